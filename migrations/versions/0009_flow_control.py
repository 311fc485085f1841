"""Flow control (SPEC §8): queue limits, partition keys, throttle and debounce.

Queue columns: ``global_concurrency``, ``partition_concurrency`` and the rate
limit (``rate_limit`` starts per ``rate_limit_period_seconds``, optionally per
partition key). A queue with none of them set is claimed by the plain claim
statement and pays nothing for them (docs/flow-control.md).

Job columns: ``partition_key`` (the key partition limits count by),
``debounce_key`` (at most one pending job per key: the debounced add updates
it), and ``limited`` (set by the limited claim on the jobs it starts, so the
index that counts a queue's active jobs holds only jobs of limited queues).

``queue_start`` records the starts of rate-limited queues, one row per claim
and key with its count: the rate is counted from it exactly, over a sliding
window, without reading job history. ``throttle_window`` holds each throttle
key's current window and the job it let through.

Every index is partial: jobs without a partition key, a debounce key or a
limited claim add no entry. Every column is nullable or has a constant
default, so adding them rewrites nothing; the indexes are built on the rows
that match their predicates only (none, before anyone uses flow control).

Revision ID: 0009
Revises: 0008
"""

from alembic import context, op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE {schema}.queue
    ADD COLUMN global_concurrency integer CHECK (global_concurrency > 0),
    ADD COLUMN partition_concurrency integer CHECK (partition_concurrency > 0),
    ADD COLUMN rate_limit integer CHECK (rate_limit > 0),
    ADD COLUMN rate_limit_period_seconds integer CHECK (rate_limit_period_seconds > 0),
    ADD COLUMN rate_limit_per_partition boolean,
    -- a rate is a count and its window, or nothing
    ADD CONSTRAINT queue_rate_limit_whole CHECK (
        (rate_limit IS NULL) = (rate_limit_period_seconds IS NULL));

ALTER TABLE {schema}.job
    ADD COLUMN partition_key text,
    ADD COLUMN debounce_key text,
    ADD COLUMN limited boolean NOT NULL DEFAULT false;

-- The limited claim: each partition key's ready jobs in claim order, and the
-- distinct keys by a loose index scan over it.
CREATE INDEX job_partition_idx ON {schema}.job
    (queue, partition_key, priority DESC, start_after, seq)
    WHERE status = 'pending' AND partition_key IS NOT NULL;
-- The limited claim counts a queue's active jobs (per key) from this.
CREATE INDEX job_limited_active_idx ON {schema}.job (queue, partition_key)
    WHERE status = 'active' AND limited;
-- At most one pending job per debounce key: a debounced add updates it.
CREATE UNIQUE INDEX job_debounce_key_uq ON {schema}.job (queue, debounce_key)
    WHERE debounce_key IS NOT NULL AND status = 'pending';

CREATE TABLE {schema}.queue_start (
    queue          text NOT NULL,
    -- '' when the rate is counted for the whole queue
    partition_key  text NOT NULL,
    started_at     timestamptz NOT NULL,
    starts         integer NOT NULL CHECK (starts > 0)
);
CREATE INDEX queue_start_idx ON {schema}.queue_start (queue, started_at);

CREATE TABLE {schema}.throttle_window (
    queue           text NOT NULL,
    key             text NOT NULL,
    job_id          uuid NOT NULL,
    window_ends_at  timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);

-- A slot of a limited queue freed (its job completed, failed, was cancelled,
-- rescued or released): wake the workers waiting for one. Jobs of other
-- queues only evaluate the WHEN.
CREATE TRIGGER job_slot_freed_notify AFTER UPDATE OF status ON {schema}.job
    FOR EACH ROW
    WHEN (OLD.limited AND OLD.status = 'active' AND NEW.status <> 'active')
    EXECUTE FUNCTION {schema}.notify_job_pending()
"""

DOWNGRADE = """
DROP TRIGGER job_slot_freed_notify ON {schema}.job;
DROP TABLE {schema}.throttle_window;
DROP TABLE {schema}.queue_start;
DROP INDEX {schema}.job_debounce_key_uq;
DROP INDEX {schema}.job_limited_active_idx;
DROP INDEX {schema}.job_partition_idx;
ALTER TABLE {schema}.job
    DROP COLUMN limited,
    DROP COLUMN debounce_key,
    DROP COLUMN partition_key;
ALTER TABLE {schema}.queue
    DROP CONSTRAINT queue_rate_limit_whole,
    DROP COLUMN rate_limit_per_partition,
    DROP COLUMN rate_limit_period_seconds,
    DROP COLUMN rate_limit,
    DROP COLUMN partition_concurrency,
    DROP COLUMN global_concurrency
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))

"""Flow control's upkeep: a changed limit wakes the queue's workers, and ended
throttle windows can be pruned in bounded batches.

Workers no longer read their queues' limits on a timer: a claim tells them
when a queue gained or lost its limits (docs/flow-control.md). What a claim
cannot tell is a limit raised on a queue whose workers wait for a slot, so
``queue_limits_changed_notify`` sends the queue's wake-up (the payload every
job wake-up has: the queue's name) when a limit column of its row changes.
It fires on UPDATE only, and only when a limit changed: a queue row written
at each worker's start with the same limits sends nothing.

``throttle_window_ends_idx`` lets maintenance find ended windows (of keys
never used again) oldest first, a batch at a time, without reading the
table; it costs each throttled add one more index entry.

Revision ID: 0012
Revises: 0011
"""

from alembic import context, op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE FUNCTION {schema}.notify_queue_limits_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.job', NEW.name);
    RETURN NULL;
END
$$;

CREATE TRIGGER queue_limits_changed_notify AFTER UPDATE ON {schema}.queue
    FOR EACH ROW
    WHEN (OLD.global_concurrency IS DISTINCT FROM NEW.global_concurrency
          OR OLD.partition_concurrency IS DISTINCT FROM NEW.partition_concurrency
          OR OLD.rate_limit IS DISTINCT FROM NEW.rate_limit
          OR OLD.rate_limit_period_seconds IS DISTINCT FROM NEW.rate_limit_period_seconds
          OR OLD.rate_limit_per_partition IS DISTINCT FROM NEW.rate_limit_per_partition)
    EXECUTE FUNCTION {schema}.notify_queue_limits_changed();

CREATE INDEX throttle_window_ends_idx ON {schema}.throttle_window (window_ends_at)
"""

DOWNGRADE = """
DROP INDEX {schema}.throttle_window_ends_idx;
DROP TRIGGER queue_limits_changed_notify ON {schema}.queue;
DROP FUNCTION {schema}.notify_queue_limits_changed()
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))

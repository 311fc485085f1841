"""Retention per outcome: separate ages for completed and for failed jobs.

Queue and job each get ``retention_completed_ttl_seconds`` (for jobs that end
``completed``) and ``retention_failed_ttl_seconds`` (``failed``, ``cancelled``
and ``expired``: the jobs that did not do their work). NULL means "not set
here": a job's age falls back from its own outcome's ttl to its own
``retention_ttl_seconds``, then to its queue's two, then to the client's
defaults (docs/retention.md). The columns are nullable without a default, so
adding them changes only the catalog: no table rewrite, no long lock.

The two partial indexes are the pruner's ranges for jobs that set an
outcome's ttl of their own, as ``job_retention_ttl_idx`` is for
``retention_ttl_seconds``. They hold only finished jobs that set one, so the
adds of other jobs add no entry, and building them reads the table once while
adds wait (docs/schema.md, "Migration 0008").

Revision ID: 0008
Revises: 0007
"""

from alembic import context, op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE {schema}.queue
    ADD COLUMN retention_completed_ttl_seconds integer
        CHECK (retention_completed_ttl_seconds >= 0),
    ADD COLUMN retention_failed_ttl_seconds integer
        CHECK (retention_failed_ttl_seconds >= 0);

-- No CHECK on the job's two (migration 0006: the client validates them, and
-- each CHECK of the job table costs every write of a row).
ALTER TABLE {schema}.job
    ADD COLUMN retention_completed_ttl_seconds integer,
    ADD COLUMN retention_failed_ttl_seconds integer;

-- The pruner's ranges of jobs with an outcome's ttl of their own, by ttl and age.
CREATE INDEX job_retention_completed_ttl_idx
    ON {schema}.job (retention_completed_ttl_seconds, finished_at)
    WHERE retention_completed_ttl_seconds IS NOT NULL AND status = 'completed';
CREATE INDEX job_retention_failed_ttl_idx
    ON {schema}.job (retention_failed_ttl_seconds, finished_at)
    WHERE retention_failed_ttl_seconds IS NOT NULL
      AND status IN ('failed', 'cancelled', 'expired')
"""

DOWNGRADE = """
DROP INDEX {schema}.job_retention_failed_ttl_idx;
DROP INDEX {schema}.job_retention_completed_ttl_idx;
ALTER TABLE {schema}.job
    DROP COLUMN retention_failed_ttl_seconds,
    DROP COLUMN retention_completed_ttl_seconds;
ALTER TABLE {schema}.queue
    DROP COLUMN retention_failed_ttl_seconds,
    DROP COLUMN retention_completed_ttl_seconds
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))

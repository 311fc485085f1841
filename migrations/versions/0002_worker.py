"""Worker support: finish notifications for waiters.

Revision ID: 0002
Revises: 0001
"""

from alembic import context, op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

UPGRADE = """
-- Set by add_job_and_wait / wait_for_job: the statement that finishes such a
-- job sends its id on "<schema>.finished". Jobs nobody waits for send nothing,
-- so the hot completion path pays no NOTIFY per job.
ALTER TABLE {schema}.job ADD COLUMN notify_finished boolean NOT NULL DEFAULT false;

CREATE FUNCTION {schema}.notify_job_finished() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.finished', NEW.id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER job_finished_notify AFTER UPDATE OF status ON {schema}.job
    FOR EACH ROW
    WHEN (NEW.notify_finished AND NEW.finished_at IS NOT NULL AND OLD.finished_at IS NULL)
    EXECUTE FUNCTION {schema}.notify_job_finished()
"""

DOWNGRADE = """
DROP TRIGGER job_finished_notify ON {schema}.job;
DROP FUNCTION {schema}.notify_job_finished();
ALTER TABLE {schema}.job DROP COLUMN notify_finished
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))

"""A worker's batched completions wake the workers waiting for a freed slot
once per queue, not once per job.

``job_slot_freed_notify`` ran ``notify_job_pending()`` (PL/pgSQL) for every
limited job leaving ``active``: in a batch of 50 completions, 50 calls whose
notifications PostgreSQL then folds into one. ``complete_jobs`` now sends that
wake-up itself for the limited queues the worker names, once per queue, and
turns those rows' ``limited`` flag off as it completes them; the trigger
fires only for a limited job that leaves ``active`` with the flag still on
(every other path: a failure, a rescue, a release, a cancel, a pull
consumer's completion, an older worker's).

Revision ID: 0018
Revises: 0017
"""

from alembic import context, op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

UPGRADE = """
DROP TRIGGER job_slot_freed_notify ON {schema}.job;
CREATE TRIGGER job_slot_freed_notify AFTER UPDATE OF status ON {schema}.job
    FOR EACH ROW
    WHEN (OLD.limited AND NEW.limited AND OLD.status = 'active' AND NEW.status <> 'active')
    EXECUTE FUNCTION {schema}.notify_job_pending()
"""

DOWNGRADE = """
DROP TRIGGER job_slot_freed_notify ON {schema}.job;
CREATE TRIGGER job_slot_freed_notify AFTER UPDATE OF status ON {schema}.job
    FOR EACH ROW
    WHEN (OLD.limited AND OLD.status = 'active' AND NEW.status <> 'active')
    EXECUTE FUNCTION {schema}.notify_job_pending()
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))

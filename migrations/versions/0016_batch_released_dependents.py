"""A completion that released its job's dependents itself skips the row trigger.

Since 0013, a worker's batched completion (``complete_jobs``) releases the
dependents waiting for one of its jobs alone in one ``UPDATE`` of the batch,
and the row trigger ``settle_dependents`` still ran after it for every
completed job with dependents, finding nothing to release in all but one
case: a dependent whose add committed after the completion's snapshot (the
add locked the dependency, so the completion waited for it). That run cost
about 16.5 µs per completed job with dependents (docs/performance.md).

``dependents_released`` is set by ``complete_jobs`` when the version of the
row it completed is the one its snapshot read: no add committed in between,
so the batch's release saw every dependent (an add of a dependent writes the
dependency's row whenever that dependency is not completed, so such an add
always leaves a newer version). The trigger does not fire for the update
that turns the flag on.

The trigger also fired for every status change of a job with dependents,
its claim (``pending`` to ``active``) among them, where the function returns
at once: about 13 µs per claimed job with dependents, in plpgsql's call
alone. It now fires only for the changes the function acts on: to an end
(``completed``, ``failed``, ``cancelled``, ``expired``), and from a failed
end (a retry, which re-arms the dependents it cancelled).

Revision ID: 0016
Revises: 0015
"""

from alembic import context, op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE {schema}.job ADD COLUMN dependents_released boolean NOT NULL DEFAULT false;
DROP TRIGGER job_settle_dependents ON {schema}.job;
CREATE TRIGGER job_settle_dependents AFTER UPDATE OF status ON {schema}.job
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status
          AND (NEW.status IN ('completed', 'failed', 'cancelled', 'expired')
               OR OLD.status IN ('failed', 'cancelled', 'expired'))
          AND NOT (NEW.dependents_released AND NOT OLD.dependents_released))
    EXECUTE FUNCTION {schema}.settle_dependents()
"""

DOWNGRADE = """
DROP TRIGGER job_settle_dependents ON {schema}.job;
CREATE TRIGGER job_settle_dependents AFTER UPDATE OF status ON {schema}.job
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION {schema}.settle_dependents();
ALTER TABLE {schema}.job DROP COLUMN dependents_released
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))

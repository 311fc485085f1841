"""The claim index split by pattern: jobs a worker cannot match are never read.

``job_claim_idx`` held every pending job, so a claim stepped over every
pending job whose ``preferred_instance_key_pattern`` the worker does not
match, and read its row to see the pattern, at every claim (100,000 such jobs
at a higher priority slowed a drain of plain jobs about 15x). Now it holds
the pending jobs without a pattern, and ``job_claim_patterned_idx`` those with
one, by queue and pattern, so the claim reads only the ranges of the patterns
the worker matches. Each pending job is in exactly one of them: an add writes
no more index entries than before.

Revision ID: 0015
Revises: 0014
"""

from alembic import context, op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE INDEX job_claim_patterned_idx ON {schema}.job (
    queue, preferred_instance_key_pattern, priority DESC, start_after, seq)
    WHERE status = 'pending' AND preferred_instance_key_pattern IS NOT NULL;
DROP INDEX {schema}.job_claim_idx;
CREATE INDEX job_claim_idx ON {schema}.job (queue, priority DESC, start_after, seq)
    WHERE status = 'pending' AND preferred_instance_key_pattern IS NULL
"""

DOWNGRADE = """
DROP INDEX {schema}.job_claim_idx;
CREATE INDEX job_claim_idx ON {schema}.job (queue, priority DESC, start_after, seq)
    WHERE status = 'pending';
DROP INDEX {schema}.job_claim_patterned_idx
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))

"""Maintenance: an index for pruning jobs that carry their own retention.

Revision ID: 0003
Revises: 0002
"""

from alembic import context, op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

UPGRADE = """
-- The pruner's per-job retention: finished jobs with their own ttl, by ttl
-- then age. It finds the distinct ttls by a loose index scan and, for each,
-- reads only the range already past it, so a pass does not read every
-- retained row (job_finished_idx serves jobs that use their queue's ttl).
CREATE INDEX job_retention_ttl_idx ON {schema}.job (retention_ttl_seconds, finished_at)
    WHERE retention_ttl_seconds IS NOT NULL AND finished_at IS NOT NULL
"""

DOWNGRADE = """
DROP INDEX {schema}.job_retention_ttl_idx
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))

"""Schedules: an optional misfire grace, past which a missed tick is skipped.

Revision ID: 0004
Revises: 0003
"""

from alembic import context, op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

UPGRADE = """
-- NULL (the default, and every schedule made before this revision): a tick
-- missed while no scheduler ran is spawned once, however late. A number: a
-- tick found more than that many seconds after its instant is skipped with
-- the other missed ones, and the schedule moves on to its next tick.
ALTER TABLE {schema}.schedule
    ADD COLUMN misfire_grace_seconds integer CHECK (misfire_grace_seconds > 0)
"""

DOWNGRADE = """
ALTER TABLE {schema}.schedule DROP COLUMN misfire_grace_seconds
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))

"""One maintenance leader at a time: the other workers' services stay idle.

Every worker ran every maintenance service on its interval, each pass a
transaction taking the service's advisory lock: 50 idle worker processes
made about 120 maintenance statements a second between them to find
nothing to do. ``maintenance_leader`` holds one row per role
('maintenance', 'scheduler'): the worker leading it and until when. A
worker takes or renews a role with one statement; the others wait for the
term to end before asking again, so a leader that stops or freezes is
replaced within a term. The services' advisory locks stay: two workers that
both think they lead still never run one service at once.

Revision ID: 0014
Revises: 0013
"""

from alembic import context, op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE {schema}.maintenance_leader (
    role text PRIMARY KEY,
    worker_id uuid NOT NULL,
    until timestamp with time zone NOT NULL
)
"""

DOWNGRADE = """
DROP TABLE {schema}.maintenance_leader
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))

"""Workers: a process may consume no queue and run only the scheduler and maintenance.

Revision ID: 0005
Revises: 0004
"""

from alembic import context, op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# A worker started with queues=[] registers with concurrency 0: it claims
# nothing, but its row still says which host runs the scheduler and
# maintenance, and the reaper forgets it like any other.
UPGRADE = """
ALTER TABLE {schema}.worker DROP CONSTRAINT worker_concurrency_check;
ALTER TABLE {schema}.worker ADD CONSTRAINT worker_concurrency_check CHECK (concurrency >= 0)
"""

DOWNGRADE = """
ALTER TABLE {schema}.worker DROP CONSTRAINT worker_concurrency_check;
ALTER TABLE {schema}.worker ADD CONSTRAINT worker_concurrency_check CHECK (concurrency > 0)
"""


def upgrade() -> None:
    for statement in UPGRADE.split(";"):
        op.execute(statement.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    for statement in DOWNGRADE.split(";"):
        op.execute(statement.format(schema=context.config.attributes["quoted_schema"]))

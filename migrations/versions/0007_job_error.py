"""Jobs: an ``error`` column for SQL readers, and an index of dead-letter sources.

``error`` is the newest error's message as text, NULL when the job has none,
so that ``SELECT id, error FROM portqueue.job WHERE status = 'failed'`` needs
no JSON. It is a stored generated column rather than a value each failing
statement writes: every way an error joins ``errors`` (a handler's failure,
a lapsed lease, a dependency, a hand-written UPDATE) keeps it right, and no
statement on the claim or completion path names it. Its expression never
raises, whatever a hand-written ``errors`` holds (an object, a scalar, an
entry without a message): it is NULL then.

Adding a stored generated column rewrites the job table under an exclusive
lock: adds, claims and completions wait for the rewrite (docs/schema.md,
"Migration 0007", says how long it takes per million rows).

``job_source_job_idx`` lets the pruner see, for each job it is about to
delete, whether a dead-letter copy still names it (``source_job_id``): such a
source is kept for as long as the copy is, so its errors stay readable and
``retry_job(job_id=copy.source_job_id)`` keeps working. Partial: only copies
have a source, so other jobs' inserts add no index entry.

Revision ID: 0007
Revises: 0006
"""

from alembic import context, op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

UPGRADE = """
-- The newest error's message: errors is a JSON array, newest last.
ALTER TABLE {schema}.job
    ADD COLUMN error text GENERATED ALWAYS AS (errors -> -1 ->> 'message') STORED;

-- Dead-letter copies by the job they came from, for the pruner.
CREATE INDEX job_source_job_idx ON {schema}.job (source_job_id)
    WHERE source_job_id IS NOT NULL
"""

DOWNGRADE = """
DROP INDEX {schema}.job_source_job_idx;
ALTER TABLE {schema}.job DROP COLUMN error
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))

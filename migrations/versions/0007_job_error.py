"""Jobs: an ``error`` column for SQL readers, and an index of dead-letter sources.

``error`` is the newest error's message as text, NULL when the job has none,
so that ``SELECT id, error FROM portqueue.job WHERE status = 'failed'`` needs
no JSON. The two statements that add an entry to ``errors`` (a handler's
failure, fail_jobs; a lapsed lease, rescue_lapsed) write it beside the entry.
A stored generated column (``errors -> -1 ->> 'message'``) was measured and
rejected (docs/performance.md, "The error column"): PostgreSQL computes it on
every insert and every update of a job, claims and heartbeats included, and
adding it rewrites the whole table under an exclusive lock. This column is
added without a rewrite; the UPDATE below fills it for jobs that already
have errors, and only those rows are written.

``job_source_job_idx`` lets the pruner see, for each job it is about to
delete, whether a dead-letter copy still names it (``source_job_id``): such a
source is kept for as long as the copy is, so its errors stay readable and
``retry_job(job_id=copy.source_job_id)`` keeps working. Partial: only copies
have a source, so other jobs' inserts add no index entry. Building it reads
the table once while adds wait (docs/schema.md, "Migration 0007").

Revision ID: 0007
Revises: 0006
"""

from alembic import context, op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

UPGRADE = """
-- The newest error's message (errors is a JSON array, newest last), written
-- by the statements that add an error.
ALTER TABLE {schema}.job ADD COLUMN error text;

UPDATE {schema}.job SET error = errors -> -1 ->> 'message'
WHERE errors <> '[]'::jsonb;

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

"""Jobs: keep the CHECKs that guard the state machine, drop the input ranges.

PostgreSQL reads every CHECK of a table again, from its stored text, for each
statement that writes a row of it: the job table's fourteen came to a tenth of
the server time of a single add, and as much of a single-job claim. Nine of
them only bounded values that the client validates before they are written
(a delay, a timeout, an expiry, a retention, a progress, a queue name's
length) and that no statement of portqueue's derives on its own. Those go.
What stays is what a row written by hand could otherwise break for other jobs:
attempts within max_attempts, at least one attempt, a known backoff strategy,
finished_at set exactly for finished jobs, and a lease on every active job.
The queue table keeps all of its checks: it is written rarely, and its
defaults are what a job inherits.

Revision ID: 0006
Revises: 0005
"""

from alembic import context, op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# The checks dropped (the downgrade below restores them as they were).
DROPPED = (
    "job_queue_check", "job_attempt_check", "job_retry_delay_seconds_check",
    "job_backoff_factor_check", "job_backoff_max_delay_seconds_check",
    "job_timeout_seconds_check", "job_expire_in_seconds_check",
    "job_retention_ttl_seconds_check", "job_progress_check",
)

UPGRADE = """
ALTER TABLE {schema}.job
    DROP CONSTRAINT job_queue_check,
    DROP CONSTRAINT job_attempt_check,
    DROP CONSTRAINT job_retry_delay_seconds_check,
    DROP CONSTRAINT job_backoff_factor_check,
    DROP CONSTRAINT job_backoff_max_delay_seconds_check,
    DROP CONSTRAINT job_timeout_seconds_check,
    DROP CONSTRAINT job_expire_in_seconds_check,
    DROP CONSTRAINT job_retention_ttl_seconds_check,
    DROP CONSTRAINT job_progress_check
"""

# NOT VALID, then VALIDATE: the scan of the existing rows then takes a lock
# that lets inserts and updates go on.
DOWNGRADE = """
ALTER TABLE {schema}.job
    ADD CONSTRAINT job_queue_check CHECK (char_length(queue) BETWEEN 1 AND 128) NOT VALID,
    ADD CONSTRAINT job_attempt_check CHECK (attempt >= 0) NOT VALID,
    ADD CONSTRAINT job_retry_delay_seconds_check CHECK (retry_delay_seconds >= 0) NOT VALID,
    ADD CONSTRAINT job_backoff_factor_check CHECK (backoff_factor >= 1) NOT VALID,
    ADD CONSTRAINT job_backoff_max_delay_seconds_check
        CHECK (backoff_max_delay_seconds >= 0) NOT VALID,
    ADD CONSTRAINT job_timeout_seconds_check CHECK (timeout_seconds > 0) NOT VALID,
    ADD CONSTRAINT job_expire_in_seconds_check CHECK (expire_in_seconds > 0) NOT VALID,
    ADD CONSTRAINT job_retention_ttl_seconds_check CHECK (retention_ttl_seconds >= 0) NOT VALID,
    ADD CONSTRAINT job_progress_check CHECK (progress BETWEEN 0 AND 1) NOT VALID;
ALTER TABLE {schema}.job VALIDATE CONSTRAINT job_queue_check;
ALTER TABLE {schema}.job VALIDATE CONSTRAINT job_attempt_check;
ALTER TABLE {schema}.job VALIDATE CONSTRAINT job_retry_delay_seconds_check;
ALTER TABLE {schema}.job VALIDATE CONSTRAINT job_backoff_factor_check;
ALTER TABLE {schema}.job VALIDATE CONSTRAINT job_backoff_max_delay_seconds_check;
ALTER TABLE {schema}.job VALIDATE CONSTRAINT job_timeout_seconds_check;
ALTER TABLE {schema}.job VALIDATE CONSTRAINT job_expire_in_seconds_check;
ALTER TABLE {schema}.job VALIDATE CONSTRAINT job_retention_ttl_seconds_check;
ALTER TABLE {schema}.job VALIDATE CONSTRAINT job_progress_check
"""


def upgrade() -> None:
    op.execute(UPGRADE.format(schema=context.config.attributes["quoted_schema"]))


def downgrade() -> None:
    op.execute(DOWNGRADE.format(schema=context.config.attributes["quoted_schema"]))

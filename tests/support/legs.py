"""What CI's legs (.ci/run) select beyond README's test command."""

from __future__ import annotations

# Files whose every test spawns worker processes (the ``slow`` marker's
# meaning) without saying so in the file: tests/conftest.py marks them slow,
# so they run once, like the others. Each file -> what it spawns.
SPAWNS_PROCESSES: dict[str, str] = {
    "tests/faults/test_ambiguous_commit.py": "workers behind a proxy that drops a commit's reply",
    "tests/faults/test_blackhole.py": "workers whose LISTEN connection is black-holed",
    "tests/faults/test_blackhole_roles.py": "workers with one connection role black-holed",
    "tests/faults/test_kill.py": "workers killed with SIGKILL and SIGSTOP",
    "tests/faults/test_many.py": "worker fleets draining 600 jobs",
    "tests/faults/test_pg_restart.py": "workers whose sessions are terminated",
    "tests/faults/test_rescuer_race.py": "five rescuer processes",
    "tests/faults/test_shutdown.py": "workers stopped by signals",
}

# Slow tests whose proof depends on the server's executor or catalog, so CI's
# pg18 leg runs them too (it deselects every other slow test: they ran on
# pg15). Listed here rather than marked in place; tests/conftest.py marks
# their slow tests every_major. Each file -> why.
EVERY_MAJOR: dict[str, str] = {
    "tests/faults/test_races.py": "row locks and ON CONFLICT between concurrent transactions",
    "tests/faults/test_rescuer_pause.py": "READ COMMITTED's re-check of rows updated meanwhile",
    "tests/faults/test_rescuer_race.py": "concurrent rescuers' row locks on one lapsed job",
    "tests/faults/test_migrate_concurrently.py": "DDL locks of a migration against live workers",
    "tests/migrations/test_concurrent_migrate.py": "DDL and catalog locks of racing migrations",
}

# The test files CI's second-server legs run (.ci/run: the embedded PostgreSQL
# 18, and PgBouncer in transaction mode), chosen so that together they run
# every named query of sql/ (PORTQUEUE_TEST_EVERY_QUERY, checked by
# tests/support/query_coverage.py) and every migration. Everything else runs
# on pg15 only: its behaviour does not depend on the server's major or on
# pooling, which change how statements run, not what the tests prove of them.
SERVER_LEGS: tuple[str, ...] = (
    # Each public method on AsyncPortQueue, and the behaviour of each part of sql/.
    "tests/integration/test_client_parity.py",
    "tests/integration/test_produce.py",             # produce.sql
    "tests/integration/test_read.py",                # read.sql
    "tests/integration/test_manage.py",              # manage.sql
    "tests/integration/test_bulk_retry_cancel.py",
    "tests/integration/test_redrive.py",
    "tests/integration/test_maintenance.py",         # maintenance.sql
    "tests/integration/test_retention_per_outcome.py",
    "tests/integration/test_scheduler.py",           # scheduler.sql
    "tests/integration/test_schedule_declare.py",
    "tests/integration/test_worker_outcomes.py",     # worker.sql
    "tests/integration/test_worker_claiming.py",
    "tests/integration/test_worker_context.py",
    "tests/integration/test_worker_shutdown.py",
    "tests/integration/test_handler_control.py",
    "tests/integration/test_drain.py",
    "tests/integration/test_pull_consumers.py",
    "tests/integration/test_tx_conformance.py",      # the caller's own transactions
    "tests/integration/test_workflow_flows.py",
    "tests/integration/test_workflow_dependencies.py",
    # transaction_async's pipeline with no BEGIN: the server's implicit
    # transaction, and PgBouncer's transaction mode keeping it on one session.
    "tests/integration/test_transaction_async.py",
    "tests/integration/test_flow_control_adds.py",
    "tests/integration/test_flow_control_upkeep.py",
    "tests/integration/test_cli_insight.py",         # insight.sql
    "tests/integration/test_cli_dashboard.py",
    "tests/dashboard/test_activity.py",
    "tests/dashboard/test_bulk.py",
    # What the server's executor and planner decide: row locks between
    # transactions, plans, durability.
    "tests/integration/test_concurrency.py",
    "tests/integration/test_claim_plan.py",
    "tests/integration/test_claim_plain.py",
    "tests/integration/test_claim_levels.py",        # a recursive CTE read lazily, in order
    "tests/integration/test_pull_and_bulk_plans.py",
    "tests/integration/test_hot_path.py",
    "tests/integration/test_commit_durability.py",
    # Every migration, up and down, and the catalog it leaves.
    "tests/migrations/",
    # The partitioned layout's prototype (issue 24): which triggers fire on a
    # row move, and what the planner prunes, are the server's to decide.
    "tests/integration/test_partitioned_triggers.py",
    "tests/integration/test_partition_pruning.py",
)

_DEMO = ("run only by `portqueue demo`, whose tests start it as a process (slow, pg15 only; "
         "the pg18 leg never ran them)")
# Named queries no test the second-server legs select can run, each -> why.
NOT_ON_SERVER_LEGS: dict[str, str] = {
    "demo_drop_schema": _DEMO,
    "demo_latency": _DEMO,
    "demo_lock": _DEMO,
    "demo_mark_schema": _DEMO,
    "demo_schema_comment": _DEMO,
    "demo_throughput": _DEMO,
    "end_sessions": ("ends a stuck handler's session: only tests/faults/test_handlers.py (slow, "
                     "pg15) gets a handler stuck in the server, and poll_only never sends it"),
}

# And those the PgBouncer leg cannot run: its switch routes tests/integration only,
# with poll_only.
_DASHBOARD = "the dashboard's reads: tests/dashboard is outside the PgBouncer switch's scope"
NOT_THROUGH_PGBOUNCER: dict[str, str] = {
    "activity": _DASHBOARD,
    "matching_job_count": _DASHBOARD,
    "matching_job_ids": _DASHBOARD,
    "queue_peers": "the listener's (who listens for a queue): poll_only never starts one",
}

"""``portqueue flow`` (one flow: its status, and each job's key, status and dependencies)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from portqueue.cli.base import EXIT_FAILURE, DsnOption, JsonOption, SchemaOption, app, fail
from portqueue.cli.options import job_ids
from portqueue.cli.output import emit_json, new_table, stdout_console, when
from portqueue.cli.session import open_session
from portqueue.types import FlowSnapshot


@app.command("flow")
def flow_command(
    flow_id: Annotated[str, typer.Argument(help="The flow's id (a UUID, add_flow's flow_id).",
                                           show_default=False)],
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """Show a flow: its status, and each job with the keys it depends on. Exits 1 if unknown.

    Examples:

        portqueue flow 0193f0a4-8c1e-7b7a-9d6e-3f1c2a4b5d6e

        portqueue flow 0193f0a4-8c1e-7b7a-9d6e-3f1c2a4b5d6e --json | jq '.jobs[].status'
    """
    (checked,) = job_ids([flow_id])
    with open_session(dsn, schema) as session:
        flow = session.run(session.pq.get_flow, flow_id=checked)
    if flow is None:
        fail(EXIT_FAILURE, f"no flow {checked}")
    if as_json:
        emit_json(flow)
        return
    console = stdout_console()
    console.print(f"flow {flow.flow_id}: {flow.status.value}")
    console.print(_flow_table(flow))


def _flow_table(flow: FlowSnapshot) -> Table:
    key_of = {job.job_id: key for key, job in flow.jobs.items()}
    table = new_table("key", "status", "queue", "job id", "depends on", "finished")
    for key, job in flow.jobs.items():
        table.add_row(key, job.status.value, job.queue, job.job_id,
                      ", ".join(key_of.get(parent, parent) for parent in job.depends_on) or "-",
                      when(job.finished_at))
    return table

"""The flow page: a flow's jobs drawn as a graph (server-rendered SVG), each
node its job's key and status, linked to the job's page; edges run from a
dependency to its dependent. Layered by depth: a job sits one column right
of its deepest dependency."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from portqueue.dashboard.refresh import refresh_of
from portqueue.dashboard.render import render
from portqueue.dashboard.views import client_of
from portqueue.errors import InvalidArgument
from portqueue.types import FlowSnapshot, FlowStatus, JobSnapshot

NODE_WIDTH, NODE_HEIGHT = 170, 46
COLUMN_GAP, ROW_GAP, MARGIN = 60, 18, 10


@dataclass(frozen=True)
class Node:
    key: str
    job: JobSnapshot
    x: int
    y: int


@dataclass(frozen=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class Graph:
    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int


def layout(flow: FlowSnapshot) -> Graph:
    key_of = {job.job_id: key for key, job in flow.jobs.items()}
    depth: dict[str, int] = {}
    # The flow's jobs come in insertion order, and add_flow refuses cycles,
    # but an entry may name a dependency listed after it: resolve by passes.
    pending = list(flow.jobs)
    while pending:
        left = []
        for key in pending:
            parents = [key_of[p] for p in flow.jobs[key].depends_on if p in key_of]
            if all(parent in depth for parent in parents):
                depth[key] = 1 + max((depth[parent] for parent in parents), default=-1)
            else:
                left.append(key)
        if len(left) == len(pending):  # not a graph add_flow wrote: draw the rest flat
            depth.update(dict.fromkeys(left, 0))
            break
        pending = left
    rows: dict[int, int] = {}
    nodes: dict[str, Node] = {}
    for key, job in flow.jobs.items():
        column = depth[key]
        row = rows.get(column, 0)
        rows[column] = row + 1
        nodes[key] = Node(key, job, MARGIN + column * (NODE_WIDTH + COLUMN_GAP),
                          MARGIN + row * (NODE_HEIGHT + ROW_GAP))
    edges = [
        Edge(parent.x + NODE_WIDTH, parent.y + NODE_HEIGHT // 2, node.x, node.y + NODE_HEIGHT // 2)
        for node in nodes.values()
        for parent in (nodes[key_of[p]] for p in node.job.depends_on if p in key_of)]
    columns = max(depth.values(), default=0) + 1
    tallest = max(rows.values(), default=1)
    return Graph(list(nodes.values()), edges,
                 2 * MARGIN + columns * NODE_WIDTH + (columns - 1) * COLUMN_GAP,
                 2 * MARGIN + tallest * NODE_HEIGHT + (tallest - 1) * ROW_GAP)


async def flow(request: Request) -> Response:
    client = client_of(request)
    try:
        snapshot = await client.get_flow(flow_id=request.path_params["flow_id"])
    except InvalidArgument:
        snapshot = None  # not a flow id: no such flow
    if snapshot is None:
        raise HTTPException(404, "No such flow: no job of it is left.")
    return render(request, "flow.html", {
        "flow": snapshot, "graph": layout(snapshot), "node_width": NODE_WIDTH,
        "node_height": NODE_HEIGHT,
        "refresh": None if snapshot.status is not FlowStatus.RUNNING else refresh_of(request),
    })

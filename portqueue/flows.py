"""Workflows (SPEC §9), without I/O: jobs that depend on others, flows of jobs
added as one graph, reading a flow, and fan-out by topic.

The producer's half of the workflow contract, beside ``portqueue.operations``
(whose plain adds it leaves as they are: a job without dependencies never
comes here). Release and failure propagation are the database's:
``settle_dependents`` (migration 0010) runs inside the transaction that
finishes a dependency, whatever statement finishes it.

Adding a dependent job is two statements in one transaction: the existing
dependencies are locked (``lock_dependencies``) and read, which decides each
new job's status (waiting, pending, or cancelled when a dependency has
already failed), then every job is inserted with its status
(``add_graph_jobs``). The lock is what makes the read true until commit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from portqueue import validation
from portqueue.driver import Operation, Rows
from portqueue.errors import InvalidArgument, QueuePausedError
from portqueue.ids import uuid7, uuid7s
from portqueue.operations import (
    Declared,
    _entry_arrays,
    _patterns_of,
    _scalar_entry,
    _utc,
    _with_job_id,
    check_patterns,
    job_snapshot,
)
from portqueue.queries import Queries
from portqueue.settings import Settings
from portqueue.types import (
    AddJobResult,
    FlowResult,
    FlowSnapshot,
    FlowStatus,
    JobSnapshot,
    JobStatus,
)
from portqueue.validation import JobSpec

# A dependency in one of these ends its dependents (unless they "run").
BROKEN = frozenset({"failed", "cancelled", "expired"})
FAILURE_MODES = ("cancel", "run")
# Options of a graph entry that job_spec does not take.
GRAPH_KEYS = frozenset({"depends_on", "on_dependency_failure"})
FLOW_KEYS = GRAPH_KEYS | {"key", "queue"}
# Keys dedupe against one queue's rows with ON CONFLICT (or a throttle
# window, a debounced job), which a graph, whose jobs are decided together,
# cannot skip one by one.
UNKEYED = ("idempotency_key", "singleton_key", "throttle", "debounce")


@dataclass
class Node:
    """One job of a graph being added."""

    argument: str  # how errors name the entry: "jobs[3]", or "" for add_job
    queue: str
    spec: JobSpec
    parents: list[str]  # existing jobs it depends on, by id
    internal: list[int]  # jobs of the same graph it depends on, by index
    runs: bool  # on_dependency_failure="run"
    key: str | None = None


def _arg(node_argument: str, name: str) -> str:
    return f"{node_argument}.{name}" if node_argument else name


def failure_mode(argument: str, value: object) -> bool:
    """True for "run"; "cancel" (the default) is False."""
    if value is None or value == "cancel":
        return False
    if value == "run":
        return True
    raise InvalidArgument(argument, f"must be one of {FAILURE_MODES}, got {value!r}")


def dependency_ids(argument: str, value: object) -> list[str]:
    """``depends_on=[job ids]`` (``AddJobResult``s are taken for their ids)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise InvalidArgument(argument, "must be a list of job ids")
    ids: list[str] = []
    for index, item in enumerate(value):
        if isinstance(item, AddJobResult):
            item = item.job_id
        job_id = validation.job_id(item, f"{argument}[{index}]")
        if job_id not in ids:
            ids.append(job_id)
    return ids


def _spec(settings: Settings, options: Mapping[str, Any], prefix: str, job_id: str,
          declared: Declared | None, queue: str,
          attrs: Mapping[str, str] | None = None) -> JobSpec:
    """``attrs``: the add span's trace context (``hooks.adding``), stored on the row."""
    for key in UNKEYED:
        if options.get(key) is not None:
            raise InvalidArgument(f"{prefix}{key}", "is not taken by jobs with dependencies, "
                                  "flows or publish")
    spec, schedule = validation.job_spec(
        options, instance_key=settings.instance_key,
        max_payload_bytes=settings.max_payload_bytes, prefix=prefix, job_id=job_id)
    if schedule is not None and (schedule.recurring or schedule.start_at is not None):
        raise InvalidArgument(f"{prefix}schedule", "only a one-off delay (start_after_seconds)")
    if attrs:
        spec = spec._replace(attrs=attrs)
    defaults = None if declared is None else declared(queue)
    return spec if defaults is None else defaults.fill(spec)


def _order(nodes: Sequence[Node]) -> list[int]:
    """The nodes in dependency order, level by level (each level in index
    order); a cycle is refused, naming an entry on it. Linear in the nodes
    and edges: each edge is counted down once (Kahn's algorithm)."""
    # node.internal names each dependency once (add_flow deduplicates it)
    waiting_on = [len(node.internal) for node in nodes]
    dependents: list[list[int]] = [[] for _ in nodes]
    for index, node in enumerate(nodes):
        for parent in node.internal:
            dependents[parent].append(index)
    order = [index for index, count in enumerate(waiting_on) if not count]
    done = 0
    while done < len(order):
        level: list[int] = []
        for index in order[done:]:
            for child in dependents[index]:
                waiting_on[child] -= 1
                if not waiting_on[child]:
                    level.append(child)
        done = len(order)
        level.sort()
        order += level
    if len(order) < len(nodes):
        left = {index for index, count in enumerate(waiting_on) if count}
        start = min(left)
        path, seen, at = [start], {start: 0}, start
        while True:  # walk dependencies until one repeats: that is the cycle
            at = min(j for j in nodes[at].internal if j in left)
            if at in seen:
                path = [*path[seen[at]:], at]
                break
            seen[at] = len(path)
            path.append(at)
        names = " -> ".join(repr(nodes[i].key) if nodes[i].key else str(i) for i in path)
        raise InvalidArgument(_arg(nodes[path[0]].argument, "depends_on"),
                              f"forms a cycle: {names}")
    return order


def _verdicts(nodes: Sequence[Node], found: Mapping[str, str], order: Sequence[int]
              ) -> tuple[list[str], list[str | None]]:
    """Each node's status at add, and its DependencyFailed entry if cancelled;
    ``order`` is ``_order(nodes)``."""
    statuses: list[str] = [""] * len(nodes)
    failures: list[str | None] = [None] * len(nodes)
    for index in order:
        node = nodes[index]
        states = [(job_id, found[job_id]) for job_id in node.parents] + [
            (nodes[j].spec.id, "cancelled" if statuses[j] == "cancelled" else "open")
            for j in node.internal]
        broken = [(job_id, state) for job_id, state in states if state in BROKEN]
        if all(state == "completed" for _, state in states):
            statuses[index] = "pending"
        elif broken and not node.runs:
            statuses[index] = "cancelled"
            job_id, state = broken[0]
            failures[index] = json.dumps({
                "type": "DependencyFailed", "message": f"dependency {job_id} ended {state}",
                "dependency_id": job_id, "attempt": 0})
        elif node.runs and all(state == "completed" or state in BROKEN for _, state in states):
            statuses[index] = "pending"
        else:
            statuses[index] = "waiting"
    return statuses, failures


def add_graph(q: Queries, nodes: Sequence[Node], flow_id: str | None,
              order: Sequence[int] | None = None) -> Operation[list[AddJobResult]]:
    """Insert ``nodes`` with their dependencies, one result per node, in order.
    ``order``: the nodes in dependency order, if the caller has it already."""
    external = sorted({job_id for node in nodes for job_id in node.parents})
    found: dict[str, str] = {}
    if external:
        rows = yield q("lock_dependencies", job_ids=external)
        found = {str(row["id"]): str(row["status"]) for row in rows}
        for node in nodes:
            for job_id in node.parents:
                if job_id not in found:
                    raise InvalidArgument(
                        _arg(node.argument, "depends_on"),
                        f"no job {job_id} in this schema (a dependency must be a job of "
                        "the same schema)")
    statuses, failures = _verdicts(nodes, found, _order(nodes) if order is None else order)
    depended = {j for node in nodes for j in node.internal}
    # Dependents of several jobs take the trigger's slower path (lock, then
    # read every dependency); a job only such dependents' flag asks for it.
    shared = [node for node in nodes if len(node.parents) + len(node.internal) > 1]
    shared_internal = {j for node in shared for j in node.internal}
    specs = [node.spec for node in nodes]
    rows = yield q(
        "add_graph_jobs", **_entry_arrays(specs),
        queue_names=[node.queue for node in nodes], statuses=statuses,
        depends_on=json.dumps([node.parents + [nodes[j].spec.id for j in node.internal]
                               for node in nodes]),
        on_dependency_failure=["run" if node.runs else None for node in nodes],
        has_dependents=[index in depended for index in range(len(nodes))],
        has_shared_dependents=[index in shared_internal for index in range(len(nodes))],
        shared_parents=sorted({job_id for node in shared for job_id in node.parents}),
        flow_key=[node.key for node in nodes], failure=failures,
        parents=external, flow_id=flow_id)
    return _results(rows, [spec.id for spec in specs])


def _results(rows: Rows, ids: Sequence[str]) -> list[AddJobResult]:
    for row in rows:
        if row["outcome"] == "paused":
            raise QueuePausedError(row["queue"])
    added = {str(row["id"]): row for row in rows}
    # The rows of one statement share its now(), and most a queue and status:
    # each result is a copy of the first of its kind (operations._with_job_id)
    # rather than a new frozen dataclass, which costs several times more.
    templates: dict[tuple[Any, ...], AddJobResult] = {}
    results = []
    for job_id in ids:
        row = added[job_id]
        kind = (row["queue"], row["status"], row["start_after"], row["created_at"])
        template = templates.get(kind)
        if template is None:
            template = templates[kind] = _added(row)
        results.append(_with_job_id(template, job_id))
    return results


def _added(row: Mapping[str, Any]) -> AddJobResult:
    return AddJobResult(job_id=str(row["id"]), queue=row["queue"],
                        status=JobStatus(row["status"]), start_after=_utc(row["start_after"]),
                        created_at=_utc(row["created_at"]))


def _check_patterns(settings: Settings, nodes: Sequence[Node], prefix: str | None
                    ) -> Operation[None]:
    patterns = _patterns_of([node.spec for node in nodes], prefix)
    if patterns:
        yield from check_patterns(settings.queries, settings.instance_key, patterns)


# --- entry points: validate, then run ---


def add_dependent_job(settings: Settings, options: dict[str, Any], depends_on: object,
                      declared: Declared | None = None,
                      attrs: Mapping[str, str] | None = None) -> Operation[AddJobResult]:
    """``add_job(..., depends_on=[ids])``; ``attrs`` as ``_spec`` takes them."""
    queue = validation.queue_name(options.pop("queue"))
    node = Node("", queue, _spec(settings, options, "", uuid7(), declared, queue, attrs),
                dependency_ids("depends_on", depends_on), [], False)
    yield from _check_patterns(settings, [node], None)
    (result,) = yield from add_graph(settings.queries, [node], None)
    return result


def has_dependencies(jobs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether an ``add_jobs`` batch takes the dependent path."""
    return any(isinstance(entry, Mapping) and entry.keys() & GRAPH_KEYS for entry in jobs)


def add_dependent_jobs(settings: Settings, queue: object, jobs: Sequence[Mapping[str, Any]],
                       declared: Declared | None = None,
                       attrs: Mapping[str, str] | None = None
                       ) -> Operation[list[AddJobResult]]:
    """``add_jobs`` where some entries name ``depends_on`` (job ids); ``attrs``
    as ``_spec`` takes them, for every entry."""
    name = validation.queue_name(queue)
    entries = validation.job_entries(jobs)
    ids = uuid7s(len(entries))
    nodes = []
    for index, entry in enumerate(entries):
        argument = f"jobs[{index}]"
        options = {k: v for k, v in entry.items() if k not in GRAPH_KEYS and k != "tx"}
        depends_on = entry.get("depends_on")
        nodes.append(Node(
            argument, name,
            _spec(settings, options, argument + ".", ids[index], declared, name, attrs),
            [] if depends_on is None else dependency_ids(f"{argument}.depends_on", depends_on),
            [], failure_mode(f"{argument}.on_dependency_failure",
                             entry.get("on_dependency_failure"))))
    if not nodes:
        return []
    yield from _check_patterns(settings, nodes, "jobs")
    return (yield from add_graph(settings.queries, nodes, None))


def add_flow(settings: Settings, jobs: object, declared: Declared | None = None,
             attrs: Mapping[str, str] | None = None) -> Operation[FlowResult]:
    """``add_flow(jobs=[{key, queue, data, depends_on: [keys], ...}])``; ``attrs``
    as ``_spec`` takes them, for every job of the flow."""
    entries = validation.job_entries(jobs)
    if not entries:
        raise InvalidArgument("jobs", "a flow needs at least one job")
    ids = uuid7s(len(entries))
    keys: dict[str, int] = {}
    for index, entry in enumerate(entries):
        key = validation.text(f"jobs[{index}].key", entry.get("key"))
        if key in keys:
            raise InvalidArgument(f"jobs[{index}].key",
                                  f"{key!r} is the key of jobs[{keys[key]}] already")
        keys[key] = index
    nodes = []
    for index, entry in enumerate(entries):
        argument = f"jobs[{index}]"
        if "tx" in entry:
            raise InvalidArgument(f"{argument}.tx", "a flow takes tx= on add_flow itself")
        queue = validation.queue_name(entry.get("queue"), f"{argument}.queue")
        options = {k: v for k, v in entry.items() if k not in FLOW_KEYS}
        depends_on = entry.get("depends_on", [])
        if isinstance(depends_on, (str, bytes, Mapping)) or not isinstance(depends_on, Sequence):
            raise InvalidArgument(f"{argument}.depends_on", "must be a list of keys of this flow")
        for key in depends_on:
            if not isinstance(key, str) or key not in keys:
                raise InvalidArgument(f"{argument}.depends_on",
                                      f"unknown key {key!r}: no job of this flow has it")
        # dict.fromkeys: each dependency once, in the order given
        internal = list(dict.fromkeys(keys[key] for key in depends_on))
        nodes.append(Node(
            argument, queue,
            _spec(settings, options, argument + ".", ids[index], declared, queue, attrs),
            [], internal,
            failure_mode(f"{argument}.on_dependency_failure", entry.get("on_dependency_failure")),
            key=entry["key"]))
    order = _order(nodes)  # a cycle is refused before anything is sent
    yield from _check_patterns(settings, nodes, "jobs")
    flow_id = uuid7()
    results = yield from add_graph(settings.queries, nodes, flow_id, order)
    keyed = zip((node.key or "" for node in nodes), results, strict=True)
    return FlowResult(flow_id=flow_id, jobs=dict(keyed))


def flow_destination(jobs: object) -> str | None:
    """The queue an add span of ``add_flow(jobs=...)`` names: the one every
    entry names, else none (a flow across queues has no single destination).
    Read before validation, which refuses what this cannot name."""
    if isinstance(jobs, (str, bytes, Mapping)) or not isinstance(jobs, Sequence):
        return None
    queues = {entry.get("queue") if isinstance(entry, Mapping) else None for entry in jobs}
    (queue,) = queues if len(queues) == 1 else (None,)
    return queue if isinstance(queue, str) else None


def flow_status(jobs: Sequence[JobSnapshot]) -> FlowStatus:
    if not all(job.status.finished for job in jobs):
        return FlowStatus.RUNNING
    if all(job.status is JobStatus.COMPLETED for job in jobs):
        return FlowStatus.COMPLETED
    return FlowStatus.FAILED


def get_flow(settings: Settings, flow_id: object) -> Operation[FlowSnapshot | None]:
    checked = validation.job_id(flow_id, "flow_id")
    q = settings.queries
    ids = yield q("flow_jobs", flow_id=checked)
    if not ids:
        return None
    rows = yield q("jobs_by_id", job_ids=[str(row["id"]) for row in ids])
    by_id = {str(row["id"]): row for row in rows}
    keyed = {str(by_id[str(row["id"])]["flow_key"]): job_snapshot(by_id[str(row["id"])])
             for row in ids if str(row["id"]) in by_id}
    return FlowSnapshot(flow_id=checked, status=flow_status(list(keyed.values())), jobs=keyed)


def topic_name(value: object) -> str:
    return validation.text("topic", value, max_length=validation.MAX_QUEUE_NAME)


def subscribe(settings: Settings, topic: object, queue: object) -> Operation[bool]:
    """True if the subscription is new."""
    q = settings.queries
    rows = yield q("subscribe", topic=topic_name(topic), queue=validation.queue_name(queue))
    return bool(rows[0]["added"])


def unsubscribe(settings: Settings, topic: object, queue: object) -> Operation[bool]:
    """True if there was such a subscription."""
    q = settings.queries
    rows = yield q("unsubscribe", topic=topic_name(topic), queue=validation.queue_name(queue))
    return bool(rows)


def publish(settings: Settings, topic: object, options: dict[str, Any],
            attrs: Mapping[str, str] | None = None) -> Operation[list[AddJobResult]]:
    """One job per subscribed queue, ordered by queue name; ``attrs`` as
    ``_spec`` takes them."""
    name = topic_name(topic)
    spec = _spec(settings, options, "", uuid7(), None, "", attrs)
    if spec.preferred_instance_key_pattern is not None:
        yield from check_patterns(settings.queries, settings.instance_key,
                                  _patterns_of([spec], None))
    q = settings.queries
    rows = yield q("publish", topic=name, flow_id=None, **_scalar_entry(spec))
    for row in rows:
        if row["outcome"] == "paused":
            raise QueuePausedError(row["queue"])
    return sorted((_added(row) for row in rows), key=lambda result: result.queue)

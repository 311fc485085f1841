"""What became of outcomes the worker cannot be sure of, read back by lease
token: a transactional COMMIT that went unanswered (``Unsure``), and a
completion batch retried after its first COMMIT landed unanswered. The row
still holding the outcome's lease token tells."""

from __future__ import annotations

from portqueue import worker_operations as ops
from portqueue.queries import Queries
from portqueue.worker.connections import Connections
from portqueue.worker.outcomes import Completion, Outcome, Settled, Unsure, failure


async def settled_by_lease(connections: Connections, q: Queries,
                           outcomes: list[Completion] | list[Unsure]) -> dict[str, str]:
    """The status of each job whose row still holds the outcome's lease token."""
    leases = [o.running.lease for o in outcomes]
    (rows,) = await connections.execute(ops.settled_by_lease(q, leases))
    return ops.settled_statuses(rows)


async def resolve_unsure(connections: Connections, q: Queries,
                         batch: list[Outcome]) -> list[Outcome]:
    """Turn each unanswered transactional COMMIT into what happened: the
    completion landed (settled), it did not (the attempt failed, nothing of it
    written), or the lease was lost meanwhile."""
    unsure = [o for o in batch if isinstance(o, Unsure)]
    if not unsure:
        return batch
    statuses = await settled_by_lease(connections, q, unsure)
    resolved: list[Outcome] = [o for o in batch if not isinstance(o, Unsure)]
    for outcome in unsure:
        status = statuses.get(outcome.running.claimed.id)
        if status == "active":
            resolved.append(failure(outcome.running, outcome.error))
        else:
            landed = status == outcome.completion.status
            resolved.append(Settled(outcome.running, completed=landed,
                                    status=outcome.completion.status))
    return resolved

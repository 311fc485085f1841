"""Claims ahead: the jobs a backlogged queue claimed past its free slots, held
until slots free, bounded by what the queue will start before its next claim
returns.

Off unless the worker was started with ``claim_ahead=True``: SPEC §4 has a
claim take at most the free slots, and a held job is ``active`` before it
starts (docs/consuming.md, "Claims ahead").

A queue's *ahead* is how many jobs it claims past its free slots: about its
concurrency x (the claim's round trip / the queue's mean handler time), the
jobs its slots start while one claim is in flight, capped at
``HOLD_PER_SLOT`` x its concurrency. A queue of slow handlers (a mean above
the round trip, or none measured yet) holds nothing, so workers sharing a
backlog of slow jobs share it as they would without this. Limited queues hold
nothing either (claim_limited counts every claimed row as running).

Held jobs are ``active`` in the table with ``started_at`` NULL: claimed, leased
by this worker, not started. A claim that may hold leaves ``started_at`` NULL
on every row it claims (``holding``), and each job's start is written with
its first heartbeat or its outcome (``Running.unstamped``). They start in
claim order as slots free; the heartbeat extends their leases; ``stop()``
releases them at once, their attempt not spent (``clear``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from portqueue.worker.demand import Demand
from portqueue.worker.state import Running

# At most this many jobs held per slot of a queue's concurrency (measured:
# docs/performance.md, "perf (session 2026-12-02 evening)").
HOLD_PER_SLOT = 4
# Weight of the newest sample in the running means of handler time and claim
# round trip.
SMOOTHING = 0.2


class Hold:
    def __init__(self, demand: Demand, concurrency: dict[str, int],
                 run: Callable[[Running], None],
                 started: Callable[[list[str]], None], *, enabled: bool) -> None:
        self._demand = demand
        self._enabled = enabled
        self._concurrency = concurrency
        self._run = run
        self._started = started
        self._held: dict[str, deque[Running]] = {name: deque() for name in concurrency}
        self._handler_seconds: dict[str, float] = {}
        self._round_trip: float | None = None
        self._filling = False
        self._refill: set[str] = set()
        self.closed = False

    # --- what to claim ---

    def ahead(self, queue: str) -> int:
        """How many jobs past its free slots ``queue`` claims now."""
        mean = self._handler_seconds.get(queue)
        if not self._enabled or self.closed or mean is None or self._round_trip is None:
            return 0
        concurrency = self._concurrency[queue]
        if mean <= 0:
            return HOLD_PER_SLOT * concurrency
        return min(HOLD_PER_SLOT * concurrency, int(concurrency * self._round_trip / mean))

    def claim_took(self, seconds: float) -> None:
        """A claim's round trip (the fetcher)."""
        trip = self._round_trip
        self._round_trip = seconds if trip is None else trip + SMOOTHING * (seconds - trip)

    def ran(self, queue: str, seconds: float) -> None:
        """A handler of ``queue`` took ``seconds`` (the runners)."""
        mean = self._handler_seconds.get(queue)
        self._handler_seconds[queue] = (
            seconds if mean is None else mean + SMOOTHING * (seconds - mean))

    # --- held jobs ---

    def add(self, jobs: list[Running]) -> None:
        """A claim's jobs, in claim order: they start as slots free, the first
        ones now."""
        queues = []
        for running in jobs:
            self._held[running.claimed.queue].append(running)
            queues.append(running.claimed.queue)
        for queue in dict.fromkeys(queues):
            self._demand.held[queue] = len(self._held[queue])
        self.fill(queues)

    def fill(self, queues: list[str] | set[str]) -> None:
        """Start held jobs of ``queues`` while they have free slots. Iterative:
        a job that finishes inside its start (an eager task) frees its slot
        into this loop, not into a recursion."""
        self._refill.update(queues)
        if self._filling:
            return
        self._filling = True
        started: list[str] = []
        try:
            while self._refill:
                queue = self._refill.pop()
                held = self._held[queue]
                while held and self._demand.free(queue) > 0 and not self.closed:
                    running = held.popleft()
                    self._demand.held[queue] = len(held)
                    if running.settled:  # its lease was lost while it waited
                        continue
                    self._run(running)
                    started.append(running.claimed.id)
        finally:
            self._filling = False
        if started:
            self._started(started)

    def unsettled(self) -> list[Running]:
        """The held jobs whose leases are this worker's (the heartbeat)."""
        return [r for held in self._held.values() for r in held if not r.settled]

    def clear(self) -> list[Running]:
        """Stopping: nothing more starts; the held jobs, settled, to release."""
        self.closed = True
        released = [r for r in self.unsettled()]
        for running in released:
            running.settled = True
        for queue, held in self._held.items():
            held.clear()
            self._demand.held[queue] = 0
        return released

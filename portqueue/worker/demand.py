"""Which of a worker's queues the fetcher should claim next, and how many slots each has.

Each queue keeps its own wake-up state, so what one queue's claim returned
never decides when another is claimed again:

- a queue is *wanted* when something says it may have jobs: the worker
  started, the poll interval passed, a NOTIFY named it, or a slot of it
  freed while it is *backlogged*;
- a queue is *backlogged* while its last claim filled every slot it asked
  for (more may be waiting), until a claim of it comes back short.

The fetcher claims only wanted queues that have a free slot; a wanted queue
with no free slot stays wanted, and its next freed slot claims it. All of it
runs on the worker's loop: no locks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from portqueue.worker.stopping import Wake


class Demand:
    def __init__(self, concurrency: Mapping[str, int]) -> None:
        self._concurrency = dict(concurrency)
        self._running: Counter[str] = Counter()
        self._backlogged: set[str] = set()
        self._wanted: set[str] = set(self._concurrency)
        # Set when a wanted queue gains a free slot: the fetcher waits on it.
        self.changed = Wake()
        # The poll interval's multiple between polls (the listener sets it:
        # a worker among many that hears no wake-ups polls more rarely).
        self.poll_stretch = 1.0

    @property
    def queues(self) -> list[str]:
        return list(self._concurrency)

    def handles(self, queue: str) -> bool:
        return queue in self._concurrency

    def free(self, queue: str) -> int:
        return self._concurrency[queue] - self._running[queue]

    def running(self, queue: str) -> int:
        return self._running[queue]

    def ready(self) -> bool:
        """Whether a wanted queue has a free slot (a claim is due now)."""
        return any(self.free(queue) > 0 for queue in self._wanted)

    def want(self, queue: str) -> None:
        """A NOTIFY named ``queue``: claim it when it has a free slot (now, if it has)."""
        if queue not in self._concurrency:
            return
        self._wanted.add(queue)
        if self.free(queue) > 0:
            self.changed.set()

    def want_all(self) -> None:
        """The poll interval passed, or notifications may have been missed."""
        for queue in self._concurrency:
            self.want(queue)

    def take(self) -> dict[str, int]:
        """The free slots of every wanted queue that has some; those queues are
        no longer wanted until something says so again."""
        asked = {queue: self.free(queue) for queue in self._concurrency
                 if queue in self._wanted and self.free(queue) > 0}
        self._wanted.difference_update(asked)
        return asked

    def claimed(self, asked: Mapping[str, int], rows_per_queue: Mapping[str, int]) -> None:
        """What a claim of ``asked`` returned, per queue (expired rows included:
        they used a slot of the claim). Only the queues claimed change state."""
        for queue, slots in asked.items():
            if rows_per_queue.get(queue, 0) >= slots:
                self._backlogged.add(queue)
                if self.free(queue) > 0:  # expired rows took slots but run nothing
                    self.want(queue)
            else:
                self._backlogged.discard(queue)

    def started(self, queue: str) -> None:
        self._running[queue] += 1

    def finished(self, queue: str) -> None:
        """A slot of ``queue`` freed: claim it again at once if it is backlogged."""
        self._running[queue] -= 1
        if queue in self._backlogged:
            self._wanted.add(queue)
            self.changed.set()
        elif queue in self._wanted:
            self.changed.set()

"""``portqueue worker`` whose worker is slow to finish starting:
``python -m tests.faults.slow_start worker …``.

A test hook widening a real window: the worker has registered (its row is
written) but ``start()`` has not returned yet. A SIGTERM then must stop the
worker cleanly once it has started, not kill the process with the default
action.
"""

from __future__ import annotations

import asyncio
import logging

from portqueue.cli import main
from portqueue.worker.runtime import Worker

DELAY_SECONDS = 1.0

_start = Worker.start


async def slow_start(self: Worker) -> None:
    await _start(self)
    logging.getLogger("portqueue.worker").info("test hook: start() delayed")
    await asyncio.sleep(DELAY_SECONDS)


Worker.start = slow_start  # type: ignore[method-assign]

if __name__ == "__main__":
    main()

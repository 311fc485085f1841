"""``portqueue worker`` whose main thread is slow to begin stopping:
``python -m tests.faults.slow_stop worker …``.

A test hook widening a real window: between the first signal being heard and
the drain beginning, a second signal must still turn the stop into an abort.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from portqueue.cli import main
from portqueue.worker.host import ThreadWorkerHost

DELAY_SECONDS = 2.0

_stop = ThreadWorkerHost.stop


def slow_stop(self: ThreadWorkerHost, *, abort: bool = False) -> Any:
    logging.getLogger("portqueue.worker").info("test hook: stop() delayed")
    time.sleep(DELAY_SECONDS)  # resumes after a signal handler runs (PEP 475)
    return _stop(self, abort=abort)


ThreadWorkerHost.stop = slow_stop  # type: ignore[method-assign]

if __name__ == "__main__":
    main()

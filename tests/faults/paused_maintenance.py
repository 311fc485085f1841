"""``portqueue worker`` whose first rescuer pass stops inside its transaction:
``python -m tests.faults.paused_maintenance worker …``.

The pass has taken the rescuer's lock and opened its transaction when it says
``PAUSED`` (on stdout) and waits there for good: the test then freezes the
whole process (SIGSTOP) with the pass open, as a stalled VM would.
"""

from __future__ import annotations

import asyncio

from portqueue._testing import install_hook
from portqueue.cli import main

PAUSED = "paused inside the rescuer's pass"


async def _pause() -> None:
    print(PAUSED, flush=True)
    await asyncio.Event().wait()  # until the test freezes, then kills, the process


if __name__ == "__main__":
    # Only when run as the worker: a test process that imports this module
    # (collection, an import sweep) must not have its own rescuer passes
    # pause for good.
    install_hook("rescuer.before_batch", _pause)
    main()

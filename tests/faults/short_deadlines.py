"""``portqueue worker`` with short statement deadlines:
``python -m tests.faults.short_deadlines worker …``.

The defaults (seconds per role) are sized for production; a fault test that
black-holes a connection would wait them out. Here every role's deadline is
``FAULT_STATEMENT_SECONDS`` (default 2 s): the same code paths, sooner.
"""

from __future__ import annotations

import os

from portqueue.cli import main
from portqueue.worker import connections

SECONDS = float(os.environ.get("FAULT_STATEMENT_SECONDS", "2"))
for role in connections.STATEMENT_SECONDS:
    connections.STATEMENT_SECONDS[role] = SECONDS

if __name__ == "__main__":
    main()

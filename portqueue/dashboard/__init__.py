"""The portqueue web dashboard: queues, jobs, schedules and their actions.

A small server-rendered ASGI app (Starlette, Jinja2, uvicorn: the
``dashboard`` extra). ``serve`` runs it; ``create_app`` returns the app for
tests or for mounting in your own ASGI server. See docs/dashboard.md.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as missing:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the dashboard needs the 'dashboard' extra: pip install 'portqueue[dashboard]'"
    ) from missing

from portqueue.dashboard.app import create_app
from portqueue.dashboard.server import serve

__all__ = ["create_app", "serve"]

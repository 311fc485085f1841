"""Auto-refresh of the list pages: a ``<meta http-equiv="refresh">`` (no script,
which the CSP forbids), paused and resumed through the ``refresh`` parameter.

``?refresh=off`` pauses it, ``?refresh=<seconds>`` sets the interval; the
setting stays in the URL, so it survives each reload. A reload drops the
one-time notice of the action that led to the page, so it is not shown again
as if the action had been repeated.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from portqueue import parsing
from portqueue.dashboard.render import link

DEFAULT_SECONDS = 10
MIN_SECONDS, MAX_SECONDS = 2, 3600
OFF = "off"
# The notice parameters: shown once, after the redirect that set them.
_ONE_TIME = frozenset({"notice", "count", "matched"})


@dataclass(frozen=True)
class Refresh:
    seconds: int | None  # None: paused
    reload_url: str
    pause_url: str
    resume_url: str

    @property
    def paused(self) -> bool:
        return self.seconds is None


def refresh_of(request: Request) -> Refresh:
    """The page's refresh setting; a bad ``refresh`` value raises, naming it."""
    raw = request.query_params.get("refresh") or ""
    seconds: int | None
    if raw == OFF:
        seconds = None
    elif raw:
        seconds = parsing.integer("refresh", raw, minimum=MIN_SECONDS, maximum=MAX_SECONDS)
    else:
        seconds = DEFAULT_SECONDS
    kept = {key: value for key, value in request.query_params.items()
            if key not in _ONE_TIME and key != "refresh"}
    path = _route_path(request)
    running = {} if raw in ("", OFF) else {"refresh": raw}
    return Refresh(
        seconds=seconds,
        reload_url=link(request, path, **kept, **running),
        pause_url=link(request, path, **kept, refresh=OFF),
        resume_url=link(request, path, **kept))


def _route_path(request: Request) -> str:
    """The page's path inside the app (``link`` adds the mount prefix back)."""
    path = str(request.scope["path"])
    root = str(request.scope.get("root_path", ""))
    if root and path.startswith(root):
        path = path[len(root):]
    return path or "/"

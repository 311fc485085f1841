"""HTML rendering: one Jinja environment with autoescape always on, and the
filters the templates use to show values as text (never as markup)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from portqueue.dashboard.notices import notice_for
from portqueue.types import FOREVER, JobStatus

PREVIEW_CHARS = 120

_environment = jinja2.Environment(
    loader=jinja2.PackageLoader("portqueue.dashboard", "templates"),
    # On for every template whatever its name: a job's data, output, errors and
    # queue names are attacker-controlled text.
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def pretty_json(value: Any) -> str:
    """Indented JSON as plain text (the template escapes it)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


def preview_json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def timestamp(value: datetime | str | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        parsed = parse_timestamp(value)
        if parsed is None:
            return value
        value = parsed
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def parse_timestamp(text: str) -> datetime | None:
    """A timestamp stored inside JSON (an error's ``at``), or ``None``."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 86_400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"


def url(path: str, **params: Any) -> str:
    """``path`` with the non-empty ``params`` as a query string, each value encoded."""
    kept = {key: value for key, value in params.items() if value not in (None, "")}
    return path + ("?" + urlencode(kept) if kept else "")


def link(request: Request, path: str, **params: Any) -> str:
    """``url`` under the prefix the app is mounted at (``root_path``), if any."""
    return str(request.scope.get("root_path", "")) + url(path, **params)


def retention(seconds: int | None) -> str:
    """A retention ttl: FOREVER by name, else as a duration."""
    return "forever" if seconds == FOREVER else duration(seconds)


def clip(text: str | None, limit: int) -> str:
    """``text`` cut to ``limit`` characters for a list (its own page shows it whole)."""
    if text is None:
        return "—"
    return text if len(text) <= limit else text[: limit - 1] + "…"


_environment.filters.update(
    clip=clip, pretty_json=pretty_json, preview_json=preview_json, timestamp=timestamp,
    duration=duration, retention=retention)
_environment.globals.update(statuses=list(JobStatus))


def render(
    request: Request, template: str, context: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    notice = notice_for(request.query_params)
    context = {"refresh": None, **context}  # only the list pages reload themselves
    page = _environment.get_template(template).render(
        request=request, csrf_token=request.state.csrf_token, notice=notice,
        url=lambda path, **params: link(request, path, **params), **context)
    return HTMLResponse(page, status_code=status_code)

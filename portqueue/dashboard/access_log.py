"""Keeping the dashboard token out of the server's access log.

A ``?token=`` link is exchanged for a session cookie on its first request,
but the server logs that request's URL before anyone can drop it: uvicorn's
access log writes ``GET /jobs?token=… 303``, and logs end up in places the
token must not (CI output, log shippers). ``serve`` puts ``RedactToken`` on
that logger: every ``token`` value in a logged URL becomes ``***``, whether
the token was right or wrong (a near miss is as secret as a hit).
"""

from __future__ import annotations

import logging
from urllib.parse import unquote_plus

from portqueue.dashboard.auth import TOKEN_PARAMETER

ACCESS_LOGGER = "uvicorn.access"
REDACTED = "***"


def redact_token(text: str) -> str:
    """``text`` with the value of every ``token`` parameter of its query replaced."""
    path, mark, query = text.partition("?")
    if not mark:
        return text
    return path + mark + "&".join(_redacted(pair) for pair in query.split("&"))


def _redacted(pair: str) -> str:
    key, equals, _ = pair.partition("=")
    # Decoded as the app decodes it: "tok%65n=…" is read as the token too.
    if equals and unquote_plus(key) == TOKEN_PARAMETER:
        return f"{key}={REDACTED}"
    return pair


class RedactToken(logging.Filter):
    """Redacts ``token`` values in every text argument of a record (the URL of an
    access-log line; which argument it is is the server's business)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_token(arg) if isinstance(arg, str) else arg
                                for arg in record.args)
        if isinstance(record.msg, str):
            record.msg = redact_token(record.msg)
        return True

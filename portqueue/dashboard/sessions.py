"""The session cookie a ``?token=`` link is exchanged for.

Its value is ``<issued>.<nonce>.<signature>``: the Unix time the session
began, a random nonce (no two browsers share a cookie) and an HMAC-SHA256 of
both under a key derived from the token. The cookie never holds the token;
changing the token ends every session; a session older than its lifetime, or
a value changed in any byte, is refused. Nothing is stored server-side, so
several processes serving one address with the same token accept each
other's sessions.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from portqueue import parsing, validation
from portqueue.errors import InvalidArgument

DEFAULT_SESSION_LIFETIME_SECONDS = 12 * 3600
MAX_SESSION_LIFETIME_SECONDS = 30 * 24 * 3600
# Processes behind one address may disagree on the time by this much: a session
# issued by one is not refused by another as "from the future".
CLOCK_SKEW_SECONDS = 60


def lifetime(value: object) -> int:
    """A checked ``session_lifetime_seconds``."""
    return validation.integer("session_lifetime_seconds", value, minimum=1,
                              maximum=MAX_SESSION_LIFETIME_SECONDS)


def session_key(token: str) -> bytes:
    return hmac.new(token.encode(), b"portqueue-dashboard-session-key", hashlib.sha256).digest()


def _signature(key: bytes, issued: str, nonce: str) -> str:
    return hmac.new(key, f"{issued}.{nonce}".encode(), hashlib.sha256).hexdigest()


def new_session(key: bytes, *, issued: int | None = None) -> str:
    """A fresh cookie value, issued now (or at ``issued``, Unix seconds)."""
    at = str(int(time.time()) if issued is None else issued)
    nonce = secrets.token_urlsafe(18)
    return f"{at}.{nonce}.{_signature(key, at, nonce)}"


def session_ok(key: bytes, value: str, lifetime_seconds: int) -> bool:
    """Whether ``value`` was signed under ``key`` and is younger than ``lifetime_seconds``."""
    at, _, rest = value.partition(".")
    nonce, _, signature = rest.partition(".")
    if not hmac.compare_digest(signature.encode("utf-8", "replace"),
                               _signature(key, at, nonce).encode()):
        return False
    try:
        issued = parsing.integer("session", at, minimum=0, maximum=2**62)
    except InvalidArgument:
        return False
    age = time.time() - issued
    return -CLOCK_SKEW_SECONDS <= age < lifetime_seconds

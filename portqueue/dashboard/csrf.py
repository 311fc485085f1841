"""CSRF protection for the dashboard's actions.

Each browser gets a random nonce in a ``SameSite=Strict`` cookie; every form
carries the token derived from it (an HMAC under a per-process secret), and an
action runs only when ``csrf_ok`` finds the two matching and the request
coming from this origin.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from portqueue.dashboard.scope import cookies, equal, header, set_cookie

CSRF_COOKIE = "portqueue_csrf"
CSRF_FIELD = "csrf_token"


class CsrfMiddleware:
    """Puts ``csrf_token`` (for forms) and ``csrf_cookie_sent`` in ``scope["state"]``."""

    def __init__(self, app: ASGIApp, *, secret: bytes | None = None) -> None:
        self.app = app
        # Per process: a restart invalidates open forms (the page says to reload),
        # and a cookie planted by another site cannot be paired with a valid token.
        self.secret = secret or secrets.token_bytes(32)

    def form_token(self, nonce: str) -> str:
        return hmac.new(self.secret, nonce.encode(), hashlib.sha256).hexdigest()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = cookies(scope).get(CSRF_COOKIE) or ""
        sent = 20 <= len(nonce) <= 100 and nonce.isascii()
        if not sent:
            nonce = secrets.token_urlsafe(32)
        state: dict[str, Any] = scope.setdefault("state", {})
        state["csrf_token"] = self.form_token(nonce)
        state["csrf_cookie_sent"] = sent
        if sent:
            await self.app(scope, receive, send)
            return
        cookie = set_cookie(CSRF_COOKIE, nonce, "Strict")

        async def send_with_cookie(message: Message) -> None:
            # Only pages carry forms: a stylesheet fetched before the page's cookie
            # was stored must not replace it with a nonce no form knows.
            if message["type"] == "http.response.start" and _is_page(message):
                message["headers"] = [*message.get("headers", []), (b"set-cookie", cookie)]
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def _is_page(start: Message) -> bool:
    return any(key == b"content-type" and bytes(value).startswith(b"text/html")
               for key, value in start.get("headers", []))


def csrf_ok(scope: Scope, supplied: object) -> bool:
    """Whether a form's ``csrf_token`` matches this browser's cookie, and the
    request did not come from another site."""
    state = scope.get("state", {})
    if not state.get("csrf_cookie_sent") or not isinstance(supplied, str):
        return False
    # Defence in depth: browsers label cross-site requests; refuse them even
    # with a (somehow) valid token.
    if (header(scope, b"sec-fetch-site") or "same-origin") not in ("same-origin", "none"):
        return False
    origin = header(scope, b"origin")
    if origin is not None and urlsplit(origin).netloc != header(scope, b"host"):
        return False
    return equal(supplied, str(state["csrf_token"]))

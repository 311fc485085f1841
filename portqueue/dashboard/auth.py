"""Authentication: HTTP Basic, a bearer token, or the session cookie a
``?token=`` link is exchanged for; 401 otherwise. Every comparison of a secret
is constant-time."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

from portqueue.dashboard.scope import cookies, equal, header, query, raw_query, set_cookie
from portqueue.errors import InvalidArgument

SESSION_COOKIE = "portqueue_session"
TOKEN_PARAMETER = "token"


@dataclass(frozen=True)
class Credentials:
    """What the dashboard accepts: Basic ``user:password`` and/or a token."""

    basic: bytes | None = None   # the exact "user:password" bytes a Basic header decodes to
    token: str | None = None

    @property
    def required(self) -> bool:
        return self.basic is not None or self.token is not None

    def session_value(self) -> str:
        """The session cookie's value: derived from the token, so the cookie
        never holds the token itself."""
        if self.token is None:
            raise ValueError("no token: a session cookie is derived from the token")
        return hmac.new(self.token.encode(), b"portqueue-dashboard-session",
                        hashlib.sha256).hexdigest()


def credentials(auth: str | None, token: str | None) -> Credentials:
    """Validate the ``auth`` ("user:password") and ``token`` settings."""
    basic = None
    if auth is not None:
        user, colon, password = auth.partition(":") if isinstance(auth, str) else ("", "", "")
        # An empty user or password would make "authentication" guessable.
        if not colon or not user or not password:
            raise InvalidArgument("auth", "expected 'user:password' with both parts non-empty")
        basic = auth.encode()
    if token is not None and (not isinstance(token, str) or len(token) < 8):
        # A short token is brute-forced over the network in minutes.
        raise InvalidArgument("token", "expected a string of at least 8 characters")
    return Credentials(basic=basic, token=token)


class AuthMiddleware:
    """401 unless the request carries accepted credentials; a valid ``?token=``
    on a GET is exchanged for the session cookie (303 to the same page)."""

    def __init__(self, app: ASGIApp, *, credentials: Credentials) -> None:
        self.app = app
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.credentials.required:
            await self.app(scope, receive, send)
            return
        if self._authorized(scope):
            await self.app(scope, receive, send)
        elif scope["method"] == "GET" and self._query_token_ok(scope):
            await self._exchange_token(scope, send)
        else:
            await self._refuse(send)

    def _authorized(self, scope: Scope) -> bool:
        creds = self.credentials
        scheme, _, value = (header(scope, b"authorization") or "").partition(" ")
        scheme = scheme.lower()
        if creds.basic is not None and scheme == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True)
            except (binascii.Error, ValueError):
                return False
            return hmac.compare_digest(decoded, creds.basic)
        if creds.token is not None:
            if scheme == "bearer":
                return equal(value.strip(), creds.token)
            session = cookies(scope).get(SESSION_COOKIE)
            if session is not None:
                return equal(session, creds.session_value())
        return False

    def _query_token_ok(self, scope: Scope) -> bool:
        if self.credentials.token is None:
            return False
        supplied = query(scope).get(TOKEN_PARAMETER)
        return supplied is not None and equal(supplied, self.credentials.token)

    async def _exchange_token(self, scope: Scope, send: Send) -> None:
        # The token is used once: it becomes a session cookie and the browser is
        # sent to the same page without it, so it leaves the address bar and history.
        rest = [(k, v) for k, v in parse_qsl(raw_query(scope), keep_blank_values=True)
                if k != TOKEN_PARAMETER]
        # One leading slash: "//host/..." would send the browser to another site.
        location = quote(scope.get("root_path", "") + "/" + scope["path"].lstrip("/"))
        if rest:
            location += "?" + urlencode(rest)
        cookie = set_cookie(SESSION_COOKIE, self.credentials.session_value(), "Lax")
        await send({"type": "http.response.start", "status": 303, "headers": [
            (b"location", location.encode("latin-1")), (b"set-cookie", cookie),
            (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    async def _refuse(self, send: Send) -> None:
        challenge = (b'Basic realm="portqueue dashboard", charset="UTF-8"'
                     if self.credentials.basic is not None else b'Bearer realm="portqueue"')
        body = b"401: authentication required\n"
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"www-authenticate", challenge), (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

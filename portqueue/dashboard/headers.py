"""Security headers on every response, errors and 401s included: a strict
Content-Security-Policy (no script at all, styles from this origin only),
framing and sniffing bans, and ``Cache-Control: no-store``."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# No script-src: 'none' from default-src, so even markup that slipped past
# escaping could not run a script. Styles come from /static only (no inline).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    # The ?token= link must not leak to other sites through Referer. Not
    # "no-referrer": with it, browsers send "Origin: null" on same-origin form
    # posts, which the CSRF check refuses.
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)


class HeadersMiddleware:
    """Sets ``SECURITY_HEADERS`` on every response, replacing any the app set."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {key for key, _ in SECURITY_HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k not in names]
                message["headers"] = kept + list(SECURITY_HEADERS)
            await send(message)

        await self.app(scope, receive, send_with_headers)

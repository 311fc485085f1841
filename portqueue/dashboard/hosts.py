"""Which ``Host`` the dashboard answers to: the defence against DNS rebinding.

A page on evil.example can re-point its own name at 127.0.0.1; the browser
then treats the dashboard as same-origin with that page, which can read every
page, take a form's CSRF token and act (its ``Origin`` equals the ``Host`` it
sends). The attacker cannot choose what ``Host`` the browser sends, though: it
is the attacker's name. So only loopback names, the address the server is
bound to and the names the operator lists are served; any other ``Host`` gets
421 before authentication, the CSRF cookie or any page, so nothing is read.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from portqueue.dashboard.scope import header
from portqueue.errors import InvalidArgument

ANY_HOST = "*"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# A name or an IPv4 address, or an IPv6 address in brackets, then an optional port.
_HOST_HEADER_RE = re.compile(r"(?P<name>[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
_NAME_RE = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")


def _normal(name: str) -> str:
    # Case and a trailing dot do not change which host DNS names.
    return name.strip("[]").lower().rstrip(".")


def allowed_hosts(names: Iterable[str] | None, *, bound: str | None = None) -> frozenset[str]:
    """The host names served: loopback, ``bound`` and ``names`` (each a host name or
    an IP address, no port; ``"*"`` serves any ``Host``)."""
    if isinstance(names, str):
        raise InvalidArgument("allowed_hosts", "expected a list of host names, not one string")
    allowed = set(LOOPBACK_NAMES)
    for name in [*(names or ()), *([bound] if bound else [])]:
        if not isinstance(name, str):
            raise InvalidArgument("allowed_hosts", f"expected host names, got {name!r}")
        if name == ANY_HOST:
            allowed.add(ANY_HOST)
            continue
        normal = _normal(name)
        if not _is_host_name(normal):
            raise InvalidArgument(
                "allowed_hosts", f"{name!r} is not a host name or IP address (no port, no scheme)")
        allowed.add(str(ipaddress.ip_address(normal)) if _is_address(normal) else normal)
    return frozenset(allowed)


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_host_name(name: str) -> bool:
    return _is_address(name) or (len(name) <= 253 and _NAME_RE.fullmatch(name) is not None)


def host_name(value: str | None) -> str | None:
    """The host name a ``Host`` header names (normalised, port dropped), or ``None``
    when it is missing or malformed."""
    match = _HOST_HEADER_RE.fullmatch(value or "")
    if match is None:
        return None
    name = _normal(match.group("name"))
    return str(ipaddress.ip_address(name)) if _is_address(name) else name


class HostMiddleware:
    """400 without a well-formed ``Host``, 421 for one not in ``allowed``."""

    def __init__(self, app: ASGIApp, *, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or ANY_HOST in self.allowed:
            await self.app(scope, receive, send)
            return
        name = host_name(header(scope, b"host"))
        if name in self.allowed:
            await self.app(scope, receive, send)
        elif name is None:
            await _refuse(send, 400, b"400: the request has no valid Host header\n")
        else:
            # The refused name is not echoed: it is the attacker's text.
            await _refuse(send, 421, b"421: this dashboard does not answer to that host name "
                          b"(see allowed_hosts in docs/dashboard.md)\n")


async def _refuse(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

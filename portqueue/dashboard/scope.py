"""Reading what the dashboard's middlewares need from an ASGI scope, and the
one way secrets are compared (in constant time, ``hmac.compare_digest``)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl

from starlette.types import Scope


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def cookies(scope: Scope) -> dict[str, str]:
    raw = header(scope, b"cookie")
    if not raw:
        return {}
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except CookieError:
        return {}
    return {key: morsel.value for key, morsel in jar.items()}


def set_cookie(name: str, value: str, same_site: str, *, max_age: int | None = None) -> bytes:
    # Without Max-Age the browser keeps the cookie until it closes.
    lifetime = "" if max_age is None else f"; Max-Age={max_age}"
    return f"{name}={value}; Path=/; HttpOnly; SameSite={same_site}{lifetime}".encode("latin-1")


def equal(supplied: str, expected: str | bytes) -> bool:
    given = supplied.encode("utf-8", "replace")
    wanted = expected if isinstance(expected, bytes) else expected.encode()
    return hmac.compare_digest(given, wanted)


def raw_query(scope: Scope) -> str:
    return bytes(scope.get("query_string", b"")).decode("latin-1")


def query(scope: Scope) -> Mapping[str, str]:
    return dict(parse_qsl(raw_query(scope), keep_blank_values=True))

"""Reading text people type into values: the CLI's arguments, the dashboard's
forms, query strings and cookie fields.

One place, so that every entry point refuses the same inputs the same way:
with ``InvalidArgument`` naming the argument, never with a parser's own
exception. Python's parsers raise several that are not ``JSONDecodeError``
(``RecursionError`` on deep nesting, ``ValueError`` past 4300 digits), and
``int()`` and ``str.isdigit()`` accept more than ASCII digits (``int("٣")`` is
3, ``"²".isdigit()`` is true but ``int("²")`` raises).
"""

from __future__ import annotations

import json
import math
import re
import sys
from itertools import accumulate
from typing import Any

from portqueue.errors import InvalidArgument
from portqueue.validation import MAX_PAYLOAD_DEPTH

# [0-9], not \d: \d matches every Unicode decimal digit.
_INTEGER_RE = re.compile(r"[+-]?[0-9]+")
# Python's default limit on int <-> str conversion: an integer past it can be
# written to jsonb but then never decoded by a reader running the default.
MAX_JSON_INTEGER_DIGITS = sys.int_info.default_max_str_digits
# A JSON string (escapes included), so that brackets inside strings are not counted.
_JSON_STRING_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_JSON_BRACKET_RE = re.compile(r"[\[\]{}]")


def integer(argument: str, text: str, *, minimum: int, maximum: int) -> int:
    """``text`` as a decimal integer of ASCII digits (an optional sign, spaces
    around it allowed) from ``minimum`` to ``maximum``."""
    stripped = text.strip(" \t")
    if _INTEGER_RE.fullmatch(stripped):
        digits = stripped.lstrip("+-").lstrip("0") or "0"
        # Length first: int() of thousands of digits is slow, and refused anyway.
        if len(digits) <= len(str(max(abs(minimum), abs(maximum)))):
            value = -int(digits) if stripped[0] == "-" else int(digits)
            if minimum <= value <= maximum:
                return value
    raise InvalidArgument(argument, f"expected an integer from {minimum} to {maximum}")


def json_value(argument: str, text: str) -> Any:
    """``text`` parsed as JSON, refusing what no job could store or be read back
    with: NaN and Infinity (not JSON, jsonb refuses them), numbers beyond a
    float or past ``MAX_JSON_INTEGER_DIGITS`` digits, and nesting deeper than
    the client accepts (``MAX_PAYLOAD_DEPTH``)."""
    if _nesting(text) > MAX_PAYLOAD_DEPTH:
        raise InvalidArgument(
            argument, f"is nested deeper than {MAX_PAYLOAD_DEPTH} arrays/objects")
    try:
        return json.loads(text, parse_constant=_refuse_constant(argument),
                          parse_int=_integer_of(argument), parse_float=_float_of(argument))
    except json.JSONDecodeError as exc:
        raise InvalidArgument(
            argument, f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:  # _nesting counts valid JSON exactly; this is for the rest
        raise InvalidArgument(argument, "is nested too deeply") from None


def stored_json(column: str, text: str | bytes | bytearray,
                parse_int: Any = None) -> Any:
    """A JSON column's text as stored, decoded. The client writes nothing
    deeper than ``MAX_PAYLOAD_DEPTH``, but a row written by SQL may hold what
    PostgreSQL accepts (10,000 levels and more) and Python's decoder cannot
    follow (a little under its recursion limit): a ``ValueError`` naming the
    column, instead of a ``RecursionError`` from wherever the row was read."""
    try:
        return json.loads(text, parse_int=parse_int)
    except RecursionError:
        pass
    depth = _nesting(text if isinstance(text, str) else bytes(text).decode())
    raise InvalidArgument(
        column, f"is nested {depth} arrays/objects deep, too deep for Python to decode "
        f"(the client writes at most {MAX_PAYLOAD_DEPTH}; this was written by SQL)")


def _nesting(text: str) -> int:
    """How deep ``text``'s arrays and objects go (exact for valid JSON)."""
    if "[" not in text and "{" not in text:
        return 0
    brackets = _JSON_BRACKET_RE.findall(_JSON_STRING_RE.sub("", text))
    return max(accumulate(1 if b in "[{" else -1 for b in brackets), default=0)


def _refuse_constant(argument: str) -> Any:
    def refuse(constant: str) -> None:
        raise InvalidArgument(argument, f"{constant} is not JSON")
    return refuse


def _integer_of(argument: str) -> Any:
    def parse(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_JSON_INTEGER_DIGITS:
            raise InvalidArgument(
                argument, f"has an integer of more than {MAX_JSON_INTEGER_DIGITS} digits")
        return int(digits)
    return parse


def _float_of(argument: str) -> Any:
    def parse(number: str) -> float:
        value = float(number)
        if not math.isfinite(value):  # 1e400: json would read it as inf, which jsonb refuses
            raise InvalidArgument(argument, "has a number too large for a float")
        return value
    return parse

"""Inputs the validation, bad-input, round-trip and hostile tests share: payloads
of an exact encoded size, deep nesting, regex patterns the two engines disagree
on, and hypothesis strategies for JSON with jsonb's model of what comes back.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st


def nested_lists(depth: int) -> list[Any]:
    """``depth`` nested lists, built without recursion: [[[...]]]."""
    outer: list[Any] = []
    inner = outer
    for _ in range(depth - 1):
        inner.append([])
        inner = inner[0]
    return outer


def exact_string(size: int, unit: str = "x") -> str:
    """A string whose JSON encoding is exactly ``size`` bytes (``unit`` is one char)."""
    unit_bytes = len(json.dumps(unit, ensure_ascii=False).encode()) - 2
    count, rest = divmod(size - 2, unit_bytes)
    return unit * count + "x" * rest


# Patterns Python's re compiles but Postgres's ~ refuses (each is checked
# against Postgres in tests/integration/test_bad_input.py).
PYTHON_ONLY_PATTERNS = [
    "(?P<name>gpu)",
    "(?P<n>a)(?P=n)",
    "(?>atomic)",
    "a++",
    "a*+",
    "a{2}+",
    "a?+",
    "(a)?(?(1)b|c)",
    r"\N{LATIN SMALL LETTER A}",
    "a{256}",
    "a{1,1000}",
    "(a{255}){200}",
    "(?a)ram",
    "(?u)ram",
    "(?i:ram)",
    "(?-i:ram)",
    "(?i)(?s)ram",
    "a{1",
    "a{1,2,3}",
    "a{1 }",
    "[\\1]",
    "(?=a)*",
    "(a)(?=\\1)",
]

# Valid in both engines but read differently, so refused too.
DIFFERENT_MEANING_PATTERNS = [
    r"\bgpu\b",  # word boundary in Python, backspace in Postgres
    r"\Bx",  # non-boundary in Python, a backslash in Postgres
    "a{,3}",  # 0 to 3 a's in Python, the text "a{,3}" in Postgres
    "[[:alpha:]]",  # a POSIX class in Postgres, a set plus "]" in Python
    "(?x)ram 8gb",  # verbose mode would hide structure from the check
    "(?#comment)ram",
    r"(a)\1",
]

# Text jsonb and Postgres text can store: any code point but NUL and surrogates.
storable_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"))
numbers = (
    st.integers()
    | st.integers(min_value=-(10**4299), max_value=10**4299)  # Python's 4300-digit print limit
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | storable_text,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(storable_text, children, max_size=4),
    max_leaves=24,
)


def jsonb_model(value: Any) -> Any:
    """What jsonb gives back for ``value`` (see the module docstring)."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return {k: jsonb_model(value[k]) for k in keys}
    if isinstance(value, list):
        return [jsonb_model(v) for v in value]
    if isinstance(value, float) and value == 0.0:
        return 0.0
    return value


def exact(value: Any) -> Any:
    """A form in which == is exact: types, float bits, list and key order all count."""
    if isinstance(value, dict):
        return ("dict", [(k, exact(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [exact(v) for v in value])
    if isinstance(value, float):
        return ("float", value.hex())
    return (type(value).__name__, value)



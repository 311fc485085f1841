"""``portqueue.parsing``: whatever the text, a value or ``InvalidArgument``
naming the argument, never a parser's own exception."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from portqueue import parsing
from portqueue.errors import InvalidArgument

ASCII_INTEGER = re.compile(r"[ \t]*[+-]?[0-9]+[ \t]*")
JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.text() | st.floats(
    allow_nan=False, allow_infinity=False)
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=30)


@given(st.text() | st.from_regex(ASCII_INTEGER, fullmatch=True))
def test_integer_takes_ascii_digits_in_range_and_refuses_the_rest(text: str) -> None:
    try:
        value = parsing.integer("n", text, minimum=-1000, maximum=1000)
    except InvalidArgument as exc:
        assert exc.argument == "n"
        assert ASCII_INTEGER.fullmatch(text) is None or not -1000 <= int(text) <= 1000
    else:
        assert ASCII_INTEGER.fullmatch(text) and value == int(text)


@pytest.mark.parametrize("text", ["²", "¹", "٣", "\uff13", "1_0", "0x10", "1e3", "3.0", "",
                                  "+-1", "1 000", "\u00a01", "3\n"])
def test_integer_refuses_what_int_or_isdigit_would_take(text: str) -> None:
    with pytest.raises(InvalidArgument, match=r"^page: expected an integer from 1 to 9$"):
        parsing.integer("page", text, minimum=1, maximum=9)


def test_integer_refuses_thousands_of_digits_without_converting_them() -> None:
    with pytest.raises(InvalidArgument):
        parsing.integer("page", "9" * 100_000, minimum=1, maximum=9)
    assert parsing.integer("page", "0" * 100_000 + "7", minimum=1, maximum=9) == 7


@given(JSON_VALUES)
def test_json_value_reads_back_what_json_writes(value: object) -> None:
    assert parsing.json_value("data", json.dumps(value)) == value


@given(st.text(alphabet='[]{}"\\:,0123456789.eE+-ntrufalsNIiy \n', max_size=300) | st.text())
def test_json_value_raises_only_invalid_argument(text: str) -> None:
    try:
        parsing.json_value("data", text)
    except InvalidArgument as exc:
        assert exc.argument == "data"


@pytest.mark.parametrize("text", ["[" * 100_000, "{" * 100_000, '{"a":' * 100_000,
                                  "[" * 201 + "]" * 201, "1" * 4301, "-" + "1" * 4301,
                                  "1e400", "-1e400", "NaN", "[Infinity]"])
def test_json_value_refuses_what_no_job_could_hold(text: str) -> None:
    with pytest.raises(InvalidArgument, match=r"^data: "):
        parsing.json_value("data", text)


def test_nesting_ignores_brackets_inside_strings() -> None:
    text = json.dumps(["[" * 500, {"k": "{" * 500}, "\\\"[[["])
    assert parsing.json_value("data", text)[1] == {"k": "{" * 500}
    assert parsing.json_value("data", "[" * 200 + "]" * 200) is not None

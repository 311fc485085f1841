"""The named SQL in sql/*.sql, parsed once and rendered per schema.

A block starts with ``-- name: <name>`` and runs to the next one. ``{schema}``
is replaced through ``psycopg.sql.Identifier``; values stay ``%(name)s``
parameters, bound by the driver. Nothing else is ever put into SQL text.

A block starting with ``-- fragment: <name>`` is not a statement but a piece
several statements share (the dead-letter copy, a prune batch's tail). A
statement includes it as ``{<name>}``; it is rendered for the schema first,
so it may use ``{schema}`` too. Fragments hold only constant SQL, never a
value, so sharing them is the same as writing them out twice.

A fragment may take parameters, ``-- fragment: <name>(<param>, ...)``, used
in its body as ``{<param>}``: one shape read over several index ranges, say.
A block includes it as ``{<name>(<param> => <sql>, ...)}``, every parameter
named once; the arguments are SQL text of the same sql/ file (constant, like
the fragment), substituted when the files are loaded, so load_templates()
and load_fragments() hold them already expanded (except each parameterized
fragment's own body).
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from portqueue.resources import resource_dir

_BLOCK_RE = re.compile(r"^-- (name|fragment): (\w+)(?:\(([\w, ]*)\))?\s*$", re.MULTILINE)
_INVOCATION_RE = re.compile(r"\{(\w+)\(")
_PARAMETER_RE = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Positional:
    """A statement's text with ``$n`` placeholders, and the parameter each
    ``$n`` stands for (``names[n - 1]``)."""

    sql: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Query:
    """One statement to run: which named query, its rendered SQL and its
    parameters; ``positional``, for a statement too long for psycopg to keep
    its conversion (see ``Queries``), the same text converted once."""

    name: str
    sql: str
    params: Mapping[str, Any]
    positional: Positional | None = None


@dataclass(frozen=True)
class Batch:
    """Statements to send back to back in one transaction, without waiting for
    each one's rows: the runner pulls the next from ``queries`` (which may
    build it only then) while the server runs the one before, and answers
    with all their rows, in order."""

    queries: Iterator[Query]


def load_blocks() -> dict[str, dict[str, str]]:
    """Every block of every file in sql/, by kind ("name" or "fragment") and name,
    parameterized fragments' invocations expanded."""
    return _load()[0]


def fragment_parameters() -> dict[str, tuple[str, ...]]:
    """The parameters of each fragment that takes some (rendered only where invoked)."""
    return _load()[1]


@functools.cache
def _load() -> tuple[dict[str, dict[str, str]], dict[str, tuple[str, ...]]]:
    blocks: dict[str, dict[str, str]] = {"name": {}, "fragment": {}}
    parameters: dict[str, tuple[str, ...]] = {}
    for path in sorted(resource_dir("sql").glob("*.sql")):
        parts = _BLOCK_RE.split(path.read_text(encoding="utf-8"))
        for kind, name, params, body in zip(parts[1::4], parts[2::4], parts[3::4], parts[4::4],
                                            strict=True):
            if name in blocks["name"] or name in blocks["fragment"]:
                raise RuntimeError(f"block {name!r} is defined twice (second in {path.name})")
            blocks[kind][name] = _strip_comments(body).rstrip(";")
            if params is not None:
                if kind != "fragment":
                    raise RuntimeError(f"statement {name!r} takes parameters: only fragments do")
                parameters[name] = tuple(p.strip() for p in params.split(",") if p.strip())
    for kind in blocks.values():
        for name, body in kind.items():
            if name not in parameters:
                kind[name] = _expand(body, blocks["fragment"], parameters, (name,))
    return blocks, parameters


def _expand(text: str, fragments: Mapping[str, str], parameters: Mapping[str, tuple[str, ...]],
            including: tuple[str, ...]) -> str:
    """``text`` with every ``{fragment(param => sql, ...)}`` replaced by that
    fragment's body, its parameters substituted (and expanded in turn)."""
    out: list[str] = []
    position = 0
    for match in _INVOCATION_RE.finditer(text):
        name = match.group(1)
        if name not in parameters or match.start() < position:
            continue
        if name in including:
            raise RuntimeError(f"fragment {name!r} includes itself: {' -> '.join(including)}")
        arguments, end = _arguments(text, match.end(), name)
        if set(arguments) != set(parameters[name]):
            raise RuntimeError(f"{' -> '.join(including)}: fragment {name!r} takes "
                               f"{', '.join(parameters[name])}, given {', '.join(arguments)}")
        # The body is indented to the invocation's column, and an argument's
        # later lines keep their indentation relative to its first character,
        # so the expansion (sql/expanded/) reads as if written out.
        body = _PARAMETER_RE.sub(functools.partial(_place, arguments=arguments), fragments[name])
        out.append(text[position:match.start()])
        column = match.start() - (text.rfind("\n", 0, match.start()) + 1)
        out.append(_indent(_expand(body, fragments, parameters, (*including, name)), column))
        position = end
    out.append(text[position:])
    return "".join(out)


def _indent(text: str, by: int) -> str:
    """``text`` with its lines after the first indented by ``by`` columns."""
    first, *rest = text.split("\n")
    return "\n".join([first, *(" " * by + line if line else line for line in rest)])


def _place(placeholder: re.Match[str], arguments: Mapping[str, tuple[str, int]]) -> str:
    """The argument for one ``{param}`` of a fragment's body (the placeholder
    itself when it is not a parameter: ``{schema}``, a fragment), its later
    lines moved to where its first one now starts."""
    if placeholder.group(1) not in arguments:
        return placeholder.group(0)
    value, written_at = arguments[placeholder.group(1)]
    body = placeholder.string
    placed_at = placeholder.start() - (body.rfind("\n", 0, placeholder.start()) + 1)
    first, *rest = value.split("\n")
    moved = [" " * max(0, placed_at + len(line) - len(line.lstrip(" ")) - written_at)
             + line.lstrip(" ") for line in rest]
    return "\n".join([first, *moved])


def _arguments(text: str, start: int, name: str) -> tuple[dict[str, tuple[str, int]], int]:
    """The ``param => sql`` arguments from ``start`` (just past the opening
    parenthesis) to the closing ``)}``, split at commas outside parentheses
    and quotes, each with the column its SQL starts at, and where the
    invocation ends."""
    arguments: dict[str, tuple[str, int]] = {}
    depth, quoted, begin = 0, False, start
    for index in range(start, len(text)):
        char = text[index]
        if char == "'":
            quoted = not quoted
        elif quoted:
            continue
        elif char == "(":
            depth += 1
        elif char in ",)" and depth == 0:
            key, arrow, value = text[begin:index].partition("=>")
            if not arrow or not key.strip().isidentifier():
                raise RuntimeError(f"fragment {name!r}: argument {text[begin:index]!r} "
                                   "is not `param => sql`")
            offset = begin + len(key) + len(arrow)
            offset += len(value) - len(value.lstrip())
            arguments[key.strip()] = (value.strip(), offset - (text.rfind("\n", 0, offset) + 1))
            begin = index + 1
            if char == ")":
                if text[index + 1:index + 2] != "}":
                    raise RuntimeError(f"fragment {name!r}: its invocation must end in ')}}'")
                return arguments, index + 2
        elif char == ")":
            depth -= 1
    raise RuntimeError(f"fragment {name!r}: invocation not closed")


def load_templates() -> dict[str, str]:
    """Every named statement (schema.sql holds none)."""
    return load_blocks()["name"]


def load_fragments() -> dict[str, str]:
    """Every shared piece of statements."""
    return load_blocks()["fragment"]


def _strip_comments(body: str) -> str:
    # Whole-line comments are for readers of sql/; dropping them keeps a stray
    # "%" or brace in prose from being read as a placeholder.
    lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip()


# psycopg converts a statement's placeholders once and keeps the result for
# texts of up to 4,096 bytes (psycopg._queries.MAX_CACHED_STATEMENT_LENGTH);
# a longer text is converted on every execute, on the claim's hot path too
# (docs/performance.md, "claims (session 2026-12-04)"). The indentation is for
# readers of sql/: the server gets none (no sql/ literal spans lines).
_INDENT_RE = re.compile(r"\n[ \t]+")


def _unindented(text: str) -> str:
    return _INDENT_RE.sub("\n", text)


# Past that limit (claim_limited, claim) the text is converted here once, and
# the driver runs it on a raw cursor, which takes $n placeholders as they are.
CONVERTED_BY_PSYCOPG_BYTES = 4096
_PLACEHOLDER_RE = re.compile(r"%\((\w+)\)s|%")


def positional(text: str) -> Positional:
    """``text``'s ``%(name)s`` placeholders as ``$n``, one number per name, as
    psycopg would convert them."""
    names: dict[str, int] = {}

    def number(placeholder: re.Match[str]) -> str:
        name = placeholder.group(1)
        if name is None:
            raise ValueError(f"a '%' that is not a %(name)s placeholder in {text[:60]!r}")
        return f"${names.setdefault(name, len(names) + 1)}"

    converted = _PLACEHOLDER_RE.sub(number, text)
    return Positional(converted, tuple(names))


class Queries:
    """The named queries rendered for one schema, plus its NOTIFY channel names."""

    def __init__(self, schema: str, *, indented: bool = False) -> None:
        """``indented``: the statements as sql/ lays them out, for readers
        (tools/expand_sql.py); the server gets them without."""
        self.schema = schema
        quoted = sql.Identifier(schema)
        fragments = _render_fragments(quoted)
        layout = (lambda text: text) if indented else _unindented
        self._rendered = {
            name: layout(sql.SQL(template).format(schema=quoted, **fragments).as_string())
            for name, template in load_templates().items()
        }
        self._positional = {name: positional(text) for name, text in self._rendered.items()
                            if len(text.encode()) > CONVERTED_BY_PSYCOPG_BYTES}
        # Channel names match the triggers in the migrations: "<schema>.<topic>".
        self.job_channel = f"{schema}.job"
        self.cancel_channel = f"{schema}.cancel"
        # A queue's first listener had no free slot for a wake-up: the others claim.
        self.passed_channel = f"{schema}.passed"
        self.finished_channel = f"{schema}.finished"

    def __call__(self, name: str, **params: Any) -> Query:
        return Query(name, self._rendered[name], params, self._positional.get(name))

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._rendered)


def _render_fragments(schema: sql.Identifier) -> dict[str, sql.Composable]:
    """Every fragment rendered for ``schema``, the fragments it includes first."""
    texts = {name: text for name, text in load_fragments().items()
             if name not in fragment_parameters()}
    rendered: dict[str, sql.Composable] = {}

    def render(name: str, including: tuple[str, ...]) -> sql.Composable:
        if name in including:
            raise RuntimeError(f"fragment {name!r} includes itself: {' -> '.join(including)}")
        if name not in rendered:
            text = texts[name]
            parts = {field: render(field, (*including, name))
                     for _, field, _, _ in string.Formatter().parse(text)
                     if field in texts}
            rendered[name] = sql.SQL(text).format(schema=schema, **parts)
        return rendered[name]

    for name in texts:
        render(name, ())
    return rendered


@functools.lru_cache(maxsize=32)
def queries_for(schema: str) -> Queries:
    return Queries(schema)


def statement_names(text: str) -> list[str]:
    """The named statements of one sql/ file's text, in file order (its fragments left out)."""
    return [name for kind, name, _ in _BLOCK_RE.findall(text) if kind == "name"]

"""An AST check for string-built SQL (STYLE.md, principle 2: values are bound,
identifiers are composed, nothing else is interpolated).

What it reports, per module:
- ``sink``: SQL handed to ``execute``/``executemany``, ``sql.SQL`` or
  SQLAlchemy's ``text`` that was built by string operations (an f-string,
  ``+``, ``%``, ``.format``, ``.join``), directly or through a local variable;
- ``sql-text``: such string building anywhere, when the template reads as a
  SQL statement (a literal, or a module constant, starting with SELECT,
  INSERT, UPDATE, DELETE, CREATE, ...), even if the sink is elsewhere;
- ``composed-from-text``: ``sql.SQL``/``text`` given a non-literal outside the
  named-query loader (portqueue/queries.py renders sql/*.sql through it).

Allowed: literal SQL, ``query.sql`` of a named query, psycopg.sql composition
(``sql.SQL("LISTEN {}").format(sql.Identifier(x))``), and interpolating the
schema already quoted by ``sql.Identifier`` (a value whose name says
``quoted_schema``; migrate.py makes it), as the Alembic migrations do.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

SQL_START = re.compile(
    r"\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|WITH|LISTEN|NOTIFY|UNLISTEN|"
    r"TRUNCATE|GRANT|REVOKE|SET|RESET|COMMENT|LOCK|VACUUM|ANALYZE|COPY|DO|BEGIN)\b",
    re.IGNORECASE)
EXECUTE_METHODS = frozenset({"execute", "executemany", "exec_driver_sql"})
COMPOSING_CALLS = frozenset({"psycopg.sql.SQL", "sqlalchemy.text", "sqlalchemy.sql.text"})
LOADERS = frozenset({"portqueue/queries.py"})
QUOTED = "quoted_schema"


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str
    code: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.code}"


def _quoted_only(values: list[ast.expr]) -> bool:
    """Every interpolated value is the Identifier-quoted schema."""
    return bool(values) and all(QUOTED in ast.unparse(v) for v in values)


class _Module(ast.NodeVisitor):
    def __init__(self, path: str, tree: ast.Module) -> None:
        self.path = path
        self.findings: list[Finding] = []
        self.imports: dict[str, str] = {}
        self.constants: dict[str, str] = {}
        self.scopes: list[dict[str, ast.expr]] = [{}]
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.constants[target.id] = node.value.value

    # --- names ---

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.imports[(alias.asname or alias.name).split(".")[0]] = alias.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def _qualified(self, func: ast.expr) -> str:
        if isinstance(func, ast.Name):
            return self.imports.get(func.id, func.id)
        if isinstance(func, ast.Attribute):
            return f"{self._qualified(func.value)}.{func.attr}"
        return ""

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scopes.append({})
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                self.scopes[-1][target.id] = node.value
        self.generic_visit(node)

    # --- what counts as built ---

    def _template(self, node: ast.expr) -> str | None:
        """The literal text a string operation starts from, when known."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return self.constants.get(node.id)
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value for v in node.values
                           if isinstance(v, ast.Constant) and isinstance(v.value, str))
        if isinstance(node, ast.BinOp):
            return self._template(node.left)
        return None

    def _built(self, node: ast.expr, depth: int = 0) -> tuple[str, list[ast.expr]] | None:
        """(template, interpolated values) if ``node`` is string-built, else None."""
        if isinstance(node, ast.JoinedStr):
            values = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
            return (self._template(node) or "", values) if values else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
            stringy = any(self._template(side) is not None or self._built(side, depth + 1)
                          for side in (node.left, node.right))
            if stringy:
                return (self._template(node) or "", [node.right])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("format", "join", "format_map"):
            receiver = node.func.value
            if self._qualified(receiver).endswith(("sql.SQL", "psycopg.sql.SQL")) or (
                    isinstance(receiver, ast.Call)
                    and self._qualified(receiver.func) in COMPOSING_CALLS):
                return None  # psycopg.sql composition: Identifier/Literal, checked as a sink
            values = [*node.args, *(k.value for k in node.keywords)]
            return (self._template(receiver) or "", values)
        if isinstance(node, ast.Name) and depth < 3:
            assigned = self.scopes[-1].get(node.id)
            if assigned is not None:
                return self._built(assigned, depth + 1)
        return None

    def _report(self, node: ast.AST, rule: str) -> None:
        self.findings.append(Finding(self.path, getattr(node, "lineno", 0), rule,
                                     ast.unparse(node)[:120]))

    # --- rules ---

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        qualified = self._qualified(func)
        is_execute = isinstance(func, ast.Attribute) and func.attr in EXECUTE_METHODS
        is_composing = qualified in COMPOSING_CALLS
        argument = node.args[0] if node.args else None
        if (is_execute or is_composing) and argument is not None:
            built = self._built(argument)
            if built is not None and not _quoted_only(built[1]):
                self._report(node, "sink")
        if is_composing and argument is not None and self.path not in LOADERS \
                and not (isinstance(argument, ast.Constant) and isinstance(argument.value, str)) \
                and self._built(argument) is None:
            self._report(node, "composed-from-text")
        self._sql_text(node)
        self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        self._sql_text(node)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        self._sql_text(node)
        self.generic_visit(node)

    def _sql_text(self, node: ast.expr) -> None:
        if isinstance(node, ast.Name):
            return
        built = self._built(node)
        if built is None:
            return
        template, values = built
        if SQL_START.match(template) and not _quoted_only(values):
            self._report(node, "sql-text")


def check_source(source: str, path: str = "<sample>") -> list[Finding]:
    module = _Module(path, ast.parse(source))
    module.visit(ast.parse(source))
    # One construct may match two rules at one place: report it once.
    unique = {(f.line, f.rule, f.code): f for f in module.findings}
    return sorted(unique.values(), key=lambda f: (f.line, f.rule))


def check_tree(root: Path, folders: tuple[str, ...]) -> list[Finding]:
    findings: list[Finding] = []
    for folder in folders:
        for file in sorted((root / folder).rglob("*.py")):
            relative = file.relative_to(root).as_posix()
            findings += check_source(file.read_text(encoding="utf-8"), relative)
    return findings

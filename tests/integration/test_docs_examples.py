"""Every shell example of README.md and docs/*.md runs as written (issue 18, item 2),
and so do README's and getting-started's Python examples.

The fenced ``sh`` and ``console`` blocks are read from the files (``console``
lines starting with ``$ `` are commands, the lines after them their output).
Each ``portqueue …`` command runs as a real process against this test run's
database, the block's commands in order, from a state seeded before each block
(queues with pending, failed and completed jobs). Only what names the user's
own setup is replaced: ``myapp.jobs:pq`` by tests/integration/docs_app.py, a
``--dsn`` by the test database, a job id by a real one, ports by free ones, and
the demo's job count by a small one. ``worker`` and ``dashboard`` are started,
awaited until they serve, and stopped with SIGTERM, which must end them with
exit 0. A command whose documented output is an error must fail; every other
one must exit 0. Commands of other programs (pip, python, psql, systemctl) are
not run, but each must be of a program listed here, so that a new example is
never silently left untested.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import types
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import PortQueue
from portqueue.migrate import migrate
from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
# The schema the docs' commands use when they name none.
DOCS_SCHEMA = "portqueue"
# Schemas examples create besides it (`portqueue migrate --schema jobs`).
OTHER_SCHEMAS = ("jobs", "portqueue_demo")
APP = "tests.integration.docs_app:pq"
DEMO_JOBS = "40"
LONG_RUNNING = {"worker", "dashboard"}
# Programs whose commands the docs show but this test does not run, and why.
NOT_RUN = {
    "pip": "installs packages (tests/migrations/test_wheel.py installs the wheel)",
    "python": "a venv, pytest, the benchmark or Django's manage.py (tested elsewhere)",
    "python3": "creates a virtualenv",
    ".": "activates a virtualenv",
    "export": "sets the DSN, which this test sets itself",
    "psql": "the DBA's own tool",
    "systemctl": "a process manager",
    "journalctl": "a process manager's logs",
    ".venv/bin/python": "the retention benchmark (bench/)",
}
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
SEPARATORS = {";", "&&", "||", "|"}
FAILURE = '[{"attempt": 1, "type": "SMTPError", "message": "SMTP 550: no such user"}]'


@dataclass
class Command:
    """One simple command of an example, as the docs spell it."""

    where: str
    words: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdout_to: str | None = None
    fails: bool = False  # its documented output is an error

    @property
    def program(self) -> str:
        return self.words[0] if self.words else ""


@dataclass
class Block:
    where: str
    commands: list[Command]


def _blocks(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, language, body) of each fenced block of ``path``."""
    text = path.read_text(encoding="utf-8")
    for match in FENCE.finditer(text):
        yield text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2)


def _command_lines(language: str, body: str) -> Iterator[tuple[int, str, list[str]]]:
    """(offset, command line, its documented output lines)."""
    lines = body.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].rstrip()
        start = index
        index += 1
        if language == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\") and index < len(lines):
            line = line[:-1] + " " + lines[index].strip()
            index += 1
        output: list[str] = []
        if language == "console":
            while index < len(lines) and not lines[index].startswith("$ "):
                output.append(lines[index])
                index += 1
        yield start, line, output


def _simple_commands(line: str) -> Iterator[tuple[list[str], str | None]]:
    """The line's simple commands (split at ; && || |), each with its stdout file."""
    # <job id> is a placeholder, not a redirection.
    lexer = shlex.shlex(line.replace("<job id>", "JOB_ID"), posix=True,
                        punctuation_chars=True)
    lexer.whitespace_split = True
    words: list[str] = []
    stdout_to: str | None = None
    tokens = list(lexer)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token in SEPARATORS:
            yield words, stdout_to
            words, stdout_to = [], None
        elif token == ">":
            index += 1
            stdout_to = tokens[index]
        else:
            words.append(token)
        index += 1
    yield words, stdout_to


def _command(where: str, words: list[str], stdout_to: str | None, fails: bool) -> Command:
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return Command(where, words, env, stdout_to, fails)


def shell_examples() -> list[Block]:
    blocks = []
    for path in DOC_FILES:
        name = path.relative_to(ROOT).as_posix()
        for first_line, language, body in _blocks(path):
            if language not in SHELL_LANGUAGES:
                continue
            commands = []
            for offset, line, output in _command_lines(language, body):
                fails = any(out.startswith("portqueue: error:") for out in output)
                where = f"{name}:{first_line + 1 + offset}"
                commands += [_command(where, words, stdout_to, fails)
                             for words, stdout_to in _simple_commands(line) if words]
            blocks.append(Block(f"{name}:{first_line}", commands))
    return blocks


BLOCKS = shell_examples()
RUN_BLOCKS = [block for block in BLOCKS
              if any(command.program == "portqueue" for command in block.commands)]


def test_every_shell_example_is_run_or_of_a_program_listed_as_not_run() -> None:
    programs = {command.program for block in BLOCKS for command in block.commands}
    unknown = sorted(programs - {"portqueue", *NOT_RUN})
    assert not unknown, f"examples of programs this test neither runs nor lists: {unknown}"
    assert len(RUN_BLOCKS) >= 20, "the examples were not found: did the fences change?"


# --- the database the examples run against ---


@dataclass
class Seeded:
    failed_job_id: str


@pytest.fixture(scope="module")
def docs_dsn(pg_dsn: str) -> Iterator[str]:
    migrate(pg_dsn, schema=DOCS_SCHEMA)
    yield pg_dsn
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for schema in (DOCS_SCHEMA, *OTHER_SCHEMAS):
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(schema)))
        conn.execute("DROP TABLE IF EXISTS public.orders")


@pytest.fixture
def seeded(docs_dsn: str) -> Seeded:
    """The state every block starts from: the queues the examples name, with
    pending, failed and completed jobs."""
    with psycopg.connect(docs_dsn, autocommit=True) as conn:
        tables = sql.SQL(", ").join(sql.Identifier(DOCS_SCHEMA, table)
                                    for table in ("job", "schedule", "queue", "worker"))
        conn.execute(sql.SQL("TRUNCATE {}").format(tables))
    with PortQueue(docs_dsn, schema=DOCS_SCHEMA) as pq:
        for queue in ("emails", "reports", "reindex", "fulfillment"):
            pq.add_jobs(queue=queue, jobs=[{"data": {"n": n}} for n in range(2)])
        failed = pq.add_jobs(queue="emails", jobs=[{"data": {"to": "x@y"}}] * 3)
        done = pq.add_jobs(queue="emails", jobs=[{"data": {"n": n}} for n in range(2)])
    with psycopg.connect(docs_dsn, autocommit=True) as conn:
        job = sql.Identifier(DOCS_SCHEMA, "job")
        conn.execute(sql.SQL(
            "UPDATE {} SET status = 'failed', attempt = 1, finished_at = now(), "
            "errors = %s::jsonb WHERE id = ANY(%s)").format(job),
            [FAILURE, [r.job_id for r in failed]])
        conn.execute(sql.SQL(
            "UPDATE {} SET status = 'completed', attempt = 1, finished_at = now() "
            "WHERE id = ANY(%s)").format(job), [[r.job_id for r in done]])
    assert failed[0].job_id is not None
    return Seeded(failed_job_id=failed[0].job_id)


def _environment(dsn: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PORTQUEUE_", "DJANGO_"))}
    # This checkout's code, whatever portqueue the environment has installed.
    env.update(PORTQUEUE_DSN=dsn, PYTHONPATH=str(ROOT), COLUMNS="200")
    return env


def _arguments(command: Command, dsn: str, seeded: Seeded) -> list[str]:
    """The command's arguments with the user's own setup replaced by the test's."""
    words = command.words[1:]
    out: list[str] = []
    for index, word in enumerate(words):
        before = words[index - 1] if index else ""
        if word == "myapp.jobs:pq":
            word = APP
        elif before == "--dsn":
            word = dsn
        elif before in ("--port", "--metrics-port"):
            word = str(free_port())
        elif before == "--jobs":
            word = DEMO_JOBS
        elif word == "JOB_ID" or UUID.match(word):
            word = seeded.failed_job_id
        out.append(word)
    if out[:1] == ["dashboard"] and "--port" not in out:
        out += ["--port", str(free_port())]
    if out[:1] == ["demo"] and "--jobs" not in out:
        out += ["--jobs", DEMO_JOBS]
    return out


def _django(command: Command, env: dict[str, str], dsn: str) -> None:
    """The Django example's settings module is the test project's."""
    if "DJANGO_SETTINGS_MODULE" in command.env:
        env.update(DJANGO_SETTINGS_MODULE="tests.django.project.settings",
                   PORTQUEUE_DJANGO_DSN=dsn, PORTQUEUE_DJANGO_SCHEMA=DOCS_SCHEMA)


def _serving(process: subprocess.Popen[str], arguments: list[str], log: Path) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"{arguments} exited {process.returncode}: {log.read_text()}")
    if arguments[0] == "worker":
        return " started: queues=" in log.read_text()
    port = arguments[arguments.index("--port") + 1]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # 401 without credentials: it serves
    except (urllib.error.URLError, ConnectionError):
        return False


def _run_long(arguments: list[str], env: dict[str, str], cwd: Path, where: str) -> None:
    log = cwd / "process.log"
    with log.open("w") as sink:
        process = subprocess.Popen([sys.executable, "-m", "portqueue.cli", *arguments],
                                   cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                   text=True)
    try:
        wait_until(lambda: _serving(process, arguments, log), timeout=60,
                   what=f"{where}: portqueue {' '.join(arguments)} to serve")
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
        # The worker drains and exits 0. Uvicorn shuts the dashboard down
        # cleanly, then ends by the signal it got, as servers conventionally do.
        stopped = {0} if arguments[0] == "worker" else {0, -signal.SIGTERM}
        assert code in stopped, f"{where}: exit {code} after SIGTERM: {log.read_text()}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _run(command: Command, dsn: str, seeded: Seeded, cwd: Path) -> None:
    arguments = _arguments(command, dsn, seeded)
    env = {**_environment(dsn), **command.env}
    if "PORTQUEUE_DSN" in command.env:  # PORTQUEUE_DSN=postgresql://admin@db/app portqueue …
        env["PORTQUEUE_DSN"] = dsn
    _django(command, env, dsn)
    if arguments[0] in LONG_RUNNING:
        _run_long(arguments, env, cwd, command.where)
        return
    done = subprocess.run([sys.executable, "-m", "portqueue.cli", *arguments], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=180)
    shown = f"{command.where}: portqueue {' '.join(arguments)}: exit {done.returncode}\n" + (
        f"{done.stdout}\n{done.stderr}")
    if command.fails:
        assert done.returncode != 0 and "portqueue: error:" in done.stderr, shown
    else:
        assert done.returncode == 0, shown
    if command.stdout_to is not None:
        (cwd / command.stdout_to).write_text(done.stdout)


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=[block.where for block in RUN_BLOCKS])
def test_shell_example_runs(block: Block, docs_dsn: str, seeded: Seeded,
                            tmp_path: Path) -> None:
    # What the examples read from their working directory.
    (tmp_path / "jobs.jsonl").write_text(
        '{"data": {"to": "a@example.com"}}\n'
        '{"data": {"to": "b@example.com"}, "priority": 10, "idempotency_key": "welcome:b"}\n')
    for command in block.commands:
        if command.program == "portqueue":
            _run(command, docs_dsn, seeded, tmp_path)


# --- the Python examples ---


README_PRELUDE = """
from sqlalchemy import Column, Integer, Numeric, Text, create_engine
from sqlalchemy.orm import DeclarativeBase, Session

engine = create_engine(SQLALCHEMY_URL)


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id = Column(Integer, primary_key=True)
    total = Column(Numeric)
    state = Column(Text)


Base.metadata.drop_all(engine)
Base.metadata.create_all(engine)
with Session(engine) as session, session.begin():
    session.add(Order(id=42, total=10, state="new"))
order_id, total = 41, 9.99
"""


def python_examples(path: Path) -> list[str]:
    return [body for _, language, body in _blocks(path) if language == "python"]


def _with_test_dsn(code: str, dsn: str) -> str:
    return re.sub(r'"postgresql://[^"]*"', lambda _: repr(dsn), code)


@contextlib.contextmanager
def _myapp_modules() -> Iterator[dict[str, types.ModuleType]]:
    """``# myapp/jobs.py`` blocks become the module ``myapp.jobs``, as the docs
    have the reader save them; removed from sys.modules afterwards."""
    modules: dict[str, types.ModuleType] = {}
    try:
        yield modules
    finally:
        for name in ("myapp.jobs", "myapp"):
            sys.modules.pop(name, None)


def _run_python(path: Path, dsn: str, prelude: str, start_worker: bool) -> dict[str, Any]:
    namespace: dict[str, Any] = {"SQLALCHEMY_URL": _sqlalchemy_url(dsn)}
    exec(compile(prelude, f"{path.name}:prelude", "exec"), namespace)
    clients: list[PortQueue] = []
    started: list[PortQueue] = []
    with _myapp_modules():
        try:
            for index, code in enumerate(python_examples(path)):
                code = _with_test_dsn(code, dsn)
                where = f"{path.name}: python block {index + 1}"
                if code.startswith("# myapp/jobs.py"):
                    package = types.ModuleType("myapp")
                    package.__path__ = []
                    module = types.ModuleType("myapp.jobs")
                    sys.modules.update({"myapp": package, "myapp.jobs": module})
                    exec(compile(code, where, "exec"), module.__dict__)
                    namespace.update({k: v for k, v in module.__dict__.items()
                                      if not k.startswith("__")})
                    if start_worker:  # "leave it running in this terminal"
                        module.pq.start(maintenance=False)
                        started.append(module.pq)
                else:
                    exec(compile(code, where, "exec"), namespace)
                clients += [value for value in namespace.values()
                            if isinstance(value, PortQueue) and value not in clients]
        finally:
            for client in started:
                client.stop()
            for client in clients:
                client.stop()
                client.close()
    return namespace


def _sqlalchemy_url(dsn: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    user, host = params.get("user", "postgres"), params.get("host", "127.0.0.1")
    return f"postgresql+psycopg://{user}@{host}:{params.get('port', 5432)}/{params['dbname']}"


def test_readme_python_examples_run(docs_dsn: str, seeded: Seeded) -> None:
    namespace = _run_python(ROOT / "README.md", docs_dsn, README_PRELUDE, start_worker=False)
    assert namespace["out"] == {"shipped": True}
    with psycopg.connect(docs_dsn) as conn:
        assert conn.execute("SELECT state FROM public.orders WHERE id = 42").fetchone() == (
            "shipped",)
        fulfil = conn.execute(sql.SQL(
            "SELECT count(*) FROM {} WHERE queue = 'fulfillment' AND data = %s::jsonb").format(
            sql.Identifier(DOCS_SCHEMA, "job")), ['{"order_id": 41}']).fetchone()
        assert fulfil == (1,), "the add inside the SQLAlchemy transaction committed with it"
    # Running the README again declares its cron schedule again: still one.
    _run_python(ROOT / "README.md", docs_dsn, README_PRELUDE, start_worker=False)
    with psycopg.connect(docs_dsn) as conn:
        schedules = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE queue = 'reports'").format(
            sql.Identifier(DOCS_SCHEMA, "schedule"))).fetchone()
    assert schedules == (1,)


def test_getting_started_python_examples_run(
    docs_dsn: str, seeded: Seeded, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("PORTQUEUE_DSN", docs_dsn)
    started = time.monotonic()
    _run_python(ROOT / "docs" / "getting-started.md", docs_dsn, "", start_worker=True)
    printed = capsys.readouterr().out
    assert "sending 'welcome' to e@example.com" in printed
    assert "{'sent': True}" in printed
    assert time.monotonic() - started < 60

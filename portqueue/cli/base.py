"""What every command shares: the app, the connection options, exit codes,
password redaction and error reporting.

Exit codes: 0 success; 1 the operation failed (the database refused or was
unreachable, or nothing matched where that matters, e.g. an unknown job id);
2 a usage error (a missing DSN, a bad schema name, bad input); 130 interrupted.

Connection strings carry passwords, and they end up in CI logs: every message
the CLI prints about a connection goes through :func:`redact` first.
"""

from __future__ import annotations

import re
from typing import Annotated, NoReturn
from urllib.parse import unquote

import psycopg
import typer
from psycopg.conninfo import conninfo_to_dict

from portqueue.errors import InvalidArgument
from portqueue.validation import schema_name

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

app = typer.Typer(
    name="portqueue",
    no_args_is_help=True,
    add_completion=False,
    # Locals of a failing frame include the DSN, password and all.
    pretty_exceptions_show_locals=False,
)

DsnOption = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        envvar="PORTQUEUE_DSN",
        help="PostgreSQL connection string (URL or key=value).",
        show_default=False,
    ),
]
SchemaOption = Annotated[
    str,
    typer.Option(
        "--schema",
        envvar="PORTQUEUE_SCHEMA",
        help="The schema holding portqueue's tables.",
    ),
]
JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print JSON for scripts (shapes in docs/cli.md); no colours, "
                 "no progress bars."),
]


@app.callback()
def _root() -> None:
    """portqueue: a PostgreSQL-native, transactional job queue.

    Settings come from options or the environment (PORTQUEUE_DSN,
    PORTQUEUE_SCHEMA). `portqueue demo` shows it working. Run
    `portqueue COMMAND --help` for a command's options.

    Exit codes: 0 success; 1 the operation failed, or nothing matched where
    that matters (an unknown job id); 2 a usage error or bad input (nothing
    is written then); 130 interrupted.

    Example:

        PORTQUEUE_DSN=postgresql://app@db.internal/app portqueue migrate
    """


def describe(exc: BaseException) -> str:
    # SQLAlchemy wraps the driver's error in "(psycopg.X) ... (Background on
    # this error at: …)"; the driver's own message is the useful part.
    orig = getattr(exc, "orig", None)  # sqlalchemy.exc.DBAPIError
    if isinstance(orig, BaseException):
        exc = orig
    message = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {message}"


def _passwords(dsn: str) -> set[str]:
    """Every spelling of a password the DSN may carry, even an unparsable DSN."""
    found: set[str] = set()
    try:
        password = conninfo_to_dict(dsn).get("password")
        if password:
            found.add(str(password))
    except psycopg.Error:
        pass
    # URL userinfo (scheme://user:password@host) and password=… in either
    # form, as written: libpq messages quote the DSN's own text.
    for pattern in (r"^[A-Za-z][\w+.-]*://[^/?#@]*?:([^/?#@]*)@", r"password\s*=\s*([^\s&]+)"):
        for match in re.finditer(pattern, dsn):
            raw = match.group(1).strip("'")
            found.update({raw, unquote(raw)})
    return {password for password in found if password}


def redact(message: str, dsn: str) -> str:
    """``message`` with any password from ``dsn`` replaced by ``***``."""
    for password in sorted(_passwords(dsn), key=len, reverse=True):
        message = message.replace(password, "***")
    return message


def fail(code: int, message: str) -> NoReturn:
    typer.echo(f"portqueue: error: {message}", err=True)
    raise typer.Exit(code)


def require_dsn(dsn: str | None) -> str:
    """``dsn``, checked to parse; a usage error when missing or malformed."""
    if not dsn:
        fail(EXIT_USAGE, "no database given: pass --dsn or set PORTQUEUE_DSN")
    try:
        conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        fail(EXIT_USAGE, f"--dsn: not a valid connection string: {redact(str(exc), dsn)}")
    return dsn


def checked_schema(schema: str) -> str:
    try:
        return schema_name(schema)
    except InvalidArgument as exc:
        fail(EXIT_USAGE, f"{exc} (from --schema or PORTQUEUE_SCHEMA)")

"""The ``portqueue`` command line.

One Typer app; each command is a function registered on ``app`` (``migrate``
today, the worker and the operator commands later). Exit codes follow the
usual convention: 0 success, 1 the operation failed (the database refused or
was unreachable), 2 a usage error (a missing DSN, a bad schema name).

Connection strings carry passwords, and they end up in CI logs: every message
this module prints about a connection goes through :func:`redact` first.
"""

from __future__ import annotations

import re
import sys
from typing import Annotated, NoReturn
from urllib.parse import unquote

import psycopg
import typer
from psycopg.conninfo import conninfo_to_dict

from portqueue.errors import InvalidArgument
from portqueue.migrate import head_revision, migrate, migration_sql
from portqueue.validation import schema_name

EXIT_FAILURE = 1
EXIT_USAGE = 2

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


@app.callback()
def _root() -> None:
    """portqueue: a PostgreSQL-native, transactional job queue.

    Settings come from options or the environment (PORTQUEUE_DSN,
    PORTQUEUE_SCHEMA). Run `portqueue COMMAND --help` for a command's options.

    Example:

        PORTQUEUE_DSN=postgresql://app@db.internal/app portqueue migrate
    """


@app.command("migrate")
def migrate_command(
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    sql: Annotated[
        bool,
        typer.Option(
            "--sql",
            help="Print the SQL for an empty database instead of running it; "
            "never connects, so no DSN is needed.",
        ),
    ] = False,
) -> None:
    """Create or upgrade portqueue's schema to the latest revision.

    Safe to run from many processes at once (deploys): they serialise on an
    advisory lock, and a schema already at the latest revision is left as is.

    Examples:

        portqueue migrate --dsn postgresql://app@db.internal/app

        PORTQUEUE_DSN=postgresql://app@db/app portqueue migrate --schema jobs

        portqueue migrate --sql > portqueue-schema.sql
    """
    try:
        schema = schema_name(schema)
    except InvalidArgument as exc:
        _fail(EXIT_USAGE, f"{exc} (from --schema or PORTQUEUE_SCHEMA)")

    if sql:
        sys.stdout.write(migration_sql(schema=schema))
        return

    if not dsn:
        _fail(EXIT_USAGE, "no database given: pass --dsn or set PORTQUEUE_DSN")
    try:
        conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        _fail(EXIT_USAGE, f"dsn: not a valid connection string: {redact(str(exc), dsn)}")

    # Here, not at the top: other commands need not pay for importing them.
    from alembic.util import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    try:
        migrate(dsn, schema=schema)
    except (psycopg.Error, SQLAlchemyError, CommandError) as exc:
        _fail(EXIT_FAILURE, f"migration failed: {redact(_describe(exc), dsn)}")
    typer.echo(f"portqueue: schema {schema!r} is at revision {head_revision()} (head)")


def _describe(exc: BaseException) -> str:
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


def _fail(code: int, message: str) -> NoReturn:
    typer.echo(f"portqueue: error: {message}", err=True)
    raise typer.Exit(code)


def main() -> None:
    """The ``portqueue`` console script."""
    app(prog_name="portqueue")


if __name__ == "__main__":
    main()

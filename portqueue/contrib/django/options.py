"""The backend's settings, read once from ``TASKS[alias]`` and checked before use.

Every problem raises ``ImproperlyConfigured`` naming the setting, e.g.
``TASKS['default']['OPTIONS']['SCHEMA']: …``, when Django first builds the
backend (at the first ``@task`` decoration or ``task_backends[alias]``), so a
typo never surfaces later as a job in the wrong schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils.connection import ConnectionDoesNotExist
from psycopg.conninfo import make_conninfo

from portqueue import validation
from portqueue.errors import InvalidArgument
from portqueue.types import RetryPolicy

OPTION_NAMES = frozenset({"DATABASE", "DSN", "SCHEMA", "RETRY", "CLIENT"})

# Entries of Django's connection parameters that are Python objects or Django's
# own switches, not libpq keywords: a DSN built with them would not parse.
_NOT_LIBPQ = frozenset({"context", "cursor_factory", "prepare_threshold"})


@dataclass(frozen=True)
class BackendOptions:
    """``OPTIONS`` after checking; see docs/django.md for each one's meaning."""

    alias: str
    database: str
    dsn: str
    schema: str
    retry: RetryPolicy | None
    client: Mapping[str, Any] = field(default_factory=dict)
    # False when ``dsn`` was built from Django's database settings.
    dsn_given: bool = True


class _Names:
    """Builds ``TASKS['alias']['OPTIONS']['X']`` for error messages."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def setting(self, name: str) -> str:
        return f"TASKS[{self.alias!r}][{name!r}]"

    def option(self, name: str) -> str:
        return f"{self.setting('OPTIONS')}[{name!r}]"

    def problem(self, name: str, message: str) -> ImproperlyConfigured:
        return ImproperlyConfigured(f"{self.option(name)}: {message}")


def check_queues(alias: str, params: Mapping[str, Any]) -> None:
    """QUEUES must be a list of portqueue queue names (1 to 128 characters)."""
    names = _Names(alias)
    queues = params.get("QUEUES", ["default"])
    # A bare string would become a set of its characters in BaseTaskBackend.
    if isinstance(queues, (str, bytes)) or not isinstance(queues, (list, tuple, set, frozenset)):
        raise ImproperlyConfigured(f"{names.setting('QUEUES')}: must be a list of queue names")
    for queue in queues:
        try:
            validation.queue_name(queue)
        except InvalidArgument as exc:
            raise ImproperlyConfigured(f"{names.setting('QUEUES')}: {queue!r}: {exc}") from None


def backend_options(alias: str, params: Mapping[str, Any]) -> BackendOptions:
    """Check ``params["OPTIONS"]`` and fill in the defaults."""
    names = _Names(alias)
    raw = params.get("OPTIONS", {})
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"{names.setting('OPTIONS')}: must be a dict")
    unknown = sorted(set(raw) - OPTION_NAMES)
    if unknown:
        raise names.problem(unknown[0], f"unknown option; known: {', '.join(sorted(OPTION_NAMES))}")
    database = raw.get("DATABASE", "default")
    if not isinstance(database, str):
        raise names.problem("DATABASE", "must be an alias of settings.DATABASES")
    dsn_given = bool(raw.get("DSN"))
    dsn = raw.get("DSN") or _database_dsn(names, database)
    if not isinstance(dsn, str):
        raise names.problem("DSN", "must be a libpq connection string")
    client = raw.get("CLIENT", {})
    if not isinstance(client, Mapping) or {"dsn", "schema"} & set(client):
        raise names.problem("CLIENT", "must be a dict of PortQueue settings other than "
                                      "dsn and schema (use DSN and SCHEMA)")
    try:
        schema = validation.schema_name(raw.get("SCHEMA", "portqueue"))
    except InvalidArgument as exc:
        raise names.problem("SCHEMA", str(exc)) from None
    try:
        retry = validation.retry_policy(raw.get("RETRY"), argument="RETRY")
    except InvalidArgument as exc:
        raise names.problem("RETRY", str(exc)) from None
    return BackendOptions(alias=alias, database=database, dsn=dsn, schema=schema, retry=retry,
                          client=dict(client), dsn_given=dsn_given)


class CurrentOptions:
    """A backend's options with the DSN of Django's database as its settings are now.

    Django's test runner renames the database to its test database (or a clone
    of it) after the backend may have been built (a ``@task`` decorated at
    import builds it): a DSN frozen then would read results from the other
    database. The DSN is rebuilt only when the database's name, user, host or
    port changed: building it costs more than the lookups it would add to
    every ``get_result()``."""

    def __init__(self, options: BackendOptions) -> None:
        self.options = options
        self._key: tuple[Any, ...] | None = None
        self._current = options

    def __call__(self) -> BackendOptions:
        if self.options.dsn_given:
            return self.options
        database = connections[self.options.database].settings_dict
        key = tuple(database.get(name) for name in ("NAME", "USER", "HOST", "PORT"))
        if key != self._key:
            dsn = _database_dsn(_Names(self.options.alias), self.options.database)
            self._current = replace(self.options, dsn=dsn)
            self._key = key
        return self._current


def _database_dsn(names: _Names, database: str) -> str:
    """The libpq DSN of Django's own connection ``database``: same server, user and options."""
    try:
        connection = connections[database]
    except ConnectionDoesNotExist:
        raise names.problem("DATABASE", f"no database {database!r} in settings.DATABASES") from None
    # Enqueues join this connection's transactions: it must be PostgreSQL.
    if connection.vendor != "postgresql":
        raise names.problem(
            "DATABASE", f"database {database!r} is {connection.vendor}, portqueue needs PostgreSQL")
    params = connection.get_connection_params()
    libpq: dict[str, Any] = {
        str(key): value for key, value in params.items()
        if key not in _NOT_LIBPQ and isinstance(value, (str, int)) and not isinstance(value, bool)
    }
    return make_conninfo("", **libpq)

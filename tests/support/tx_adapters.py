"""The caller's side of the ``tx=`` conformance suite: one harness per adapter.

A harness plays an application that owns its transaction: it holds a psycopg
connection, a SQLAlchemy session or connection, or a Django ``atomic`` block,
does its own business writes on it, and alone decides to commit or roll back.
It hands portqueue two things: ``tx``, the adapter under test, and ``client``,
the portqueue client of the same flavour (``PortQueue`` for a sync adapter,
``AsyncPortQueue`` for an async one, driven to completion call by call on the
loop that also drives the caller's async connection). Every behaviour test is
written once against this interface and runs for every adapter.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import Column, MetaData, Table, Text, create_engine, insert
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session, registry
from sqlalchemy.pool import NullPool

from portqueue import AsyncPortQueue, PortQueue
from portqueue.tx import AsyncTx, SyncTx, from_django, from_psycopg, from_sqlalchemy
from tests.support.clients import BlockingAsyncClient

# The business table every harness writes to: "orders", in a schema of the
# suite's own so it never meets portqueue's tables or the migration tests'.
ORDERS_SCHEMA = "tx_conformance"
INSERT_ORDER = "INSERT INTO tx_conformance.orders (id) VALUES (%(id)s)"

orders_table = Table("orders", MetaData(schema=ORDERS_SCHEMA), Column("id", Text, primary_key=True))


class Order:
    """The business row as an ORM entity, for the SQLAlchemy Session harnesses."""

    def __init__(self, order_id: str) -> None:
        self.id = order_id


registry().map_imperatively(Order, orders_table)


def create_orders_table(db: psycopg.Connection[Any]) -> None:
    """Create (once per database) and empty the business table."""
    db.execute("CREATE SCHEMA IF NOT EXISTS tx_conformance")
    db.execute("CREATE TABLE IF NOT EXISTS tx_conformance.orders (id text PRIMARY KEY)")
    db.execute("TRUNCATE tx_conformance.orders")


def sqlalchemy_url(dsn: str, drivername: str = "postgresql+psycopg") -> URL:
    """``postgresql+psycopg://…`` for the database of a libpq ``dsn`` (URL or key=value)."""
    params = {key: str(value) for key, value in conninfo_to_dict(dsn).items()}
    host = params.pop("host", None)
    port = params.pop("port", None)
    url = URL.create(
        drivername,
        username=params.pop("user", None),
        password=params.pop("password", None) or None,
        database=params.pop("dbname", None),
        port=int(port) if port else None,
        query=params,
    )
    if host and host.startswith("/"):
        # A Unix socket directory is not a URL host; libpq takes it as ?host=.
        return url.update_query_dict({"host": host})
    return url.set(host=host) if host else url


def django_database(dsn: str) -> dict[str, Any]:
    """A ``DATABASES`` entry (PostgreSQL backend, psycopg 3) for the database of ``dsn``."""
    params = {key: str(value) for key, value in conninfo_to_dict(dsn).items()}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.pop("dbname", ""),
        "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""),
        "HOST": params.pop("host", ""),
        "PORT": params.pop("port", ""),
        "OPTIONS": params,
    }


class CallerTransaction(ABC):
    """An application's transaction, driven the way its library drives it.

    ``begin()`` opens a transaction (a no-op where the library begins on first
    use); ``commit()`` / ``rollback()`` end it; the harness is reusable for
    several transactions in a row.
    """

    name: ClassVar[str]
    is_async: ClassVar[bool]

    def __init__(self, pg_dsn: str, schema: str) -> None:
        self.pg_dsn = pg_dsn
        self.schema = schema
        self.client: Any = self._client_of(self.is_async)

    def _client_of(self, is_async: bool) -> Any:
        # With an instance key, as tests/conftest.py's clients: jobs may then
        # name a preferred_instance_key_pattern, which is checked in the tx.
        schema, key = self.schema, "test-host-ram-8gb"
        if is_async:
            return BlockingAsyncClient(
                lambda: AsyncPortQueue(self.pg_dsn, schema=schema, instance_key=key))
        return PortQueue(self.pg_dsn, schema=schema, instance_key=key)

    @contextmanager
    def other_client(self) -> Iterator[Any]:
        """The client of the other flavour, which must refuse this harness's ``tx``."""
        client = self._client_of(not self.is_async)
        try:
            yield client
        finally:
            client.close()

    @property
    @abstractmethod
    def tx(self) -> SyncTx | AsyncTx:
        """The adapter under test, joined to this caller's transaction."""

    @abstractmethod
    def begin(self) -> None: ...

    @abstractmethod
    def execute(
        self, statement: str, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """Run a statement of the caller's own (``%(name)s`` placeholders) in its transaction."""

    @abstractmethod
    def in_transaction(self) -> bool:
        """Whether the library says the caller's transaction is still open."""

    @abstractmethod
    def commit(self) -> None: ...

    @abstractmethod
    def rollback(self) -> None: ...

    @abstractmethod
    def _close_caller(self) -> None:
        """Release the caller's connection; an open transaction is rolled back."""

    def write_order(self, order_id: str) -> None:
        """The caller's business write, the way this library's users write it."""
        self.execute(INSERT_ORDER, {"id": order_id})

    def close(self) -> None:
        try:
            self._close_caller()
        finally:
            self.client.close()


def _rows(cursor: Any) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in cursor.fetchall()] if cursor.description else []


# --- psycopg 3 ---


class _PsycopgCaller(CallerTransaction):
    """What the sync and async psycopg callers share: the connection's own
    transaction status says whether a transaction is open."""

    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]
    _tx: SyncTx | AsyncTx

    @property
    def tx(self) -> SyncTx | AsyncTx:
        return self._tx

    def begin(self) -> None:
        assert self.conn.info.transaction_status == pq.TransactionStatus.IDLE

    def in_transaction(self) -> bool:
        return self.conn.info.transaction_status == pq.TransactionStatus.INTRANS


class PsycopgSync(_PsycopgCaller):
    name = "psycopg-sync"
    conn: psycopg.Connection[Any]
    is_async = False

    def __init__(self, pg_dsn: str, schema: str) -> None:
        super().__init__(pg_dsn, schema)
        # Not autocommit: psycopg opens a transaction on the first statement,
        # and it stays open until the caller commits or rolls back.
        self.conn = psycopg.connect(pg_dsn)
        self._tx = from_psycopg(self.conn)

    def execute(
        self, statement: str, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        return _rows(self.conn.execute(statement, params))  # type: ignore[arg-type]

    def commit(self) -> None:
        self.conn.commit()

    def rollback(self) -> None:
        self.conn.rollback()

    def _close_caller(self) -> None:
        self.conn.close()


class PsycopgAsync(_PsycopgCaller):
    name = "psycopg-async"
    conn: psycopg.AsyncConnection[Any]
    is_async = True

    def __init__(self, pg_dsn: str, schema: str) -> None:
        super().__init__(pg_dsn, schema)
        self.run = self.client.run
        self.conn = self.run(psycopg.AsyncConnection.connect(pg_dsn))
        self._tx = from_psycopg(self.conn)

    def execute(
        self, statement: str, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        async def run() -> list[tuple[Any, ...]]:
            cursor = await self.conn.execute(statement, params)  # type: ignore[arg-type]
            return [tuple(row) for row in await cursor.fetchall()] if cursor.description else []

        return self.run(run())  # type: ignore[no-any-return]

    def commit(self) -> None:
        self.run(self.conn.commit())

    def rollback(self) -> None:
        self.run(self.conn.rollback())

    def _close_caller(self) -> None:
        self.run(self.conn.close())


# --- SQLAlchemy (psycopg driver); NullPool: nothing outlives the test ---


def _tuples(result: Any) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in result] if result.returns_rows else []


class _SqlalchemySync(CallerTransaction):
    """A Session or a Connection: both own their transaction the same way."""

    is_async = False
    owner: Any

    drivername = "postgresql+psycopg"

    def __init__(self, pg_dsn: str, schema: str) -> None:
        super().__init__(pg_dsn, schema)
        self.engine = create_engine(sqlalchemy_url(pg_dsn, self.drivername), poolclass=NullPool)
        self.owner = self._open_owner()
        self._tx = from_sqlalchemy(self.owner)

    @abstractmethod
    def _open_owner(self) -> Any: ...

    @property
    def tx(self) -> SyncTx | AsyncTx:
        return self._tx

    def begin(self) -> None:
        self.owner.begin()

    def execute(
        self, statement: str, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        conn = self.owner.connection() if isinstance(self.owner, Session) else self.owner
        return _tuples(conn.exec_driver_sql(statement, dict(params or {})))

    def in_transaction(self) -> bool:
        return bool(self.owner.in_transaction())

    def commit(self) -> None:
        self.owner.commit()

    def rollback(self) -> None:
        self.owner.rollback()

    def _close_caller(self) -> None:
        self.owner.close()
        self.engine.dispose()


class SqlalchemySession(_SqlalchemySync):
    name = "sqlalchemy-session"

    def _open_owner(self) -> Any:
        return Session(self.engine)

    def write_order(self, order_id: str) -> None:
        # The ORM way: the unit of work, flushed so the INSERT is on the wire
        # before portqueue's statements run.
        self.owner.add(Order(order_id))
        self.owner.flush()


class SqlalchemyConnection(_SqlalchemySync):
    name = "sqlalchemy-connection"

    def _open_owner(self) -> Any:
        return self.engine.connect()

    def write_order(self, order_id: str) -> None:
        self.owner.execute(insert(orders_table).values(id=order_id))


class SqlalchemyPsycopg2Session(SqlalchemySession):
    """A Session on psycopg2, which binds parameters in the client, not the server."""

    name = "sqlalchemy-psycopg2-session"
    drivername = "postgresql+psycopg2"


class _SqlalchemyAsync(CallerTransaction):
    """An AsyncSession or an AsyncConnection, driven on the client's own loop."""

    is_async = True
    owner: Any

    def __init__(self, pg_dsn: str, schema: str) -> None:
        super().__init__(pg_dsn, schema)
        self.run = self.client.run
        self.engine = create_async_engine(sqlalchemy_url(pg_dsn), poolclass=NullPool)
        self.owner = self.run(self._open_owner())
        self._tx = from_sqlalchemy(self.owner)

    @abstractmethod
    async def _open_owner(self) -> Any: ...

    @property
    def tx(self) -> SyncTx | AsyncTx:
        return self._tx

    def begin(self) -> None:
        self.run(self.owner.begin().start())

    def execute(
        self, statement: str, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        async def run() -> list[tuple[Any, ...]]:
            owner = self.owner
            conn = await owner.connection() if isinstance(owner, AsyncSession) else owner
            return _tuples(await conn.exec_driver_sql(statement, dict(params or {})))

        return self.run(run())  # type: ignore[no-any-return]

    def in_transaction(self) -> bool:
        return bool(self.owner.in_transaction())

    def commit(self) -> None:
        self.run(self.owner.commit())

    def rollback(self) -> None:
        self.run(self.owner.rollback())

    def _close_caller(self) -> None:
        self.run(self.owner.close())
        self.run(self.engine.dispose())


class SqlalchemyAsyncSession(_SqlalchemyAsync):
    name = "sqlalchemy-async-session"

    async def _open_owner(self) -> Any:
        return AsyncSession(self.engine)

    def write_order(self, order_id: str) -> None:
        self.owner.add(Order(order_id))
        self.run(self.owner.flush())


class SqlalchemyAsyncConnection(_SqlalchemyAsync):
    name = "sqlalchemy-async-connection"

    async def _open_owner(self) -> Any:
        return await self.engine.connect()

    def write_order(self, order_id: str) -> None:
        self.run(self.owner.execute(insert(orders_table).values(id=order_id)))


# --- Django: the caller's transaction is an atomic() block ---


class Django(CallerTransaction):
    name = "django"
    is_async = False

    def __init__(self, pg_dsn: str, schema: str, *, using: str) -> None:
        super().__init__(pg_dsn, schema)
        self.using = using
        self._atomic: Any = None
        self._tx = from_django(using=using)

    @property
    def tx(self) -> SyncTx | AsyncTx:
        return self._tx

    @property
    def _connection(self) -> Any:
        from django.db import connections

        return connections[self.using]

    def begin(self) -> None:
        from django.db import transaction

        assert self._atomic is None, "the previous atomic block is still open"
        self._atomic = transaction.atomic(using=self.using)
        self._atomic.__enter__()

    def execute(
        self, statement: str, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        with self._connection.cursor() as cursor:
            cursor.execute(statement, params)
            return _rows(cursor)

    def in_transaction(self) -> bool:
        return bool(self._connection.in_atomic_block)

    def _leave(self) -> None:
        atomic, self._atomic = self._atomic, None
        atomic.__exit__(None, None, None)

    def commit(self) -> None:
        self._leave()

    def rollback(self) -> None:
        from django.db import transaction

        # What an exception escaping the `with atomic():` block does.
        transaction.set_rollback(True, using=self.using)
        self._leave()

    def _close_caller(self) -> None:
        if self._atomic is not None:
            self.rollback()
        self._connection.close()


HARNESSES: dict[str, type[CallerTransaction]] = {
    harness.name: harness
    for harness in (
        PsycopgSync,
        PsycopgAsync,
        SqlalchemySession,
        SqlalchemyPsycopg2Session,
        SqlalchemyConnection,
        SqlalchemyAsyncSession,
        SqlalchemyAsyncConnection,
        Django,
    )
}


def count_orders(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM tx_conformance.orders").fetchone()
    assert row is not None
    return int(row[0])

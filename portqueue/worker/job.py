"""What a handler receives: the job's fields, its stop signal, progress and
attrs reporting, and transactional completion.

``Job`` serves sync handlers (run in threads); ``AsyncJob`` serves ``async
def`` handlers. ``set_progress`` and ``set_attrs`` return at once: the worker
writes the latest values within milliseconds, fenced by the attempt's lease.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import psycopg

from portqueue import parsing, validation
from portqueue.errors import InvalidArgument, PortQueueError
from portqueue.worker.signal import AsyncSignal, SignalState, ThreadSignal

if TYPE_CHECKING:  # state.py imports this module
    from portqueue.worker.state import Claimed

# Attrs are merged into a jsonb column on every touch; keep them small.
MAX_ATTRS_BYTES = 64 * 1024


class JobReport:
    """Progress and attrs waiting for the next touch; written by handler threads.

    What a touch took stays *unconfirmed* until that touch is written: the
    settling write (``last``) carries it too. A touch waits its turn on the
    claim session, so the job's completion, on the pool, can commit first,
    and then the touch's fence (status 'active') drops what it carried: the
    job would end without the progress its handler reported last.
    """

    def __init__(self, notify: Callable[[], None]) -> None:
        self.progress: float | None = None
        self.attrs: dict[str, Any] | None = None
        self._unconfirmed: tuple[float | None, dict[str, Any] | None] = (None, None)
        self._notify = notify
        self._lock = threading.Lock()

    def take(self) -> tuple[float | None, dict[str, Any] | None]:
        """For a touch: what is new since the last one."""
        with self._lock:
            progress, attrs = self.progress, self.attrs
            self.progress, self.attrs = None, None
            before_progress, before_attrs = self._unconfirmed
            self._unconfirmed = (progress if progress is not None else before_progress,
                                 {**before_attrs, **attrs} if before_attrs and attrs
                                 else attrs or before_attrs)
        return progress, attrs

    def confirm(self) -> None:
        """The touch that took the values was written."""
        with self._lock:
            self._unconfirmed = (None, None)

    def last(self) -> tuple[float | None, dict[str, Any] | None]:
        """For the settling write: everything not known to be written."""
        with self._lock:
            progress, attrs = self._unconfirmed
            if self.progress is not None:
                progress = self.progress
            if self.attrs:
                attrs = {**(attrs or {}), **self.attrs}
            self.progress, self.attrs = None, None
            self._unconfirmed = (None, None)
        return progress, attrs

    def put_back(self, progress: float | None, attrs: dict[str, Any] | None) -> None:
        """A touch that did not reach the database: keep its values for the next one."""
        with self._lock:
            if self.progress is None:
                self.progress = progress
            if attrs:
                self.attrs = {**attrs, **(self.attrs or {})}
            self._unconfirmed = (None, None)

    def set_progress(self, value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and 0 <= value <= 1
        ):
            raise InvalidArgument("progress", f"must be a number from 0 to 1, got {value!r}")
        with self._lock:
            self.progress = float(value)
        self._notify()

    def set_attrs(self, attrs: object) -> None:
        if not isinstance(attrs, Mapping):
            raise InvalidArgument("attrs", "must be a dict")
        encoded = validation.payload("attrs", dict(attrs), MAX_ATTRS_BYTES)
        with self._lock:
            self.attrs = {**(self.attrs or {}), **json.loads(encoded)}
        self._notify()


class _JobFields:
    def __init__(self, claimed: Claimed, report: JobReport) -> None:
        self.id = claimed.id
        self.queue = claimed.queue
        # Decoded here, in the runner's try: a row written by SQL too deep to
        # decode fails its job (outcomes.unreadable), not the runner.
        self.data = parsing.stored_json("data", claimed.data_json)
        self.attempt = claimed.attempt
        self.max_attempts = claimed.max_attempts
        self.group_id = claimed.group_id
        # Each dependency's output, by its key in the flow, else its job id.
        self.parent_outputs: dict[str, Any] = (
            {} if claimed.parent_outputs_json is None
            else parsing.stored_json("parent_outputs", claimed.parent_outputs_json))
        self._report = report

    def set_progress(self, value: float) -> None:
        """Record progress from 0 to 1 on the job's row (written asynchronously)."""
        self._report.set_progress(value)

    def set_attrs(self, attrs: Mapping[str, Any]) -> None:
        """Merge ``attrs`` into the job's ``attrs`` column (written asynchronously)."""
        self._report.set_attrs(attrs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} queue={self.queue!r} attempt={self.attempt}>"


class Job(_JobFields):
    """A sync handler's job. ``signal.is_set()`` / ``signal.wait(timeout)``."""

    def __init__(self, claimed: Claimed, report: JobReport, state: SignalState,
                 connect: Callable[[], contextlib.AbstractContextManager[psycopg.Connection[Any]]]
                 ) -> None:
        super().__init__(claimed, report)
        self.signal = ThreadSignal(state)
        self._connect = connect
        self.open_transaction: psycopg.Connection[Any] | None = None
        self._release: contextlib.ExitStack | None = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection in a transaction that commits only together with the job's
        completion, after the handler returns. If the handler raises, inside or
        after the block, nothing of it commits."""
        if self._release is not None:
            raise PortQueueError("job.transaction() can be entered once per attempt")
        stack = contextlib.ExitStack()
        conn = stack.enter_context(self._connect())
        self._release = stack
        try:
            yield conn
        except BaseException:
            if not conn.closed:  # a broken connection has nothing to roll back
                conn.rollback()
            stack.close()
            raise
        self.open_transaction = conn

    def close_transaction(self, commit: bool) -> None:
        conn, self.open_transaction = self.open_transaction, None
        try:
            # A broken connection has nothing to roll back (the server did when
            # the session ended); a failed COMMIT raises, so the worker can ask
            # the row whether it landed.
            if conn is not None and (commit or not conn.closed):
                (conn.commit if commit else conn.rollback)()
        finally:
            if self._release is not None:
                self._release.close()


class AsyncJob(_JobFields):
    """An async handler's job. ``signal.is_set()`` / ``await signal.wait()``."""

    def __init__(
        self, claimed: Claimed, report: JobReport, state: SignalState,
        connect: Callable[[], contextlib.AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]],
    ) -> None:
        super().__init__(claimed, report)
        self.signal = AsyncSignal(state)
        self._connect = connect
        self.open_transaction: psycopg.AsyncConnection[Any] | None = None
        self._release: contextlib.AsyncExitStack | None = None

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """As ``Job.transaction``, for ``async with``."""
        if self._release is not None:
            raise PortQueueError("job.transaction() can be entered once per attempt")
        stack = contextlib.AsyncExitStack()
        conn = await stack.enter_async_context(self._connect())
        self._release = stack
        try:
            yield conn
        except BaseException:
            if not conn.closed:
                await conn.rollback()
            await stack.aclose()
            raise
        self.open_transaction = conn

    async def close_transaction(self, commit: bool) -> None:
        conn, self.open_transaction = self.open_transaction, None
        try:
            # As Job.close_transaction.
            if conn is not None and (commit or not conn.closed):
                await (conn.commit if commit else conn.rollback)()
        finally:
            if self._release is not None:
                await self._release.aclose()

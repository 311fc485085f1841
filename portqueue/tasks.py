"""Task objects: a function whose arguments are its job's payload.

``pq.task(queue=None, **queue_options)`` decorates a function (sync or
``async def``) and registers it as its queue's handler, as ``handler()``
does; the queue defaults to ``"<module>.<qualname>"``. The task object:

- ``task.add(*args, **kwargs)`` checks the arguments against the function's
  signature (a missing or unknown argument raises ``InvalidArgument`` naming
  it, and nothing is written), fills in defaults, encodes them as the job's
  ``data`` (a JSON object by parameter name) and adds the job; awaited on
  ``AsyncPortQueue``;
- ``task.configure(**add_options)`` returns the same task with add options
  (``priority``, ``schedule``, ``retry``, ``tx``, ...) applied to its adds;
- ``task(*args, **kwargs)`` calls the function here and now, no job involved.

Parameters annotated with a dataclass, ``datetime``, ``date``, ``UUID`` or
``Decimal`` (also inside ``Optional``, ``list``, ``tuple``, ``set``, ``dict``
and dataclass fields) are encoded at add and rebuilt before the call; other
values must be JSON already. A function whose first parameter is named
``job`` receives the job (``Job``, or ``AsyncJob`` for ``async def``) when a
worker runs it, and ``None`` on a plain call.

Caveats: positional-only and ``*args`` parameters have no name to store under
and are refused when decorating. Annotations are resolved with
``typing.get_type_hints``; one that does not resolve (a class local to a
function, under ``from __future__ import annotations``) is left unencoded.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload
from uuid import UUID

from portqueue.errors import InvalidArgument
from portqueue.types import AddJobResult

if typing.TYPE_CHECKING:
    from typing_extensions import Self

    from portqueue.worker.job import AsyncJob, Job

P = ParamSpec("P")
R = TypeVar("R")

_NO_HINT: Any = inspect.Parameter.empty
_SCALARS: tuple[type, ...] = (datetime, date, UUID, Decimal)


def _hints(function: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(function)
    except Exception:
        # An annotation that does not resolve: use what is already an object.
        annotations = getattr(function, "__annotations__", {})
        return {name: hint for name, hint in annotations.items() if not isinstance(hint, str)}


@functools.cache
def _field_hints(cls: type) -> dict[str, Any]:
    return _hints(cls)


def _optional_member(hint: Any) -> Any:
    """X for ``X | None`` / ``Optional[X]``; ``None`` for any other union."""
    members = [m for m in typing.get_args(hint) if m is not type(None)]
    return members[0] if len(members) == 1 else None


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _needs_codec(hint: Any) -> bool:
    """Whether values of ``hint`` are encoded (any special type anywhere in it)."""
    if hint is _NO_HINT or hint is Any:
        return False
    if isinstance(hint, type) and (issubclass(hint, _SCALARS) or dataclasses.is_dataclass(hint)):
        return True
    return any(_needs_codec(arg) for arg in typing.get_args(hint) if arg is not Ellipsis)


def encode(value: Any, hint: Any, where: str) -> Any:
    """``value`` as JSON for a parameter annotated ``hint``; ``where`` names it in errors."""
    if value is None or not _needs_codec(hint):
        return value
    if _is_union(hint):
        member = _optional_member(hint)
        return value if member is None else encode(value, member, where)
    origin = typing.get_origin(hint) or hint
    args = typing.get_args(hint)
    if origin in (list, tuple, set, frozenset):
        if not isinstance(value, (list, tuple, set, frozenset)):
            raise InvalidArgument(where, f"must be a {origin.__name__}, got "
                                  f"{type(value).__name__}")
        items = list(value)
        if origin is tuple and args and args[-1] is not Ellipsis:
            pairs = enumerate(zip(items, args, strict=False))
            return [encode(v, h, f"{where}[{i}]") for i, (v, h) in pairs]
        item = args[0] if args else _NO_HINT
        return [encode(v, item, f"{where}[{i}]") for i, v in enumerate(items)]
    if origin is dict:
        item = args[1] if len(args) == 2 else _NO_HINT
        if not isinstance(value, Mapping):
            raise InvalidArgument(where, f"must be a dict, got {type(value).__name__}")
        return {k: encode(v, item, f"{where}[{k!r}]") for k, v in value.items()}
    if not isinstance(origin, type):
        return value
    if not isinstance(value, origin):
        raise InvalidArgument(where, f"must be a {origin.__name__}, got {type(value).__name__}")
    if dataclasses.is_dataclass(origin):
        hints = _field_hints(origin)
        return {f.name: encode(getattr(value, f.name), hints.get(f.name, _NO_HINT),
                               f"{where}.{f.name}")
                for f in dataclasses.fields(origin) if f.init}
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return str(value)  # UUID, Decimal: their exact text


def decode(value: Any, hint: Any) -> Any:
    """``encode``'s inverse: the value a handler's parameter receives."""
    if value is None or not _needs_codec(hint):
        return value
    if _is_union(hint):
        member = _optional_member(hint)
        return value if member is None else decode(value, member)
    origin = typing.get_origin(hint) or hint
    args = typing.get_args(hint)
    if origin in (list, tuple, set, frozenset):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return tuple(decode(v, h) for v, h in zip(value, args, strict=False))
        item = args[0] if args else _NO_HINT
        return origin(decode(v, item) for v in value)
    if origin is dict:
        item = args[1] if len(args) == 2 else _NO_HINT
        return {k: decode(v, item) for k, v in value.items()}
    if isinstance(origin, type) and dataclasses.is_dataclass(origin):
        cls: Any = origin
        hints = _field_hints(cls)
        return cls(**{name: decode(v, hints.get(name, _NO_HINT)) for name, v in value.items()})
    if origin is datetime:
        return datetime.fromisoformat(value)
    if origin is date:
        return date.fromisoformat(value)
    if isinstance(origin, type) and issubclass(origin, (UUID, Decimal)):
        return origin(value)
    return value


class _Signature:
    """A task function's parameters: what ``add`` checks and the call rebuilds."""

    def __init__(self, function: Callable[..., Any]) -> None:
        name = getattr(function, "__qualname__", repr(function))
        self.name = name
        parameters = list(inspect.signature(function).parameters.values())
        self.takes_job = bool(parameters) and parameters[0].name == "job"
        if self.takes_job:
            parameters = parameters[1:]
        for parameter in parameters:
            if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.VAR_POSITIONAL):
                # The payload stores arguments by name; these have none to store under.
                raise InvalidArgument("function", f"{name}: parameter {parameter.name!r} is "
                                      "positional-only; a task's parameters need names")
        self.parameters = {p.name: p for p in parameters if p.kind is not p.VAR_KEYWORD}
        self.extra_keywords = any(p.kind is p.VAR_KEYWORD for p in parameters)
        self.signature = inspect.Signature(parameters)
        hints = _hints(function)
        self.hints = {name: hints.get(name, _NO_HINT) for name in self.parameters}
        self.return_hint = hints.get("return", _NO_HINT)

    def data(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The job's data for a call with these arguments; InvalidArgument naming
        the first missing, unknown or ill-typed one."""
        positional = [p for p in self.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
        if len(args) > len(positional):
            raise InvalidArgument("args", f"{self.name} takes {len(positional)} positional "
                                  f"argument(s), got {len(args)}")
        for key in kwargs:
            if key not in self.parameters and not self.extra_keywords:
                raise InvalidArgument(key, f"is not a parameter of {self.name}")
        given = {p.name for p in positional[:len(args)]}
        for key in kwargs:
            if key in given:
                raise InvalidArgument(key, "is given twice (by position and by name)")
        for parameter in self.parameters.values():
            if (parameter.default is parameter.empty and parameter.name not in given
                    and parameter.name not in kwargs):
                raise InvalidArgument(parameter.name, f"is required by {self.name}")
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        data: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if name in self.parameters:
                data[name] = encode(value, self.hints[name], name)
            else:  # the **kwargs parameter's dict: stored as the names given
                data.update(value)
        return data

    def arguments(self, data: Any) -> dict[str, Any]:
        """The keyword arguments of a call from a job's data."""
        if not isinstance(data, Mapping):
            raise TypeError(f"{self.name}: the job's data must be an object of arguments by "
                            f"name, got {type(data).__name__}")
        return {name: decode(value, self.hints.get(name, _NO_HINT))
                for name, value in data.items()}


def _add_option_names(client: Any) -> frozenset[str]:
    names = inspect.signature(client.add_job).parameters
    return frozenset(names) - {"queue", "data"}


def check_queue_options(client: Any, options: Mapping[str, Any]) -> None:
    """Every key is a ``create_queue`` option (other than queue and handler)."""
    accepted = set(inspect.signature(client.create_queue).parameters) - {"queue", "handler"}
    for key in options:
        if key not in accepted:
            raise InvalidArgument(key, "is not a queue option (see create_queue)")


class _TaskBase(Generic[P, R]):
    def __init__(self, client: Any, function: Callable[..., Any], queue: str,
                 signature: _Signature, add_options: Mapping[str, Any]) -> None:
        self._client = client
        self.function = function
        self.queue = queue
        self._signature = signature
        self._add_options = dict(add_options)
        functools.update_wrapper(self, function)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here and now (``job`` is ``None`` if it takes one)."""
        if self._signature.takes_job:
            return self.function(None, *args, **kwargs)  # type: ignore[no-any-return]
        return self.function(*args, **kwargs)  # type: ignore[no-any-return]

    def configure(self, **add_options: Any) -> Self:
        """This task with ``add_job`` options (``priority``, ``schedule``, ``tx``, ...)
        for its adds; merged over any configured before. Unknown ones raise
        ``InvalidArgument``; values are checked when adding."""
        accepted = _add_option_names(self._client)
        for key in add_options:
            if key not in accepted:
                raise InvalidArgument(key, "is not an add option (see add_job)")
        return type(self)(self._client, self.function, self.queue, self._signature,
                          {**self._add_options, **add_options})

    def data(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        """The job data ``add`` would store for these arguments (checked, encoded)."""
        return self._signature.data(args, kwargs)

    def handler(self) -> Callable[..., Any]:
        """The queue handler a worker calls: the data decoded, then the function."""
        signature, function = self._signature, self.function

        def head(job: Any) -> tuple[Any, ...]:
            return (job,) if signature.takes_job else ()

        def output(result: Any) -> Any:
            return encode(result, signature.return_hint, "return")

        if inspect.iscoroutinefunction(function):
            async def run_async(job: Any) -> Any:
                return output(await function(*head(job), **signature.arguments(job.data)))

            run_async.__qualname__ = signature.name
            return run_async

        def run(job: Any) -> Any:
            return output(function(*head(job), **signature.arguments(job.data)))

        run.__qualname__ = signature.name
        return run

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._signature.name} on {self.queue!r}>"


class AsyncTask(_TaskBase[P, R]):
    """A task of an ``AsyncPortQueue``: ``await task.add(...)``."""

    async def add(self, *args: P.args, **kwargs: P.kwargs) -> AddJobResult:
        """Add a job with these arguments as its data; ``InvalidArgument`` naming a
        missing or unknown argument, before anything is written."""
        data = self._signature.data(args, kwargs)
        result: AddJobResult = await self._client.add_job(
            queue=self.queue, data=data, **self._add_options)
        return result


class Task(_TaskBase[P, R]):
    """A task of a ``PortQueue``: ``task.add(...)``."""

    def add(self, *args: P.args, **kwargs: P.kwargs) -> AddJobResult:
        """Add a job with these arguments as its data; ``InvalidArgument`` naming a
        missing or unknown argument, before anything is written."""
        data = self._signature.data(args, kwargs)
        result: AddJobResult = self._client.add_job(
            queue=self.queue, data=data, **self._add_options)
        return result


def default_queue(function: Callable[..., Any]) -> str:
    return f"{function.__module__}.{function.__qualname__}"


class _FactoryBase:
    _task_class: type[_TaskBase[Any, Any]]

    def __init__(self, client: Any, queue: str | None, queue_options: Mapping[str, Any]) -> None:
        check_queue_options(client, queue_options)
        self._client = client
        self._queue = queue
        self._queue_options = dict(queue_options)

    def _make(self, function: Callable[..., Any]) -> Any:
        if not callable(function):
            raise InvalidArgument("function", f"a task decorates a function, got {function!r}")
        signature = _Signature(function)
        queue = default_queue(function) if self._queue is None else self._queue
        task = self._task_class(self._client, function, queue, signature, {})
        self._client.create_queue(queue=queue, handler=task.handler(), **self._queue_options)
        return task


class AsyncTaskFactory(_FactoryBase):
    """What ``AsyncPortQueue.task(...)`` returns: decorate a function with it."""

    _task_class = AsyncTask

    @overload
    def __call__(self, function: Callable[Concatenate[Job, P], R]) -> AsyncTask[P, R]: ...
    @overload
    def __call__(self, function: Callable[Concatenate[AsyncJob, P], R]) -> AsyncTask[P, R]: ...
    @overload
    def __call__(self, function: Callable[P, R]) -> AsyncTask[P, R]: ...
    def __call__(self, function: Callable[..., Any]) -> Any:
        return self._make(function)


class TaskFactory(_FactoryBase):
    """What ``PortQueue.task(...)`` returns: decorate a function with it."""

    _task_class = Task

    @overload
    def __call__(self, function: Callable[Concatenate[Job, P], R]) -> Task[P, R]: ...
    @overload
    def __call__(self, function: Callable[Concatenate[AsyncJob, P], R]) -> Task[P, R]: ...
    @overload
    def __call__(self, function: Callable[P, R]) -> Task[P, R]: ...
    def __call__(self, function: Callable[..., Any]) -> Any:
        return self._make(function)

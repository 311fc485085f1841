"""Named pause points for fault-injection tests.

``await checkpoint(name)`` costs one dict lookup unless a test installed a
hook for that name with ``install_hook``; the hook then runs in its place
(typically: say "paused", wait until the test lets go). The library calls it
only where a race with another process is worth proving, e.g. the rescuer
between taking its lock and running its batch. Not a public API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

Hook = Callable[[], Awaitable[None]]

_hooks: dict[str, Hook] = {}


async def checkpoint(name: str) -> None:
    hook = _hooks.get(name)
    if hook is not None:
        await hook()


def install_hook(name: str, hook: Hook) -> None:
    _hooks[name] = hook


def remove_hook(name: str) -> None:
    _hooks.pop(name, None)

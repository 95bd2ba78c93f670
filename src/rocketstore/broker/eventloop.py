"""The event loop ``rocketstore serve`` runs on: uvloop when it is installed, else asyncio's.

uvloop (``pip install rocketstore[fast]``) is an optional dependency: the broker is written to
plain asyncio (``asyncio.Protocol`` transports, ``call_soon_threadsafe``), so both loops run the
same code; uvloop only makes the loop's own work — socket reads and writes, callbacks, wake-ups
from the put and reput threads — cheaper. ``ROCKETSTORE_EVENT_LOOP=asyncio`` forces the
standard loop (to compare, or to rule uvloop out).
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, Coroutine


def loop_name() -> str:
    """``uvloop`` or ``asyncio``: the loop ``run`` will use."""
    if os.environ.get("ROCKETSTORE_EVENT_LOOP", "").lower() == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run(coro)`` on the loop ``loop_name()`` names."""
    if loop_name() == "uvloop":
        import uvloop
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    return asyncio.run(coro)


async def cancel_and_wait(task: "asyncio.Task[Any] | None") -> None:
    """Cancel a background task and wait until it has finished (its error, if it had one,
    was already logged by the task itself)."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):
        pass

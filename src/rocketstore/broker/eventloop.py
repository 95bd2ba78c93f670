"""The event loop ``rocketstore serve`` runs on: uvloop when it is installed, else asyncio's.

uvloop (``pip install rocketstore[fast]``) is an optional dependency: the broker is written to
plain asyncio (``asyncio.Protocol`` transports, ``call_soon_threadsafe``), so both loops run the
same code; uvloop only makes the loop's own work — socket reads and writes, callbacks, wake-ups
from the put and reput threads — cheaper. ``ROCKETSTORE_EVENT_LOOP=asyncio`` forces the
standard loop (to compare, or to rule uvloop out).

A broker process (``serve``, its protocol workers) also sets the cyclic garbage collector
before ``run`` (``tune_gc``). With Python's default, a young collection every 700 container
allocations, a broker holding many objects (the half records kept for a batched
END_TRANSACTION, the remembered decisions, the topic and consumer tables) spent 1.0 s of CPU
where it now spends 0.82 s on 50,000 rows of an exactly-once Spark write, and 0.42 s where it
now spends 0.37 s on an at-least-once one (``benchmarks/README.md``, "Sixth pass").
``ROCKETSTORE_GC_THRESHOLD`` overrides the three thresholds ("50000,50,100" is the default;
"python" keeps the interpreter's own).
"""
from __future__ import annotations

import asyncio
import logging
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


GC_THRESHOLD = (50_000, 50, 100)  # young collections every 50,000 container allocations


def gc_threshold() -> tuple[int, ...] | None:
    """The thresholds ``tune_gc`` sets: ``ROCKETSTORE_GC_THRESHOLD`` ("a,b,c", or "python":
    None, the interpreter's own), else ``GC_THRESHOLD``."""
    raw = os.environ.get("ROCKETSTORE_GC_THRESHOLD", "").strip()
    if not raw:
        return GC_THRESHOLD
    if raw.lower() == "python":
        return None
    try:
        values = tuple(int(v) for v in raw.split(","))
    except ValueError:
        values = ()
    if not 1 <= len(values) <= 3 or min(values) < 0:
        raise ValueError(f"ROCKETSTORE_GC_THRESHOLD={raw!r}: want up to three non-negative "
                         f"integers, as gc.set_threshold takes them (or 'python')")
    return values


def tune_gc() -> tuple[int, ...] | None:
    """Before a broker process serves: what was built to start it (modules, tables, the
    store's indexes) is moved out of the collector's way (``gc.freeze``), and collections
    come ``gc_threshold()`` apart. Returns the thresholds set (None: left as they were)."""
    import gc
    try:
        values = gc_threshold()
    except ValueError as exc:
        logging.getLogger(__name__).warning("%s; using %s", exc, GC_THRESHOLD)
        values = GC_THRESHOLD
    if values is None:
        return None
    gc.collect()
    gc.freeze()
    gc.set_threshold(*values)
    return values


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

"""A background event loop that the blocking client facades run their coroutines on.

Theory of operation: the ``Async*`` classes are the implementation; ``Producer``,
``PullConsumer`` and ``PushConsumer`` hand each call to one shared daemon thread running an event
loop (``run_coroutine_threadsafe``) and block on the result, so blocking code gets the same
concurrent, opaque-matched connections. Calling a facade from that loop's own thread would
deadlock and raises instead.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine


class LoopThread:
    _shared: "LoopThread | None" = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="rocketstore-client",
                                        daemon=True)
        self._thread.start()

    @classmethod
    def shared(cls) -> "LoopThread":
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        if threading.current_thread() is self._thread:
            raise RuntimeError("blocking client call made from its own event loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

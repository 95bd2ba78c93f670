"""``Puts``: the one way a message goes from the broker into the store.

Theory of operation: every processor and service that stores a message calls ``put`` /
``put_batch`` (on the event loop) or ``put_blocking`` (on a store thread: the schedule and
transaction services). The puts run on the single ``PutWriter`` thread (tried inline first, see
``writer``). With SYNC_FLUSH ``put``/``put_batch`` append without waiting (``defer_sync``) and
then wait on the event loop for the group commit that covers them (``syncflush``): no thread is
held per waiting put; ``put_blocking`` callers still wait in the store (``wait_flushed``). The rules every stored message follows live in the store's put path, once: the
``UNIQ_KEY`` a message without one gets (``StoreConfig.generate_uniq_key``), the store host a
message without one gets (``StoreConfig.store_host``), delay levels and size limits. What a
send checks before it gets here (the topic, its perm, the queue) is in ``processors.send``.

On a SYNC_MASTER the store's put path leaves the wait for a slave to the caller
(``PutPath.defer_replica_wait``, set by the controller): ``submit`` then awaits the store's
``ha.submit_wait`` on the event loop, so many puts wait for one acknowledgement together
without holding a thread each, and the result carries FLUSH_SLAVE_TIMEOUT or
SLAVE_NOT_AVAILABLE when no slave held the message in time.
"""
from __future__ import annotations

import asyncio
from functools import partial
from typing import Any, Awaitable, Callable

from ...format.message import Message
from ...store.results import PutStatus


class Puts:
    def __init__(self, store: Any, run: Callable[..., Awaitable[Any]],
                 writer: Any = None) -> None:
        self.store = store
        self.run = run
        self.writer = writer  # the PutWriter once the broker runs
        self.sync_waiter: Any = None  # syncflush.SyncFlushWaiter with SYNC_FLUSH

    def put_blocking(self, msg: Message, nowait: bool = False) -> Any:
        """Put one message from a store thread (``nowait``: None rather than block)."""
        return self.store.put_message(msg, nowait=nowait)

    def put_batch_blocking(self, msgs: list[Message], nowait: bool = False) -> Any:
        return self.store.put_messages(msgs, nowait=nowait)

    def _put_deferred(self, msg: Message, nowait: bool = False) -> Any:
        """SYNC_FLUSH: appended, not yet durable (the result's ``sync_offset``)."""
        return self.store.put_message(msg, nowait=nowait, defer_sync=True)

    def _put_batch_deferred(self, msgs: list[Message], nowait: bool = False) -> Any:
        return self.store.put_messages(msgs, nowait=nowait, defer_sync=True)

    def put_encoded_blocking(self, recs: list[Any], nowait: bool = False) -> Any:
        """Put records worker processes encoded (``broker.workers``) in one append."""
        return self.store.put_encoded_many(recs, nowait=nowait)

    def _put_encoded_deferred(self, recs: list[Any], nowait: bool = False) -> Any:
        return self.store.put_encoded_many(recs, nowait=nowait, defer_sync=True)

    def put_encoded_then(self, recs: list[Any],
                         dones: list[Callable[[Any, BaseException | None], None]]) -> None:
        """Put pre-encoded records in one append and call ``dones[i](result, error)`` on the
        event loop once record i is answered (appended; durable under SYNC_FLUSH; held by a
        slave on a SYNC_MASTER). Callbacks, not a task per put: an ASYNC_FLUSH append done
        inline calls them at once."""
        fut = self.writer.submit(self._put_encoded_deferred if self.sync_waiter is not None
                                 else self.put_encoded_blocking, recs)
        if fut.done():
            self._appended(dones, fut)
        else:
            fut.add_done_callback(lambda f: self._appended(dones, f))

    def _appended(self, dones: list[Callable], fut: asyncio.Future) -> None:
        exc = fut.exception()
        if exc is not None:
            for done in dones:
                done(None, exc)
            return
        for done, r in zip(dones, fut.result()):
            if self.sync_waiter is not None:
                parked = self.sync_waiter.park(r)
                if parked is not None:
                    parked.add_done_callback(partial(self._parked, done, r))
                    continue
            self._durable(done, r, True)

    def _parked(self, done: Callable, r: Any, f: asyncio.Future) -> None:
        self._durable(done, r, f.result())

    def _durable(self, done: Callable, r: Any, ok: bool) -> None:
        if not ok:
            r.status = PutStatus.FLUSH_DISK_TIMEOUT
        if getattr(r, "replica_wait_offset", None) is None:
            done(r, None)
            return
        task = asyncio.ensure_future(self._wait_replicas(r))  # a SYNC_MASTER's put
        task.add_done_callback(lambda t: done(None, t.exception()) if t.exception() is not None
                               else done(t.result(), None))

    async def put(self, msg: Message) -> Any:
        """Put one message; its ``PutMessageResult`` (once durable / replicated as configured)."""
        if self.sync_waiter is not None:  # SYNC_FLUSH: append, then wait on the loop
            return await self.submit(self.put_blocking, msg)
        if self.writer is not None:  # (inline rather than through submit: the hot path)
            r = await self.writer.submit(self.put_blocking, msg)
        else:
            r = await self.run(self.put_blocking, msg)
        if getattr(r, "replica_wait_offset", None) is not None:  # a SYNC_MASTER's put
            return await self._wait_replicas(r)
        return r

    async def put_batch(self, msgs: list[Message]) -> Any:
        """Put a batch as one record run; its ``PutMessageResult``."""
        return await self.submit(self.put_batch_blocking, msgs)

    async def submit(self, fn: Callable, *args: Any) -> Any:
        """Run a blocking put function (one of the above) the way puts run here."""
        if self.sync_waiter is not None:
            if fn == self.put_blocking:
                fn = self._put_deferred
            elif fn == self.put_batch_blocking:
                fn = self._put_batch_deferred
            if fn in (self._put_deferred, self._put_batch_deferred):
                r = await self.sync_waiter.wait(await self.writer.submit(fn, *args))
            else:  # anything else blocks in the store: the executor, as before
                r = await self.run(fn, *args)
        elif self.writer is not None:
            r = await self.writer.submit(fn, *args)
        else:
            r = await self.run(fn, *args)
        if getattr(r, "replica_wait_offset", None) is not None:  # a SYNC_MASTER's put
            return await self._wait_replicas(r)
        return r

    async def _wait_replicas(self, r: Any) -> Any:
        """The SYNC_MASTER step the store left to us: until a slave holds the put (PUT_OK),
        else FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE in the result."""
        ha = getattr(self.store, "ha", None)
        wait_to, r.replica_wait_offset = r.replica_wait_offset, None
        if ha is None:
            return r
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        ha.submit_wait(wait_to, lambda st: loop.call_soon_threadsafe(_resolve, fut, st))
        status = await fut
        if status.name != "PUT_OK":
            r.status = status
        return r

    def inline(self) -> tuple[Callable, ...]:
        """The put functions ``PutWriter`` may try on the event loop first."""
        return (self.put_blocking, self.put_batch_blocking, self._put_deferred,
                self._put_batch_deferred, self.put_encoded_blocking, self._put_encoded_deferred)


def _resolve(fut: asyncio.Future, value: Any) -> None:
    if not fut.done():
        fut.set_result(value)

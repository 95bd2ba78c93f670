"""``Puts``: the one way a message goes from the broker into the store.

Theory of operation: there is one way in and one way back.

* **In**: ``put_encoded_then(records, dones)`` — records the send rule encoded
  (``broker.send_rule``), appended together; and, for what the store's message put path must
  encode (delay levels, timer wheels, batches, transactions' half messages, retries), ``put(msg)``
  / ``put_batch(msgs)``. Each is a ``PutJob`` run by ``_start``: on the single ``PutWriter``
  thread (tried inline first, see ``writer``) once the broker runs, else on the broker's
  executor. ``put_records`` / ``put`` / ``put_batch`` are the awaiting forms. Store threads (the
  schedule and transaction services) call ``put_blocking``, which waits in the store.
* **Back**: every ``PutMessageResult`` passes ``_settle`` on the event loop: with SYNC_FLUSH the
  store appended without waiting (``defer_sync``) and the result waits here for the group commit
  that covers its ``sync_offset`` (``syncflush``: no thread is held per waiting put); on a
  SYNC_MASTER the store's put path leaves the wait for a slave to us
  (``PutPath.defer_replica_wait``, set by the wiring) and the result waits for ``ha.submit_wait``
  (FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE when no slave held it in time). Then the result is
  handed to its callback ``done(result, None)`` (or ``done(None, error)``).

The rules every stored message follows live in the store's put path, once: the ``UNIQ_KEY`` a
message without one gets (``StoreConfig.generate_uniq_key``), the store host, delay levels and
size limits. What a send checks before it gets here is the send rule's.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Awaitable, Callable, Sequence, TypeVar, Union

from ...format.message import EncodedMessage, Message
from ...store.results import PutMessageResult, PutStatus

if TYPE_CHECKING:
    from ...store.message_store import MessageStore
    from .syncflush import SyncFlushWaiter
    from .writer import PutWriter

T = TypeVar("T")
Done = Callable[[Union[PutMessageResult, None], Union[BaseException, None]], None]
Run = Callable[..., Awaitable[object]]


@dataclass(frozen=True)
class PutJob:
    """What one store call puts: ``records`` (a result each), else ``messages`` (one result;
    ``batch``: one record run)."""
    records: Sequence[EncodedMessage] = ()
    messages: Sequence[Message] = ()
    batch: bool = False


class Puts:
    def __init__(self, store: MessageStore, run: Run, writer: PutWriter | None = None) -> None:
        self.store = store
        self.run = run
        self.writer = writer  # the PutWriter once the broker runs
        self.sync_waiter: SyncFlushWaiter | None = None  # with SYNC_FLUSH

    # -- in -------------------------------------------------------------------------------------
    def put_blocking(self, msg: Message, nowait: bool = False) -> PutMessageResult | None:
        """Put one message from a store thread (``nowait``: None rather than block)."""
        return self.store.put_message(msg, nowait=nowait)

    def put_encoded_then(self, recs: list[EncodedMessage], dones: list[Done]) -> None:
        """Put pre-encoded records in one append and call ``dones[i](result, error)`` on the
        event loop once record i is answered (appended; durable under SYNC_FLUSH; held by a
        slave on a SYNC_MASTER). Callbacks, not a task per put: an ASYNC_FLUSH append done
        inline calls them at once."""
        self._start(PutJob(records=recs), dones)

    async def put_records(self, recs: list[EncodedMessage]) -> list[PutMessageResult]:
        """``put_encoded_then``, awaited: a result per record."""
        return await self._await(PutJob(records=recs), len(recs))

    async def put(self, msg: Message) -> PutMessageResult:
        """Put one message; its ``PutMessageResult`` (once durable / replicated as configured)."""
        return (await self._await(PutJob(messages=[msg]), 1))[0]

    async def put_batch(self, msgs: list[Message]) -> PutMessageResult:
        """Put a batch as one record run; its ``PutMessageResult``."""
        return (await self._await(PutJob(messages=msgs, batch=True), 1))[0]

    async def submit(self, fn: Callable[[Message], object], msg: Message) -> PutMessageResult:
        """The gRPC proxy's way in (``proxy.pieces.BrokerPieces.put``): ``fn`` is
        ``put_blocking``, the message is put as ``put`` puts it."""
        return await self.put(msg)

    # -- the store call -------------------------------------------------------------------------
    def _call(self, job: PutJob, nowait: bool = False) -> list[PutMessageResult] | None:
        """Run ``job`` against the store (on the put thread, or inline with ``nowait``)."""
        defer = self.sync_waiter is not None  # SYNC_FLUSH: append, then wait on the loop
        if job.records:
            return self.store.append(list(job.records), nowait=nowait, defer_sync=defer)
        if job.batch:
            r = self.store.put_messages(job.messages, nowait=nowait, defer_sync=defer)
        else:
            r = self.store.put_message(job.messages[0], nowait=nowait, defer_sync=defer)
        return None if r is None else [r]

    def inline(self) -> tuple[Callable[..., list[PutMessageResult] | None], ...]:
        """The put functions ``PutWriter`` may try on the event loop first."""
        return (self._call,)

    def _start(self, job: PutJob, dones: list[Done]) -> None:
        if self.writer is not None:
            fut: asyncio.Future[list[PutMessageResult] | None] = self.writer.submit(self._call,
                                                                                     job)
        else:
            fut = asyncio.ensure_future(self.run(self._call, job))  # type: ignore[arg-type]
        if fut.done():
            self._appended(dones, fut)
        else:
            fut.add_done_callback(partial(self._appended, dones))

    async def _await(self, job: PutJob, n: int) -> list[PutMessageResult]:
        loop = asyncio.get_running_loop()
        futs: list[asyncio.Future[PutMessageResult]] = [loop.create_future() for _ in range(n)]
        self._start(job, [partial(_settle_future, f) for f in futs])
        return [await f for f in futs]

    # -- back -----------------------------------------------------------------------------------
    def _appended(self, dones: list[Done],
                  fut: asyncio.Future[list[PutMessageResult] | None]) -> None:
        exc = fut.exception()
        results = fut.result() if exc is None else None
        if results is None:
            exc = exc or RuntimeError("the put returned no result")
            for done in dones:
                done(None, exc)
            return
        for done, r in zip(dones, results):
            self._settle(r, done)

    def _settle(self, r: PutMessageResult, done: Done) -> None:
        """The one way a result comes back: durable (SYNC_FLUSH), held by a slave (SYNC_MASTER),
        then to ``done``."""
        if self.sync_waiter is not None:
            parked = self.sync_waiter.park(r)
            if parked is not None:
                parked.add_done_callback(partial(self._flushed, r, done))
                return
        self._replicated(r, done)

    def _flushed(self, r: PutMessageResult, done: Done, f: asyncio.Future[bool]) -> None:
        if not f.result():
            r.status = PutStatus.FLUSH_DISK_TIMEOUT
        self._replicated(r, done)

    def _replicated(self, r: PutMessageResult, done: Done) -> None:
        wait_to = r.replica_wait_offset
        ha = self.store.ha
        if wait_to is None:
            done(r, None)
            return
        r.replica_wait_offset = None
        if ha is None:
            done(r, None)
            return
        loop = asyncio.get_running_loop()

        def held(status: PutStatus) -> None:  # (on the HA thread, or at once)
            loop.call_soon_threadsafe(_replica_answer, r, status, done)
        ha.submit_wait(wait_to, held)


def _replica_answer(r: PutMessageResult, status: PutStatus, done: Done) -> None:
    if status.name != "PUT_OK":
        r.status = status
    done(r, None)


def _settle_future(fut: asyncio.Future[PutMessageResult], r: PutMessageResult | None,
                   exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    elif r is not None:
        fut.set_result(r)

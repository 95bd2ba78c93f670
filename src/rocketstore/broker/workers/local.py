"""The workers' fast path for the broker's own connections (``serve --workers 1``).

Theory of operation: a one-process broker reads its clients itself. For each read,
``broker.server._Channel`` offers every send request to ``LocalSends.take``: a plain send
(``encode.plain_send``: no batch, delay, timer or transaction, not a slave; with ACL on, after
the same check every request passes) passes the
same topic checks as a worker's PUT (``FastPuts.check``) and is gathered on the channel; at the
end of the read (or before a request that takes the ordinary way, so a connection's sends keep
their order) the gathered records go into the CommitLog in one append
(``FastPuts.append`` → ``Puts.put_encoded_then``), each answered with the send processor's
header (``encode.send_response``). No task, ``Message`` or future per send. Anything the fast
path does not take goes to the send processor as before, so every refusal keeps one
implementation.
"""
from __future__ import annotations

import itertools
import time
from functools import partial
from typing import Any, Callable

from ...remoting.command import RemotingCommand
from .encode import Settings, plain_send, send_response
from .pool import FastPuts


class LocalSends:
    """Offered every request of ``remoting.codes.SEND_REQUEST_CODES`` (``take`` takes plain
    sends); one that takes the ordinary way holds the connection's later sends behind it."""

    def __init__(self, fast: FastPuts, settings: Settings,
                 acl_check: Callable[[RemotingCommand, str], None] | None = None) -> None:
        self.fast = fast
        self.settings = settings
        self.acl_check = acl_check  # with aclEnable: the check every request passes first
        self._seqs = itertools.count(1)

    def take(self, ch: Any, cmd: RemotingCommand) -> bool:
        """True when ``cmd`` is a plain send now gathered on ``ch`` (answered by ``append``);
        False: handle it the ordinary way."""
        if self.acl_check is not None:
            try:  # the same check as the send processor's guard; a refusal is answered there
                self.acl_check(cmd, ch.peer)
            except Exception:
                return False
        try:
            p = plain_send(cmd, ch.peer, next(self._seqs), 0, self.settings)
        except Exception:  # whatever it is, the send processor answers it
            return False
        if p is None:
            return False
        rec = self.fast.check(ch, p)
        if rec is None:
            return False
        ch.fast_puts += 1
        ch.puts.append((rec, partial(self._done, ch, cmd, p, time.perf_counter())))
        return True

    def append(self, ch: Any) -> None:
        self.fast.append(ch)

    def _done(self, ch: Any, cmd: RemotingCommand, p: Any, t0: float, r: Any,
              exc: BaseException | None) -> None:
        code, msg_id, remark = self.fast.outcome(p, t0, r, exc)
        ch.fast_put_answered()
        if not cmd.is_oneway:
            ch.write(send_response(cmd, code, p.queue_id, r.queue_offset if msg_id else 0, msg_id,
                                   remark))

    async def drain(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the gathered sends to be answered."""
        await self.fast.drain(timeout_s)

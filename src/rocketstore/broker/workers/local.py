"""The fast path for the broker's own connections (``serve --workers 1``).

Theory of operation: a one-process broker reads its clients itself. For each read,
``broker.server._Channel`` offers every send request to ``LocalSends.take``: the send rule
(``send_rule.plan_send``, with the broker's topic table: the send processor's topic and queue
checks, auto-creation included) plans it; a ``Put`` (no batch, delay, timer or transaction, not a
slave; with ACL on, after the same check every request passes) is gathered on the channel; at the
end of the read (or before a request that takes the ordinary way, so a connection's sends keep
their order) the gathered records go into the CommitLog in one append (``FastPuts.append`` →
``Puts.put_encoded_then``), each answered with the send rule's header
(``send_rule.send_answer_header``). No task, ``Message`` or future per send. Any other plan goes
to the send processor, which plans it again and answers it, so every refusal keeps one
implementation.
"""
from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Callable

from ...remoting.command import RemotingCommand
from ...store.results import PutMessageResult
from ..send_rule import (Put, SendRules, TopicLookup, plan_send, send_answer_header,
                         send_topic)
from .pool import FastPuts

if TYPE_CHECKING:
    from ..server import _Channel


class LocalSends:
    """Offered every request of ``remoting.codes.SEND_REQUEST_CODES`` (``take`` takes plain
    sends); one that takes the ordinary way holds the connection's later sends behind it."""

    def __init__(self, fast: FastPuts, rules: SendRules,
                 acl_check: Callable[[RemotingCommand, str], None] | None = None) -> None:
        self.fast = fast
        self.rules = rules
        self.acl_check = acl_check  # with aclEnable: the check every request passes first
        ctx = fast.ctx
        self.topics: TopicLookup = partial(send_topic, ctx.topics, ctx.config)

    def take(self, ch: _Channel, cmd: RemotingCommand) -> bool:
        """True when ``cmd`` is a plain send now gathered on ``ch`` (answered by ``append``);
        False: handle it the ordinary way."""
        if self.acl_check is not None:
            try:  # the same check as the send processor's guard; a refusal is answered there
                self.acl_check(cmd, ch.peer)
            except Exception:
                return False
        ch.clock.touched()
        try:
            plan = plan_send(cmd.code, cmd.ext_fields, cmd.body, ch.peer, self.rules,
                             self.topics)
        except Exception:  # whatever it is, the send processor answers it
            return False
        if not isinstance(plan, Put):
            return False
        self.fast.admit()
        ch.order.gather((plan.record, partial(self._done, ch, cmd, plan, time.perf_counter())))
        return True

    def append(self, ch: _Channel) -> None:
        self.fast.append(ch.order.take_gathered())

    def _done(self, ch: _Channel, cmd: RemotingCommand, p: Put, t0: float,
              r: PutMessageResult | None, exc: BaseException | None) -> None:
        code, msg_id, remark = self.fast.outcome(p.topic, p.body_len, t0, r, exc)
        ch.fast_put_answered()
        if not cmd.is_oneway:
            if msg_id and r is not None:
                ch.write(cmd.response(code, send_answer_header(msg_id, p.queue_id,
                                                               r.queue_offset)))
            else:
                ch.write(cmd.response(code, remark=remark or None))

    async def drain(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the gathered sends to be answered."""
        await self.fast.drain(timeout_s)

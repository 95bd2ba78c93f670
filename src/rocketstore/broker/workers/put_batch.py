"""A worker's plain sends of one read, planned and encoded as link PUT messages in one call.

Theory of operation: a worker cuts every frame of a client read and decodes the send headers,
then hands the read's send requests to ``link_puts`` at once: for each it answers either the
whole link PUT message (``link.put_msg`` of the send rule's ``Put``: the link header, the PUT
head, the topic and the CommitLog record, in one ``bytes``) or None (the frame goes to the
writer whole). Python decides per read; the per-message work — the header's fields and
integers, the send rule's plain-send checks (``send_rule.plan_send`` without a topic table),
the properties, the record encoding and the PUT head — is one call per read.

This module is the specification: ``_speedups.pyx`` beside it is its compiled twin (same name,
same arguments, byte-identical results; ``tests/broker/test_put_batch.py`` compares them with
hypothesis), loaded unless ``ROCKETSTORE_PURE_PYTHON=1`` (``rocketstore._native``). The twin
takes the usual shape of a request (a ``dict`` of ``str`` header fields, integers written as
plain decimal digits) and hands anything else to ``link_put_py`` here, so every unusual header
has one implementation.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

from ... import _native
from ...format.message import create_uniq_key
from ..send_rule import SEND_CODES, Put, SendRules, plan_send
from . import link as L

SendItem = tuple[int, Mapping[str, str], bytes]  # (request code, header fields, body)


def link_put_py(code: int, fields: Mapping[str, str], body: bytes, peer: str, rules: SendRules,
                seq: int, conn: int, now_ms: int | None = None,
                uniq_key: Callable[[], str] = create_uniq_key) -> bytes | None:
    """The link PUT message of one send request, or None (the writer handles it whole)."""
    if not rules.fast_sends or code not in SEND_CODES:
        return None
    try:
        plan = plan_send(code, fields, body, peer, rules, now_ms=now_ms, uniq_key=uniq_key)
        if not isinstance(plan, Put):
            return None
        rec = plan.record
        return b"".join(L.put_msg(L.Put(seq, conn, rec.queue_id, rec.sys_flag, rec.store_ts_pos,
                                        plan.body_len, plan.default_queue_nums, plan.props_off,
                                        rec.topic, rec.data)))
    except Exception:  # whatever it is, the writer's send processor answers it
        return None


def link_puts_py(items: Sequence[SendItem], peer: str, rules: SendRules, seq0: int, conn: int,
                 now_ms: int | None = None,
                 uniq_key: Callable[[], str] = create_uniq_key) -> list[bytes | None]:
    """``link_put_py`` of each item, item ``i`` with sequence number ``seq0 + i``."""
    if not rules.fast_sends:
        return [None] * len(items)
    return [link_put_py(code, fields, body, peer, rules, seq0 + i, conn, now_ms, uniq_key)
            for i, (code, fields, body) in enumerate(items)]


link_puts = link_puts_py
_speedups = _native.load("rocketstore.broker.workers._speedups")
if _speedups is not None:
    link_puts = _speedups.link_puts

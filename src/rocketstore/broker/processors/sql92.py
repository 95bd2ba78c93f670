"""SQL92 on the broker: CHECK_CLIENT_CONFIG (46) and the filter a PULL uses.

As RocketMQ 4.9's ``ClientManageProcessor.checkClientConfig`` and ``PullMessageProcessor``:

| situation                                            | answer                                  |
|------------------------------------------------------|-----------------------------------------|
| CHECK_CLIENT_CONFIG, TAG subscription                | SUCCESS                                 |
| CHECK_CLIENT_CONFIG, ``enablePropertyFilter=false``  | SYSTEM_ERROR "The broker does not support consumer to filter message by SQL92" |
| CHECK_CLIENT_CONFIG, expression does not compile     | SUBSCRIPTION_PARSE_FAILED, the compiler's message |
| PULL with the subscription flag, bad expression      | SUBSCRIPTION_PARSE_FAILED "parse the consumer's subscription failed" |
| PULL without it: group unknown / topic not subscribed| everything (RocketMQ: SUBSCRIPTION_NOT_EXIST) |
| PULL, SQL92 group without registered filter          | FILTER_DATA_NOT_EXIST                   |
| PULL, registered filter older than ``subVersion``    | FILTER_DATA_NOT_LATEST                  |
| PULL, SQL92 while ``enablePropertyFilter=false``     | SYSTEM_ERROR (as CHECK_CLIENT_CONFIG)   |

With ``filterSupportRetry`` a pull of ``%RETRY%<group>`` also applies the group's SQL92 filter
of each message's original topic (RocketMQ's ``ExpressionForRetryMessageFilter``).

(RocketMQ builds the filter of a flagged pull with an ``assert`` that production brokers skip, so
there a bad expression lets every message through; here it is refused as the code intends.)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...filter import SelectorSyntaxError, is_tag_type
from ...remoting.codes import PULL_FLAG_SUBSCRIPTION, ResponseCode
from ...remoting.command import RemotingCommand
from ..state.filters import (ConsumerFilterData, ExpressionMessageFilter,
                             RetryExpressionMessageFilter, compile_expression,
                             not_supported)
from ..state.topics import RETRY_PREFIX

if TYPE_CHECKING:
    from ..contexts import PullContext


class PullRefused(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@dataclass
class PullSubscription:
    tags: str | None  # the tag expression (None: everything); unused for SQL92
    message_filter: ExpressionMessageFilter | None  # set for SQL92


def pull_subscription(ctx: PullContext, cmd: RemotingCommand, group: str, topic: str) -> PullSubscription:
    """What a PULL filters with (see the module table); raises :class:`PullRefused`."""
    sys_flag = cmd.get_int("sysFlag", 0) or 0
    if sys_flag & PULL_FLAG_SUBSCRIPTION:
        expr_type = cmd.get_str("expressionType")
        expr = cmd.get_str("subscription")
        data = None
        if not is_tag_type(expr_type):
            if not expr:
                raise PullRefused(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                  "parse the consumer's subscription failed")
            try:
                compiled = compile_expression(str(expr_type), expr)
            except SelectorSyntaxError:
                raise PullRefused(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                  "parse the consumer's subscription failed") from None
            data = ConsumerFilterData(group, topic, expr, str(expr_type), compiled,
                                      born_time=0, client_version=cmd.get_int("subVersion", 0) or 0)
    else:
        info = ctx.consumers.group(group)
        sub = info.subscriptions.get(topic) if info is not None else None
        if sub is None:  # (RocketMQ: SUBSCRIPTION_NOT_EXIST; kept lenient for tag pulls)
            return PullSubscription(None, None)
        expr_type, expr = sub.expression_type, sub.sub_string
        data = None
        if not is_tag_type(expr_type):
            data = ctx.filters.get(topic, group)
            if data is None:
                raise PullRefused(ResponseCode.FILTER_DATA_NOT_EXIST,
                                  "The broker's consumer filter data is not exist!Your expression may be wrong!")
            if data.client_version < (cmd.get_int("subVersion", 0) or 0):
                raise PullRefused(ResponseCode.FILTER_DATA_NOT_LATEST,
                                  "the consumer's consumer filter data not latest")
    if is_tag_type(expr_type):
        tags = None if expr is None or expr.strip() in ("", "*") else expr.strip()
        if ctx.config.filter_support_retry and topic.startswith(RETRY_PREFIX):
            return PullSubscription(tags, RetryExpressionMessageFilter(
                ctx.filters, topic[len(RETRY_PREFIX):]))
        return PullSubscription(tags, None)
    if not ctx.config.enable_property_filter:
        raise PullRefused(ResponseCode.SYSTEM_ERROR, not_supported(str(expr_type)))
    return PullSubscription(None, ExpressionMessageFilter(data, ctx.filters.bloom))


def check_client_config(ctx: PullContext, body: bytes | None) -> tuple[int, str | None]:
    """CHECK_CLIENT_CONFIG's (code, remark) for a ``CheckClientRequestBody``."""
    try:
        req = json.loads(body.decode("utf-8")) if body else {}
    except (ValueError, UnicodeDecodeError):
        req = {}
    sub = req.get("subscriptionData") if isinstance(req, dict) else None
    if not isinstance(sub, dict):
        return ResponseCode.SUCCESS, None
    expr_type = sub.get("expressionType")
    if is_tag_type(expr_type):
        return ResponseCode.SUCCESS, None
    if not ctx.config.enable_property_filter:
        return ResponseCode.SYSTEM_ERROR, not_supported(str(expr_type))
    try:
        compile_expression(str(expr_type), str(sub.get("subString") or ""))
    except SelectorSyntaxError as exc:
        return ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc)
    return ResponseCode.SUCCESS, None


async def check_config(ctx: PullContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    code, remark = check_client_config(ctx, cmd.body)
    return cmd.response(code, remark=remark)

"""The put hook for timer messages (RocketMQ 5's ``HookUtils.handleScheduleMessage`` /
``checkIfTimerMessage`` / ``transformTimerMessage``).

A plain or committed message with ``TIMER_DELIVER_MS`` (absolute ms), ``TIMER_DELAY_SEC`` or
``TIMER_DELAY_MS`` and no ``DELAY`` level is stored on ``rmq_sys_wheel_timer`` queue 0 with
``TIMER_OUT_MS`` (its wheel slot), ``REAL_TOPIC`` and ``REAL_QID``. A ``DELAY`` level wins: the
timer properties are dropped and the 4.x delay level applies. A message already carrying
``TIMER_OUT_MS`` (a delivered or rolled one) is not transformed again. The answers are
RocketMQ's: an unreadable value, a time beyond ``timerMaxDelaySec``, or a cancel
(``TIMER_DEL_UNIQKEY``) for a time already past is ``WHEEL_TIMER_MSG_ILLEGAL``; timer messages
on a broker with ``timerWheelEnable=false`` are ``WHEEL_TIMER_NOT_ENABLE``.

The slot: a deliver time on a precision boundary goes one slot earlier, any other is floored.
The wheel delivers a slot once the clock has passed its end, so a message is never early.
"""
from __future__ import annotations

from ...format.message import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC
from ...format.timer_layout import (PROPERTY_TIMER_DEL_UNIQKEY, PROPERTY_TIMER_DELAY_MS,
                                    PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELIVER_MS,
                                    PROPERTY_TIMER_OUT_MS, TIMER_PROPERTIES, TIMER_TOPIC)


class TimerRejected(Exception):
    """A timer message the put path refuses; ``status`` names a ``PutStatus``."""

    def __init__(self, status: str, remark: str) -> None:
        super().__init__(remark)
        self.status = status
        self.remark = remark


def is_timer_message(topic: str, props: dict[str, str], delay_level: int) -> bool:
    """``checkIfTimerMessage``; drops the timer properties of a message with a delay level."""
    if delay_level > 0:
        for k in TIMER_PROPERTIES:
            props.pop(k, None)
        return False
    if topic == TIMER_TOPIC or PROPERTY_TIMER_OUT_MS in props:
        return False
    return any(k in props for k in TIMER_PROPERTIES)


def deliver_ms_of(props: dict[str, str], now_ms: int) -> int:
    """The absolute deliver time the properties ask for (SEC, then MS, then DELIVER_MS).
    Raises ``ValueError`` naming the property whose value is not a whole number."""
    def number(name: str, unit: str) -> int:
        value = props[name]
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"{name}={value!r} is not a whole number of {unit}"
                             + (" (an absolute time, ms since the epoch)"
                                if name == PROPERTY_TIMER_DELIVER_MS else "")) from None
    if PROPERTY_TIMER_DELAY_SEC in props:
        return now_ms + number(PROPERTY_TIMER_DELAY_SEC, "seconds") * 1000
    if PROPERTY_TIMER_DELAY_MS in props:
        return now_ms + number(PROPERTY_TIMER_DELAY_MS, "milliseconds")
    return number(PROPERTY_TIMER_DELIVER_MS, "milliseconds")


def transform_timer_message(topic: str, queue_id: int, props: dict[str, str], now_ms: int, *,
                            enabled: bool, precision_ms: int, max_delay_sec: int,
                            is_reject=None) -> tuple[str, int]:
    """Rewrite ``props`` in place; returns the (topic, queue) to store on. Raises
    ``TimerRejected``."""
    if not enabled:
        raise TimerRejected("WHEEL_TIMER_NOT_ENABLE",
                            "accurate timer message is not enabled, timerWheelEnable is false")
    try:
        deliver = deliver_ms_of(props, now_ms)
    except (ValueError, OverflowError) as exc:
        raise TimerRejected("WHEEL_TIMER_MSG_ILLEGAL", f"timer message illegal: {exc}") from exc
    if deliver > now_ms:
        if deliver - now_ms > max_delay_sec * 1000:
            raise TimerRejected(
                "WHEEL_TIMER_MSG_ILLEGAL",
                f"timer message illegal, the delay time should not be bigger than the max delay "
                f"{max_delay_sec * 1000}ms; or if set del msg, the delay time should be bigger than "
                f"the current time")
        deliver = deliver - precision_ms if deliver % precision_ms == 0 else deliver // precision_ms * precision_ms
        if is_reject is not None and is_reject(deliver):
            raise TimerRejected("WHEEL_TIMER_FLOW_CONTROL", "timer message is under flow control")
        props[PROPERTY_TIMER_OUT_MS] = str(deliver)
        props[PROPERTY_REAL_TOPIC] = topic
        props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        return TIMER_TOPIC, 0
    if PROPERTY_TIMER_DEL_UNIQKEY in props:
        raise TimerRejected(
            "WHEEL_TIMER_MSG_ILLEGAL",
            f"timer message illegal, the delay time should not be bigger than the max delay "
            f"{max_delay_sec * 1000}ms; or if set del msg, the delay time should be bigger than "
            f"the current time")
    return topic, queue_id  # a time already past: delivered at once, as a plain message

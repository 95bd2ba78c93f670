"""RocketMQ 5's timer store: ``timerwheel``, ``timerlog/``, ``config/timercheck`` (see service.py)."""
from .service import TimerMessageStore, TimerStoreAccess, timer_paths
from .transform import TimerRejected, transform_timer_message

__all__ = ["TimerMessageStore", "TimerStoreAccess", "TimerRejected", "transform_timer_message",
           "timer_paths"]

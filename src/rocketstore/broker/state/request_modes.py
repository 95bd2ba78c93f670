"""``messageRequestMode.json``: how a group consumes a topic, PULL or POP (RocketMQ 5's
``MessageRequestModeManager``; ``mqadmin setConsumeMode`` sends SET_MESSAGE_REQUEST_MODE, 401).

Shape, as RocketMQ 5.3.3 writes it (``<store>/config/messageRequestMode.json``)::

    {"messageRequestModeMap":{"T":{"G":{"consumerGroup":"G","mode":"POP",
                                        "popShareQueueNum":0,"topic":"T"}}}}

Written whole (temporary file, fsync, rename) on every change: changes are operator actions.
"""
from __future__ import annotations

import json
import os
import threading

from .files import load_json_lenient, write_bytes_atomic

MODES = ("PULL", "POP")


class MessageRequestModes:
    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, "messageRequestMode.json")
        self._lock = threading.Lock()
        data = load_json_lenient(self.path) or {}
        self._modes: dict[str, dict[str, dict]] = {
            str(t): {str(g): dict(v) for g, v in (groups or {}).items()}
            for t, groups in (data.get("messageRequestModeMap") or {}).items()}

    def get(self, topic: str, group: str) -> dict | None:
        """``{"topic", "consumerGroup", "mode", "popShareQueueNum"}`` or None (never set)."""
        with self._lock:
            return self._modes.get(topic, {}).get(group)

    def set(self, topic: str, group: str, mode: str, pop_share_queue_num: int) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        with self._lock:
            self._modes.setdefault(topic, {})[group] = {
                "topic": topic, "consumerGroup": group, "mode": mode,
                "popShareQueueNum": int(pop_share_queue_num)}
            text = json.dumps({"messageRequestModeMap": self._modes}, sort_keys=True)
        write_bytes_atomic(self.path, text.encode("utf-8"))

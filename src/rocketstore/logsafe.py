"""Log lines that say what a client sent without letting it write lines of its own.

A request value with a newline (``PUT_KV_CONFIG`` with ``value="x\\n2026-01-01 ERROR ..."``)
would otherwise forge a log line. ``EscapingFormatter`` escapes control characters (and the
Unicode line separators) in every formatted message; a traceback keeps its own lines.
"""
from __future__ import annotations

import logging

_TABLE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}
_TABLE.update({0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x85: "\\x85", 0x2028: "\\u2028",
               0x2029: "\\u2029"})
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def escape(text: str) -> str:
    """``text`` with control characters written as escapes (one line, always)."""
    return text.translate(_TABLE)


class EscapingFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(record.message)
        return super().formatMessage(record)


def configure(level: int, fmt: str = LOG_FORMAT) -> None:
    """``logging.basicConfig`` with an ``EscapingFormatter`` on the root handler."""
    logging.basicConfig(level=level, format=fmt)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(EscapingFormatter(fmt))


__all__ = ["EscapingFormatter", "configure", "escape", "LOG_FORMAT"]

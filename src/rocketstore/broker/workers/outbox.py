"""``Outbox``: link messages queued during one event-loop turn, written in one ``writelines``.

Both ends of a link (the writer's ``pool.Link``, the worker's ``worker.Worker``) say many small
things per turn — a PUT per send, a RESULT per put — so a syscall is paid per turn, not per
message. A subclass sets ``loop`` and ``_out = []`` and says where the bytes go (``_target``).
"""
from __future__ import annotations

import asyncio
import asyncio


class Outbox:
    loop: asyncio.AbstractEventLoop
    _out: list[bytes]

    def _target(self) -> asyncio.WriteTransport | None:
        """The transport the link's bytes go to (None before it is connected)."""
        raise NotImplementedError

    def send(self, msg: bytes) -> None:
        if not self._out:
            self.loop.call_soon(self._flush)
        self._out.append(msg)

    def send_parts(self, parts: list[bytes]) -> None:
        if not self._out:
            self.loop.call_soon(self._flush)
        self._out.extend(parts)

    def _flush(self) -> None:
        parts, self._out = self._out, []
        target = self._target()
        if parts and target is not None and not target.is_closing():
            target.writelines(parts)

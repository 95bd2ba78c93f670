"""``SendOrder``: the order of one connection's sends, whichever process reads the connection.

Theory of operation: a plain send may be put on a fast path (``send_rule.Put``: gathered per read
and appended together, or sent to the writer as a PUT) while any other send goes whole to the
send processor. A client that pipelines both on one connection must find them stored in the
order it wrote them, so each connection keeps one ``SendOrder``:

* ``gathered``: the plain sends of this read not appended yet (the one-process path appends
  them at the end of the read, or before a request that takes the processor);
* ``fast``: plain sends taken by a fast path and not answered yet (they count against the
  connection's requests in flight, and a send that goes whole waits behind them in a worker);
* ``whole``: sends of this connection the send processor has now; while there is one, later
  plain sends follow it through the processor (``open`` is False);
* ``reforwards``: a worker's PUTs the writer answered FALLBACK, not back as REFRAME yet: the same;
* ``waiting`` (a worker's connection): sends held until the fast sends ahead of them are
  answered, in the order they came.

The writer's channel (``broker.server._Channel``) and a worker's ``ClientConn`` each hold one;
nothing else changes these counts.
"""
from __future__ import annotations

import collections
from typing import Generic, TypeVar

G = TypeVar("G")  # what a gathered plain send is (record, answer callback)
W = TypeVar("W")  # what a held send is (a worker's frame and its PUT)


class SendOrder(Generic[G, W]):
    __slots__ = ("gathered", "fast", "whole", "reforwards", "waiting")

    def __init__(self) -> None:
        self.gathered: list[G] = []
        self.fast = 0
        self.whole = 0
        self.reforwards = 0
        self.waiting: collections.deque[W] = collections.deque()

    @property
    def open(self) -> bool:
        """A plain send may take a fast path now (nothing of this connection is with the send
        processor or on its way there)."""
        return not self.whole and not self.reforwards

    def gather(self, item: G) -> None:
        self.gathered.append(item)
        self.fast += 1

    def take_gathered(self) -> list[G]:
        gathered, self.gathered = self.gathered, []
        return gathered

    def answered(self) -> None:
        """A fast send of this connection was answered."""
        self.fast -= 1

    def reframed(self) -> None:
        """A send answered FALLBACK came back whole."""
        if self.reforwards:
            self.reforwards -= 1

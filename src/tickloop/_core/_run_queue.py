"""Approved calls waiting for a concurrency slot, and the slots in use.

Calls start in arrival order across tools, each tool's queue in its own order, within the
run's limit and every tool's own `max_concurrency`. A heap holds the oldest queued call of
each tool that has a free slot, so starting the next call never scans the queues.

Most calls meet no limit at all (no run limit, a tool without one, nothing queued before
them): those wait in a plain list, `ready`, and start in the order the heap would start
them, without a queue or a heap of their own. Anything else (a limit, a queue, calls not
in arrival order) puts them through the queues first.
"""

from __future__ import annotations

import heapq
from collections import deque
from itertools import pairwise

from ._call import Call

__all__ = ["RunQueue"]


class RunQueue:
    """Which calls wait for a slot (`queued`), which run (`running`), and who goes next."""

    __slots__ = (
        "_in_heads",
        "_queues",
        "_tool_running",
        "heads",
        "queued",
        "ready",
        "running",
        "writers",
    )

    def __init__(self) -> None:
        self._queues: dict[str, deque[Call]] = {}
        # (seq, tool) of tools able to start one: empty when none can start
        self.heads: list[tuple[int, str]] = []
        # Queued calls that met no limit when queued, in the order they were (see above).
        self.ready: list[Call] = []
        self._in_heads: set[str] = set()
        self._tool_running: dict[str, int] = {}
        self.queued = 0
        self.running: set[str] = set()
        # Running calls that write something: a tick waits for these, not for
        # fire-and-forget ones (PROTOCOL §4).
        self.writers = 0

    def push(self, call: Call) -> None:
        self.queued += 1
        tool = call.tool
        name = tool.name
        queue = self._queues.get(name)
        if tool.max_concurrency is None and not queue:
            self.ready.append(call)  # nothing of its tool queued before it, no limit of its own
            return
        self._queue(call, name, queue)

    def _queue(self, call: Call, name: str, queue: deque[Call] | None) -> None:
        if queue is None:
            queue = self._queues[name] = deque()
        queue.append(call)
        if len(queue) == 1:
            self._offer_head(name, queue, call.tool.max_concurrency)

    def start(self, limit: int | None) -> list[Call]:
        """Take the calls that may start now, oldest first; each counts as running."""
        ready = self.ready
        if ready:
            if limit is None and not self.heads and _in_arrival_order(ready):
                return self._start_ready()
            self._queue_ready()
        heads = self.heads
        started: list[Call] = []
        while heads and (limit is None or len(self.running) < limit):
            _, name = heapq.heappop(heads)
            self._in_heads.discard(name)
            call = self._queues[name].popleft()
            self.queued -= 1
            self._tool_running[name] = self._tool_running.get(name, 0) + 1
            self.running.add(call.id)
            if not call.fire_and_forget:
                self.writers += 1
            started.append(call)
            queue = self._queues[name]
            if queue:
                self._offer_head(name, queue, call.tool.max_concurrency)
        return started

    def _start_ready(self) -> list[Call]:
        """Start every call of `ready`: what the heap would start, in the same order, when
        nothing limits them and they came in arrival order (their tools' queues empty)."""
        started, self.ready = self.ready, []
        self.queued -= len(started)
        tool_running, running = self._tool_running, self.running
        for call in started:
            name = call.tool.name
            tool_running[name] = tool_running.get(name, 0) + 1
            running.add(call.id)
            if not call.fire_and_forget:
                self.writers += 1
        return started

    def _queue_ready(self) -> None:
        """Put the calls of `ready` in their tools' queues, in the order they came, as if
        they had been queued there: a limit or the order decides now (`start`)."""
        ready, self.ready = self.ready, []
        for call in ready:
            name = call.tool.name
            self._queue(call, name, self._queues.get(name))

    def finish(self, call: Call) -> None:
        """A running call ended: its slot goes to the next queued call of its tool."""
        self.running.discard(call.id)
        if not call.fire_and_forget:
            self.writers -= 1
        name = call.tool.name
        self._tool_running[name] -= 1
        queue = self._queues.get(name)
        if queue:
            self._offer_head(name, queue, call.tool.max_concurrency)

    def _offer_head(self, name: str, queue: deque[Call], limit: int | None) -> None:
        """Put a tool's oldest queued call (`queue` is not empty) among the candidates,
        if the tool has a slot (`limit`: its `max_concurrency`)."""
        if name in self._in_heads:
            return
        if limit is not None and self._tool_running.get(name, 0) >= limit:
            return
        heapq.heappush(self.heads, (queue[0].seq, name))
        self._in_heads.add(name)


def _in_arrival_order(calls: list[Call]) -> bool:
    """Whether `calls` ascend by arrival order (one call, as most batches are, does)."""
    return len(calls) == 1 or all(a.seq < b.seq for a, b in pairwise(calls))

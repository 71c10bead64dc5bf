"""Approved calls waiting for a concurrency slot, and the slots in use.

Calls start in arrival order across tools, each tool's queue in its own order, within the
run's limit and every tool's own `max_concurrency`. A heap holds the oldest queued call of
each tool that has a free slot, so starting the next call never scans the queues.

Most calls meet no limit at all (no run limit, a tool without one, nothing queued before
them): those wait in a plain list, `ready`, and start in the order the heap would start
them, without a queue or a heap of their own. Anything else (a limit, a queue, calls not
in arrival order) puts them through the queues first.

Under `critical_path` (PROTOCOL §13) the queues are the same, but when a limit holds
calls back — more calls can start than there are slots, the run's or a tool's — the next
to start is the one of highest rank (`_ranks`), then the earliest ready, then the first in
plan order. Those calls move from their tool's queue into a heap by that key, re-keyed
when the ranks are worked out afresh. When nothing is held back, every call that can start
starts, in arrival order, and no rank is worked out.
"""

from __future__ import annotations

import heapq
from collections import deque
from itertools import pairwise

from ._call import Call
from ._ranks import Ranks

__all__ = ["Ranks", "RunQueue"]

# A held-back call's place under critical_path: highest rank, earliest ready, plan order.
_Entry = tuple[float, int, int, Call]


class RunQueue:
    """Which calls wait for a slot (`queued`), which run (`running`), and who goes next."""

    __slots__ = (
        "_in_heads",
        "_key_epoch",
        "_keyed",
        "_limits",
        "_queues",
        "_tool_running",
        "heads",
        "pushed",
        "queued",
        "ranks",
        "ready",
        "running",
        "writers",
    )

    def __init__(self, ranks: Ranks | None = None) -> None:
        self._queues: dict[str, deque[Call]] = {}
        # Tools able to start one: empty when none can start. First in first out: a heap
        # of (seq of its oldest queued call, tool); critical_path: (0, tool), unordered.
        self.heads: list[tuple[int, str]] = []
        # critical_path (`ranks` given): held-back calls by tool, keyed in ranks' `epoch`
        self.ranks = ranks
        self._keyed: dict[str, list[_Entry]] = {}
        self._key_epoch: dict[str, int] = {}
        self._limits: dict[str, int | None] = {}
        # Queued calls that met no limit when queued, in the order they were (see above).
        self.ready: list[Call] = []
        self._in_heads: set[str] = set()
        # Running calls of each tool that has a `max_concurrency`: only those are asked.
        self._tool_running: dict[str, int] = {}
        self.queued = 0
        # Calls ever queued; a call's number among them says when it became ready to
        # start: ties of rank go to the earlier (PROTOCOL §13).
        self.pushed = 0
        self.running: set[str] = set()
        # Running calls that write something: a tick waits for these, not for
        # fire-and-forget ones (PROTOCOL §4).
        self.writers = 0

    def push(self, call: Call) -> None:
        self.queued += 1
        call.ready_at = self.pushed
        self.pushed += 1
        tool = call.tool
        name = tool.name
        queue = self._queues.get(name)
        if tool.max_concurrency is None and not queue:
            self.ready.append(call)  # nothing of its tool queued before it, no limit of its own
            return
        self._queue(call, name, queue)

    def start_at_once(self, call: Call, limit: int | None) -> bool:
        """Whether a call just approved starts now, never queued (it then counts as
        running): most calls, which meet no limit (`limit`, the run's, nor its tool's)
        with nothing queued before them. `start` would start them at once too, in the
        same order, without a rank (nothing is held back: PROTOCOL §13); the others are
        `push`ed and started by `start`."""
        if limit is not None or self.queued or call.tool.max_concurrency is not None:
            return False
        call.ready_at = self.pushed
        self.pushed += 1
        self._count_running(call)
        return True

    def _count_running(self, call: Call) -> None:
        if call.tool.max_concurrency is not None:
            name = call.tool.name
            self._tool_running[name] = self._tool_running.get(name, 0) + 1
        self.running.add(call.id)
        if not call.fire_and_forget:
            self.writers += 1

    def _queue(self, call: Call, name: str, queue: deque[Call] | None) -> None:
        if queue is None:
            queue = self._queues[name] = deque()
            self._limits[name] = call.tool.max_concurrency
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
        if self.ranks is not None:
            return self._start_ranked(limit) if self.heads else []
        heads = self.heads
        started: list[Call] = []
        while heads and (limit is None or len(self.running) < limit):
            _, name = heapq.heappop(heads)
            self._in_heads.discard(name)
            call = self._queues[name].popleft()
            self.queued -= 1
            self._count_running(call)
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
        for call in started:
            self._count_running(call)
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
        if call.tool.max_concurrency is not None:
            self._tool_running[name] -= 1
        queue = self._queues.get(name)
        if queue or (self._keyed and self._keyed.get(name)):
            self._offer_head(name, queue, call.tool.max_concurrency)

    def park(self, call: Call) -> None:
        """A running call waits for decisions made elsewhere (a sub-agent's whose child
        paused): it gives up its slot, and is pushed again once decided."""
        self.finish(call)

    def _offer_head(self, name: str, queue: deque[Call] | None, limit: int | None) -> None:
        """Put a tool's oldest queued call (the tool has one) among the candidates, if the
        tool has a slot (`limit`: its `max_concurrency`)."""
        if name in self._in_heads:
            return
        if limit is not None and self._tool_running.get(name, 0) >= limit:
            return
        if self.ranks is not None:
            self.heads.append((0, name))
        else:
            assert queue
            heapq.heappush(self.heads, (queue[0].seq, name))
        self._in_heads.add(name)

    # -- critical_path (PROTOCOL §13) ----------------------------------------------------

    def _start_ranked(self, limit: int | None) -> list[Call]:
        """Start what may start now: all of it, in arrival order, when nothing is held
        back; else the best by rank, one slot at a time."""
        free = None if limit is None else limit - len(self.running)
        if free is not None and free <= 0:
            return []
        names = [name for _, name in self.heads]
        waiting = 0
        held_back = False
        for name in names:
            count = len(self._queues.get(name) or ()) + len(self._keyed.get(name) or ())
            tool_limit = self._limits[name]
            if tool_limit is not None and count > tool_limit - self._tool_running.get(name, 0):
                held_back = True
            waiting += count
        if not held_back and (free is None or waiting <= free):
            return self._start_all(names)
        assert self.ranks is not None
        self.ranks.refresh(self.queued, self.pushed)
        for name in names:
            self._key(name)
        started: list[Call] = []
        keyed = self._keyed
        while names and (free is None or len(started) < free):
            best = min(names, key=lambda name: keyed[name][0])
            call = heapq.heappop(keyed[best])[3]
            self._run(call)
            started.append(call)
            tool_limit = self._limits[best]
            if not keyed[best] or (
                tool_limit is not None and self._tool_running[best] >= tool_limit
            ):
                names.remove(best)
                self._in_heads.discard(best)
        self.heads = [(0, name) for name in names]
        return started

    def _start_all(self, names: list[str]) -> list[Call]:
        calls: list[Call] = []
        for name in names:
            queue = self._queues.get(name)
            if queue:
                calls.extend(queue)
                queue.clear()
            keyed = self._keyed.get(name)
            if keyed:
                calls.extend(entry[3] for entry in keyed)
                keyed.clear()
        calls.sort(key=_by_seq)
        for call in calls:
            self._run(call)
        self.heads = []
        self._in_heads.clear()
        return calls

    def _key(self, name: str) -> None:
        """Move a tool's queued calls into its heap, keyed by the current ranks (and key
        again what is in the heap, if the ranks were worked out afresh since)."""
        ranks = self.ranks
        assert ranks is not None
        heap = self._keyed.get(name)
        if heap is None:
            heap = self._keyed[name] = []
        if heap and self._key_epoch.get(name) != ranks.epoch:
            heap[:] = [_entry(ranks, entry[3]) for entry in heap]
            heapq.heapify(heap)
        self._key_epoch[name] = ranks.epoch
        queue = self._queues.get(name)
        while queue:
            heapq.heappush(heap, _entry(ranks, queue.popleft()))

    def _run(self, call: Call) -> None:
        self.queued -= 1
        self._count_running(call)


def _entry(ranks: Ranks, call: Call) -> _Entry:
    return (-ranks.rank(call), call.ready_at, call.seq, call)


def _by_seq(call: Call) -> int:
    return call.seq


def _in_arrival_order(calls: list[Call]) -> bool:
    """Whether `calls` ascend by arrival order (one call, as most batches are, does)."""
    return len(calls) == 1 or all(a.seq < b.seq for a, b in pairwise(calls))

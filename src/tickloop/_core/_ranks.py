"""Ranks of held-back calls: the longest path to the end of the plan (PROTOCOL §13).

When a concurrency limit holds ready calls back, the next to start is the one with the
longest path, in expected seconds, from the call (its own duration included) to the end
of the plan known so far. A call's rank is its expected duration plus the largest rank
among the calls that wait on it (`Dependents`); a held call (run, its write waiting for
plan order) weighs nothing, but what waits on its write still counts.

Ranks are worked out only when a limit holds calls back, by a walk down from the
held-back calls, each call's rank kept (`_memo`) for the walks after it. The plan grows
while the model streams, and a call arriving later may raise an earlier call's rank, so
the kept ranks go stale with every arrival (and every change of a measured mean). They
are thrown away and worked out again when the next choice comes, as long as that costs
no more than a fixed share of the calls queued since the last time (`CREDIT_PER_CALL`
calls visited per call queued): the cost per call stays flat however long the plan, and
a plan of up to hundreds of pending calls is ranked afresh at nearly every choice. A huge
plan that changes between every two choices is ranked on kept ranks in between (new calls
are ranked when first met, on what is known then). Calls are counted, not timed, so the
same inputs give the same ranks: a replayed run makes the same choices.

Expected durations come from the tool (`expected_duration`), else from `Measured` (the
driver's measurements, handed in as data: this module reads no clock), else 1 second.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import dataclass
from typing import Protocol

from ._call import Call
from ._plan_order import PlanOrder
from ._status import CallStatus
from ._tools import Tool

__all__ = ["CREDIT_PER_CALL", "SCHEDULES", "Dependents", "Measured", "Ranks", "Schedule"]

SCHEDULES = ("critical_path", "fifo")

# Calls a fresh ranking may visit per call queued since the last one (see above).
CREDIT_PER_CALL = 64

DEFAULT_DURATION = 1.0


class Measured(Protocol):
    """Mean durations the driver measured, by tool name; `version` changes with them."""

    @property
    def version(self) -> int: ...

    def mean(self, tool: str) -> float | None: ...


# The ids of the calls that wait on a call (its end, or its write), given the call.
Dependents = Callable[[Call], Iterable[str]]


@dataclass(frozen=True)
class Schedule:
    """The order of starts under a limit: `order` is "critical_path" or "fifo";
    `measured` the driver's means (None: declared durations or 1)."""

    order: str = "critical_path"
    measured: Measured | None = None

    def __post_init__(self) -> None:
        if self.order not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, not {self.order!r}")


def ranks_for(
    schedule: str | Schedule,
    calls: Mapping[str, Call],
    arrived: Sized,
    plan: PlanOrder,
    tool_dependents: Mapping[str, Iterable[str]],
) -> Ranks | None:
    """A scheduler's ranks (None under fifo): `calls` not ended, `arrived` one entry per
    call that has arrived, `plan` its plan order, `tool_dependents` the calls waiting for
    a call's end through their tool's `depends_on`."""
    if not isinstance(schedule, Schedule):
        schedule = Schedule(schedule)
    if schedule.order == "fifo":
        return None

    def dependents(call: Call) -> list[str]:
        found = plan.dependents(call.id, call.seq, call.writes)
        if tool_dependents:
            found.extend(tool_dependents.get(call.id, ()))
        return found

    return Ranks(calls, dependents, arrived.__len__, schedule.measured)


class Ranks:
    """Ranks of one scheduler's calls, worked out when asked (see the module docstring).

    `calls`: the scheduler's calls not ended; `dependents`: who waits on a call;
    `arrivals`: how many calls have arrived (a new one may raise ranks); `measured`: the
    driver's means, or None (declared durations or 1: a deterministic workflow).
    """

    def __init__(
        self,
        calls: Mapping[str, Call],
        dependents: Dependents,
        arrivals: Callable[[], int],
        measured: Measured | None = None,
    ) -> None:
        self._calls = calls
        self._dependents = dependents
        self._arrivals = arrivals
        self._measured = measured
        self._memo: dict[str, float] = {}
        self.epoch = 0  # bumped whenever the kept ranks are thrown away
        self._seen: tuple[int, int] = (-1, -1)  # (arrivals, measured version) ranked on
        self._ranked_at = 0  # calls queued before the last fresh ranking
        self._cost = 0  # calls its walks have visited since
        self.visits = 0  # calls every walk has visited: what ranking has cost in all

    def refresh(self, queued: int, pushed: int) -> bool:
        """Before a choice: throw the kept ranks away if the plan or the means changed
        since they were worked out, and the calls queued since then (`pushed` counts
        every call ever queued) pay for it. True when they were (every queued call must
        be ranked again)."""
        seen = (self._arrivals(), -1 if self._measured is None else self._measured.version)
        if seen == self._seen:
            return False
        if self._memo and (pushed - self._ranked_at) * CREDIT_PER_CALL < self._cost + queued:
            return False  # not paid for yet: rank on what is kept
        self._seen = seen
        self._memo = {}
        self._ranked_at = pushed
        self._cost = queued
        self.epoch += 1
        return True

    def expected(self, tool: Tool) -> float:
        declared = tool.expected_duration
        if declared is not None:
            return declared
        if self._measured is not None:
            mean = self._measured.mean(tool.name)
            if mean is not None:
                return mean
        return DEFAULT_DURATION

    def rank(self, call: Call) -> float:
        """The longest path, in expected seconds, from `call` to the end of the plan."""
        memo = self._memo
        known = memo.get(call.id)
        if known is not None:
            return known
        # An explicit stack, not recursion: a chain may be a hundred thousand calls long.
        # A call on the stack counts as 0 to a dependent that reaches it again (a cycle:
        # settled as one later, PROTOCOL §5).
        calls, dependents = self._calls, self._dependents
        on_stack: set[str] = {call.id}
        # Each frame: a call, the ids that wait on it, how many of them were looked at.
        stack: list[tuple[Call, list[str], list[int]]] = [(call, list(dependents(call)), [0])]
        visited = 1
        while stack:
            current, waiting_ids, looked = stack[-1]
            while looked[0] < len(waiting_ids):
                next_id = waiting_ids[looked[0]]
                looked[0] += 1
                waiting = calls.get(next_id)
                if waiting is None or next_id in memo or next_id in on_stack:
                    continue
                on_stack.add(next_id)
                stack.append((waiting, list(dependents(waiting)), [0]))
                visited += 1
                break
            else:
                stack.pop()
                on_stack.discard(current.id)
                longest = 0.0
                for waiting_id in waiting_ids:
                    later = memo.get(waiting_id)
                    if later is not None and later > longest:
                        longest = later
                memo[current.id] = self._weight(current) + longest
        self._cost += visited
        self.visits += visited
        return memo[call.id]

    def _weight(self, call: Call) -> float:
        # A held call has run: only what waits on its write is still to come.
        return 0.0 if call.status == CallStatus.HELD else self.expected(call.tool)

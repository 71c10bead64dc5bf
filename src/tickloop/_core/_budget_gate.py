"""The scheduler's side of budgets (PROTOCOL §12): room for a call before it is queued.

A call that becomes ready (after its approval) reserves room for one tool call, in the
order calls became ready (`BudgetedRunQueue.push`, a step before the run queue's own
push); only a call that holds room enters the run queue (where §13 orders starts), and
its reservation becomes spending when it starts. A call with no room
waits for the budget hook's answer about the exhausted limit (one question at a time,
each limit asked once while it stays exhausted), or, with no hook or after a refusal,
ends `failed` with an Error Message of type `budget` naming the limit; it is not counted.
After a deferral ("defer", a stored run) it is parked: `deferred`, holding nothing, the
tick ends paused on it, and a resume starts it again (a `Decide`), reserving anew.

Pure, like the scheduler: the hook's answers come in as `AnswerBudget` events, and what a
model request spent as `SpendBudget`, so a journal that replays the events replays the
budget too, and makes the same refusals.

A replayed or forked run (docs/replay.md) gives the gate what its record decided for a
call it reuses (`recorded`): a call the record refused is refused again with the same
error, and a call the record started is counted without asking for room (its room was the
record's); only a call the record does not decide reserves room here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._budget import Budget, BudgetRequest, Ledger, call_amount
from ._call import Call
from ._run_queue import Ranks, RunQueue
from ._scheduler_io import Action, AnswerBudget, AskBudget, SpendBudget
from ._status import CallStatus

__all__ = ["BudgetedRunQueue", "RecordedRoom", "budget_error"]

# What a replayed record decided for a call id: its budget error (refused), True (it
# started), or None (the record does not decide it: it reserves room as any call).
RecordedRoom = Callable[[str], dict[str, Any] | bool | None]


def budget_error(ledger: Ledger, limit: str, what: str = "this call did not run") -> dict[str, Any]:
    """The Error Message's error for work refused for `limit` (type `budget`)."""
    return {
        "type": "budget",
        "message": f"no room left in the budget: {ledger.describe(limit)}; {what}",
        "limit": limit,
    }


class BudgetedRunQueue(RunQueue):
    """A run queue that takes only calls holding room; see the module docstring.

    A call waiting on the budget hook counts as `queued` (the tick cannot end while it
    waits) without being in a tool's queue.
    """

    __slots__ = (
        "_emit",
        "_park",
        "_settle",
        "asking",
        "counts",
        "ledger",
        "limited",
        "recorded",
        "waiting",
    )

    def __init__(
        self,
        ledger: Ledger,
        settle: Callable[[Call, CallStatus, dict[str, Any] | None], None],
        emit: Callable[[Action], None],
        ranks: Ranks | None = None,
        park: Callable[[Call], None] | None = None,
        recorded: RecordedRoom | None = None,
    ) -> None:
        super().__init__(ranks)
        self.ledger = ledger
        self.recorded = recorded  # a replayed record's decisions (module docstring)
        self._settle = settle  # the scheduler's: end a call with a status and an error
        self._emit = emit
        # The scheduler's: defer a queued call (it holds nothing; a `Decide` pushes it
        # again). Without one, a deferral refuses what waits, as a refusal does.
        self._park = park
        # Calls without room, by the limit they wait on, in the order they became ready.
        self.waiting: dict[str, list[Call]] = {}
        self.asking: str | None = None  # the limit the hook is being asked about
        # Whether any ledger of the chain limits calls: grants add only to limits there
        # are, so without one every call has room and starting it only counts it.
        self.limited = any(
            each.limits.tool_calls is not None or each.limits.per_tool for each in ledger.chain()
        )
        # Without a limit, starts are only counted, here, per tool: every ledger of the
        # chain reads this dict for its usage (`Ledger.tally`), no booking per call.
        self.counts: dict[str, int] = {}
        if not self.limited:
            ledger.tally(self.counts)

    def inputs(self) -> dict[type, Callable[[Any], None]]:
        """The scheduler inputs this queue takes (`Scheduler.handle` dispatches them)."""
        return {AnswerBudget: self.answer, SpendBudget: self.spend}

    def push(self, call: Call) -> None:
        """Reserve room for a ready call, then queue it; or park it, or refuse it."""
        fate = self.recorded(call.id) if self.recorded is not None else None
        if isinstance(fate, dict):  # refused in the record: again, and not counted
            self._settle(call, CallStatus.FAILED, fate)
            return
        if self.limited:
            parked = self.ledger.parked
            if parked:
                parked.pop(call.id, None)  # decided on a resume: it reserves again
            missing = self.ledger.reserve(call_amount(call.tool.name), force=fate is True)
            if missing is not None:
                self._no_room(call, missing)
                return
        super().push(call)

    def _no_room(self, call: Call, missing: str) -> None:
        root = self.ledger.root
        if missing in root.deferred and self._park is not None:
            self._park_call(call, missing)  # asked already: the run pauses for more
            return
        if not root.asks or missing in root.refused:
            self._settle(call, CallStatus.FAILED, budget_error(self.ledger, missing))
            return
        self.queued += 1
        self.waiting.setdefault(missing, []).append(call)
        self._ask_next()

    def start(self, limit: int | None) -> list[Call]:
        started = super().start(limit)
        if not self.limited:  # counted when it starts (PROTOCOL §12)
            counts = self.counts
            for call in started:
                name = call.tool.name
                counts[name] = counts.get(name, 0) + 1
            return started
        for call in started:
            amount = call_amount(call.tool.name)
            self.ledger.settle(amount, amount)
        return started

    def spend(self, event: SpendBudget) -> None:
        self.ledger.spend(event.amount)

    def answer(self, event: AnswerBudget) -> None:
        """The hook's answer about `event.limit`: more room, or a refusal.

        A deferral ("defer") parks what waits (see the module docstring), and the run
        pauses before its next model request until more room is given.
        """
        limit, grant = event.limit, event.grant
        if self.asking == limit:
            self.asking = self.ledger.question = None
        waiting = self.waiting.pop(limit, [])
        self.queued -= len(waiting)
        if isinstance(grant, Budget):
            self.ledger.grant(grant)
            if waiting and grant.limit(limit):  # room added where it lacked: again, in order
                for call in waiting:
                    self.push(call)
                waiting = []
        elif grant is None:
            self.ledger.root.refused.add(limit)
        else:
            self.ledger.root.deferred.add(limit)
            if self._park is not None:
                for call in waiting:
                    self._park_call(call, limit)
                waiting = []
        for call in waiting:
            self._settle(call, CallStatus.FAILED, budget_error(self.ledger, limit))
        self._ask_next()

    def _park_call(self, call: Call, limit: str) -> None:
        """Wait, deferred, for more room for `limit`: a resume starts the call again."""
        assert self._park is not None
        self.ledger.parked[call.id] = limit
        self._park(call)

    def _ask_next(self) -> None:
        if self.asking is not None:
            return
        for limit, calls in self.waiting.items():
            if calls:
                self.asking = limit
                root = self.ledger.root
                request = BudgetRequest(limit, 1, root.usage, root.limits, root.run_id)
                self.ledger.question = request
                self._emit(AskBudget(request))
                return

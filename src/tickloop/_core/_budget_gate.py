"""The scheduler's side of budgets (PROTOCOL §12): room for a call before it is queued.

A call that becomes ready (after its approval) reserves room for one tool call, in the
order calls became ready (`BudgetedRunQueue.push`, a step before the run queue's own
push); only a call that holds room enters the run queue (where §13 orders starts), and
its reservation becomes spending when it starts. What becomes of a call with no room
is the limit's life (`_budget_life`, its table): it waits for the budget hook's answer
(one question at a time), or is refused (`failed`, an Error Message of type `budget`
naming the limit, not counted), or is parked (`deferred`, holding nothing; the tick ends
paused on it, and a resume decides it again, reserving anew). This queue carries those
verdicts out on the calls.

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
from functools import partial
from typing import Any

from ._budget import Budget, BudgetRequest, Ledger, call_amount
from ._budget_life import NoRoom
from ._call import Call
from ._run_queue import Ranks, RunQueue
from ._scheduler_io import Action, AnswerBudget, AskBudget, SpendBudget
from ._status import CallStatus

__all__ = ["BudgetedRunQueue", "RecordedRoom", "budget_error", "budget_inputs", "limits_calls"]

# What a replayed record decided for a call id: its budget error (refused), True (it
# started), or None (the record does not decide it: it reserves room as any call).
RecordedRoom = Callable[[str], dict[str, Any] | bool | None]


def limits_calls(ledger: Ledger) -> bool:
    """Whether a ledger of the chain limits tool calls: grants add only to limits there
    are, so without one every call has room, and only the run's usage counts it."""
    return any(
        each.limits.tool_calls is not None or each.limits.per_tool for each in ledger.chain()
    )


def spend(ledger: Ledger, event: SpendBudget) -> None:
    ledger.spend(event.amount)


def answer_requests(ledger: Ledger, event: AnswerBudget) -> None:
    """The hook's answer about a model request's limit (no call waits on one here)."""
    ledger.life.answer(event.limit, event.grant, can_park=False)
    if isinstance(event.grant, Budget):
        ledger.grant(event.grant)


def budget_inputs(ledger: Ledger) -> dict[type, Callable[[Any], None]]:
    """The scheduler inputs of a run whose calls no limit holds (no `BudgetedRunQueue`):
    what its model requests spent, and the hook's answers about their limits."""
    return {AnswerBudget: partial(answer_requests, ledger), SpendBudget: partial(spend, ledger)}


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
        "_again",
        "_emit",
        "_park",
        "_settle",
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
        *,
        limited: bool = True,
    ) -> None:
        super().__init__(ranks)
        self.ledger = ledger
        self.recorded = recorded  # a replayed record's decisions (module docstring)
        # Whether the chain limits calls; a run whose chain limits none has a gate only
        # to follow a record's refusals, and counts its calls from their records.
        self.limited = limited
        self._settle = settle  # the scheduler's: end a call with a status and an error
        self._emit = emit
        # The scheduler's: defer a queued call (it holds nothing; a `Decide` pushes it
        # again). Without one, a deferral refuses what waits, as a refusal does.
        self._park = park
        # Calls without room, by the limit they wait on, in the order they became ready.
        self.waiting: dict[str, list[Call]] = {}
        # Calls that started, then were parked by their child run (a sub-agent's that
        # paused, PROTOCOL §11): counted at their first start, they start again without
        # room or a count (an agent call counts once, however often it resumes).
        self._again: set[str] = set()

    def inputs(self) -> dict[type, Callable[[Any], None]]:
        """The scheduler inputs this queue takes (`Scheduler.handle` dispatches them)."""
        return {AnswerBudget: self.answer, SpendBudget: partial(spend, self.ledger)}

    def push(self, call: Call) -> None:
        """Reserve room for a ready call, then queue it; or park it, or refuse it."""
        fate = self.recorded(call.id) if self.recorded is not None else None
        if isinstance(fate, dict):  # refused in the record: again, and not counted
            self._settle(call, CallStatus.FAILED, fate)
            return
        if self.limited and call.id not in self._again:
            life = self.ledger.life
            if life.has_parked():
                life.unpark(call.id)  # decided on a resume: it reserves again
            missing = self.ledger.reserve(call_amount(call.tool.name), force=fate is True)
            if missing is not None:
                self._no_room(call, missing)
                return
        super().push(call)

    def _no_room(self, call: Call, missing: str) -> None:
        verdict = self.ledger.life.no_room(missing, can_park=self._park is not None)
        if verdict is NoRoom.PARK:
            self._park_call(call, missing)  # asked already: the run pauses for more
        elif verdict is NoRoom.REFUSE:
            self._settle(call, CallStatus.FAILED, budget_error(self.ledger, missing))
        else:
            self.queued += 1
            self.waiting.setdefault(missing, []).append(call)
            self._ask_next()

    def start_at_once(self, call: Call, limit: int | None) -> bool:
        return False  # room is reserved (`push`) and counted (`start`) first

    def park(self, call: Call) -> None:
        super().park(call)
        self._again.add(call.id)

    def start(self, limit: int | None) -> list[Call]:
        started = super().start(limit)
        again = self._again
        if again:
            self._count([call for call in started if call.id not in again])
            again.difference_update(call.id for call in started)
        else:
            self._count(started)
        return started

    def _count(self, started: list[Call]) -> None:
        if not self.limited:
            return  # counted from the records (`Ledger.tally`)
        for call in started:  # counted when it starts (PROTOCOL §12)
            amount = call_amount(call.tool.name)
            self.ledger.settle(amount, amount)

    def answer(self, event: AnswerBudget) -> None:
        """The hook's answer about `event.limit`: more room, a refusal or a deferral;
        what waited on it goes on, is refused or is parked (`RunLimits.answer`)."""
        limit, grant = event.limit, event.grant
        verdict = self.ledger.life.answer(limit, grant, can_park=self._park is not None)
        waiting = self.waiting.pop(limit, [])
        self.queued -= len(waiting)
        if isinstance(grant, Budget):
            self.ledger.grant(grant)
            if waiting and not grant.limit(limit):  # no room added where it lacked
                verdict = NoRoom.REFUSE
        for call in waiting:
            if verdict is None:
                self.push(call)  # room added where it lacked: again, in order
            elif verdict is NoRoom.PARK:
                self._park_call(call, limit)
            else:
                self._settle(call, CallStatus.FAILED, budget_error(self.ledger, limit))
        self._ask_next()

    def _park_call(self, call: Call, limit: str) -> None:
        """Wait, deferred, for more room for `limit`: a resume starts the call again."""
        assert self._park is not None
        self.ledger.life.park(call.id, limit)
        self._park(call)

    def _ask_next(self) -> None:
        life = self.ledger.life
        if life.asking() is not None:
            return
        for limit, calls in self.waiting.items():
            if calls:
                root = self.ledger.root
                request = BudgetRequest(limit, 1, root.usage, root.limits, life.tree.run_id)
                life.ask(request)
                self._emit(AskBudget(request))
                return

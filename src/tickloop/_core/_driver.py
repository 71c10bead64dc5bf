"""What every driver of the scheduler does the same way, whatever it runs on.

The `Scheduler` decides; a driver feeds it events and carries out its actions. The trio
engine (`_engine.Engine`) and the Temporal workflow (`tickloop.temporal`) differ only in
how they start a call, ask about one and wait for the end of a tick; everything else —
the event constructors, the journal hook, handing every action to the observer, noting
the tick's end — is here once. Nothing here awaits, so it is as sans-IO as the scheduler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .._errors import ConfigurationError
from ._budget import BudgetRequest, Ledger
from ._budget_gate import RecordedRoom
from ._decisions import ApproveHook, Deny, PendingCall, Plan
from ._log import ContextLog
from ._observer import wants
from ._ranks import SCHEDULES, Measured, Schedule
from ._scheduler import CallRecord, Scheduler
from ._scheduler_io import (
    Action,
    AnswerBudget,
    AskApproval,
    AskBudget,
    AskReview,
    CloseGate,
    CloseStream,
    CloseText,
    Decide,
    Event,
    Flush,
    NoteTickEnded,
    OpenGate,
    OpenTick,
    ReceiveCall,
    ReportFault,
    ScreenCall,
    Screened,
    SpendBudget,
    StartCall,
)
from ._tools import ToolSet

__all__ = ["Journal", "SchedulerDriver", "check_configuration", "check_schedule"]


def check_configuration(
    tools: ToolSet,
    approve: ApproveHook | None,
    max_concurrency: int | None,
    schedule: str = "critical_path",
) -> None:
    """Configuration errors are raised before anything runs (PROTOCOL §6)."""
    check_schedule(schedule)
    if approve is None and tools.may_require_approval:
        names = ", ".join(repr(name) for name in tools.may_require_approval)
        raise ConfigurationError(
            f"tool(s) {names} may require approval, but no approval hook was given "
            "(pass approve=...)"
        )
    if approve is not None and not callable(approve):
        raise ConfigurationError(f"approve must be callable, not {approve!r}")
    if max_concurrency is not None and (
        isinstance(max_concurrency, bool)
        or not isinstance(max_concurrency, int)
        or max_concurrency < 1
    ):
        raise ConfigurationError(
            f"max_concurrency must be a positive whole number or None, not {max_concurrency!r}"
        )


def check_schedule(schedule: Any) -> None:
    """`schedule=` names one of the orders of starts under a limit (PROTOCOL §13)."""
    if not isinstance(schedule, str) or schedule not in SCHEDULES:
        raise ConfigurationError(
            f"schedule must be one of {', '.join(map(repr, SCHEDULES))}, not {schedule!r}"
        )


class Journal(Protocol):
    """Where a durable run records what the engine does (see `_durable.DurableRun`).

    `record` is called for every event, after the scheduler and before any of its
    actions is carried out; `commit` before the engine acts on the world (a handler runs,
    the hook is asked), so nothing acts on an event that is not stored yet.
    """

    def record(self, event: Event, actions: list[Action]) -> None: ...

    def commit(self, call_id: str | None = None) -> None: ...


class SchedulerDriver:
    """Feeds one run's scheduler and dispatches its actions; a subclass says how to act.

    A subclass implements `_start` (run an explicit call's handler, then feed
    `FinishCall`), `_request_approval` (ask about a call, then feed `Decide`) and
    `_tick_ended` (wake whoever waits for the tick). Any other action only goes to the
    observer, so a scheduler that grows a new action needs no change here unless the
    driver must act on it. Events are fed one at a time and never from inside
    `Scheduler.handle`, so the scheduler is never re-entered.
    """

    def __init__(
        self,
        tools: ToolSet,
        log: ContextLog,
        *,
        approve: ApproveHook | None = None,
        review: bool = False,
        max_concurrency: int | None = None,
        on_action: Callable[[Action], None] | None = None,
        clock: Callable[[], str],
        journal: Journal | None = None,
        run_id: str | None = None,
        budget: Ledger | None = None,
        on_budget: Callable[[BudgetRequest], Any] | None = None,
        schedule: str = "critical_path",
        measured: Measured | None = None,
        recorded: RecordedRoom | None = None,
        screens: Callable[[str], bool] | None = None,
    ) -> None:
        check_configuration(tools, approve, max_concurrency, schedule)
        if on_budget is not None and not callable(on_budget):
            raise ConfigurationError(f"on_budget must be callable, not {on_budget!r}")
        self.tools = tools
        self.log = log
        self.run_id = run_id
        # With no observer and no journal, nobody reads the scheduler's facts (`Note...`):
        # it is spared making them, several per call. An observer may say it has no use
        # for them (an `ActionObserver`: the run's events without listeners).
        wants_notes, wants_messages = wants(on_action)
        self.scheduler = Scheduler(
            tools,
            log,
            max_concurrency=max_concurrency,
            run_id=run_id,
            notes=journal is not None or wants_notes,
            # A journal needs no `NoteMessage` (every write is at a path its call
            # declared); nor does an observer that says so (`wants_messages`).
            messages=wants_messages,
            arrows=journal is not None,  # the store's rows draw whom each call waited on
            budget=budget,
            # Means measured in this process rank calls (PROTOCOL §13), except in a run
            # that is replayed: a resume must rank as the run did, so declared or 1.
            schedule=Schedule(schedule, measured if journal is None else None),
            # A replayed or forked run: the budget decisions its record made (§12).
            recorded=recorded,
            review=review,  # PROTOCOL §15: gated calls wait for the plan review
            screens=screens,  # which tools' calls pass tool guardrails (PROTOCOL §15)
        )
        self.budget = budget  # the run's ledger (PROTOCOL §12), shared with its tree
        if budget is not None:
            # The hook answers for the tree. A stored run asks even without one (its
            # driver refuses, journaled): a resume's replay makes the same refusals, and
            # parks what was parked, whatever hook the resuming process has (§12).
            hook = on_budget is not None or journal is not None
            budget.life.tree.answered_by(run_id, hook=hook)
        self._on_budget = on_budget
        self._approve = approve
        self._on_action = on_action
        # Durable runs: commits each event (with what it changed) before its actions run.
        self._journal = journal
        self._date = clock
        self._outcome: NoteTickEnded | None = None

    @property
    def records(self) -> dict[str, CallRecord]:
        return self.scheduler.records

    # -- the tick, as the outer loop sees it -----------------------------------------------

    def open_tick(self, iteration: int, *, code: bool = False, found: tuple[str, ...] = ()) -> None:
        """Open the tick of a request; `code`: a code plan's (PROTOCOL §14); `found`:
        the deferred tools its menu shows (tool search)."""
        self._reset_tick()
        self.feed(OpenTick(iteration, self._date(), code=code, found=found))

    def date(self) -> str:
        """The driver's clock, as every event carries it."""
        return self._date()

    def receive(self, call: Any, date: str | None = None) -> None:
        """Hand one streamed call to the tick; it starts at once if it is ready.

        The calls of one chunk arrive together: a caller handing many may read `date()`
        once and give it to each, instead of a clock read per call.
        """
        self.feed(ReceiveCall(call, self._date() if date is None else date))

    def report(self, error: dict[str, Any], call: Any = None) -> None:
        """A structural fault of the iteration (bad solution, bad output) for the errors."""
        self.feed(ReportFault(error, call, self._date()))

    def close_stream(self) -> None:
        self.feed(CloseStream(self._date()))

    def close_text(self, program: str, sites: dict[str, str]) -> None:
        """A code plan's program is written (its calls go on): the plan review is asked
        now, not once the program has run (PROTOCOL §15)."""
        self.feed(CloseText(program, sites, self._date()))

    def flush_errors(self) -> None:
        """Append the faults reported since the tick ended (an output that did not
        resolve, PROTOCOL §8), so the next request shows them."""
        self.feed(Flush(self._date()))

    def decide(self, call_id: str, decision: Any) -> None:
        """A decision from outside the hook (a deferred call)."""
        self.feed(Decide(call_id, decision, self._date()))

    def screened(self, call_id: str, denial: Deny | None) -> None:
        """The tool guardrails' answer about a call: a `Deny`, or None (all passed)."""
        self.feed(Screened(call_id, denial, self._date()))

    def close_gate(self) -> None:
        """Input guardrails are pending (PROTOCOL §15): calls with effects wait."""
        self.feed(CloseGate(self._date()))

    def open_gate(self) -> None:
        """Every input guardrail passed: the calls held at the gate go on."""
        self.feed(OpenGate(self._date()))

    def answer_budget(self, limit: str, grant: Any) -> None:
        """The budget hook's answer about `limit`: a `Budget`, None or "defer"."""
        self.feed(AnswerBudget(limit, grant, self._date()))

    def spend(self, amount: dict[str, float], *, commit: bool = False) -> None:
        """Room spent outside the scheduler (a model request), journaled as an input;
        `commit`: stored before the caller acts (sends the request)."""
        self.feed(SpendBudget(amount, self._date()))
        if commit and self._journal is not None:
            self._journal.commit()

    def expect_tick(self) -> None:
        """Wait for the end of a tick opened earlier (a resume, a deferred call decided)."""
        self._reset_tick()

    # -- events in, actions out ------------------------------------------------------------

    def feed(self, event: Event) -> None:
        actions = self.scheduler.handle(event)
        if self._journal is not None:
            self._journal.record(event, actions)
        on_action = self._on_action
        for action in actions:
            if on_action is not None:
                on_action(action)
            # Exact types (no action type is subclassed): cheaper than isinstance.
            if type(action) is StartCall:
                self._start(action)
            elif type(action) is AskApproval:
                self._request_approval(action.pending)
            elif type(action) is AskReview:
                self._request_review(action.plan)
            elif type(action) is ScreenCall:
                self._request_screen(action.pending)
            elif type(action) is AskBudget:
                self._request_budget(action.request)
            elif type(action) is NoteTickEnded:
                self._outcome = action
                self._tick_ended(action)

    # -- what a driver does ----------------------------------------------------------------

    def _reset_tick(self) -> None:
        self._outcome = None

    def _start(self, action: StartCall) -> None:
        raise NotImplementedError

    def _request_approval(self, pending: PendingCall) -> None:
        raise NotImplementedError

    def _tick_ended(self, action: NoteTickEnded) -> None:
        raise NotImplementedError

    def _request_review(self, plan: Plan) -> None:
        raise NotImplementedError

    def _request_screen(self, pending: PendingCall) -> None:
        raise NotImplementedError(f"{type(self).__name__} runs no tool guardrails")

    def _request_budget(self, request: BudgetRequest) -> None:
        raise NotImplementedError

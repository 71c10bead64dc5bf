"""The trio driver of the scheduler: tasks, threads, timeouts, the approval hook.

The `Scheduler` decides; this layer only carries its actions out and turns what happens
in the world (a handler returned, a hook answered) back into events. Events are fed one at
a time and never from inside `Scheduler.handle`, so the scheduler is never re-entered.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
import sys
import time
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Protocol

import pydantic
import trio

from .._core._budget import BudgetRequest, Ledger
from .._core._budget_gate import RecordedRoom
from .._core._decisions import ApproveHook, Deny, PendingCall, Plan, ReviewHook
from .._core._driver import Journal, SchedulerDriver, check_configuration
from .._core._guardrails import (
    Guardrail,
    GuardrailContext,
    InputGuardrail,
    Pass,
    Reject,
    ReplaceResult,
    ResultGuardrail,
    ToolGuardrail,
    Trip,
    guardrail_name,
    verdict_to_dict,
)
from .._core._log import (
    MAX_VALUE_DEPTH,
    SURROGATE_FAULT,
    ContextLog,
    copy_json,
    has_surrogate,
)
from .._core._media import MediaKeeper, MemoryMedia, holds_media, keep_media
from .._core._paths import RunPath
from .._core._scheduler_io import (
    Action,
    Decide,
    FinishCall,
    Flush,
    NoteTickEnded,
    ParkCall,
    Review,
    StartCall,
)
from .._core._status import FINAL_STATUSES, CallStatus
from .._core._tools import Branch, CallContext, Tool, ToolSet
from .._errors import GuardrailTripped, describe_error, is_call_error, unwrap_single
from ._asking import ask, passing_here, review
from ._budgeting import BudgetHook, ask_budget
from ._durations import RunDurations
from ._guarding import check
from ._host import host_loop, run_on_host

__all__ = [
    "PARKED",
    "CallRefused",
    "Engine",
    "Journal",
    "Outcome",
    "RunClock",
    "check_configuration",
    "run_handler",
    "utc_now",
]


class RunClock(Protocol):
    """What the engine needs of a run's wall_time clock (PROTOCOL §12; the agent's
    `WallClock` is one): the deadline at which running calls end as timed out, and a
    clock that stops while the run waits only for people (`pause`, `go_on`)."""

    @property
    def deadline(self) -> float: ...

    def pause(self) -> None: ...

    def go_on(self) -> None: ...


class _Parked:
    def __repr__(self) -> str:
        return "PARKED"


PARKED: Any = _Parked()
"""What a handler returns when its call must wait for decisions made elsewhere (a
sub-agent whose child run paused, PROTOCOL §11): the engine parks the call (`ParkCall`)
instead of finishing it, and it runs again once decided."""


class CallRefused(Exception):
    """Raised by a handler that finds its call structurally wrong before it does anything
    (a sub-agent call deeper than `max_depth`): the call ends `invalid` with this
    message as a structural error, not `failed`."""


def utc_now(_clock: Callable[[], int] = time.time_ns) -> str:
    """ISO-8601 UTC with a `Z` and microseconds, the `_date` of every engine write.

    From integer nanoseconds (no float rounding). Only the whole second's text is kept,
    by `functools.lru_cache` (which locks), so any number of threads may date at once.
    """
    seconds, nanoseconds = divmod(_clock(), 1_000_000_000)
    # `zfill` rather than a `:06d` format spec, whose machinery costs more, once a call.
    return f"{_utc_second(seconds)}.{str(nanoseconds // 1000).zfill(6)}Z"


@functools.lru_cache(maxsize=2)
def _utc_second(seconds: int) -> str:
    # Every call finishing within one second is dated in it: the second's text is made
    # once (`gmtime` and `strftime` take microseconds; docs/decisions.md "Dates").
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


Outcome = tuple[Any, str | None, dict[str, Any] | None]
"""How a call ended, as `FinishCall` takes it: (value, branch, error)."""


class Engine(SchedulerDriver):
    """Runs ticks of one run on trio.

    Use inside `async with engine.session():` — the session's nursery owns every call's
    task, so leaving it waits for fire-and-forget calls too and the run never ends while
    one still runs, then appends their late errors (`Flush`). That is on a normal exit
    only: an exception out of the block cancels the calls still running, so a run that
    stops on its own leaves the block first and raises after it (`OuterLoop.run`).
    """

    def __init__(
        self,
        tools: ToolSet,
        log: ContextLog,
        *,
        approve: ApproveHook | None = None,
        review_plan: ReviewHook | None = None,
        max_concurrency: int | None = None,
        on_action: Callable[[Action], None] | None = None,
        clock: Callable[[], str] = utc_now,
        journal: Journal | None = None,
        run_id: str | None = None,
        answer: Callable[[str, dict[str, Any]], Outcome | None] | None = None,
        scope: object = None,
        budget: Ledger | None = None,
        on_budget: BudgetHook | None = None,
        schedule: str = "critical_path",
        path: RunPath = RunPath.ROOT,
        recorded_room: RecordedRoom | None = None,
        budget_questions: trio.Lock | None = None,
        guardrails: tuple[Guardrail, ...] = (),
        on_verdict: Callable[[str | None, str, str, dict[str, Any]], None] | None = None,
        recorded_screens: Callable[[str], Pass | Deny | None] | None = None,
        media: MediaKeeper | None = None,
    ) -> None:
        # Where the bytes of images and audio the run's tools return are kept (the
        # store's media table, else memory); results hold `$media` references.
        self.media: MediaKeeper = media if media is not None else MemoryMedia()
        # A replayed or forked run's recorded tool-guardrail verdicts: reused, not asked.
        self._recorded_screens = recorded_screens
        # The result guardrails of this run's calls (PROTOCOL §15: a child's are the
        # root's and its own, in that order); other kinds are the loop's.
        self._result_guardrails = tuple(g for g in guardrails if isinstance(g, ResultGuardrail))
        self._tool_guardrails = tuple(g for g in guardrails if isinstance(g, ToolGuardrail))
        # Told every verdict (call id or None, guardrail, kind, verdict as JSON): events.
        self._on_verdict = on_verdict
        # The trip that stopped the run (PROTOCOL §15), raised when the session ends.
        self.tripped: GuardrailTripped | None = None
        # A guardrail's metered one-shot request to the run's model (`GuardrailContext.
        # ask_model`): the loop's, which owns the model and the budget; None: none.
        self.ask_model: Callable[[str], Awaitable[str]] | None = None
        # A replay's recorded trips of tool and result guardrails, by call id: (guardrail,
        # reason). The call trips the run again where it did, asking no guardrail.
        self.replayed_trips: dict[str, tuple[str, str]] = {}
        # Handed to every call's `CallContext.scope`: what a sub-agent's call needs of
        # the run it belongs to (`_agent._tree.RunPlace`); opaque to the engine.
        self.scope = scope
        # The run's place in its tree (PROTOCOL §11): a call's context names it by its
        # full path, unique in the tree.
        self.path = path
        # How long each tool's calls take, measured here: ranks under a limit read the
        # means (PROTOCOL §13); the process keeps them when the session ends.
        self._durations = RunDurations()
        super().__init__(
            tools,
            log,
            approve=approve,
            review=review_plan is not None,
            max_concurrency=max_concurrency,
            on_action=on_action,
            clock=clock,
            journal=journal,
            run_id=run_id,
            budget=budget,
            on_budget=on_budget,
            schedule=schedule,
            measured=self._durations,
            recorded=recorded_room,  # a replayed run's budget decisions, with `answer`
            screens=self._screens if self._tool_guardrails else None,
        )
        self._nursery: trio.Nursery | None = None
        self._review_plan = review_plan  # PROTOCOL §15, asked when a stream closes
        self._clock: trio.abc.Clock | None = None  # the run's, read twice per call
        # A recorded outcome for a call id, given in place of running its handler (a
        # replayed or forked run, docs/replay.md); None runs the handler.
        self._answer = answer
        self._tick_done: trio.Event | None = None
        self._call_ended: trio.Event | None = None  # set as a call ends (`wait_until`)
        # The budget hook is asked one question at a time, the scheduler's (a call's limit)
        # and the loop's (a model request's) alike: the lock of the whole tree, when the
        # run is one of a tree's (§12), else its own.
        self.budget_questions = budget_questions if budget_questions is not None else trio.Lock()
        # The run's wall_time clock (PROTOCOL §12), when it has a limit (`keep_time`):
        # at its deadline running calls end as timed out, and time the run waits only
        # for people is not counted. None: no limit, and no cancel scope per call.
        self.wall_clock: RunClock | None = None
        self._questions = 0  # questions to a hook (approval, budget) not answered yet
        self._abandoned = False  # cancelled for good (`abandon`): nothing starts any more
        # Worker threads of sync handlers: as many as calls may run (PROTOCOL §2: a
        # max_concurrency of None means no limit, for sync tools too).
        self._threads = trio.CapacityLimiter(
            math.inf if max_concurrency is None else max_concurrency
        )

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Engine]:
        try:
            with unwrap_single():
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery  # stays open while calls run: they may start others
                    self._clock = trio.lowlevel.current_clock()
                    yield self
        finally:
            self._nursery = None
            self._durations.merge()
        if self.tripped is not None:
            raise self.tripped
        if nursery.cancel_scope.cancel_called:
            # The engine never cancels this nursery itself: a tool or hook did (through
            # trio's internals), which cut the tick short. Reporting the tick as finished
            # would leave calls `running` in a result, or a durable run stored as done.
            unfinished = [
                call_id
                for call_id, record in self.records.items()
                if record.status not in FINAL_STATUSES and record.status != CallStatus.DEFERRED
            ]
            raise RuntimeError(
                "a tool or hook cancelled the engine's own calls; the tick did not finish"
                + (f" (unfinished calls: {', '.join(unfinished[:10])})" if unfinished else "")
            )
        # Every task, fire-and-forget ones included, has finished: report their late errors.
        self.feed(Flush(self._date()))

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Until `condition()` holds, checked as calls end (fire-and-forget ones too);
        what `LoopDriver.wait_until` is for a workflow."""
        while not condition():
            if self._call_ended is None:  # one event for every waiter
                self._call_ended = trio.Event()
            await self._call_ended.wait()

    async def wait_tick(self) -> NoteTickEnded:
        assert self._tick_done is not None, "open_tick first"
        await self._tick_done.wait()
        assert self._outcome is not None
        return self._outcome

    # -- resuming a durable run (the scheduler was rebuilt by replaying its events) --------

    def restart(self, action: StartCall) -> None:
        """Run again a call the scheduler counts as running (idempotent, cut by a crash)."""
        self._start(action)

    def ask(self, pending: PendingCall) -> None:
        """Ask the hook again about a call whose question a crash left unanswered."""
        self._spawn(self._ask, pending)

    # -- carrying out the scheduler's actions ----------------------------------------------

    def _reset_tick(self) -> None:
        super()._reset_tick()
        self._tick_done = trio.Event()

    def _tick_ended(self, action: NoteTickEnded) -> None:
        if self._tick_done is not None:
            self._tick_done.set()

    def _request_approval(self, pending: PendingCall) -> None:
        self._spawn(self._ask, pending)

    def _request_review(self, plan: Plan) -> None:
        self._spawn(self._review, plan)

    def ask_review(self, plan: Plan) -> None:
        """Ask the review again about a plan whose review a crash left unanswered."""
        self._spawn(self._review, plan)

    def check_input(
        self, guardrails: tuple[InputGuardrail, ...], value: Any, *, close: bool = True
    ) -> trio.Event:
        """Ask the input guardrails about the run's input, concurrently (PROTOCOL §15).

        The gate closes now (`close=False`: a resumed run's is closed already) and opens
        when every one has passed; the event returned is set when the blocking ones have,
        which the first request waits for. One that raises trips (fail closed); a trip
        stops the run.
        """
        if close:
            self.close_gate()
        if not guardrails:
            self.open_gate()
        blocking_passed = trio.Event()
        left = [len(guardrails), sum(1 for g in guardrails if g.blocking)]
        if not left[1]:
            blocking_passed.set()

        async def one(guardrail: InputGuardrail) -> None:
            name = guardrail_name(guardrail)
            verdict = await check(
                guardrail.fn, (value, self.guardrail_context()), (Pass, Trip), Trip
            )
            self._tell_verdict(None, name, "input", verdict)
            if isinstance(verdict, Trip):
                self.trip(name, verdict)
                return
            left[0] -= 1
            if guardrail.blocking:
                left[1] -= 1
                if not left[1]:
                    blocking_passed.set()
            if not left[0]:
                self.open_gate()

        for guardrail in guardrails:
            self._spawn(one, guardrail)
        return blocking_passed

    def trip_again(self, name: str, reason: str, after: frozenset[str]) -> None:
        """A replayed run's recorded input trip (PROTOCOL §15), asking no guardrail: the
        gate closes now, and the trip stops the run once the calls that had finished
        before it in the record (`after`) have finished here."""
        self.close_gate()
        records = self.scheduler.records

        def caught_up() -> bool:
            if all(
                call_id in records and records[call_id].status in FINAL_STATUSES
                for call_id in after
            ):
                return True
            # A replay that went another way: nothing more will finish before the gate.
            scheduler = self.scheduler
            return not scheduler.stream_open and not any(
                record.status == CallStatus.RUNNING for record in records.values()
            )

        async def when_caught_up() -> None:
            while not caught_up():  # looked at again as calls end, and now and then
                with trio.move_on_after(0.05):  # (a stream closing ends no call)
                    await self.wait_until(caught_up)
            self.trip(name, Trip(reason))

        self._spawn(when_caught_up)

    @property
    def gate_closed(self) -> bool:
        """Whether calls with effects wait for the input guardrails (a resumed run's
        journal may have left the gate closed)."""
        return self.scheduler.gate_closed

    def _screens(self, tool: str) -> bool:
        return any(guardrail.applies_to(tool) for guardrail in self._tool_guardrails)

    def _request_screen(self, pending: PendingCall) -> None:
        self._spawn(self._screen, pending)

    def screen_again(self, pending: PendingCall) -> None:
        """Ask the tool guardrails again about a call a crash left unanswered."""
        self._spawn(self._screen, pending)

    async def _screen(self, pending: PendingCall) -> None:
        """A ready call through its tool guardrails, in order (PROTOCOL §15); calls are
        screened concurrently. The verdict is journaled (`Screened`) before it is acted on."""
        if pending.id in self.replayed_trips:
            self._trip_again(pending.id)
            return
        recorded = self._recorded_screens(pending.id) if self._recorded_screens else None
        if recorded is not None:
            self.screened(pending.id, recorded if isinstance(recorded, Deny) else None)
            return
        if self._journal is not None:
            self._journal.commit(pending.id)  # stored before a guardrail is asked
        for guardrail in self._tool_guardrails:
            if not guardrail.applies_to(pending.tool):
                continue
            name = guardrail_name(guardrail)
            verdict = await check(
                guardrail.fn,
                (pending, self.guardrail_context()),
                (Pass, Deny, Trip),
                Deny,  # a tool guardrail that raises denies the call (fail closed)
            )
            self._tell_verdict(pending.id, name, "tool", verdict)
            if isinstance(verdict, Trip):
                self.trip(name, verdict)
                return
            if isinstance(verdict, Deny):
                self.screened(pending.id, Deny(f"{name}: {verdict.reason}"))
                return
        self.screened(pending.id, None)

    def keep_time(self, clock: RunClock | None) -> None:
        """The run's wall_time clock, or None for a run without that limit."""
        self.wall_clock = clock

    def ask_budget_again(self) -> None:
        """Ask the budget hook again a question a crash (or a stop) left unanswered."""
        question = self.budget.life.question if self.budget is not None else None
        if isinstance(question, BudgetRequest):  # the gate's (`BudgetedRunQueue`)
            self._spawn(self._ask_budget, question)

    def _request_budget(self, request: BudgetRequest) -> None:
        self._spawn(self._ask_budget, request)

    async def _ask_budget(self, request: BudgetRequest) -> None:
        if self._on_budget is None:  # a stored run without a hook: refused (journaled)
            self.answer_budget(request.limit, None)
            return
        if self._journal is not None:
            self._journal.commit()  # what led to the question is stored before it is asked
        async with self.budget_questions:
            with self.question_open():
                durable = self._journal is not None
                answer = await ask_budget(self._on_budget, request, durable=durable)
        self.answer_budget(request.limit, answer)

    # -- wall time waiting only for people (PROTOCOL §12, docs/decisions.md) ------------

    @contextmanager
    def question_open(self) -> Iterator[None]:
        """A hook (approval or budget) is asked meanwhile: a person may be answering."""
        self._questions += 1
        self._people_or_not()
        try:
            yield
        finally:
            self._questions -= 1
            self._people_or_not()

    def _people_or_not(self) -> None:
        """Stop the run's clock while it waits only for people: a question is open, no
        call runs and no model request streams; start it again when that ends."""
        clock = self.wall_clock
        if clock is None:
            return
        scheduler = self.scheduler
        if self._questions and not scheduler.stream_open and not scheduler.busy:
            clock.pause()
        else:
            clock.go_on()

    def close_stream(self) -> None:
        super().close_stream()
        if self.wall_clock is not None:
            self._people_or_not()

    def abandon(self, error: dict[str, Any]) -> None:
        """End every running call `failed` with `error`, after the session was cancelled
        for good (a child run whose agent call timed out, PROTOCOL §11): journaled and told
        like any end, so no call stays `running` forever. Nothing starts any more: a call
        the ends let start is ended the same way."""
        self._abandoned = True
        while True:
            running = [
                call_id
                for call_id, record in self.records.items()
                if record.status == CallStatus.RUNNING
            ]
            if not running:
                return
            for call_id in running:
                self.feed(FinishCall(call_id, None, None, dict(error), self._date()))

    def _spawn(self, function: Callable[..., Any], *args: Any) -> None:
        if self._abandoned:
            return
        if self._nursery is None:
            raise RuntimeError("the engine runs calls only inside `async with engine.session()`")
        self._nursery.start_soon(function, *args)

    def _start(self, action: StartCall) -> None:
        if self._abandoned:
            return
        nursery, clock = self._nursery, self._clock
        if nursery is None or clock is None:
            raise RuntimeError("the engine runs calls only inside `async with engine.session()`")
        record = self.scheduler.records[action.id]
        if record.started is None or not self.tools[action.tool].resumes:
            record.started = clock.current_time()  # one that resumes keeps its first start
        if self.wall_clock is not None:
            self.wall_clock.go_on()  # a call runs: the run does not wait only for people
        # Named as trio would name it, without trio working the name out for every call.
        nursery.start_soon(self._run, action, name=_RUN_TASK_NAME)

    async def _ask(self, pending: PendingCall) -> None:
        assert self._approve is not None  # configuration was checked
        if self._journal is not None:
            self._journal.commit(pending.id)  # stored before the question is asked
        with self.question_open():
            decision = await ask(self._approve, pending)
        self.feed(Decide(pending.id, decision, self._date()))

    async def _review(self, plan: Plan) -> None:
        assert self._review_plan is not None  # the scheduler asks only when one is given
        if self._journal is not None:
            self._journal.commit()  # stored before the question is asked
        with self.question_open():
            decisions = await review(self._review_plan, plan)
        self.feed(Review(decisions, self._date()))

    async def _run(self, action: StartCall) -> None:
        if self._journal is not None:
            self._journal.commit(action.id)  # the call's start is stored before it can act
        recorded = None if self._answer is None else self._answer(action.id, action.params)
        if recorded is not None:
            value, branch, error = recorded
        else:
            tool = self.tools[action.tool]
            context = (
                CallContext(
                    self.path.full(action.id),
                    tool.name,
                    action.call,
                    self.log.view,
                    self.run_id,
                    self.scope,
                    self.path.parts,
                )
                if tool.takes_context
                else None  # most handlers take none: not made for every call
            )
            clock = self.wall_clock
            if clock is None:
                value, branch, error = await run_handler(
                    tool, action.params, context, self._threads, self.media
                )
            else:
                with trio.move_on_at(clock.deadline) as wall:
                    value, branch, error = await run_handler(
                        tool, action.params, context, self._threads, self.media
                    )
                if wall.cancelled_caught:
                    value, branch, error = None, None, dict(WALL_TIME_OUT)
        assert self._clock is not None  # set with the nursery this task runs in
        if action.id in self.replayed_trips:
            self._trip_again(action.id)  # its result guardrail tripped here (a replay)
            return
        if value is PARKED and error is None:  # a sub-agent's child run paused
            self.feed(ParkCall(action.id, self._date()))
            return
        if recorded is None and error is None and self._result_guardrails:
            # Screened before it is journaled, emitted or written (PROTOCOL §15); a
            # replayed or resumed outcome was screened when it was first recorded.
            value, error = await self._screen_result(action, value)
            if self.tripped is not None:
                return
        if self._abandoned:
            return  # ended already (`abandon`), by a trip this task did not wait to see
        record = self.scheduler.records[action.id]
        record.finished = finished = self._clock.current_time()
        if record.started is not None:
            self._durations.add(action.tool, finished - record.started)
        self.feed(FinishCall(action.id, value, branch, error, self._date()))
        if self._call_ended is not None:
            ended, self._call_ended = self._call_ended, None
            ended.set()
        if self.wall_clock is not None:
            self._people_or_not()  # the last call ended while a question is open

    async def _screen_result(
        self, action: StartCall, value: Any
    ) -> tuple[Any, dict[str, Any] | None]:
        """The call's result through its result guardrails, in order, each seeing the last
        one's replacement: (value to write, None) or (None, the `guardrail` error)."""
        call = self._pending_of(action)
        for guardrail in self._result_guardrails:
            if not guardrail.applies_to(action.tool):
                continue
            name = guardrail_name(guardrail)
            verdict = await check(
                guardrail.fn,
                (call, value, self.guardrail_context()),
                (Pass, ReplaceResult, Reject, Trip),
                Reject,  # a result guardrail that raises rejects the call (fail closed)
            )
            self._tell_verdict(action.id, name, "result", verdict)
            if isinstance(verdict, Trip):
                self.trip(name, verdict)
                return None, None
            if isinstance(verdict, Reject):
                return None, {"type": "guardrail", "message": f"{name}: {verdict.reason}"}
            if isinstance(verdict, ReplaceResult):
                value = verdict.value
        return value, None

    def _pending_of(self, action: StartCall) -> PendingCall:
        """What a result guardrail is shown of the call that made the result."""
        record = self.scheduler.records[action.id]
        return PendingCall(
            id=action.id,
            tool=action.tool,
            params=dict(action.params),
            call=dict(action.call),
            run_id=self.run_id,
            line=record.line,
        )

    def guardrail_context(self) -> GuardrailContext:
        """What a guardrail may read of this run (a copy of its state)."""
        usage = self.budget.usage if self.budget is not None else None
        state = copy_json(self.log.view("state") or {})
        return GuardrailContext(self.run_id, str(self.path), usage, state, self.ask_model)

    def _tell_verdict(self, call_id: str | None, name: str, kind: str, verdict: Any) -> None:
        record = self.scheduler.records.get(call_id) if call_id is not None else None
        entry = {"guardrail": name, "kind": kind, **verdict_to_dict(verdict)}
        if record is not None:
            record.guardrails.append(entry)
        if self._on_verdict is not None:
            self._on_verdict(call_id, name, kind, entry)

    def _trip_again(self, call_id: str) -> None:
        name, reason = self.replayed_trips[call_id]
        self.trip(name, Trip(reason))

    def trip(self, name: str, verdict: Trip) -> None:
        """Stop the run at once (PROTOCOL §15): calls in flight end `failed`, nothing
        starts any more, and the session raises `GuardrailTripped` when it ends."""
        if self.tripped is not None:
            return
        self.tripped = GuardrailTripped(name, verdict.reason, verdict.info)
        # Cancelled first: the loop, waiting for the tick, must not wake to a tick the
        # ends below finish and ask the model again.
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        self.abandon({"type": "runtime", "message": f"cancelled: guardrail {name} tripped"})


_RUN_TASK_NAME = f"{Engine._run.__module__}.{Engine._run.__qualname__}"
WALL_TIME_OUT = {
    "type": "runtime",
    "message": "TimeoutError: the run's wall_time budget ran out while this call ran",
}


async def run_handler(
    tool: Tool,
    params: dict[str, Any],
    context: CallContext | None,
    threads: trio.CapacityLimiter,
    media: MediaKeeper | None = None,
) -> tuple[Any, str | None, dict[str, Any] | None]:
    """Run one call's handler on trio: (value, branch, error), as `FinishCall` takes them.

    Shared by the engine and by anything that runs a call elsewhere (a Temporal activity
    runs it under `trio.run`), so conversion, timeout, result checks and the wording of
    every runtime error are the same wherever a call runs.
    """
    branch: str | None = None
    error: dict[str, Any] | None = None
    value: Any = None
    try:
        handler, arguments = tool.prepare(params, context)
    except pydantic.ValidationError as problem:
        error = {
            "type": "structural",
            "message": f"parameters of {tool.name!r} do not convert to the handler's "
            f"types: {_pydantic_summary(problem)}",
        }
    except BaseException as problem:  # a validator of the tool's own types that broke
        if not is_call_error(problem, passing_here()):
            raise
        error = {
            "type": "runtime",
            "message": f"converting the parameters of {tool.name!r} raised "
            f"{describe_error(problem)}",
        }
    else:
        timeout = None if tool.times_itself else tool.timeout
        # A sync handler's thread is taken before its timeout starts: the timeout
        # measures the handler, not the wait for a thread (which an abandoned,
        # timed-out thread of an earlier call may still hold).
        thread = None if tool.is_async else await _ThreadToken.take(threads)
        try:
            if thread is None and timeout is None and host_loop() is None:
                # The common case, awaited here: no cancel scope and no frames of
                # `_invoke` and `_await_tool` (each a measurable cost per call).
                awaitable = handler(**arguments)
                try:
                    value = await awaitable
                except (TypeError, RuntimeError) as problem:
                    foreign = _wrong_framework(problem, None, tool.name)
                    if foreign is None:
                        raise
                    raise foreign from None
            elif timeout is None:  # no cancel scope: it is a measurable cost per call
                value = await _invoke(handler, arguments, thread, tool.name)
            else:
                with trio.fail_after(timeout) as scope:
                    value = await _invoke(handler, arguments, thread, tool.name)
                if thread is None and trio.current_time() > scope.deadline:
                    _warn_blocking(tool.name, timeout)
            if isinstance(value, Branch):
                branch, value = value.term, value.value
            if value is PARKED:
                return value, None, None
            if not _surely_json(value):  # else `dump_output` and `_not_json` change nothing
                try:
                    try:
                        value = tool.dump_output(value)
                    except Exception:
                        # An image or audio clip (pydantic cannot convert one): its bytes
                        # to the keeper, a `$media` reference in its place. Only here, so
                        # a result without media costs no walk of its own.
                        if not holds_media(value):
                            raise
                        keeper = media if media is not None else MemoryMedia()
                        value = tool.dump_output(keep_media(value, keeper))
                except Exception as problem:
                    error = {"type": "runtime", "message": _conversion_fault(problem)}
                else:
                    fault = _not_json(value)
                    if fault is not None:
                        error = {"type": "runtime", "message": f"the result is not JSON: {fault}"}
                if error is not None:
                    value = branch = None
        except CallRefused as problem:
            error = {"type": "structural", "message": str(problem)}
        except trio.TooSlowError as problem:
            message = (
                f"TimeoutError: {tool.name} ran over {_seconds(timeout)}"
                if timeout is not None
                else describe_error(problem)  # the handler's own deadline
            )
            error = {"type": "runtime", "message": message}
        except BaseException as problem:
            # A handler's failure is its call's, whatever it raised (SystemExit,
            # asyncio's CancelledError, a trio.Cancelled of a scope of its own);
            # KeyboardInterrupt and the cancellation of this call go through.
            if not is_call_error(problem, passing_here()):
                raise
            error = {"type": "runtime", "message": describe_error(problem)}
        finally:
            if thread is not None:
                thread.release_unless_handed()
    return value, branch, error


async def _invoke(
    handler: Callable[..., Any],
    arguments: dict[str, Any],
    thread: _ThreadToken | None,
    name: str = "",
) -> Any:
    if thread is None:  # an async handler
        return await _await_tool(handler(**arguments), name)
    # Boxed, as `_approval.ask` does: trio refuses a coroutine returned from a thread,
    # and a sync callable may return an awaitable (a wrapper of an async function).
    [result] = await trio.to_thread.run_sync(
        lambda: [handler(**arguments)],
        abandon_on_cancel=True,
        limiter=thread,  # type: ignore[arg-type]  # CapacityLimiter-like, as trio allows
    )
    if inspect.isawaitable(result):  # a sync callable that returned a coroutine
        result = await _await_tool(result, name)
    return result


async def _await_tool(awaitable: Any, name: str) -> Any:
    """Await a tool's coroutine in the framework its code is written for.

    Under plain trio it runs in trio. Driven from asyncio (`run_asyncio`), it starts in
    trio and, at the first asyncio awaitable it waits on, moves to a task of the host
    loop for the rest, so both trio tools and asyncio libraries (asyncpg, aiohttp, the
    OpenAI SDK) work (docs/asyncio.md). A tool written for a framework that is not
    driving the run fails with its name and the fix, not with trio's internals.
    """
    loop = host_loop()
    try:
        if loop is not None:
            return await _drive_on_either(awaitable.__await__(), loop)
        return await awaitable
    except (TypeError, RuntimeError) as problem:
        foreign = _wrong_framework(problem, loop, name)
        if foreign is None:
            raise
        raise foreign from None


def _warn_blocking(name: str, timeout: float) -> None:
    """An async tool returned past its timeout without once giving the loop a turn: it
    blocked the event loop (`time.sleep`, a blocking client), so the timeout could not
    stop it, and every other call stalled meanwhile. Its result is kept (it was
    returned); the warning says what to change (docs/tool-calling.md, "Timeouts")."""
    import warnings

    warnings.warn(
        f"async tool {name!r} blocked the event loop past its timeout of {_seconds(timeout)}: "
        "a timeout cannot stop code that never awaits, and every other call waited. "
        "Make the tool a plain def (it then runs in a thread) or await its I/O.",
        RuntimeWarning,
        stacklevel=2,
    )


def _wrong_framework(problem: Exception, loop: Any, name: str) -> RuntimeError | None:
    """The error that names the fix when a tool awaited another framework's code than the
    one driving the run (`problem` is what awaiting it raised), else None."""
    text = str(problem)
    if loop is None and ("unrecognized yield message" in text or "no running event loop" in text):
        return RuntimeError(
            f"tool {name!r} awaits asyncio code, but this run is driven by trio: "
            "run the agent with `await agent.run_asyncio(...)` from asyncio, or use "
            "trio/anyio libraries in the tool"
        )
    if loop is not None and "bad yield" in text:
        return RuntimeError(
            f"tool {name!r} awaits trio code after asyncio code; one tool must keep to "
            "one framework: use asyncio (or anyio) libraries throughout it"
        )
    return None


def _is_asyncio_yield(message: Any) -> bool:
    # asyncio futures mark themselves while awaited; a bare yield (asyncio.sleep(0)) is None.
    return message is None or getattr(message, "_asyncio_future_blocking", None) is not None


@types.coroutine
def _drive_on_either(steps: Any, loop: Any) -> Any:
    """Drive a coroutine in turns: in trio until it waits on something of asyncio's, then
    on the host loop as an asyncio task (so asyncio's current task, timeouts and futures
    work) until it waits on something of trio's. trio resumes a task with plain sends,
    so passing its messages through is all a trio wait needs. The code before a tool's
    first wait runs in trio's turn (trio code there fails outside trio)."""
    value: Any = None
    while True:
        try:
            message = steps.send(value)
        except StopIteration as stop:
            return stop.value
        if _is_asyncio_yield(message):
            kind, message = yield from run_on_host(loop, _host_turn(steps, message)).__await__()
            if kind == "done":
                return message
        value = yield message


async def _host_turn(steps: Any, first: Any) -> tuple[str, Any]:
    turn: tuple[str, Any] = await _host_steps(steps, first)
    return turn


@types.coroutine
def _host_steps(steps: Any, message: Any) -> Any:
    """Inside an asyncio task: step the coroutine while it waits on asyncio's
    awaitables (forwarding the task's cancellation into it); stop at trio's."""
    while True:
        if not _is_asyncio_yield(message):
            return "trio", message
        try:
            value = yield message
        except BaseException as error:
            try:
                message = steps.throw(error)
            except StopIteration as stop:
                return "done", stop.value
            continue
        try:
            message = steps.send(value)
        except StopIteration as stop:
            return "done", stop.value


class _ThreadToken:
    """A worker-thread token of the engine's limiter, taken before a call's timeout starts.

    It is handed to `trio.to_thread.run_sync` as the call's limiter (trio accepts any
    CapacityLimiter-like object): trio "acquires" it without waiting, since it is held
    already, and gives it back when the thread really ends, so a timed-out, abandoned
    thread keeps its token until its handler returns. When trio never took it over (the
    call was cancelled before the thread started), `release_unless_handed` gives it back.
    """

    __slots__ = ("_handed", "_limiter")

    def __init__(self, limiter: trio.CapacityLimiter) -> None:
        self._limiter = limiter
        self._handed = False

    @classmethod
    async def take(cls, limiter: trio.CapacityLimiter) -> _ThreadToken:
        token = cls(limiter)
        await limiter.acquire_on_behalf_of(token)
        return token

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        self._handed = True  # trio starts the thread next, and releases after it ends

    def release_on_behalf_of(self, borrower: object) -> None:
        self._limiter.release_on_behalf_of(self)

    def release_unless_handed(self) -> None:
        if not self._handed:
            self._handed = True
            self._limiter.release_on_behalf_of(self)


# -- is a converted result strict JSON? --------------------------------------------------------

#: How deeply a result may nest: pydantic's conversion refuses more (its limit), and the
#: log, copies of resolved values and the prompt all walk values by recursion.
MAX_RESULT_DEPTH = MAX_VALUE_DEPTH  # what the log accepts
# Every int under 2**2000 (603 digits) has fewer digits than any limit Python allows on
# int-to-text conversion (640 at the least), so only a larger int is tried.
_SURELY_SHORT = 1 << 2000
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOO_DEEP = f"it nests more than {MAX_RESULT_DEPTH} levels deep"
_PYDANTIC_TOO_DEEP = "Maximum serialization depth exceeded"  # pydantic-core's message


def _surely_json(value: Any) -> bool:
    """A result that is JSON as it is, the common no-op or count: None, a bool, a small
    int, an ASCII string (`tests/test_fast_paths.py` checks the conversion agrees)."""
    kind = type(value)
    if kind is int:
        short: bool = -_SURELY_SHORT < value < _SURELY_SHORT
        return short
    return value is None or kind is bool or (kind is str and value.isascii())


def _conversion_fault(problem: Exception) -> str:
    """The message for a result pydantic could not convert to JSON."""
    if type(problem) is ValueError and problem.args == (_PYDANTIC_TOO_DEEP,):
        return f"the result is not JSON: {_TOO_DEEP}"  # as `_not_json` says it
    return f"the result cannot be converted to JSON: {describe_error(problem)}"


def _not_json(value: Any) -> str | None:
    """What keeps a converted result from being strict JSON, and where, or None.

    `json.dumps(value, allow_nan=False)` would say, but a walk is much cheaper on the hot
    path: a string, a bool, None and a small int are answered at once, and a container
    is walked without recursion (and without encoding its strings). The containers come
    from pydantic's conversion, which gives string keys and no cycles.
    """
    kind = type(value)
    if kind is str:
        return _leaf_fault(value)
    if kind is bool or value is None:
        return None
    if kind is int and -_SURELY_SHORT < value < _SURELY_SHORT:
        return None
    if kind is not dict and kind is not list:
        return _leaf_fault(value)
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_RESULT_DEPTH:
            return _TOO_DEEP
        if type(node) is dict:
            for key in node:
                if not key.isascii() and has_surrogate(key):
                    return _locate_fault(value)
        for item in node.values() if type(node) is dict else node:
            kind = type(item)
            if kind is str:
                if item.isascii() or not has_surrogate(item):
                    continue
            elif kind is bool or item is None:
                continue
            if kind is int:
                if -_SURELY_SHORT < item < _SURELY_SHORT:
                    continue
            elif kind is float:
                if item - item == 0:  # finite
                    continue
            elif kind is dict or kind is list:
                stack.append((item, depth + 1))
                continue
            if _leaf_fault(item) is not None:
                return _locate_fault(value)
    return None


def _leaf_fault(value: Any) -> str | None:
    """What is wrong with one value that is not a list or a dict, or None."""
    if isinstance(value, str):
        return f"a string that {SURROGATE_FAULT}" if has_surrogate(value) else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if -_SURELY_SHORT < value < _SURELY_SHORT:
            return None
        try:
            int.__repr__(value)
        except ValueError:
            digits = int(value.bit_length() * 0.30103) + 1
            return (
                f"an int of about {digits:,} digits (Python writes at most "
                f"{sys.get_int_max_str_digits():,} as text)"
            )
        return None
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return "float NaN" if math.isnan(value) else f"float {value}"
    if isinstance(value, dict | list):
        return None
    return f"a value of type {type(value).__name__}"


def _locate_fault(root: Any) -> str:
    """The first fault in document order, with its place (`rows[2].price`); only run once
    `_not_json` has found there is one, since it builds a path for every value."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict) and len(path) < MAX_RESULT_DEPTH:
            bad = next((key for key in node if isinstance(key, str) and has_surrogate(key)), None)
            if bad is not None:
                where = f" in {_place(path)}" if path else ""
                return f"an object key{where} that {SURROGATE_FAULT}"
        if isinstance(node, dict | list) and len(path) < MAX_RESULT_DEPTH:
            pairs = node.items() if isinstance(node, dict) else enumerate(node)
            stack.extend((item, (*path, key)) for key, item in reversed(list(pairs)))
            continue
        fault = _leaf_fault(node)
        if fault is not None:
            return f"{fault} at {_place(path)}" if path else fault
    return "a value that JSON cannot encode"  # not reached: the caller found one


def _place(path: tuple[str | int, ...]) -> str:
    text = ""
    for step in path:
        if isinstance(step, int):
            text += f"[{step}]"
        elif _PLAIN_KEY.fullmatch(step):
            text += f".{step}" if text else step
        else:
            text += f"[{json.dumps(step)}]"
    return text


def _seconds(value: float) -> str:
    return f"{value:g} s"


def _pydantic_summary(error: pydantic.ValidationError) -> str:
    parts = []
    for item in error.errors()[:5]:
        where = ".".join(str(step) for step in item.get("loc", ())) or "(params)"
        parts.append(f"{where}: {item.get('msg')}")
    return "; ".join(parts)

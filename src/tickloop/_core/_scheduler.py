"""The tick scheduler: a pure state machine, inputs in, actions out.

Nothing here does I/O, awaits, reads a clock or draws a random number: the same inputs in
the same order always give the same actions. A thin driver (`_engine.py` on trio, or a
durable-execution workflow) feeds it inputs — a call arrived, a call finished, a decision
was made, the stream closed — and carries out the actions it returns: ask for approval,
start a call, note a message appended, a call settled, the tick ended. This is the sans-IO
style of h11: the protocol is here, the sockets (here: tasks and threads) are elsewhere.

The pieces beside it: `_scheduler_io` (the inputs and actions), `_status` (the states of a
call and the table of moves between them), `_call` (one call's record and working state),
`_arrival` (the checks a call gets as it arrives), `_results` (the checks of its result),
`_run_queue` (concurrency slots), `_approvals` (one question at a time), `_settling`
(dead references, cycles), `_plan_order` and `_path_index` (who reads and writes what, in
plan order).

Invariants kept throughout:

* Every accepted call is in exactly one `CallStatus`, changed only by `move`, which
  checks the transition table.
* `_writers` holds the output terms of every accepted call that is not final, so "could
  this path still be written?" is one walk down a trie, never a scan of the calls.
* `_waiters` holds the reference terms of every waiting call, so a write or a finished
  call re-examines only the calls it can affect.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from ._approvals import ApprovalQueue, downstream_of, hook_fault, pending_call, waited_on
from ._arrival import (
    check_call,
    check_edit,
    fault_message,
    new_call,
    record_parameters,
)
from ._budget import Ledger
from ._budget_gate import BudgetedRunQueue, RecordedRoom, budget_inputs, limits_calls
from ._call import (
    Call,
    CallRecord,
    OutputMismatch,
    Structural,
    error_message,
    structural,
)
from ._decisions import (
    HOOK_REFUSED,
    Approve,
    Decision,
    Defer,
    Deny,
    Edit,
    PendingCall,
    Plan,
    Replace,
    Respond,
)
from ._expressions import Expression, Reference, Term
from ._log import ContextLog, WriteError, copy_json
from ._path_index import PathIndex
from ._plan_order import PlanOrder, Slot
from ._ranks import Schedule, ranks_for
from ._reading import read, resolve
from ._results import check_output, targets, write_result
from ._review import allowed_in_advance, build_plan, site_pattern
from ._run_queue import Ranks, RunQueue
from ._scheduler_io import (
    Action,
    AskApproval,
    AskReview,
    CloseGate,
    CloseStream,
    CloseText,
    Decide,
    Event,
    FinishCall,
    Flush,
    NoteAccepted,
    NoteDecided,
    NoteMessage,
    NoteReady,
    NoteSettled,
    NoteTickEnded,
    OpenGate,
    OpenTick,
    ParkCall,
    ReceiveCall,
    ReportFault,
    Review,
    ScreenCall,
    Screened,
    StartCall,
)
from ._screening import Screening
from ._settling import LostWriters, awaits_fire_and_forget, deadlocks, unresolved
from ._sharing import share_parsed
from ._status import (
    ERROR_STATUSES,
    CallStatus,
    describe,
    move,
    not_awaiting_decision,
    usage_error,
)
from ._tools import ToolSet

__all__ = ["CallRecord", "Scheduler"]

S = CallStatus


_log = logging.getLogger("tickloop")


def _by_seq(call: Call) -> int:
    return call.seq


def _too_deep_to_resolve(call: Call) -> dict[str, Any]:
    # The call itself is shallow (checked on arrival), but what it read may be deep:
    # a value hundreds deep, placed deep in the call, against a recursive schema.
    return structural(
        "resolved parameters nest too deeply to copy or check against the schema of "
        f"{call.tool.name!r}; read a less deeply nested part of the state"
    )


class Scheduler:
    """Decides, for one run, what every call does next. See the module docstring."""

    _arrival: type | None = ReceiveCall  # its new calls may be ready on arrival; None: tests
    _code = False  # the open tick is a code plan's (`OpenTick.code`, PROTOCOL §14)

    def __init__(
        self,
        tools: ToolSet,
        log: ContextLog,
        *,
        max_concurrency: int | None = None,
        run_id: str | None = None,
        notes: bool = True,
        messages: bool = True,
        arrows: bool = False,
        budget: Ledger | None = None,
        schedule: str | Schedule = "critical_path",
        recorded: RecordedRoom | None = None,
        review: bool = False,
        screens: Callable[[str], bool] | None = None,
    ) -> None:
        self.tools = tools
        # PROTOCOL §15 "Plan review": a request's gated calls wait for the review
        # (`_reviewing`, from its tick's opening to the `Review`) before the hook. It is
        # asked once the request's text is complete (`text_open` false): a plan's
        # stream closed, or a code plan's program written (`CloseText`).
        self.review = review
        self._reviewing = False
        # A code plan's, from `CloseText`; None while the request's text is still coming.
        self._program: str | None = None
        self._program_sites: dict[str, str] = {}  # its gated sites and their tools
        # A code plan's review decisions by site (`c2.4[*]`) or call id, for the calls
        # made later in the request: the same tick only.
        self._standing: list[tuple[re.Pattern[str], Decision]] = []
        # A review's deny or defer for a call of the request not yet at the hook (at the
        # gate or screened): carried out when it gets there.
        self._advance: dict[str, Decision] = {}
        # Deferred tools no `search_tools` call of an earlier request found (tool search):
        # refused on arrival; each tick's `OpenTick.found` says which are found.
        self._hidden: frozenset[str] = tools.deferred
        # With `notes=False` the facts (`Note...`, but `NoteTickEnded`) are not returned, for a
        # driver with no observer and no journal; the work (`StartCall`...) is, either way.
        self.notes = notes
        self.messages = notes and messages  # `NoteMessage`: a journal reads none (its paths)
        self.arrows = arrows  # fill `NoteReady.waits_on`: only the store's rows read it
        self.log = log
        self.max_concurrency = max_concurrency
        self.run_id = run_id  # only shown to the hook (PendingCall.run_id)
        self._written = PathIndex()  # who wrote each path: PendingCall.waits_on
        # Who said it would write each path (as its call is now: a replacement's paths, not
        # the ones it replaced), kept for `NoteSettled.waited_on` when arrows are drawn.
        self._declared: PathIndex | None = PathIndex() if arrows else None
        self.records: dict[str, CallRecord] = {}
        self._calls: dict[str, Call] = {}  # accepted, not ended (then: its record, its seq)
        self._seqs: dict[str, int] = {}  # every call's arrival order
        self._seq = 0
        self._iteration = 0
        self._index = 0
        self._stream_open = False
        self._tick_active = False
        self._event: Event | None = None
        self._date = ""
        self._actions: list[Action] = []
        self._errors: list[dict[str, Any]] = []
        self._writers = PathIndex()
        self._waiters = PathIndex()
        self._skip_sources = PathIndex()
        self._lost_writers = LostWriters()
        self._waiting: dict[str, Call] = {}
        self._dirty: set[str] = set()
        # This request's calls of each tool some tool `depends_on` by name (only those are
        # asked for: `_wait_for_earlier_tools`, `waited_on`), in arrival order.
        self._request_by_tool: dict[str, list[str]] = {}
        self._depended_on = frozenset(
            dependency for tool in tools.values() for dependency in tool.dependency_tools
        )
        self._tool_dependents: dict[str, set[str]] = {}
        self._approvals = ApprovalQueue()
        # Between readiness and the hook (PROTOCOL §15): the input-guardrail gate and the
        # calls whose tool guardrails are asked.
        self._screening = Screening(screens)
        self._deferred: dict[str, Call] = {}
        # Plan order (PROTOCOL §3, §4): what each waiting call's terms read, held writes.
        self._plan = PlanOrder(self._writers, self._waiters, self._seq_of, log.lookup)
        ranks = ranks_for(schedule, self._calls, self._seqs, self._plan, self._tool_dependents)
        # By rank under a limit (PROTOCOL §13), or fifo; with a budget, room first (§12).
        gate = _budget_gate(self, budget, ranks, recorded)
        self._run_queue = gate or RunQueue(ranks)
        self._handlers: dict[type, Callable[[Any], None]] = {
            FinishCall: self._on_finished,
            ParkCall: lambda event: _park(self, event),
            ReceiveCall: self._on_received,
            Decide: self._on_decision,
            Review: lambda event: _on_review(self, event),
            Screened: self._on_screened,
            OpenGate: self._on_gate_opened,
            CloseGate: self._on_gate_closed,
            OpenTick: self._on_tick_opened,
            CloseStream: self._on_stream_closed,
            CloseText: self._on_text_closed,
            ReportFault: self._on_fault,
            Flush: self._on_flush,
            # `AnswerBudget`, `SpendBudget`
            **(gate.inputs() if gate else budget_inputs(budget) if budget else {}),
        }

    # -- the one entry point ---------------------------------------------------------------

    def handle(self, event: Event) -> list[Action]:
        """Apply one input; return the actions the driver must carry out, in order."""
        handler = self._handlers.get(type(event))
        if handler is None:
            raise TypeError(f"not a scheduler input: {event!r}")
        self._event = event
        self._date = event.date
        handler(event)
        self._settle_everything_possible()
        actions, self._actions = self._actions, []
        return actions

    # -- queries for drivers ---------------------------------------------------------------

    @property
    def iteration(self) -> int:
        return self._iteration

    @property
    def busy(self) -> bool:
        """True while any call of the run is running (fire-and-forget ones included)."""
        return bool(self._run_queue.running)

    @property
    def tick_active(self) -> bool:
        """A tick is open: its stream, or calls it must finish (or a resumed deferred one)."""
        return self._tick_active

    @property
    def stream_open(self) -> bool:
        return self._stream_open

    @property
    def gate_closed(self) -> bool:
        """Calls with effects wait for the input guardrails (PROTOCOL §15)."""
        return self._screening.gate_closed

    @property
    def deferred(self) -> list[PendingCall]:
        return [self._pending(call) for call in self._deferred.values()]

    @property
    def text_open(self) -> bool:
        """The request's text is still coming (a code plan's program may run on after)."""
        return self._stream_open and self._program is None

    @property
    def review_awaited(self) -> bool:
        """A plan review was asked for and not answered (a resume asks it again)."""
        return self._reviewing and not self.text_open

    def plan_under_review(self) -> Plan | None:
        """The plan a review left unanswered by a crash is about, to ask it again."""
        return _plan_of(self) if self.review_awaited else None

    def status(self, call_id: str) -> CallStatus | None:
        record = self.records.get(call_id)  # its status is always the call's (`move`)
        return None if record is None else CallStatus(record.status)

    # -- inputs ----------------------------------------------------------------------------

    def _on_fault(self, event: ReportFault) -> None:
        self._errors.append(fault_message(event.call, event.error))

    def _on_flush(self, event: Flush) -> None:
        self._append_errors()

    def _on_tick_opened(self, event: OpenTick) -> None:
        if self._tick_active:
            raise usage_error(
                event,
                f"a tick is already open (iteration {self._iteration}); wait for "
                "NoteTickEnded before opening another",
            )
        self._iteration, self._code = event.iteration, event.code
        if self.tools.deferred:
            self._hidden = self.tools.deferred.difference(event.found)
        self._index = 0
        self._stream_open = True
        self._tick_active = True
        self._request_by_tool = {}
        # Skipping is how an if/else plan works within one request (PROTOCOL §5): a
        # branch an earlier request did not take, or a call it skipped or lost, says
        # nothing about what this request reads. The outer loops open a tick only once no
        # call is deferred, so no call of an earlier tick still waits to consult them.
        self._skip_sources = PathIndex()
        self._lost_writers = LostWriters()
        self._plan.open_request(plan_order=event.plan_order)
        self._reviewing = self.review
        self._program, self._program_sites = None, {}
        self._standing, self._advance = [], {}

    def _on_text_closed(self, event: CloseText) -> None:
        if not (self.text_open and self._code):
            raise usage_error(event, "no code plan's program text is open")
        self._program, self._program_sites = event.program, dict(event.sites)
        if self._reviewing:
            _ask_review(self)

    def _on_stream_closed(self, event: CloseStream) -> None:
        if not self._stream_open:
            raise usage_error(event, "the stream is not open")
        text_was_open = self.text_open  # a plan's text, or a code plan's never closed
        self._stream_open = False
        # Settling starts now: every waiting call may have become settle-able.
        self._dirty.update(self._waiting)
        if text_was_open and self._reviewing:
            _ask_review(self)

    def _on_received(self, event: ReceiveCall) -> None:
        if not self._stream_open:
            raise usage_error(event, "a call arrived while no request stream is open")
        self._seq += 1
        call, given, wanted, keys = new_call(
            event.call, self._iteration, self._index, self._seq, self.records, self._code
        )
        self._index += 1
        record = call.record
        self.records[record.id] = record
        self._seqs[record.id] = self._seq
        try:
            check_call(
                self.tools,
                call,
                record.call,
                given,
                wanted,
                code=self._code,
                hidden=self._hidden,
                keys=keys,
            )
        except Structural as fault:
            record_parameters(call)
            # `record.call` is the wire, or the form of it that can be shown (`_check_shape`).
            self._report_invalid(call, str(fault), fault.details, wire=record.call)
            return
        self._accept(call)
        if self._standing:  # a code plan's call a review decided by its site (§15)
            _decide_by_standing(self, call)

    def _on_decision(self, event: Decide) -> None:
        call_id, decision = event.call_id, event.decision
        call = self._calls.get(call_id)
        if call is None or (self._approvals.asking != call_id and call.status != S.DEFERRED):
            raise usage_error(event, not_awaiting_decision(call_id, self.status(call_id)))
        if self._approvals.asking == call_id:
            self._approvals.asking = None
        else:
            del self._deferred[call_id]
            self._tick_active = True
        self._carry_out(call, decision, "hook")

    def _carry_out(self, call: Call, decision: Decision, by: str) -> None:
        """Act on a decision about a ready call; `by`: who approved what reads it."""
        if self.notes:
            self._emit(NoteDecided(call.id, decision))
        if isinstance(decision, Approve):
            if decision.downstream:
                self._approve_in_advance(self._downstream(call), by)
            self._enqueue(call)
        elif isinstance(decision, Deny):
            kind = "hook" if decision.reason == HOOK_REFUSED else "denied"  # the hook's bug
            self._settle(call, S.DENIED, {"type": kind, "message": decision.reason})
        elif isinstance(decision, Edit):
            self._apply_edit(call, decision.apply_to(call.record.params))
        elif isinstance(decision, Replace):
            self._apply_replacement(call, decision.call)
        elif isinstance(decision, Respond):
            self._complete(call, decision.value, branch=None)
        elif isinstance(decision, Defer):
            _defer(self, call)
        else:
            raise TypeError(f"not a decision: {decision!r}")

    def _on_finished(self, event: FinishCall) -> None:
        call = self._calls.get(event.call_id)
        if call is None or call.status != S.RUNNING:
            status = self.status(event.call_id)
            raise usage_error(
                event, f"{describe(event.call_id, status)} finished but was not running"
            )
        self._run_queue.finish(call)
        if event.error is not None:
            status = S.INVALID if event.error.get("type") == "structural" else S.FAILED
            self._settle(call, status, event.error)
        else:
            self._complete(call, event.value, event.branch)

    # -- accepting and waiting -------------------------------------------------------------

    def _accept(self, call: Call) -> None:
        tool = call.tool
        share_parsed(call, self._calls, self._writers, self._waiters)
        self._calls[call.id] = call
        if call.writes:
            for term in call.writes:
                self._plan.add_writer(term, call.id, call.seq)
            self._plan.plan(call.id, call.writes, call.wire.get("_outputPath"))
            if self._declared is not None:
                for term in call.writes:
                    self._declared.add(term, call.id)
        if tool.dependency_tools:
            self._wait_for_earlier_tools(call)
        if tool.name in self._depended_on:
            self._request_by_tool.setdefault(tool.name, []).append(call.id)
        if self.notes:
            self._actions.append(NoteAccepted(call.id, tool.name, call.wire, tool.read_only))
        self._start_waiting(call)

    def _wait_for_earlier_tools(self, call: Call) -> None:
        for dependency in call.tool.dependency_tools:
            for earlier_id in self._request_by_tool.get(dependency, ()):
                # Only calls that arrived before this one count (a replacement keeps its
                # place, and later calls may have arrived since); ended ones left `_calls`.
                earlier = self._calls.get(earlier_id)
                if earlier is not None and earlier.seq < call.seq:
                    waits = call.tool_waits
                    if waits is None:
                        waits = call.tool_waits = set()
                    waits.add(earlier.id)
                    self._tool_dependents.setdefault(earlier.id, set()).add(call.id)

    def _start_waiting(self, call: Call) -> None:
        if not call.references and not call.tool.dependency_references:
            # Most calls read nothing: nothing to file, only to examine once; a new one, the
            # only call to examine, is ready now, as the settle loop would find it next.
            call.watching = ()
            if not call.tool_waits and not self._dirty and type(self._event) is self._arrival:
                self._on_ready(call, {})
                return
            self._waiting[call.id] = call
            self._dirty.add(call.id)
            return
        self._waiting[call.id] = call
        call.watching = call.watched_terms()
        self._plan.watch(call.id, call.seq, call.watching)  # and in `_waiters`
        self._dirty.add(call.id)

    def _stop_waiting(self, call: Call) -> None:
        if self._waiting.pop(call.id, None) is None:
            return
        call.watching = ()
        self._plan.unwatch(call.id)  # and out of `_waiters`

    def _settle_everything_possible(self) -> None:
        """Re-examine affected calls until nothing changes, then start what can start.

        Runs after every input, so each step is guarded by the cheap test that says it
        has nothing to do (the same test the step would make first).
        """
        dirty, plan, approvals, queue = self._dirty, self._plan, self._approvals, self._run_queue
        calls = self._calls
        while True:
            while dirty:
                if len(dirty) == 1:  # the common case: the call that just arrived
                    call = calls.get(dirty.pop())  # None: it has ended since
                    if call is not None and call.status == S.WAITING:
                        self._examine(call)
                    continue
                batch = sorted((calls[i] for i in dirty if i in calls), key=_by_seq)
                dirty.clear()
                for call in batch:
                    if call.status == S.WAITING:
                        self._examine(call)
            if plan.recheck:
                released = plan.releasable()
                for call_id in released:  # in plan order (PROTOCOL §4)
                    self._apply_held(self._calls[call_id])
                if released:
                    continue
            if approvals.waiting and approvals.asking is None and not self._reviewing:
                self._ask_next_approval()
            if queue.heads or queue.ready:
                self._start_queued_calls()
            if dirty:
                continue
            if not self._stream_open and self._waiting and self._settle_deadlocks():
                continue
            break
        if self._tick_active and not self._stream_open:
            self._end_tick_if_done()

    # -- reading in plan order -------------------------------------------------------------

    def _examine(self, call: Call) -> None:
        if not call.watching:  # reads nothing: ready unless it waits for earlier tools
            if not call.tool_waits:
                self._stop_waiting(call)
                self._on_ready(call, {})
            return
        values: dict[tuple[str | int, ...], Any] = {}
        waiting = False
        slots = iter(self._plan.slots(call.id))
        for reference, expression in call.expressions():
            taken = [next(slots) for _ in expression.terms]
            outcome, value = read(expression, taken, self.log.lookup, call, self._could_be_written)
            if outcome == "dead":
                if waiting:  # the first dead one in order is named, as one by one (§5)
                    return
                self._settle_dead(call, reference, expression, value)
                return
            if outcome == "wait":
                waiting = True
            elif reference is not None:
                values[reference.location] = value
        if waiting or call.tool_waits:
            return
        self._stop_waiting(call)
        self._on_ready(call, values)

    def _could_be_written(self, term: Term, reader: Call) -> bool:
        if self._stream_open:
            return True
        # A call may read the path it writes: it waits for *another* call to write it.
        own = sum(1 for written in reader.writes if written.overlaps(term))
        return self._writers.count_overlapping(term) > own

    def _settle_dead(
        self, call: Call, reference: Reference | None, expression: Expression, dead: list[Slot]
    ) -> None:
        self._stop_waiting(call)
        known = (self._lost_writers, self._skip_sources, self._seq_of, self.log.view)
        error = unresolved(call, reference, expression, dead, *known)
        self._settle(call, S.SKIPPED if error is None else S.INVALID, error)

    def _seq_of(self, call_id: str) -> int:
        return self._seqs[call_id]

    # -- ready: resolve, check, approve ----------------------------------------------------

    def _on_ready(self, call: Call, values: dict[tuple[str | int, ...], Any]) -> None:
        try:
            params, error = resolve(call, values, self.log.lookup)
        except RecursionError:
            self._settle(call, S.INVALID, _too_deep_to_resolve(call))
            return
        # The parameters as written are never read again (an edit starts from the record,
        # a replacement is checked anew): the call keeps the resolved ones, one dict less.
        call.params = params
        if error is not None:
            self._settle(call, S.INVALID, error)
            return
        if self.notes:
            waits = self.arrows and waited_on(
                call, self._written, self._request_by_tool, self._seq_of
            )
            self._actions.append(NoteReady(call.id, params, waits or ()))
        screening = self._screening
        if screening.gate_closed or screening.screens is not None:
            self._past_checks(call)  # a run with guardrails (PROTOCOL §15)
        else:
            self._to_the_hook(call)  # most calls: no guardrail, no approval

    # -- the path of a ready call (PROTOCOL §15): gate, tool guardrails, hook ------------

    def _past_checks(self, call: Call) -> None:
        screening = self._screening
        if screening.holds(call):
            move(call, S.APPROVING, self._event)  # ready, and something is asked first
            screening.at_gate.append(call)
            return
        self._past_gate(call)

    def _past_gate(self, call: Call) -> None:
        if self._screening.screened(call):
            if call.status != S.APPROVING:
                move(call, S.APPROVING, self._event)
            self._screening.checking.add(call.id)
            self._emit(ScreenCall(self._pending(call)))
            return
        self._to_the_hook(call)

    def _to_the_hook(self, call: Call) -> None:
        if call.preapproved:
            self._enqueue(call)
        elif self._advance and call.id in self._advance:
            _carry_out_advance(self, call, self._advance.pop(call.id))
        elif call.approved_in_advance is not None and self._advance_approval_holds(call):
            self._run_approved_in_advance(call, call.approved_in_advance)
        elif call.tool.needs_approval(call.params) or call.approved_in_advance is not None:
            if call.status != S.APPROVING:
                move(call, S.APPROVING, self._event)
            self._approvals.waiting.append(call)
        else:
            self._enqueue(call)

    @staticmethod
    def _advance_approval_holds(call: Call) -> bool:
        """PROTOCOL §15 "Plan review": an approval given before the parameters were known
        holds for a tool gated by a predicate only if the predicate on the resolved ones
        still asks for approval; otherwise the call goes to the hook (docs/decisions.md)."""
        return call.tool.needs_approval(call.params)

    def _downstream(self, call: Call) -> list[str]:
        return downstream_of(call, self._calls, self._waiters, self._tool_dependents, self._seq_of)

    def _approve_in_advance(self, call_ids: list[str], by: str) -> None:
        """Approve known gated calls before they are asked: one still waiting is approved
        when ready (`_on_ready`); one ready and waiting its turn runs now."""
        for call_id in call_ids:
            call = self._calls.get(call_id)
            if call is None or call.approved_in_advance is not None:
                continue
            call.approved_in_advance = by
            if self._approvals.holds(call):  # at the hook's door: it runs now
                self._run_approved_in_advance(call, by)  # `ApprovalQueue.next` passes it

    def _run_approved_in_advance(self, call: Call, by: str) -> None:
        """Its approval is noted like an answer (the store's row, a replay's record)."""
        call.record.approved_by = by
        if self.notes:
            self._emit(NoteDecided(call.id, Approve()))
        self._enqueue(call)

    def _on_screened(self, event: Screened) -> None:
        call = self._calls.get(event.call_id)
        if call is None or event.call_id not in self._screening.checking:
            status = self.status(event.call_id)
            raise usage_error(event, f"{describe(event.call_id, status)} is not being screened")
        self._screening.checking.discard(event.call_id)
        if event.denial is not None:
            self._settle(call, S.DENIED, {"type": "denied", "message": event.denial.reason})
        else:
            self._to_the_hook(call)

    def _on_gate_opened(self, event: OpenGate) -> None:
        screening = self._screening
        screening.gate_closed = False
        held, screening.at_gate = screening.at_gate, []
        for call in held:
            if call.status == S.APPROVING:
                self._past_gate(call)

    def _on_gate_closed(self, event: CloseGate) -> None:
        self._screening.gate_closed = True

    def _pending(self, call: Call) -> PendingCall:
        downstream = self._downstream(call) if call.status != S.DEFERRED else []
        return pending_call(
            call, self.run_id, self._written, self._waiters, self._seq_of, downstream
        )

    def _ask_next_approval(self) -> None:
        """One question at a time, in the order calls became ready."""
        call = self._approvals.next()
        if call is not None:
            self._emit(AskApproval(self._pending(call)))

    def _apply_edit(self, call: Call, params: Any) -> None:
        fault = check_edit(call.tool, params)
        if fault is not None:
            self._settle(call, S.INVALID, hook_fault(call, True, fault))
            return
        call.record.params = copy_json(params)
        if self._screening.screened(call):
            # The edited parameters pass the tool guardrails too (PROTOCOL §15: a guardrail
            # sees what will run); the hook that edited them is not asked again (§6).
            call.preapproved = True
            self._past_gate(call)
            return
        self._enqueue(call)

    def _apply_replacement(self, call: Call, replacement: Any) -> None:
        """The replacement takes the call's id and place, and is not asked about again.

        The replaced call's output terms stay filed as written by this id until the
        replacement is known to be good: if it is not, the readers of those terms must
        learn that their writer ended invalid (and be woken), not wait forever.
        """
        old_writes = call.writes
        wire = dict(replacement) if isinstance(replacement, dict) else replacement
        if isinstance(wire, dict):
            wire["_id"] = call.id
        call.wire = wire if isinstance(wire, dict) else call.wire
        call.record.call = wire
        call.record.tool = wire.get("_tool") if isinstance(wire, dict) else None
        call.references = ()
        call.writes = ()
        call.preapproved = True
        try:
            check_call(self.tools, call, wire, hidden=self._hidden)
        except Structural as fault:
            call.writes = old_writes  # `_settle` un-files them and wakes their readers
            self._settle(call, S.INVALID, hook_fault(call, True, f"replacement call: {fault}"))
            return
        for term in old_writes:  # readers of a path no longer written must be re-examined
            self._plan.remove_writer(term, call.id)
            self._dirty.update(self._waiters.ids_overlapping(term))
        call.record.tool = call.tool.name
        for term in call.writes:
            self._plan.add_writer(term, call.id, call.seq)
        if self._declared is not None:
            for term in old_writes:
                self._declared.remove(term, call.id)
            for term in call.writes:
                self._declared.add(term, call.id)
        # The replacement keeps the call's place in the plan (PROTOCOL §3): later readers
        # of what it wrote, or now writes, look again at which earlier calls they wait on.
        self._dirty.update(
            self._plan.replan(call.id, call.seq, old_writes, call.writes, self._calls)
        )
        self._wait_for_earlier_tools(call)
        move(call, S.WAITING, self._event)
        self._start_waiting(call)

    # -- running ---------------------------------------------------------------------------

    def _enqueue(self, call: Call) -> None:
        if call.tool.is_latent:
            self._complete(call, call.latent_output, branch=None, checked=True)
            return
        move(call, S.QUEUED, self._event)
        if self._run_queue.start_at_once(call, self.max_concurrency):
            self._start(call)  # most calls: nothing limits them, nothing queued before
        else:
            self._run_queue.push(call)

    def _start_queued_calls(self) -> None:
        for call in self._run_queue.start(self.max_concurrency):
            self._start(call)

    def _start(self, call: Call) -> None:
        move(call, S.RUNNING, self._event)
        self._actions.append(StartCall(call.id, call.tool.name, call.record.params, call.wire))

    # -- finishing -------------------------------------------------------------------------

    def _complete(
        self, call: Call, value: Any, branch: str | None, *, checked: bool = False
    ) -> None:
        """A value for the call (returned, responded or latent): check it, then write it.

        `checked` is for a latent `_output`, already checked when the call arrived; a value
        a person responded with is checked here even for a latent tool. A write that an
        earlier call must precede is held, and applied in plan order (PROTOCOL §4).
        """
        try:
            if not checked and call.tool.output_validator is not None:
                check_output(call.tool, value, structural=False)
            written, untaken = targets(call, branch)
        except OutputMismatch as problem:  # nothing written, no reader woken
            self._settle(call, S.FAILED, {"type": "runtime", "message": str(problem)})
            return
        if written:
            blocker = self._plan.latest_blocker(call.id, call.seq, written)
            if blocker is not None:
                move(call, S.HELD, self._event)
                call.held = (value, written, untaken)
                self._plan.hold(call.id, call.seq, written, blocker)
                return
        self._write(call, value, written, untaken)

    def _apply_held(self, call: Call) -> None:
        assert call.held is not None
        value, written, untaken = call.held
        call.held = None
        self._write(call, value, written, untaken)

    def _write(
        self, call: Call, value: Any, written: tuple[Term, ...], untaken: tuple[Term, ...]
    ) -> None:
        if written:  # a fire-and-forget call's result is not written anywhere
            try:
                # Earlier readers keep what the calls before them left (PROTOCOL §4).
                self._plan.capture(call.seq, written)
                # A fan-out is written whole or not at all: every term is checked as the
                # earlier ones leave the views before the first is written (PROTOCOL §4).
                messages = write_result(self.log, call, written, value, self._date or None)
            except WriteError as problem:  # nothing written, no reader woken
                self._settle(call, S.FAILED, {"type": "runtime", "message": str(problem)})
                return
            for term, message in zip(written, messages, strict=True):
                if self.messages:
                    self._actions.append(NoteMessage(message))
                self._written.add_spelled(message["_path"], call.id, 1)  # text, not the Term
                if self._waiters.size:
                    self._dirty.update(self._waiters.ids_overlapping(term))
        for term in untaken:  # an if/else plan: readers of the untaken branch are skipped
            self._skip_sources.add(term, call.id)
        call.record.output = value
        self._settle(call, S.DONE, None)

    def _settle(self, call: Call, status: CallStatus, error: dict[str, Any] | None) -> None:
        """Give a call its final status and wake everything its end can affect."""
        if call.id in self._waiting:
            self._stop_waiting(call)
        never_ready = call.status == S.WAITING
        move(call, status, self._event)
        call.record.error = error
        if error is not None:
            self._errors.append(error_message(call.wire, error))
        if self.notes:
            output = None if call.writes else call.record.output  # set only when done
            waited: Sequence[str] = ()
            if never_ready and self._declared is not None:
                waited = waited_on(call, self._declared, self._request_by_tool, self._seq_of)
            self._emit(NoteSettled(call.id, status, error, output, waited))
        if call.writes:
            if status in ERROR_STATUSES:
                self._lost_writers.lose(call, status)
            elif status == S.SKIPPED:
                for term in call.writes:
                    self._skip_sources.add(term, call.id)
            for term in call.writes:
                self._plan.remove_writer(term, call.id)
                if self._waiters.size:
                    self._dirty.update(self._waiters.ids_overlapping(term))
        woken = self._plan.ended(call.id)
        if woken:
            self._dirty.update(woken)
        if self._tool_dependents:
            for dependent in self._tool_dependents.pop(call.id, ()):
                waiter = self._calls.get(dependent)  # None: it has ended too
                if waiter is not None and waiter.tool_waits is not None:
                    waiter.tool_waits.discard(call.id)
                self._dirty.add(dependent)
        del self._calls[call.id]  # ended: what a driver asks of it is in its record

    def _report_invalid(
        self, call: Call, message: str, details: dict[str, Any], *, wire: Any
    ) -> None:
        """A call that failed its arrival checks: it never waits, runs or writes."""
        move(call, S.INVALID, self._event)
        error = structural(message, **details)
        call.record.error = error
        self._errors.append(error_message(wire, error))
        if self.notes:
            self._emit(NoteSettled(call.record.id, S.INVALID, error))

    # -- deadlocks and the end of a tick ---------------------------------------------------

    def _settle_deadlocks(self) -> bool:
        """When nothing in flight can unblock them, waiting calls that wait on each other
        are cycles. A running fire-and-forget call writes nothing, so it holds this back
        only while a waiting call waits for it by tool name (PROTOCOL §4, §5)."""
        if (
            self._stream_open
            or not self._waiting
            or self._run_queue.writers
            or self._run_queue.queued
            or self._approvals.busy
            or self._reviewing
            or self._screening.busy
            or self._awaited_fire_and_forget()
        ):
            return False
        found = deadlocks(self._waiting.values(), self._plan, self._writers, self.log, self._seq_of)
        for deadlock in found:
            if deadlock.held is not None:
                self._plan.release(deadlock.held)
                self._apply_held(self._calls[deadlock.held])
                return True
            message = f"cycle: {deadlock.cycle} (each call waits on what the next one writes)"
            for call_id in deadlock.calls:
                self._settle(
                    self._calls[call_id], S.INVALID, structural(message, cycle=deadlock.cycle)
                )
        return bool(found)

    def _awaited_fire_and_forget(self) -> bool:
        return awaits_fire_and_forget(
            self._tool_dependents, self._run_queue.running, self._calls, self._waiting
        )

    def _end_tick_if_done(self) -> None:
        if not self._tick_active or self._stream_open:
            return
        if (
            self._run_queue.writers  # calls still running: the common answer, asked first
            or self._run_queue.queued
            or self._approvals.busy
            or self._screening.busy
            or self._reviewing
        ):
            return
        if self._waiting and self._awaited_fire_and_forget():
            return
        # Only calls behind a deferred decision, and fire-and-forget ones nothing waits for, remain.
        self._tick_active = False
        paused = list(self._deferred)
        errors = self._append_errors()
        self._emit(NoteTickEnded(self._iteration, errors, paused))

    def _append_errors(self) -> list[dict[str, Any]]:
        errors, self._errors = self._errors, []
        for message in errors:
            self.log.append(message)
            if self.messages:
                self._emit(NoteMessage(message))
        return errors

    def _emit(self, action: Action) -> None:
        self._actions.append(action)


def _budget_gate(
    scheduler: Scheduler,
    budget: Ledger | None,
    ranks: Ranks | None,
    recorded: RecordedRoom | None,
) -> BudgetedRunQueue | None:
    """Only a run whose chain limits calls reserves room for each (§12), or a replayed
    record's run that follows its recorded refusals; any other counts its calls from
    their records when its usage is read (`Ledger.tally`)."""
    if budget is None:
        return None
    limited = limits_calls(budget)
    if not limited:
        budget.tally(partial(started_per_tool, scheduler.records))
        if recorded is None:
            return None
    park = partial(_defer, scheduler)  # after a deferred budget question, a resume starts it
    return BudgetedRunQueue(
        budget, scheduler._settle, scheduler._emit, ranks, park, recorded, limited=limited
    )


def started_per_tool(records: dict[str, CallRecord]) -> dict[str, int]:
    """How many calls of each tool started (PROTOCOL §12: a call counts when it starts;
    its driver notes when on its record, a replay from the journal)."""
    counts: dict[str, int] = {}
    for record in records.values():
        if record.started is not None and record.tool is not None:
            counts[record.tool] = counts.get(record.tool, 0) + 1
    return counts


def _park(scheduler: Scheduler, event: ParkCall) -> None:
    """A running call waits for decisions made elsewhere (a sub-agent's whose child run
    paused, PROTOCOL §11): it gives up its slot and is deferred; a `Decide` starts it
    again. (Beside the class, which keeps to 600 lines.)"""
    call = scheduler._calls.get(event.call_id)
    if call is None or call.status != S.RUNNING:
        status = scheduler.status(event.call_id)
        raise usage_error(event, f"{describe(event.call_id, status)} parked but was not running")
    scheduler._run_queue.park(call)
    _defer(scheduler, call)


def _defer(scheduler: Scheduler, call: Call) -> None:
    """Park a call until a `Decide`: a person's, later, or a resume's, once a deferred
    budget question (PROTOCOL §12) has more room."""
    move(call, S.DEFERRED, scheduler._event)
    scheduler._deferred[call.id] = call


# -- plan review (PROTOCOL §15), beside the class --------------------------------------------


def _under_review(scheduler: Scheduler, call: Call) -> bool:
    """A call of the open request that a review may decide: gated, not yet decided."""
    return (
        call.iteration == scheduler._iteration
        and call.tool.may_require_approval
        and call.status in (S.WAITING, S.APPROVING)
        and scheduler._approvals.asking != call.id
    )


def _ask_review(scheduler: Scheduler) -> None:
    plan = _plan_of(scheduler)
    if plan is None:  # nothing to review: the hook is asked as without a review
        scheduler._reviewing = False
        return
    scheduler._emit(AskReview(plan))


def _plan_of(scheduler: Scheduler) -> Plan | None:
    gated = sorted(
        (call for call in scheduler._calls.values() if _under_review(scheduler, call)),
        key=_by_seq,
    )
    if not gated and not scheduler._program_sites:
        return None

    def shown(call: Call) -> PendingCall:
        pending = scheduler._pending(call)
        if call.status == S.APPROVING:
            return pending
        return dataclasses.replace(pending, resolved=False)  # its params as written

    return build_plan(
        gated,
        shown,
        scheduler._calls,
        scheduler._waiters,
        scheduler._tool_dependents,
        scheduler._iteration,
        scheduler.run_id,
        program=scheduler._program,
        sites=scheduler._program_sites,
    )


def _on_review(scheduler: Scheduler, event: Review) -> None:
    if not scheduler.review_awaited:
        raise usage_error(event, "no plan review is awaited")
    scheduler._reviewing = False
    for key, decision in event.decisions.items():
        pattern = site_pattern(key)
        if pattern is None:
            call = scheduler._calls.get(key)
            targets = [call] if call is not None else []
        else:
            targets = sorted(
                (call for call in scheduler._calls.values() if pattern.fullmatch(call.id)),
                key=_by_seq,
            )
        targets = [call for call in targets if _under_review(scheduler, call)]
        # A code plan's site may make its calls later in the request (§15).
        standing = scheduler._code and scheduler._stream_open
        if standing:
            scheduler._standing.append((pattern or re.compile(re.escape(key)), decision))
        names_a_site = pattern is not None or key in scheduler._program_sites
        if not targets and not (standing and names_a_site):
            _log.warning("plan review: %r names no call awaiting review; ignored", key)
        for call in targets:
            _review_decides(scheduler, call, decision)


def _decide_by_standing(scheduler: Scheduler, call: Call) -> None:
    """A call made after the review, at a site the review decided (PROTOCOL §15)."""
    if not _under_review(scheduler, call):
        return
    for pattern, decision in scheduler._standing:
        if pattern.fullmatch(call.id):
            _review_decides(scheduler, call, decision)
            return


def _review_decides(scheduler: Scheduler, call: Call, decision: Decision) -> None:
    if scheduler._approvals.holds(call):  # ready, past its guardrails: any decision
        if isinstance(decision, Approve):
            call.record.approved_by = "review"
        scheduler._carry_out(call, decision, "review")
        return
    if not allowed_in_advance(decision):
        _log.warning(
            "plan review bug: %s cannot be given to call %s before its parameters are "
            "known (only approve, deny, defer); the approval hook will be asked",
            type(decision).__name__,
            call.id,
        )
        return
    if isinstance(decision, Approve):
        scheduler._approve_in_advance([call.id], "review")
        if decision.downstream:
            scheduler._approve_in_advance(scheduler._downstream(call), "review")
    elif isinstance(decision, Deny) and call.status == S.WAITING:
        # Denied before it is ready: it never will be, and its readers settle by §5.
        if scheduler.notes:
            scheduler._emit(NoteDecided(call.id, decision))
        move(call, S.APPROVING, scheduler._event)
        scheduler._settle(call, S.DENIED, {"type": "denied", "message": decision.reason})
    else:  # a defer, or a deny of a call at the gate or screened: at the hook's door
        scheduler._advance[call.id] = decision


def _carry_out_advance(scheduler: Scheduler, call: Call, decision: Decision) -> None:
    """A review's deny or defer reaches a call that is ready and past its guardrails."""
    if call.status != S.APPROVING:
        move(call, S.APPROVING, scheduler._event)
    scheduler._carry_out(call, decision, "review")

"""The journal writer: what a durable run records as it goes (PROTOCOL §10).

`JournalWriter` sits between the engine and the store: every scheduler event is
committed to the run's journal before the engine carries out the event's actions; every
message the outer loop appends itself (input, solution, plan) is committed as it is
appended. The `calls` rows are a view of the journal that may trail it by `ROW_LAG`
(see `JournalWriter.commit`): exact at every checkpoint a reader depends on (a decision
or deferral, a tick's end, the run's end, a resume). Resuming is `_resume.DurableRun`.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from .._core._decisions import (
    Decision,
    Defer,
    PendingCall,
    Replace,
    decision_to_dict,
)
from .._core._paths import RunPath, tag_kind
from .._core._scheduler_io import (
    Action,
    AskApproval,
    CloseStream,
    Decide,
    Event,
    FinishCall,
    NoteAccepted,
    NoteDecided,
    NoteMessage,
    NoteReady,
    NoteSettled,
    NoteTickEnded,
    OpenTick,
    ParkCall,
    ReceiveCall,
    ReportFault,
    StartCall,
)
from .._core._status import CallStatus
from .._core._tools import ToolSet
from .._errors import unwrap_single
from .._observe._events import EventSink, Redactor
from ._codec import (
    _UNCHANGING,
    arrival_text,
    deps_text,
    dumps_call,
    dumps_entry,
    event_to_dict,
    finished_text,
    received_text,
    shared_text,
)
from ._rows import ROW_LAG, Row, RowChanges
from ._writer import RunWriter

# --------------------------------------------------------------------------------------
# The binding between a running loop and the store


class JournalWriter:
    """Journals one run as it goes; see the module docstring. Resuming: `DurableRun`."""

    def __init__(
        self,
        writer: RunWriter,
        tools: ToolSet,
        redact: Redactor,
        sink: EventSink,
        *,
        path: RunPath = RunPath.ROOT,
        row_seq: int | None = None,
    ) -> None:
        # A sub-agent's child run (PROTOCOL §11) is journaled in its root's run through
        # the same writer: `path` ("c1.2", "c1.2/c2.0") tags its entries' kinds
        # ("event@c1.2"), which the root's replay leaves to it, and prefixes its rows' call
        # ids ("c1.2/c1.0"); its rows sort with the root's row `row_seq` (its agent call).
        self.path = path
        self._row_seq = row_seq
        # Plan messages refer to calls by entry number (`shared_text`), which holds only
        # while this run's entries are the journal's only ones: not in a tree of runs.
        self.share = not path
        self.writer = writer
        self.tools = tools
        self.redact = redact
        self.sink = sink
        self.rows: dict[str, Row] = {}
        # Call id -> (the wire its row's `call` is the JSON of, unredacted: nothing in it
        # was secret; the number of the CallReceived entry it was made from on arrival,
        # or None): a plan message refers to those (`shared_text`). This iteration's.
        self._clean: dict[str, tuple[Any, int | None]] = {}
        # The call of the ReceiveCall being recorded and its JSON (`received_text`), and
        # the number its entry will have.
        self._received: tuple[dict[str, Any], str] | None = None
        self._received_number: int | None = None
        # This iteration's calls journaled with their text, their entries' numbers and
        # the calls: the solution message refers to them (`shared_text`).
        self._arrived: tuple[list[int], list[Any]] = ([], [])
        self._numbered = writer.seq  # entries in the journal before this process's first
        self.ready_params: dict[str, Any] = {}  # so a start need not serialise them again
        # Followed on replay only, and read right after it (`reopen`, a tools run's
        # recovery): the calls started and not finished; the `_id`s (None for a fault of
        # the iteration itself) of the calls handed to the current tick, what a tools
        # run's recovery must not hand over twice.
        self.running: dict[str, StartCall] = {}
        self.handed: set[str | None] = set()
        self.asking: PendingCall | None = None
        self.iteration = 0
        self.solutions: set[int] = set()
        self.plan_due = False
        self.verdicts: dict[int, Any] = {}  # iteration -> accepted output (None: none)
        # Every guardrail verdict journaled so far (PROTOCOL §15), in order, as its
        # `guardrail` note: a resume asks no input or output guardrail twice.
        self.guardrails: list[dict[str, Any]] = []
        # A code plan's program text so far, by iteration: its journaled statements
        # (PROTOCOL §14), the program a resume runs when the stream had not closed.
        self.programs: dict[int, str] = {}
        self.unresolved: set[int] = set()  # iterations whose output awaits its tick (§8)
        self.decisions: dict[str, Decision] = {}
        self.parked: set[str] = set()  # sub-agent calls parked while their child paused
        # What MCP servers were answered (questions, model requests), journaled by the
        # question desk: note bodies by key ("c1.0#0"), read back by a resume's replay.
        self.answers: dict[str, dict[str, Any]] = {}
        # Verdicts recorded in the store for calls parked on a deferred question, by call
        # id: a resume hands each to the desk, which answers that question with it.
        self.question_verdicts: dict[str, Any] = {}
        # Calls (full ids) whose server's question was deferred: their park is a deferral
        # a person decides (their row says `deferred`), not a sub-agent's.
        self.deferred_questions: set[str] = set()
        self.resumed = False
        self._pending: list[tuple[float, str, str]] = []
        # Events recorded that `_track` has not followed yet (see `record`): (event,
        # actions, time, mark, the place in `_pending` of an entry whose text is made
        # when it is followed, or -1 for an entry made when recorded).
        self._recorded: list[tuple[Event, list[Action], float, int, int]] = []
        self._wakeup: trio.Event | None = None
        self._added = self._committed = 0  # entries recorded / committed by this process
        # Call id -> the entry that must be committed before it acts; `_mark` is the
        # entry of the event being followed (0 on replay: all committed already).
        self._marks: dict[str, int] = {}
        self._mark = 0
        self.wall0 = time.time()
        self.trio0 = trio.current_time()
        self._clock = trio.lowlevel.current_clock()  # read per event: no lookup of the run
        self.changes = RowChanges(self._clock)  # the rows waiting to be written

    def now(self) -> float:
        """The run clock: trio time, placed on the wall clock when this process began.

        Monotonic within a process (and virtual under a MockClock, so a test's timeline
        is meaningful), and comparable across the processes a resumed run passes through.
        """
        return self.wall0 + (self._clock.current_time() - self.trio0)

    # -- writing -----------------------------------------------------------------------

    def record(self, event: Event, actions: list[Action]) -> None:
        """The engine's journal hook: called after the scheduler, before any action.

        The event's entry takes its place among the entries now. Its text is made now
        too when a value in it may still change (a result the tool keeps is stored as it
        was returned), and when the event is followed otherwise (a received call; a
        result that is a number, a string or null: nothing changes them). What the event
        changes in the rows is worked out later (`_follow_recorded`), for every event
        recorded since, at the next commit that writes or the next message: that is
        before any of its calls acts (a call acts only once its start is committed), and
        one pass over a batch of events costs less than a pass per event between the
        scheduler's and trio's work. (A call whose start is committed already commits
        nothing, so the results of one trio batch's calls are followed together, not one
        by one.)
        """
        at = self.now()
        # A call started (or asked about) by this event may act once this entry, the
        # next one recorded, is committed (`commit(call_id)`); `_track` marks it so.
        mark = self._added + 1
        later = -1  # the place of an entry whose text is made when it is followed
        if type(event) is ReceiveCall:
            # A received call is tickloop's own (parsed from the model's answer, or made
            # from its tool call), which nothing changes: its entry's text is made when
            # it is followed, in its place among the entries, held until then.
            self._add_text(at, "event", "")
            later = len(self._pending) - 1
        elif type(event) is FinishCall:
            if type(event.value) in _UNCHANGING and event.error is None and event.branch is None:
                self._add_text(at, "event", "")  # a value nothing can change: made later too
                later = len(self._pending) - 1
            else:
                self._add_text(at, "event", finished_text(event))
        else:
            self._add(at, "event", event_to_dict(event))
        self._recorded.append((event, actions, at, mark, later))

    def _follow_recorded(self) -> None:
        """Follow, in order, the events recorded and not followed yet (`record`)."""
        recorded, self._recorded = self._recorded, []
        pending = self._pending
        for index, (event, actions, at, mark, place) in enumerate(recorded):
            try:
                if type(event) is ReceiveCall:
                    self._follow_received(event, actions, at, mark, pending, place)
                    continue
                if place >= 0 and type(event) is FinishCall:  # a result nothing changes
                    pending[place] = (at, "event", finished_text(event))
                self._track(event, actions, at, mark)
            except BaseException:
                self._recorded = recorded[index + 1 :] + self._recorded  # left to follow
                raise

    def _follow_received(
        self,
        event: ReceiveCall,
        actions: list[Action],
        at: float,
        mark: int,
        pending: list[tuple[float, str, str]],
        place: int,
    ) -> None:
        # The call is encoded once, for its entry and (through `_received`) its row.
        text, received = received_text(event)
        number = self._numbered + mark  # its entry's
        pending[place] = (at, "event", text)
        self._received = received
        self._received_number = None if received is None else number
        try:
            self._track(event, actions, at, mark)
        finally:
            self._received = self._received_number = None
        if received is not None:
            numbers, calls = self._arrived
            numbers.append(number)
            calls.append(event.call)

    def journal_messages(self, messages: Sequence[dict[str, Any]]) -> None:
        if self._recorded:
            self._follow_recorded()  # a plan refers to the rows of the calls it holds
        at = self.now()
        for message in messages:
            self._track_message(message)
            text = (
                shared_text(message, self._clean, self.rows, self._arrived) if self.share else None
            )
            if text is None:
                self._add(at, "message", message)
            else:
                self._add_text(at, "message", text)

    def note(self, name: str, **data: Any) -> None:
        """Something replay does not need but the timeline does (retries, restarts...),
        or an answer to an MCP server, which a resume reads back (`QuestionDesk`)."""
        body = {"note": name, **data}
        self._follow_note(body)  # reads it only
        self._add(self.now(), "note", body)

    def _follow_note(self, body: dict[str, Any]) -> None:
        if body.get("note") == "question" and body.get("deferred"):
            self.deferred_questions.add(str(body.get("call_id")))

    def _add(self, at: float, kind: str, body: Any) -> None:
        self._add_text(at, kind, dumps_entry(body))

    def _add_text(self, at: float, kind: str, text: str) -> None:
        pending = self._pending
        if not pending and self._wakeup is not None:
            self._wakeup.set()  # the first entry since the last commit wakes the flusher
        pending.append((at, kind, text))
        self._added += 1

    def commit(self, call_id: str | None = None, *, rows: bool = False) -> None:
        """Commit every entry recorded so far, and the call rows when they are due.

        With `call_id`, only when the entry that started (or asked about) that call is
        not committed yet: calls that start together share one commit.

        Group commit: entries wait in memory until the engine is about to act (it calls
        this before a handler runs or the hook is asked) or until the flusher task gets
        its turn, which is the next trio scheduling batch. Nothing acts on an entry that
        is not committed, so losing uncommitted entries in a crash is the same as
        crashing a moment earlier; and one transaction per batch instead of one per
        event keeps durability cheap.

        The rows changed since their last write go in the same transaction when a reader
        of rows depends on it (`RowChanges.checkpoint`: a decision or deferral, a tick's end, a
        resume), when `rows` is true (the run's end), or when the oldest change is
        `ROW_LAG` old; otherwise they wait, coalesced per call. A crash may so leave the
        rows up to `ROW_LAG` behind the journal; a resume rewrites them from it.
        """
        if call_id is not None:
            # Every committed entry was followed first (below), so a call whose mark is
            # not known yet was started by an event not followed, not committed either.
            mark = self._marks.pop(call_id, None)
            if mark is not None and mark <= self._committed:
                return  # most calls: the events recorded since wait for the next commit
        if self._recorded:
            self._follow_recorded()  # before the rows are read
            if call_id is not None:
                self._marks.pop(call_id, None)  # set by following, and committed below
        changes = self.changes
        due = changes.due(rows)
        if not self._pending and not due:
            return
        self._committed = self._added
        entries, self._pending = self._pending, []
        if self.path:  # a child run's entries, in its root's journal
            path = self.path
            entries = [(at, tag_kind(kind, path), text) for at, kind, text in entries]
        dirty: dict[str, Row] = {}
        settled: dict[str, Row] = {}
        if due:
            dirty, settled = changes.take()
        current = changes.since is None or due  # no row change waits after this commit
        run_id = self.writer.run_id
        new = [row.lean_values(run_id) for row in dirty.values() if not row.stored]
        changed = [row.changes(run_id) for row in dirty.values() if row.stored]
        try:
            self.writer.append(
                entries,
                new,
                changed,
                [row.settled(run_id) for row in settled.values()],
                rows_current=current,
                rewrite=due and changes.rewrite,
            )
        except BaseException:
            # Kept, so no later commit can store what followed them without them: the
            # journal stays a prefix of what happened, as after a crash at this moment.
            self._pending = entries + self._pending
            changes.put_back(dirty, settled)
            raise
        for row in dirty.values():
            row.stored = True
        if due:
            changes.written()

    @asynccontextmanager
    async def flushing(self) -> AsyncIterator[None]:
        """Run the flusher beside the loop; commit whatever is left on the way out."""
        try:
            with unwrap_single():
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._flush_soon)
                    try:
                        yield
                    finally:
                        nursery.cancel_scope.cancel()
        finally:
            self.commit(rows=True)  # the run's end (or pause, or failure): rows exact

    async def _flush_soon(self) -> None:
        """Commit at the next scheduling batch after an entry, and write the waiting rows
        once the oldest change is `ROW_LAG` old even if nothing else is recorded (a run
        whose calls all take minutes still shows them running)."""
        while True:
            self._wakeup = trio.Event()
            if self._pending:
                self._wakeup.set()
            since = self.changes.since
            with trio.move_on_at(math.inf if since is None else since + ROW_LAG):
                await self._wakeup.wait()
            self.commit()

    def statement(self, iteration: int, index: int, line: int, program: str) -> None:
        """A code plan's statement is complete (PROTOCOL §14): journaled, with the
        program's text so far, before any of its calls starts (they start only once
        their own entries, which come after this one, are committed)."""
        self.programs[iteration] = program
        self.note("statement", iteration=iteration, index=index, line=line, program=program)

    def guardrail(self, entry: dict[str, Any]) -> None:
        """A guardrail's verdict (PROTOCOL §15), committed before the run acts on it (a
        gate opened, a trip): a resume reuses it instead of asking again."""
        self.guardrails.append(entry)
        self.note("guardrail", **entry)
        self.commit()

    def verdict(self, iteration: int, output: Any, *, unresolved: bool = False) -> None:
        """The loop's judgement of an iteration's answer: its accepted output, or None.

        `unresolved`: an output with references, resolved once the tick is over (§8); a
        resume that finishes the tick resolves it then.
        """
        self.verdicts[iteration] = output
        if unresolved:
            self.unresolved.add(iteration)
            self.note("verdict", iteration=iteration, output=output, unresolved=True)
        else:
            self.unresolved.discard(iteration)
            self.note("verdict", iteration=iteration, output=output)

    # -- tracking (live and on replay) -------------------------------------------------

    def _track_message(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "solution":
            self.solutions.add(message.get("iteration", 0))
        elif kind == "plan":
            self.plan_due = False

    def _track(self, event: Event, actions: list[Action], at: float, mark: int = 0) -> None:
        """Follow the run's state; changed call rows are kept for the next commit.

        `mark`: the number of the entry recording this event, which a call it starts or
        asks about must see committed first (0 on replay: those entries are committed).
        """
        self._mark = mark
        # The two events of every call are told by their type, before any isinstance.
        if type(event) is FinishCall:
            # Not running any more, even while its write is held (PROTOCOL §4): the
            # journaled result is replayed and applied in plan order, never run again.
            if not mark:
                self.running.pop(event.call_id, None)
        elif type(event) is ReceiveCall:
            if not mark:  # `handed` is replay's: the call's id, as the scheduler gave it
                for action in actions:
                    if isinstance(action, NoteAccepted | NoteSettled):  # before others'
                        self.handed.add(action.id)
                        break
        elif type(event) is ReportFault:
            if not mark:
                self.handed.add(None)
        elif isinstance(event, OpenTick):
            self.iteration = event.iteration
            self.plan_due = False
            self._clean = {}  # the plan of the iteration before is journaled already
            self._arrived = ([], [])
            self.handed = set()
        elif isinstance(event, CloseStream):
            self.plan_due = True
        elif type(event) is ParkCall:
            # A sub-agent's call whose child paused: not running, and started again on
            # resume (`reopen`), where its child replays its own journal.
            if not mark:
                self.running.pop(event.call_id, None)
            self.parked.add(event.call_id)
            row = self.rows.get(event.call_id)
            if row is not None and self.path.full(event.call_id) in self.deferred_questions:
                row.status = CallStatus.DEFERRED  # parked on a question: a person decides
                self.changes.changed(row, False)
                self.changes.at_checkpoint()
        elif type(event) is Decide:
            self.parked.discard(event.call_id)  # started again
        # One lookup per action instead of a chain of isinstance tests: this runs for
        # every action of every event, several per call.
        handlers = _HANDLERS
        changed = self.changes.changed
        for action in actions:
            kind = type(action)
            handler = handlers[kind] if kind in handlers else _handler(kind)
            if handler is None:
                continue
            row = handler(self, action, event, at)
            if row is not None:
                changed(row, handler is _ON_SETTLED)

    def _on_tick_ended(self, action: NoteTickEnded, event: Event, at: float) -> None:
        self.changes.at_checkpoint()  # a pause, or what the next request is made from

    def _on_ask(self, action: AskApproval, event: Event, at: float) -> Row:
        if self._mark:
            self._marks[action.pending.id] = self._mark
        row = self.rows[action.pending.id]
        row.status, row.asked = CallStatus.APPROVING, at
        self.asking = action.pending
        return row

    def _on_accepted(self, action: NoteAccepted, event: Event, at: float) -> Row:
        row = self._new_row(action.id, action.tool, at)
        call = action.call
        shared = self.redact.shared(call)
        if shared is call:
            received = self._received
            text = None if received is None else arrival_text(call, received)
            row.call = dumps_call(call) if text is None else text
            self._clean[action.id] = (call, self._received_number)
        else:
            row.call = dumps_call(shared)
        return row

    def _on_settled(self, action: NoteSettled, event: Event, at: float) -> Row:
        row = self.rows.get(action.id)
        if row is None:  # failed its arrival checks, so it was never accepted
            call = event.call if isinstance(event, ReceiveCall) else None
            tool = call.get("_tool") if isinstance(call, dict) else None
            row = self._new_row(action.id, tool if isinstance(tool, str) else None, at)
            row.call = dumps_call(self.redact.shared(call))
        row.status, row.finished = action.status, at
        row.error = None if action.error is None else dumps_entry(self.redact.shared(action.error))
        waited = action.waited_on
        if waited:
            # Settled without ever being ready (its writer was denied, failed...): the
            # timeline still draws what it waited on, as the scheduler says.
            full = self.path.full
            row.deps = deps_text([full(other) for other in waited] if self.path else waited)
        if not self._mark:
            self.running.pop(action.id, None)
        self.ready_params.pop(action.id, None)
        return row

    def _on_ready(self, action: NoteReady, event: Event, at: float) -> Row | None:
        row = self.rows.get(action.id)
        if row is None:
            return None
        row.status, row.ready = CallStatus.QUEUED, at
        row.params = dumps_entry(self.redact.shared(action.params))
        self.ready_params[action.id] = action.params
        waits = action.waits_on  # the scheduler says whom it waited on
        if waits and self.path:
            waits = [self.path.full(other) for other in waits]
        row.deps = deps_text(waits) if waits else "[]"
        return row

    def _on_decided(self, action: NoteDecided, event: Event, at: float) -> Row | None:
        row = self.rows.get(action.id)
        if row is None:
            return None
        self.changes.at_checkpoint()  # `decide` and the inbox read a deferral from its row
        row.decided = at
        row.decision = dumps_entry(self.redact.shared(decision_to_dict(action.decision)))
        if self.asking is not None and self.asking.id == action.id:
            self.asking = None
        if isinstance(action.decision, Defer):
            row.status = CallStatus.DEFERRED
        else:
            row.status = CallStatus.QUEUED
            if isinstance(action.decision, Replace):
                wire = action.decision.call
                shared = self.redact.shared(wire)
                row.call = dumps_call(shared)
                if shared is wire:
                    self._clean[action.id] = (wire, None)
                else:
                    self._clean.pop(action.id, None)
                tool = wire.get("_tool") if isinstance(wire, dict) else None
                row.tool = tool if isinstance(tool, str) else row.tool
        return row

    def _on_start(self, action: StartCall, event: Event, at: float) -> Row | None:
        if self._mark:
            self._marks[action.id] = self._mark
        row = self.rows.get(action.id)
        if row is None:
            return None
        if not self._mark:
            self.running[action.id] = action  # replay's
        row.status = CallStatus.RUNNING
        if row.started is None or not self._resumes(action.tool):
            row.started = at  # a call that resumes keeps its first start
        if action.params is not self.ready_params.pop(action.id, None):  # edited
            row.params = dumps_entry(self.redact.shared(action.params))
        return row

    def _resumes(self, tool: str) -> bool:
        found = self.tools.get(tool)
        return found is not None and found.resumes

    def _new_row(self, call_id: str, tool: str | None, at: float) -> Row:
        seq = len(self.rows) if self._row_seq is None else self._row_seq
        row = Row(self.path.full(call_id), seq, self.iteration, tool, at)
        self.rows[call_id] = row
        return row


_Handler = Callable[[JournalWriter, Any, Event, float], Row | None]
_HANDLERS: dict[type, _Handler | None] = {
    NoteMessage: None,  # a write: at a path its call declared (`_declared`)
    AskApproval: JournalWriter._on_ask,
    NoteAccepted: JournalWriter._on_accepted,
    NoteSettled: JournalWriter._on_settled,  # _ON_SETTLED
    NoteReady: JournalWriter._on_ready,
    NoteDecided: JournalWriter._on_decided,
    StartCall: JournalWriter._on_start,
    NoteTickEnded: JournalWriter._on_tick_ended,
}


_ON_SETTLED = _HANDLERS[NoteSettled]


def _handler(kind: type) -> _Handler | None:
    """The handler of an action type the table lacks (a subclass; or none, remembered)."""
    found = next((h for base, h in list(_HANDLERS.items()) if issubclass(kind, base)), None)
    _HANDLERS[kind] = found
    return found

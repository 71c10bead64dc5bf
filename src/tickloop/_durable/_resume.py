"""Durable runs: journal a run as it goes, and resume it by replaying the journal.

A run is event sourced (PROTOCOL §10). `DurableRun` sits between the engine and the
store: every scheduler event is committed to the run's journal before the engine carries
out the event's actions; every message the outer loop appends itself (input, solution,
plan) is committed as it is appended. The `calls` rows are a view of the journal that
may trail it by `ROW_LAG` (see `DurableRun.commit`): exact at every checkpoint a reader
depends on (a decision or deferral, a tick's end, the run's end, a resume).

To resume, the journal is replayed into a fresh scheduler without carrying out any
action: the log, every call's state and the tick's position come back exactly as they
were. `recover` then settles what the crash left open:

* a call that had started and not finished runs again if its tool is `idempotent`;
  otherwise it finishes `failed` with a runtime error saying it was interrupted;
* a call whose approval was being asked is asked again;
* decisions recorded for deferred calls are applied;
* a request whose stream had closed is never sent again; a stream that was still open
  is closed (the calls that arrived keep running) with a structural error telling the
  model its answer was cut off, and the loop goes on with the next iteration.

Replay and the settling of calls (`reopen`) serve both protocols' loops; what a crash
means for the request itself differs, so each protocol's loop settles its own, in
`tickloop._agent` (`_SolutionLoop._recover`, `_TurnLoop._recover`): this module runs no
protocol's loop and knows no agent. It knows the shapes of the solution protocol's plan
and solution messages, only to store their calls once (`shared_text`).
"""

from __future__ import annotations

import math
import operator
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from json.encoder import JSONEncoder, encode_basestring, encode_basestring_ascii
from typing import Any, Protocol

import trio

from .._core._budget import Budget
from .._core._decisions import (
    Approve,
    Decision,
    Defer,
    PendingCall,
    Replace,
    decision_from_dict,
    decision_to_dict,
)
from .._core._expressions import (
    Term,
    find_references,
    is_reference,
    parse_expression,
)
from .._core._log import ContextLog, has_surrogate
from .._core._path_index import PathIndex as _PathIndex
from .._core._scheduler_io import (
    Action,
    AnswerBudget,
    AskApproval,
    CloseStream,
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
    OpenTick,
    ParkCall,
    ReceiveCall,
    ReportFault,
    SpendBudget,
    StartCall,
)
from .._core._status import CallStatus
from .._core._tools import ToolSet
from .._engine._engine import Engine, utc_now
from .._errors import ResumeError, StoreError, unwrap_single
from .._observe._events import EventSink, Redactor
from ._store import CALL_COLUMNS, LEAN_COLUMNS, SHARED, RunWriter, damaged_entry

__all__ = [
    "CUT_OFF",
    "INTERRUPTED",
    "ROW_LAG",
    "UNCHECKED",
    "DurableLoop",
    "DurableRun",
    "dumps_entry",
    "event_from_dict",
    "event_to_dict",
    "new_run_id",
]


class DurableLoop(Protocol):
    """What replay needs of an outer loop (either protocol's): its engine and its log."""

    engine: Engine
    log: ContextLog


INTERRUPTED = {
    "type": "runtime",
    "message": "interrupted: the process running this call stopped before it finished",
}
CUT_OFF = "the model's answer was cut off by a crash"
# How long (seconds of trio time) a change to a call's row may wait before it is written
# when no checkpoint comes first. The journal is the record and is never late; the rows
# are what `tickloop runs|trace` and the timeline show of a live or crashed run, so they
# may be this much behind it, and are exact at every checkpoint (DurableRun.commit).
ROW_LAG = 0.25
UNCHECKED = (
    "the process stopped before the model's answer was checked; its output, if any, was not used"
)


# --------------------------------------------------------------------------------------
# Events as JSON


def event_to_dict(event: Event) -> dict[str, Any]:
    """A scheduler event as JSON data; `event_from_dict` turns it back."""
    if isinstance(event, FinishCall):
        body: dict[str, Any] = {
            "type": "CallFinished",
            "call_id": event.call_id,
            "value": event.value,
        }
        if event.branch is not None:
            body["branch"] = event.branch
        if event.error is not None:
            body["error"] = event.error
    elif isinstance(event, ReceiveCall):
        body = {"type": "CallReceived", "call": event.call}
    elif isinstance(event, Decide):
        body = {
            "type": "DecisionMade",
            "call_id": event.call_id,
            "decision": decision_to_dict(event.decision),
        }
    elif isinstance(event, OpenTick):
        body = {"type": "TickOpened", "iteration": event.iteration}
        if event.plan_order:
            body["plan_order"] = True
    elif isinstance(event, CloseStream):
        body = {"type": "StreamClosed"}
    elif isinstance(event, ReportFault):
        body = {"type": "FaultReported", "error": event.error, "call": event.call}
    elif isinstance(event, Flush):
        body = {"type": "Flush"}
    elif isinstance(event, ParkCall):
        body = {"type": "CallParked", "call_id": event.call_id}
    elif isinstance(event, SpendBudget):
        body = {"type": "BudgetSpent", "amount": event.amount}
    elif isinstance(event, AnswerBudget):
        grant = event.grant.to_dict() if isinstance(event.grant, Budget) else event.grant
        body = {"type": "BudgetAnswered", "limit": event.limit, "grant": grant}
    else:
        raise TypeError(f"not a scheduler event: {event!r}")
    body["date"] = event.date
    return body


def event_from_dict(data: Mapping[str, Any]) -> Event:
    kind = data["type"]
    date = data.get("date", "")
    if kind == "CallFinished":
        return FinishCall(
            data["call_id"], data.get("value"), data.get("branch"), data.get("error"), date
        )
    if kind == "CallReceived":
        return ReceiveCall(data["call"], date)
    if kind == "DecisionMade":
        return Decide(data["call_id"], decision_from_dict(data["decision"]), date)
    if kind == "TickOpened":
        # A journal written before plan order replays its ticks with the old rule.
        return OpenTick(data["iteration"], date, bool(data.get("plan_order", False)))
    if kind == "StreamClosed":
        return CloseStream(date)
    if kind == "FaultReported":
        return ReportFault(data["error"], data.get("call"), date)
    if kind == "Flush":
        return Flush(date)
    if kind == "CallParked":
        return ParkCall(data["call_id"], date)
    if kind == "BudgetSpent":
        return SpendBudget(dict(data["amount"]), date)
    if kind == "BudgetAnswered":
        grant = data.get("grant")
        return AnswerBudget(
            data["limit"], Budget.from_dict(grant) if isinstance(grant, dict) else grant, date
        )
    raise ValueError(f"unknown journal event type {kind!r}")


# Compact JSON, made by encoders built once (`json.dumps` builds one per call). No cycle
# check: a cycle (impossible in JSON data) ends in a RecursionError instead, which
# `dumps_entry` reports like any other unstorable value.
_JSON = JSONEncoder(ensure_ascii=False, check_circular=False, separators=(",", ":"))
_JSON_ASCII = JSONEncoder(check_circular=False, separators=(",", ":"))


def dumps_entry(value: Any) -> str:
    """JSON text for the store. A lone surrogate (a call the model sent with `"\\ud800"`,
    refused on arrival but journaled as it came, so the replay refuses it again) is kept
    as its `\\u` escape: SQLite stores UTF-8, which has no form for it."""
    try:
        text = _JSON.encode(value)
        return _JSON_ASCII.encode(value) if has_surrogate(text) else text
    except (TypeError, ValueError, RecursionError) as error:
        raise StoreError(f"a value of this run cannot be stored as JSON: {error}") from error


def dumps_call(value: Any) -> str:
    """A call's JSON for the store (its CallReceived entry, its row), in ASCII.

    Nearly every call holds a dagger (its `_outputPath`, its references), which would
    make each text built from it a two-byte string in Python, and a UTF-8 encoding when
    SQLite takes it: escaped, the text stays one byte a character, and a lone surrogate
    needs no path of its own. A call is short, so its non-ASCII text costs little room
    escaped; values (results, parameters) keep `dumps_entry`'s UTF-8.
    """
    try:
        return _JSON_ASCII.encode(value)
    except (TypeError, ValueError, RecursionError) as error:
        raise StoreError(f"a value of this run cannot be stored as JSON: {error}") from error


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


# --------------------------------------------------------------------------------------
# One call's row


class _Row:
    """The `calls` row of one call, kept in memory and rewritten whenever it changes."""

    __slots__ = (*CALL_COLUMNS, "stored")

    def __init__(self, call_id: str, seq: int, iteration: int, tool: str | None, at: float) -> None:
        # Whether this process has committed the row: then a change updates it in place.
        # False after a replay too, so a resume's first write of a row replaces it whole.
        self.stored = False
        self.call_id = call_id
        self.seq = seq
        self.iteration = iteration
        self.tool = tool
        self.status: str = CallStatus.WAITING
        self.call: str | None = None
        self.params: str | None = None
        self.deps: str | None = None
        self.decision: str | None = None
        self.error: str | None = None
        self.received: float | None = at
        self.ready: float | None = None
        self.asked: float | None = None
        self.decided: float | None = None
        self.started: float | None = None
        self.finished: float | None = None

    def values(self, run_id: str) -> tuple[Any, ...]:
        """The run id, then the row in CALL_COLUMNS order (spelled out: this runs once per
        changed row)."""
        return (
            run_id,
            self.call_id,
            self.seq,
            self.iteration,
            self.tool,
            _text(self.status),
            self.call,
            self.params,
            self.deps,
            self.decision,
            self.error,
            self.received,
            self.ready,
            self.asked,
            self.decided,
            self.started,
            self.finished,
        )

    def lean_values(self, run_id: str) -> tuple[Any, ...]:
        """`values`, without the USUALLY_NULL columns when they are NULL (most rows)."""
        values = self.values(run_id)
        if self.decision is None and self.error is None and self.asked is None:
            if self.decided is None:
                return _LEAN(values)
        return values

    def changes(self, run_id: str) -> tuple[Any, ...]:
        """The row in CHANGING_COLUMNS order, then the run and call ids (an UPDATE's)."""
        return (*self.values(run_id)[4:], run_id, self.call_id)

    def settled(self, run_id: str) -> tuple[Any, ...]:
        """What settling changes (SETTLED_COLUMNS), then the run and call ids."""
        return (_text(self.status), self.error, self.deps, self.finished, run_id, self.call_id)


# The run id and LEAN_COLUMNS out of a row's `values`.
_LEAN = operator.itemgetter(0, *(1 + CALL_COLUMNS.index(name) for name in LEAN_COLUMNS))

# A status as the plain string it equals: sqlite3 binds a `str` subclass (a `CallStatus`)
# through its adapter protocol, several times the cost of binding the string.
_text = str.__str__


def received_text(event: ReceiveCall) -> tuple[str, tuple[dict[str, Any], str] | None]:
    """A CallReceived entry's JSON, the text `dumps_call(event_to_dict(event))` makes,
    built around the call's own text; and the call with that text, for the row of the
    call it is accepted as (`arrival_text`), or None."""
    call, date = event.call, event.date
    if type(call) is dict and type(date) is str:
        try:
            call_text = _JSON_ASCII.encode(call)
        except (TypeError, ValueError, RecursionError):
            pass  # dumps_call says why
        else:
            date_text = encode_basestring_ascii(date)
            text = f'{{"type":"CallReceived","call":{call_text},"date":{date_text}}}'
            return text, (call, call_text)
    return dumps_call(event_to_dict(event)), None


# Results whose entry may be made after the tool returned: nothing can change them since.
_UNCHANGING = frozenset({int, str, type(None), float, bool})

_BIG = 10**100  # ints beyond it take the general path (too long to write: a StoreError)


def finished_text(event: FinishCall) -> str:
    """A CallFinished entry's JSON, the text `dumps_entry(event_to_dict(event))` makes,
    without building the dict: one per call. A value that is not a plain int, string or
    null, a branch, an error or a lone surrogate takes the general path."""
    call_id, value, date = event.call_id, event.value, event.date
    if (
        event.branch is None
        and event.error is None
        and type(call_id) is str
        and type(date) is str
        and (value is None or type(value) is str or (type(value) is int and -_BIG < value < _BIG))
    ):
        if value is None:
            value_text = "null"
        elif type(value) is str:
            value_text = encode_basestring(value)
        else:
            value_text = int.__repr__(value)
        text = (
            f'{{"type":"CallFinished","call_id":{encode_basestring(call_id)},'
            f'"value":{value_text},"date":{encode_basestring(date)}}}'
        )
        if text.isascii() or not has_surrogate(text):
            return text
    return dumps_entry(event_to_dict(event))


def deps_text(waits: Sequence[str]) -> str:
    """`dumps_entry(list(waits))` for call ids, joined from their C-escaped texts."""
    text = "[" + ",".join(map(encode_basestring, waits)) + "]"
    if text.isascii() or not has_surrogate(text):
        return text
    return dumps_entry(list(waits))


def arrival_text(wire: dict[str, Any], received: tuple[dict[str, Any], str]) -> str | None:
    """`dumps_call(wire)` of the wire the scheduler made on a call's arrival, built from
    the received call's text; None when it cannot be (`dumps_call` then encodes it).

    That wire is the received call copied with its `_id` set (`_core._arrival.new_call`),
    so when the call had no `_id` it is the call plus its `_id` last, and nothing else:
    its text is the call's with the `_id` member added, without comparing the two member
    by member. None otherwise (an `_id` of the model's).
    """
    call, call_text = received
    call_id = wire["_id"]
    if "_id" in call or len(wire) != len(call) + 1 or type(call_id) is not str:
        return None
    id_text = encode_basestring_ascii(call_id)
    return f'{{"_id":{id_text}}}' if not call else f'{call_text[:-1]},"_id":{id_text}}}'


def shared_text(
    message: dict[str, Any],
    clean: dict[str, tuple[Any, int | None]],
    rows: dict[str, _Row],
    arrived: tuple[list[int], list[Any]],
) -> str | None:
    """The body of a SHARED message entry standing for a plan or solution message whose
    calls are the calls journaled as they arrived, or None for any other message.

    A plan of a thousand calls would otherwise store every call three times over (its
    CallReceived entry, the solution message, the plan message): here the message is
    stored without its calls (`"message"`, the calls' place in it, `"path"`, held by a
    null), and each call as a reference (`"calls"`): `n`, the call of CallReceived entry
    `n`; `[n, id]`, that call with `_id` set to `id` (a plan's wire, as the scheduler made
    it on arrival); `[value]`, the value itself. `_store.expand_shared` puts them back.
    Only calls equal to what was journaled are referenced (the wire the scheduler made
    from the received call, `clean`; the calls handed on, `arrived`: their entries'
    numbers and the calls), so the message read back is the one journaled. A plan's
    wire replaced by a reviewer is its row's text (encoded once, when it was decided).
    None for any other message, for a plan of no calls, and for a solution none of whose
    calls is shared.
    """
    kind = message.get("type")
    parts: list[str] = []
    shared = False
    if kind == "plan" and len(message) == 2 and next(iter(message)) == "type":
        calls = message.get("calls")
        if type(calls) is not list or not calls:
            return None
        path = '["calls"]'
        for call in calls:
            call_id: Any = call.get("_id") if type(call) is dict else None
            kept = clean.get(call_id) if call_id is not None else None
            if kept is None or kept[0] != call:
                parts.append(f"[{dumps_entry(call)}]")
                continue
            number = kept[1]
            if number is None:
                parts.append(f"[{rows[call_id].call}]")  # its row's text: the very wire's
            else:
                parts.append(f"[{number},{encode_basestring_ascii(call_id)}]")
        rest: dict[str, Any] = {"type": "plan", "calls": None}
    elif kind == "solution" and arrived[1]:
        solution: Any = message.get("solution")
        calls = solution.get("calls") if type(solution) is dict else None
        if type(calls) is not list:
            return None
        path = '["solution","calls"]'
        numbers, handed = arrived
        if calls == handed:
            parts = list(map(int.__repr__, numbers))  # every call, in order: most solutions
        else:
            # The calls handed on are in the solution in the order they arrived, among
            # others that were not (not objects, cut off): each is referred to, the rest
            # stored as they are.
            position = 0
            for call in calls:
                if position < len(handed) and call == handed[position]:
                    parts.append(int.__repr__(numbers[position]))
                    position += 1
                    shared = True
                else:
                    parts.append(f"[{dumps_entry(call)}]")
            if not shared:
                return None
        rest = {**message, "solution": {**solution, "calls": None}}
    else:
        return None
    return (
        f'{{"type":"{SHARED}","message":{dumps_entry(rest)},"path":{path},'
        f'"calls":[{",".join(parts)}]}}'
    )


class _UnreadyArrows:
    """What a call that settles without ever being ready (its writer was denied, failed...)
    waited on, which the timeline still draws: the calls that said they would write what
    it reads (those that wrote it, and those that ended without writing; every write is at
    a path its call declared, so no index of writes is kept), and, for a tool's
    `depends_on`, the earlier calls of that tool. A ready call's arrows come from the
    scheduler (`NoteReady.waits_on`), so the indexes here are built only for such a call,
    from the calls accepted since the last one."""

    def __init__(self, tools: ToolSet) -> None:
        self.tools = tools
        # Every call's wire as accepted (a replacement's, once decided), in event order:
        # as it was at the event the arrows are drawn at, which the scheduler's records,
        # followed later (`DurableRun.record`), may no longer say.
        self.wires: dict[str, Any] = {}
        self.declared = _PathIndex()
        # The calls accepted, in order, and how many `declared` and `by_tool` have filed.
        self.accepted: list[str] = []
        self.declared_upto = self.by_tool_upto = 0
        self.by_tool: dict[tuple[int, str], list[str]] = {}

    def accept(self, call_id: str, wire: Any) -> None:
        self.wires[call_id] = wire
        self.accepted.append(call_id)  # filed only if `_declared` or `_by_tool` is asked

    def replace(self, call_id: str, wire: Any) -> None:
        self.wires[call_id] = wire  # a reviewer's replacement, from its decision on

    def _declared(self) -> _PathIndex:
        """Which call said it would write which path, every call accepted so far (as its
        wire is now: a replacement's path, not the one it replaced)."""
        accepted, wires = self.accepted, self.wires
        for call_id in accepted[self.declared_upto :]:
            call = wires.get(call_id)
            path = call.get("_outputPath") if isinstance(call, dict) else None
            if not isinstance(path, str):
                continue
            try:
                for term in parse_expression(path).terms:
                    self.declared.add(term, call_id)
            except ValueError:
                pass
        self.declared_upto = len(accepted)
        return self.declared

    def _by_tool(self, rows: dict[str, _Row]) -> dict[tuple[int, str], list[str]]:
        """The calls accepted so far by (iteration, tool), in arrival order."""
        accepted = self.accepted
        for call_id in accepted[self.by_tool_upto :]:
            row = rows[call_id]
            if row.tool is not None:
                self.by_tool.setdefault((row.iteration, row.tool), []).append(call_id)
        self.by_tool_upto = len(accepted)
        return self.by_tool

    def waited_on(
        self, call_id: str, row: _Row, accepted: bool, rows: dict[str, _Row]
    ) -> list[str]:
        """The arrows of `call_id`, settled now without being ready, in arrival order. A
        call refused on arrival (not `accepted`) waited on nothing."""
        found: set[str] = set()
        wire = self.wires.get(call_id) if accepted else None
        terms: list[Term] = []
        if isinstance(wire, dict):
            try:
                for key, value in wire.items():  # its parameters: the keys without "_"
                    if key.startswith("_"):
                        continue
                    if isinstance(value, str):  # most are flat: no walk of their own
                        if is_reference(value):
                            terms.extend(parse_expression(value).terms)
                    elif isinstance(value, dict | list):
                        for ref in find_references(value):
                            terms.extend(ref.expression.terms)
            except ValueError:
                terms = []  # a broken reference: the call failed its checks
        tool = self.tools.get(row.tool) if row.tool is not None else None
        if tool is not None:
            terms += [
                term for expression in tool.dependency_references for term in expression.terms
            ]
            by_tool = self._by_tool(rows) if tool.dependency_tools else {}
            for name in tool.dependency_tools:
                for earlier in by_tool.get((row.iteration, name), ()):
                    if rows[earlier].seq < row.seq:
                        found.add(earlier)
        if terms:
            declared = self._declared()
            for term in terms:
                found.update(declared.ids_overlapping(term))
        found.discard(call_id)
        if len(found) < 2:
            return list(found)
        return sorted(found, key=lambda other: rows[other].seq if other in rows else 0)


# --------------------------------------------------------------------------------------
# The binding between a running loop and the store


class DurableRun:
    """Journals one run and replays it; see the module docstring."""

    def __init__(
        self,
        writer: RunWriter,
        tools: ToolSet,
        redact: Redactor,
        sink: EventSink,
        *,
        path: str = "",
        row_seq: int | None = None,
    ) -> None:
        # A sub-agent's child run (PROTOCOL §11) is journaled in its root's run through
        # the same writer: `path` ("c1.2", "c1.2/c2.0") tags its entries' kinds
        # ("event@c1.2"), which the root's replay leaves to it, and prefixes its rows' call
        # ids ("c1.2/c1.0"); its rows sort with the root's row `row_seq` (its agent call).
        self.path = path
        self._prefix = f"{path}/" if path else ""
        self._tag = f"@{path}" if path else ""
        self._row_seq = row_seq
        # Plan messages refer to calls by entry number (`shared_text`), which holds only
        # while this run's entries are the journal's only ones: not in a tree of runs.
        self.share = not path
        self.writer = writer
        self.tools = tools
        self.redact = redact
        self.sink = sink
        self.rows: dict[str, _Row] = {}
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
        self.unready = _UnreadyArrows(tools)  # the arrows of a call never ready
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
        self.unresolved: set[int] = set()  # iterations whose output awaits its tick (§8)
        self.decisions: dict[str, Decision] = {}
        self.parked: set[str] = set()  # sub-agent calls parked while their child paused
        self.resumed = False
        self._pending: list[tuple[float, str, str]] = []
        # Events recorded that `_track` has not followed yet (see `record`): (event,
        # actions, time, mark, the place in `_pending` of an entry whose text is made
        # when it is followed, or -1 for an entry made when recorded).
        self._recorded: list[tuple[Event, list[Action], float, int, int]] = []
        # Rows changed since they were last written, one entry per call however often it
        # changed: most calls arrive, start and end between two row writes.
        self._dirty: dict[str, _Row] = {}
        # Stored rows whose only change since their last write is settling, which then
        # rewrites four columns instead of all of them.
        self._settled: dict[str, _Row] = {}
        # Trio time of the oldest row change not written yet (None: the rows are current
        # up to the journal's last commit), and whether an entry a reader of rows depends
        # on is waiting: either makes a commit write the rows.
        self._dirty_since: float | None = None
        self._checkpoint = False
        self._rewrite = False  # a resume's first row write replaces all the run's rows
        self._wakeup: trio.Event | None = None
        self._added = self._committed = 0  # entries recorded / committed by this process
        # Call id -> the entry that must be committed before it acts; `_mark` is the
        # entry of the event being followed (0 on replay: all committed already).
        self._marks: dict[str, int] = {}
        self._mark = 0
        self.wall0 = time.time()
        self.trio0 = trio.current_time()
        self._clock = trio.lowlevel.current_clock()  # read per event: no lookup of the run

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
        """Something replay does not need but the timeline does (retries, restarts...)."""
        self._add(self.now(), "note", {"note": name, **data})

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
        of rows depends on it (`_checkpoint`: a decision or deferral, a tick's end, a
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
        since = self._dirty_since
        due = since is not None and (
            rows or self._checkpoint or self._clock.current_time() >= since + ROW_LAG
        )
        if not self._pending and not due:
            return
        self._committed = self._added
        entries, self._pending = self._pending, []
        if self._tag:  # a child run's entries, in its root's journal
            tag = self._tag
            entries = [(at, kind + tag, text) for at, kind, text in entries]
        dirty: dict[str, _Row] = {}
        settled: dict[str, _Row] = {}
        if due:
            dirty, self._dirty = self._dirty, {}
            settled, self._settled = self._settled, {}
        current = since is None or due  # no row change waits after this commit
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
                rewrite=due and self._rewrite,
            )
        except BaseException:
            # Kept, so no later commit can store what followed them without them: the
            # journal stays a prefix of what happened, as after a crash at this moment.
            self._pending = entries + self._pending
            self._dirty = {**dirty, **self._dirty}
            self._settled = {**settled, **self._settled}
            raise
        for row in dirty.values():
            row.stored = True
        if due:
            self._dirty_since = None
            self._checkpoint = self._rewrite = False

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
            since = self._dirty_since
            with trio.move_on_at(math.inf if since is None else since + ROW_LAG):
                await self._wakeup.wait()
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
        elif type(event) is ReceiveCall or type(event) is ReportFault:
            if not mark:  # `handed` is replay's
                call = event.call
                handed = call.get("_id") if isinstance(call, dict) else None
                self.handed.add(handed if isinstance(handed, str) else None)
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
        elif type(event) is Decide:
            self.parked.discard(event.call_id)  # started again
        # One lookup per action instead of a chain of isinstance tests: this runs for
        # every action of every event, several per call.
        handlers = _HANDLERS
        dirty, settled = self._dirty, self._settled
        for action in actions:
            kind = type(action)
            handler = handlers[kind] if kind in handlers else _handler(kind)
            if handler is None:
                continue
            row = handler(self, action, event, at)
            if row is None:
                continue
            call_id = row.call_id
            if row.stored and handler is _ON_SETTLED and call_id not in dirty:
                settled[call_id] = row
            else:
                dirty[call_id] = row
                if settled:
                    settled.pop(call_id, None)
        # None exactly while no row change waits (`commit` clears both together).
        if self._dirty_since is None and (dirty or settled):
            self._dirty_since = self._clock.current_time()

    def _on_tick_ended(self, action: NoteTickEnded, event: Event, at: float) -> None:
        self._checkpoint = True  # a pause, or what the next request is made from

    def _on_ask(self, action: AskApproval, event: Event, at: float) -> _Row:
        if self._mark:
            self._marks[action.pending.id] = self._mark
        row = self.rows[action.pending.id]
        row.status, row.asked = CallStatus.APPROVING, at
        self.asking = action.pending
        return row

    def _on_accepted(self, action: NoteAccepted, event: Event, at: float) -> _Row:
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
        self.unready.accept(action.id, call)
        return row

    def _on_settled(self, action: NoteSettled, event: Event, at: float) -> _Row:
        row = self.rows.get(action.id)
        accepted = row is not None
        if row is None:  # failed its arrival checks, so it was never accepted
            call = event.call if isinstance(event, ReceiveCall) else None
            tool = call.get("_tool") if isinstance(call, dict) else None
            row = self._new_row(action.id, tool if isinstance(tool, str) else None, at)
            row.call = dumps_call(self.redact.shared(call))
        row.status, row.finished = action.status, at
        row.error = None if action.error is None else dumps_entry(self.redact.shared(action.error))
        if row.deps is None and action.status in ("invalid", "skipped"):
            # Settled without ever being ready (its writer was denied, failed...): the
            # timeline still draws what it waited on.
            found = self.unready.waited_on(action.id, row, accepted, self.rows)
            if found and self._prefix:
                found = [self._prefix + other for other in found]
            if found:
                row.deps = dumps_entry(found)
        if not self._mark:
            self.running.pop(action.id, None)
        self.ready_params.pop(action.id, None)
        return row

    def _on_ready(self, action: NoteReady, event: Event, at: float) -> _Row | None:
        row = self.rows.get(action.id)
        if row is None:
            return None
        row.status, row.ready = CallStatus.QUEUED, at
        row.params = dumps_entry(self.redact.shared(action.params))
        self.ready_params[action.id] = action.params
        waits = action.waits_on  # the scheduler says whom it waited on
        if waits and self._prefix:
            waits = [self._prefix + other for other in waits]
        row.deps = deps_text(waits) if waits else "[]"
        return row

    def _on_decided(self, action: NoteDecided, event: Event, at: float) -> _Row | None:
        row = self.rows.get(action.id)
        if row is None:
            return None
        self._checkpoint = True  # `decide` and the inbox read a deferral from its row
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
                self.unready.replace(action.id, wire)
                shared = self.redact.shared(wire)
                row.call = dumps_call(shared)
                if shared is wire:
                    self._clean[action.id] = (wire, None)
                else:
                    self._clean.pop(action.id, None)
                tool = wire.get("_tool") if isinstance(wire, dict) else None
                row.tool = tool if isinstance(tool, str) else row.tool
        return row

    def _on_start(self, action: StartCall, event: Event, at: float) -> _Row | None:
        if self._mark:
            self._marks[action.id] = self._mark
        row = self.rows.get(action.id)
        if row is None:
            return None
        if not self._mark:
            self.running[action.id] = action  # replay's
        row.status, row.started = CallStatus.RUNNING, at
        if action.params is not self.ready_params.pop(action.id, None):  # edited
            row.params = dumps_entry(self.redact.shared(action.params))
        return row

    def _new_row(self, call_id: str, tool: str | None, at: float) -> _Row:
        seq = len(self.rows) if self._row_seq is None else self._row_seq
        row = _Row(self._prefix + call_id, seq, self.iteration, tool, at)
        self.rows[call_id] = row
        return row

    # -- resuming ----------------------------------------------------------------------

    def replay(self, journal: list[tuple[int, float, str, Any]], loop: DurableLoop) -> None:
        """Rebuild the log and the scheduler from the journal; no action is carried out."""
        scheduler = loop.engine.scheduler
        try:
            for seq, at, kind, body in journal:
                try:
                    self._replay_entry(scheduler, loop, seq, at, kind, body)
                except (ValueError, KeyError, TypeError, AttributeError) as error:
                    raise damaged_entry(
                        self.writer.store.path,
                        self.writer.run_id,
                        seq,
                        f"cannot be read ({type(error).__name__}: {error})",
                    ) from None
        except BaseException:
            # Rows of a journal prefix must never be written as the run's (the run's end
            # commits whatever rows wait): the stored ones stay as they were.
            self._dirty, self._settled = {}, {}
            self._dirty_since, self._checkpoint = None, False
            raise
        # Times of calls that ran in an earlier process, on this process's trio clock.
        for call_id, record in scheduler.records.items():
            row = self.rows.get(call_id)
            if row is not None and row.started is not None:
                record.started = row.started - self.wall0 + self.trio0
                if row.finished is not None and call_id not in self.running:
                    record.finished = row.finished - self.wall0 + self.trio0
        # The stored rows may trail the journal (a crash within ROW_LAG of a change):
        # the resume's first commit replaces them all with the replay's.
        self._dirty = dict(self.rows)
        self._settled.clear()
        self._dirty_since = self._clock.current_time()
        self._checkpoint = True
        # A root's rows are rewritten whole (its children's are left to them); a child's
        # are replaced one by one, every one of them being dirty.
        self._rewrite = not self._prefix
        self.sink.remember(scheduler.records)
        self.resumed = True

    def _replay_entry(
        self, scheduler: Any, loop: DurableLoop, seq: int, at: float, kind: str, body: Any
    ) -> None:
        """Replay one entry; damage in it (not an object, a missing field) raises a
        ValueError, KeyError, TypeError or AttributeError, which `replay` reports."""
        if "@" in kind:
            return  # a sub-agent's entry (`path`): its child run replays it
        if kind == "message":
            loop.log.append(body)
            self._track_message(body)
        elif kind == "event":
            event = event_from_dict(body)
            try:
                actions = scheduler.handle(event)
            except (ValueError, KeyError, TypeError) as error:
                raise ResumeError(
                    f"run {self.writer.run_id!r} cannot be replayed at journal entry "
                    f"{seq} ({body.get('type')}): {error}. Were the agent's tools changed "
                    "since the run began?"
                ) from error
            self._track(event, actions, at)
        elif body.get("note") == "verdict":
            self.verdicts[body["iteration"]] = body.get("output")
            if body.get("unresolved"):
                self.unresolved.add(body["iteration"])
            else:
                self.unresolved.discard(body["iteration"])
        elif body.get("note") == "restart" and body.get("call_id") in self.rows:
            self.rows[body["call_id"]].started = at

    def reopen(self, engine: Engine) -> bool:
        """Settle the calls a crash (or a pause) left open, for either protocol's loop.

        Runs inside the engine's session, after `replay`. A call that was running runs
        again if its tool is idempotent, else finishes `failed` with `INTERRUPTED`; a
        question left unanswered is asked again; the decisions recorded for deferred
        calls are applied. False when this run is not a resume (nothing to settle).
        """
        if not self.resumed:
            return False
        scheduler = engine.scheduler
        self.note("resumed")
        engine.expect_tick()
        for call_id, action in list(self.running.items()):
            tool = self.tools.get(action.tool)
            if tool is not None and tool.idempotent:
                self.note("restart", call_id=call_id)
                row = self._dirty[call_id] = self.rows[call_id]
                row.started = self.now()
                self.sink.restarted(action)
                engine.restart(action)
            else:
                engine.feed(FinishCall(call_id, error=dict(INTERRUPTED), date=utc_now()))
                scheduler.records[call_id].finished = trio.current_time()
        if self.asking is not None and scheduler.status(self.asking.id) == CallStatus.APPROVING:
            engine.ask(self.asking)
        engine.ask_budget_again()  # a budget question left open (PROTOCOL §12)
        for_room = engine.budget.parked if engine.budget is not None else {}
        for pending in scheduler.deferred:
            decision = self.decisions.get(pending.id)
            if pending.id in for_room:
                decision = Approve()  # parked for budget room (§12): it reserves again
            if pending.id in self.parked:
                # A sub-agent's call parked by its paused child: it starts again, and its
                # child replays its journal and applies the decisions under its path (a
                # child with nothing new to do parks it again).
                self.parked.discard(pending.id)
                decision = Approve()
            if decision is not None:
                if not scheduler.tick_active:
                    # The previous decision settled its call at once (a Deny, a Respond)
                    # and so ended the tick, paused on the calls still to be decided
                    # here; this one opens it again, and its end is the one to wait for.
                    engine.expect_tick()
                engine.decide(pending.id, decision)
        return True


_Handler = Callable[[DurableRun, Any, Event, float], _Row | None]
_HANDLERS: dict[type, _Handler | None] = {
    NoteMessage: None,  # a write: at a path its call declared (`_declared`)
    AskApproval: DurableRun._on_ask,
    NoteAccepted: DurableRun._on_accepted,
    NoteSettled: DurableRun._on_settled,  # _ON_SETTLED
    NoteReady: DurableRun._on_ready,
    NoteDecided: DurableRun._on_decided,
    StartCall: DurableRun._on_start,
    NoteTickEnded: DurableRun._on_tick_ended,
}


_ON_SETTLED = _HANDLERS[NoteSettled]


def _handler(kind: type) -> _Handler | None:
    """The handler of an action type the table lacks (a subclass; or none, remembered)."""
    found = next((h for base, h in list(_HANDLERS.items()) if issubclass(kind, base)), None)
    _HANDLERS[kind] = found
    return found

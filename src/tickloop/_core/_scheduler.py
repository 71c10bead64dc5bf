"""The tick scheduler: a pure state machine, events in, actions out.

Nothing here does I/O, awaits, reads a clock or draws a random number: the same events in
the same order always give the same actions. A thin driver (`_engine.py` on trio, or a
durable-execution workflow) feeds it events — a call arrived, a call finished, a decision
was made, the stream closed — and carries out the actions it returns: ask for approval,
start a call, note a message appended, a call settled, the tick ended. This is the sans-IO
style of h11: the protocol is here, the sockets (here: tasks and threads) are elsewhere.

Invariants kept throughout:

* Every accepted call is in exactly one state: waiting, approving, deferred, queued,
  running, or one of the final statuses (done, failed, denied, skipped, invalid).
* `_writers` holds the output terms of every accepted call that is not final, so "could
  this path still be written?" is one walk down a trie, never a scan of the calls.
* `_waiters` holds the reference terms of every waiting call, so a write or a finished
  call re-examines only the calls it can affect.
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import networkx as nx

from .._errors import ReferenceSyntaxError
from ._decisions import (
    HOOK_REFUSED,
    Approve,
    Decision,
    Defer,
    Deny,
    Edit,
    PendingCall,
    Replace,
    Respond,
)
from ._expressions import (
    MAX_NESTING,
    RESERVED_OUTPUT_KINDS,
    Expression,
    Reference,
    Term,
    find_references,
    format_location,
    parse_expression,
    parse_term,
    substitute,
)
from ._log import (
    SURROGATE_FAULT,
    ContextLog,
    WriteError,
    copy_json,
    cut_json,
    describe_key,
    has_surrogate,
    shape_fault,
    short_repr,
)
from ._path_index import PathIndex as _PathIndex
from ._plan_order import PlanOrder, Slot
from ._tools import Tool, ToolSet
from ._validation import UNKNOWN

__all__ = [
    "FINAL_STATUSES",
    "META_KEYS",
    "ApprovalRequested",
    "CallAccepted",
    "CallDecided",
    "CallFinished",
    "CallReady",
    "CallReceived",
    "CallRecord",
    "CallSettled",
    "DecisionMade",
    "FaultReported",
    "Flush",
    "MessageAppended",
    "Scheduler",
    "StartCall",
    "StreamClosed",
    "TickEnded",
    "TickOpened",
]

META_KEYS = frozenset(
    {"_tool", "_outputPath", "_outputMethod", "_id", "_output", "_reasoningForCall"}
)
METHODS = ("set", "merge", "assign", "push", "concat")
FINAL_STATUSES = frozenset({"done", "failed", "denied", "skipped", "invalid"})
_MAX_LISTED_SCHEMA_ERRORS = 5


# --------------------------------------------------------------------------------------
# Events (in)


@dataclass(frozen=True, slots=True)
class TickOpened:
    """A new request's stream opened: calls that arrive now belong to `iteration`."""

    iteration: int
    date: str = ""
    # Ticks journaled before plan order (PROTOCOL §3, §4) replay with the old rule: every
    # read live, no write held. Every tick opened now keeps plan order.
    plan_order: bool = True


@dataclass(frozen=True, slots=True)
class CallReceived:
    """One call, as the model wrote it (any JSON value: the scheduler checks it)."""

    call: Any
    date: str = ""


@dataclass(frozen=True, slots=True)
class StreamClosed:
    """No more calls will arrive for this request: settling may begin."""

    date: str = ""


@dataclass(frozen=True, slots=True)
class FaultReported:
    """A structural fault of the iteration itself (unparseable solution, bad output)."""

    error: dict[str, Any]
    call: Any = None
    date: str = ""


@dataclass(frozen=True, slots=True)
class DecisionMade:
    call_id: str
    decision: Decision
    date: str = ""


@dataclass(frozen=True, slots=True)
class CallFinished:
    """An activity returned (`value`, maybe on `branch`) or failed (`error`)."""

    call_id: str
    value: Any = None
    branch: str | None = None
    error: dict[str, Any] | None = None
    date: str = ""


@dataclass(frozen=True, slots=True)
class Flush:
    """The run is ending: append the errors that came after the last tick ended."""

    date: str = ""


Event = (
    TickOpened | CallReceived | StreamClosed | FaultReported | DecisionMade | CallFinished | Flush
)


# --------------------------------------------------------------------------------------
# Actions (out)


@dataclass(frozen=True, slots=True)
class CallAccepted:
    id: str
    tool: str
    call: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CallReady:
    id: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    pending: PendingCall


@dataclass(frozen=True, slots=True)
class CallDecided:
    id: str
    decision: Decision


@dataclass(frozen=True, slots=True)
class StartCall:
    """Run this explicit call's handler with these (resolved, checked) parameters."""

    id: str
    tool: str
    params: dict[str, Any]
    call: dict[str, Any]


@dataclass(frozen=True, slots=True)
class MessageAppended:
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CallSettled:
    id: str
    status: str
    error: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class TickEnded:
    """The tick is over; `paused` lists deferred calls it could not finish without."""

    iteration: int
    errors: list[dict[str, Any]]
    paused: list[str]


Action = (
    CallAccepted
    | CallReady
    | ApprovalRequested
    | CallDecided
    | StartCall
    | MessageAppended
    | CallSettled
    | TickEnded
)


# --------------------------------------------------------------------------------------
# Records


@dataclass(slots=True, eq=False)
class CallRecord:
    """What happened to one call; `started`/`finished` are set by the driver's clock."""

    id: str
    tool: str | None
    status: str
    params: Any
    call: Any
    iteration: int
    output: Any = None
    error: dict[str, Any] | None = None
    started: float | None = None
    finished: float | None = None
    worker: str | None = None  # where it ran, when a driver runs calls on many (Temporal)


class _Call:
    """The scheduler's working state for one accepted call."""

    __slots__ = (
        "fire_and_forget",
        "held",
        "id",
        "iteration",
        "latent_output",
        "method",
        "output",
        "params",
        "preapproved",
        "record",
        "references",
        "seq",
        "status",
        "tool",
        "tool_waits",
        "watching",
        "wire",
        "writes",
    )

    def __init__(self, id: str, seq: int, iteration: int, record: CallRecord) -> None:
        self.id = id
        self.seq = seq
        self.iteration = iteration
        self.record = record
        self.status = "waiting"
        self.tool: Tool
        self.wire: dict[str, Any] = {}
        self.params: dict[str, Any] = {}
        self.references: tuple[Reference, ...] = ()
        self.output: Expression | None = None
        self.writes: tuple[Term, ...] = ()
        self.method = "set"
        self.latent_output: Any = None
        self.preapproved = False
        self.tool_waits: set[str] = set()
        self.watching: tuple[Term, ...] = ()
        self.fire_and_forget = False
        self.held: tuple[Any, list[Term], list[Term]] | None = None  # value, targets, untaken

    def expressions(self) -> Iterator[tuple[Reference | None, Expression]]:
        """Every expression the call waits on: its parameters', then its tool's depends_on."""
        for reference in self.references:
            yield reference, reference.expression
        for expression in self.tool.dependency_references:
            yield None, expression


class _Structural(Exception):
    """A structural fault found while checking a call; becomes an Error Message."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


# --------------------------------------------------------------------------------------
# The scheduler


class Scheduler:
    """Decides, for one run, what every call does next. See the module docstring."""

    def __init__(
        self,
        tools: ToolSet,
        log: ContextLog,
        *,
        max_concurrency: int | None = None,
        run_id: str | None = None,
    ) -> None:
        self.tools = tools
        self.log = log
        self.max_concurrency = max_concurrency
        self.run_id = run_id  # only shown to the hook (PendingCall.run_id)
        self._written = _PathIndex()  # who wrote each path: PendingCall.waits_on
        self.records: dict[str, CallRecord] = {}
        self._calls: dict[str, _Call] = {}
        self._seq = 0
        self._iteration = 0
        self._index = 0
        self._stream_open = False
        self._tick_active = False
        self._date = ""
        self._actions: list[Action] = []
        self._errors: list[dict[str, Any]] = []
        self._writers = _PathIndex()
        self._waiters = _PathIndex()
        self._skip_sources = _PathIndex()
        self._lost_writers = _PathIndex()
        self._waiting: dict[str, _Call] = {}
        self._dirty: set[str] = set()
        self._request_by_tool: dict[str, list[_Call]] = {}
        self._tool_dependents: dict[str, set[str]] = {}
        self._approval_queue: deque[str] = deque()
        self._asking: str | None = None
        self._deferred: dict[str, _Call] = {}
        self._tool_queues: dict[str, deque[_Call]] = {}
        self._heads: list[tuple[int, str]] = []  # (seq, tool) of tools able to start one
        self._tools_in_heads: set[str] = set()
        self._tool_running: dict[str, int] = {}
        self._queued = 0
        self._running: set[str] = set()
        self._running_writers = 0
        # Plan order (PROTOCOL §3, §4): what each waiting call's terms read, held writes.
        self._plan = PlanOrder(self._writers, self._seq_of, log.lookup)

    # -- the one entry point ---------------------------------------------------------------

    def handle(self, event: Event) -> list[Action]:
        """Apply one event; return the actions the driver must carry out, in order."""
        self._date = getattr(event, "date", "")  # a non-event gets its TypeError below
        if isinstance(event, CallFinished):
            self._on_finished(event)
        elif isinstance(event, CallReceived):
            self._on_received(event.call)
        elif isinstance(event, DecisionMade):
            self._on_decision(event.call_id, event.decision)
        elif isinstance(event, TickOpened):
            self._on_tick_opened(event.iteration, event.plan_order)
        elif isinstance(event, StreamClosed):
            self._on_stream_closed()
        elif isinstance(event, FaultReported):
            self._on_fault(event)
        elif isinstance(event, Flush):
            self._append_errors()
        else:
            raise TypeError(f"not a scheduler event: {event!r}")
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
        return bool(self._running)

    @property
    def tick_active(self) -> bool:
        """A tick is open: its stream, or calls it must finish (or a resumed deferred one)."""
        return self._tick_active

    @property
    def stream_open(self) -> bool:
        return self._stream_open

    @property
    def deferred(self) -> list[PendingCall]:
        return [self._pending(call) for call in self._deferred.values()]

    def status(self, call_id: str) -> str | None:
        call = self._calls.get(call_id)
        return None if call is None else call.status

    # -- events ----------------------------------------------------------------------------

    def _on_fault(self, event: FaultReported) -> None:
        call, error = event.call, event.error
        if shape_fault(call, _CALL_DEPTH) is not None:
            # Logging the message copies what it shows: a value the model nested 1,000 deep
            # (an invalid output, say) is shown cut, never allowed to make that fail.
            call, cut = cut_json(call, _CALL_DEPTH)
            if cut and isinstance(error, dict) and isinstance(error.get("message"), str):
                error = {**error, "message": f"{error['message']} {_CUT_NOTE}"}
        self._errors.append(_error_message(call, error))

    def _on_tick_opened(self, iteration: int, plan_order: bool = True) -> None:
        if self._tick_active:
            raise ValueError("a tick is already open; wait for TickEnded before opening another")
        self._iteration = iteration
        self._index = 0
        self._stream_open = True
        self._tick_active = True
        self._request_by_tool = {}
        # Skipping is how an if/else plan works within one request (PROTOCOL §5): a
        # branch an earlier request did not take, or a call it skipped or lost, says
        # nothing about what this request reads. The outer loops open a tick only once no
        # call is deferred, so no call of an earlier tick still waits to consult them.
        self._skip_sources = _PathIndex()
        self._lost_writers = _PathIndex()
        self._plan.open_request(plan_order=plan_order)

    def _on_stream_closed(self) -> None:
        if not self._stream_open:
            raise ValueError("the stream is not open")
        self._stream_open = False
        # Settling starts now: every waiting call may have become settle-able.
        self._dirty.update(self._waiting)

    def _on_received(self, wire: Any) -> None:
        if not self._stream_open:
            raise ValueError("a call arrived while no request stream is open")
        index = self._index
        self._index += 1
        auto_id = f"c{self._iteration}.{index}"
        self._seq += 1
        # A call without a usable `_id` is known by its engine id, made unique if an
        # explicit `_id` already took it; only a repeated explicit id is the call's fault.
        if isinstance(wire, dict):
            wire = dict(wire)
            given = wire.get("_id")
            explicit = isinstance(given, str) and given
            wanted = given if explicit else self._free_id(auto_id)
            wire["_id"] = wanted
        else:
            given, wanted = None, self._free_id(auto_id)
        record_id = wanted if wanted not in self._calls else self._free_id(auto_id)
        tool_name = wire.get("_tool") if isinstance(wire, dict) else None
        record = CallRecord(
            id=record_id,
            tool=tool_name if isinstance(tool_name, str) else None,
            status="waiting",
            params=_parameters_of(wire) if isinstance(wire, dict) else wire,
            call=wire,
            iteration=self._iteration,
        )
        call = _Call(record.id, self._seq, self._iteration, record)
        call.wire = wire if isinstance(wire, dict) else {"_id": wanted}
        self._calls[record_id] = call
        self.records[record_id] = record
        try:
            if given is not None and (not isinstance(given, str) or not given):
                raise _Structural(f"_id must be a non-empty string, got {given!r}")
            if record_id != wanted:
                raise _Structural(
                    f"id {wanted!r} is already used by another call in this run; ids must "
                    "be unique",
                    id=wanted,
                )
            self._check(call, wire)
        except _Structural as fault:
            # `record.call` is the wire, or the form of it that can be shown (`_check_shape`).
            self._report_invalid(call, str(fault), fault.details, wire=record.call)
            return
        self._accept(call)

    def _free_id(self, auto_id: str) -> str:
        """An id no call has, for a call whose own id is taken: its record is never lost.

        The engine id is free unless an explicit `_id` happened to look like one; then a
        suffix that no engine id carries keeps it apart, deterministically.
        """
        candidate, n = auto_id, 1
        while candidate in self._calls:
            n += 1
            candidate = f"{auto_id}#{n}"
        return candidate

    def _on_decision(self, call_id: str, decision: Decision) -> None:
        call = self._calls.get(call_id)
        if call is None:
            raise ValueError(f"decision for unknown call {call_id!r}")
        if self._asking == call_id:
            self._asking = None
        elif call.status == "deferred":
            del self._deferred[call_id]
            self._tick_active = True
        else:
            raise ValueError(f"call {call_id!r} is not awaiting a decision (it is {call.status})")
        self._emit(CallDecided(call_id, decision))
        if isinstance(decision, Approve):
            self._enqueue(call)
        elif isinstance(decision, Deny):
            if decision.reason == HOOK_REFUSED:  # the hook raised or answered no decision
                self._settle(call, "denied", {"type": "hook", "message": HOOK_REFUSED})
            else:
                self._settle(call, "denied", {"type": "denied", "message": decision.reason})
        elif isinstance(decision, Edit):
            self._apply_edit(call, decision.apply_to(call.record.params))
        elif isinstance(decision, Replace):
            self._apply_replacement(call, decision.call)
        elif isinstance(decision, Respond):
            self._complete(call, decision.value, branch=None)
        elif isinstance(decision, Defer):
            call.status = call.record.status = "deferred"
            self._deferred[call_id] = call
        else:
            raise TypeError(f"not a decision: {decision!r}")

    def _on_finished(self, event: CallFinished) -> None:
        call = self._calls.get(event.call_id)
        if call is None or call.status != "running":
            raise ValueError(f"call {event.call_id!r} finished but was not running")
        self._running.discard(call.id)
        if not call.fire_and_forget:
            self._running_writers -= 1
        self._release_slot(call.tool.name)
        if event.error is not None:
            status = "invalid" if event.error.get("type") == "structural" else "failed"
            self._settle(call, status, event.error)
        else:
            self._complete(call, event.value, event.branch)

    # -- checking a call as it arrives -----------------------------------------------------

    def _check(self, call: _Call, wire: Any) -> None:
        """Structural checks made at once, before a call may wait or run (PROTOCOL §7.1)."""
        self._check_shape(call, wire)
        if not isinstance(wire, dict):
            raise _Structural(f"a call must be a JSON object, got {_json_type(wire)}")
        tool_name = wire.get("_tool")
        if not isinstance(tool_name, str) or tool_name not in self.tools:
            known = ", ".join(self.tools) or "none"
            if tool_name is None:
                raise _Structural(f"the call has no _tool; the tools are: {known}")
            raise _Structural(f"unknown tool {tool_name!r}; the tools are: {known}")
        tool = self.tools[tool_name]
        call.tool = tool
        unknown = [key for key in wire if key not in META_KEYS and key.startswith("_")]
        if unknown:
            unknown.sort()
            raise _Structural(
                f"unknown meta key {unknown[0]!r}; meta keys are: {', '.join(sorted(META_KEYS))}"
            )
        method = wire.get("_outputMethod", "set")
        if method not in METHODS:
            raise _Structural(f"_outputMethod {method!r} is not one of: {', '.join(METHODS)}")
        call.method = method
        if tool.is_latent:
            if "_output" not in wire:
                raise _Structural(f"latent tool {tool.name!r} needs its result in _output")
            self._check_output(tool, wire["_output"], structural=True)
            call.latent_output = wire["_output"]
        elif "_output" in wire:
            raise _Structural(
                f"_output is only for latent tools; {tool.name!r} runs its own handler"
            )
        call.output = self._output_expression(tool, wire)
        call.writes = () if call.output is None else call.output.terms
        call.fire_and_forget = call.output is None and not tool.is_latent
        params = {key: value for key, value in wire.items() if not key.startswith("_")}
        for bound in tool.bind:
            params.pop(bound, None)  # a bound parameter comes from the run's input only
        try:
            call.references = find_references(params)
        except ReferenceSyntaxError as error:
            location = format_location(getattr(error, "location", ()))
            raise _Structural(
                f"parameter {location}: bad reference: {_syntax(error)}", parameter=location
            ) from error
        call.params = params
        call.record.params = params
        self._check_parameters_early(call)

    def _check_shape(self, call: _Call, wire: Any) -> None:
        """Keys are strings and values nest at most MAX_NESTING deep, before anything else.

        One walk with its own stack, so every later walk of the call (references, copies,
        schema checks, logging) is safe from recursion. A call that fails is recorded and
        echoed in a form that can be logged: cut at that depth, odd keys as text.
        """
        fault = shape_fault(wire, _CALL_DEPTH)
        if fault is None:
            return
        echo, cut = cut_json(wire, _CALL_DEPTH)
        call.record.call = echo
        call.record.params = _parameters_of(echo) if isinstance(echo, dict) else echo
        if isinstance(echo, dict):
            call.wire = echo
        if not isinstance(wire, dict):
            note = f" {_CUT_NOTE}" if cut else ""
            raise _Structural(f"a call must be a JSON object, got {_json_type(wire)}{note}")
        located = _locate_shape_fault(wire, "call")
        assert located is not None  # a fault in a dict is in one of its keys or values
        message, details = located
        if cut:
            message = f"{message} {_CUT_NOTE}"
        raise _Structural(message, **details)

    def _output_expression(self, tool: Tool, wire: dict[str, Any]) -> Expression | None:
        given = wire.get("_outputPath")
        if given is None:
            return tool.output_expression
        if not isinstance(given, str):
            raise _Structural(f"_outputPath must be a string, got {_json_type(given)}")
        try:
            expression = parse_expression(given)
        except ReferenceSyntaxError as error:
            raise _Structural(f"bad _outputPath: {_syntax(error)}") from error
        for term in expression.terms:
            if term.kind in RESERVED_OUTPUT_KINDS:
                what = (
                    "the engine's Error Messages (PROTOCOL §7)"
                    if term.kind == "error"
                    else "the run's input, which only the caller gives"
                )
                raise _Structural(
                    f"_outputPath {short_repr(given)} writes to {str(term)!r}, but no call may "
                    f"write to the kind {term.kind!r}: it holds {what}; write to †state or "
                    "a kind of your own",
                    expected=f"a kind other than {', '.join(sorted(RESERVED_OUTPUT_KINDS))}",
                )
        if tool.output_expression is not None and expression != tool.output_expression:
            raise _Structural(
                f"output path {given!r} is not allowed: tool {tool.name!r} always writes to "
                f"{tool.output_path!r}; omit _outputPath or use that one",
                expected=tool.output_path,
            )
        if tool.is_latent and expression.op is not None:
            # Its result is the model's own `_output`, written to one place (PROTOCOL §4):
            # it has no Branch to choose a term with, and is not fanned out.
            shape = "the branch" if expression.op == "||" else "the fan-out"
            raise _Structural(
                f"a latent call must name exactly one output term, not {shape} {given!r}: "
                f"latent tool {tool.name!r} writes its _output to one place; give one term, "
                f"such as {str(expression.terms[0])!r}",
                expected="one term",
            )
        return expression

    def _check_parameters_early(self, call: _Call) -> None:
        """Catch what is wrong already: missing or unknown parameters, bad literals.

        A reference (or a bound parameter) stands for a value not known yet, so schema
        errors at or under its location are left for the check after resolution, and so
        are errors of keywords that judge a value by what is inside it (`anyOf` of an
        optional object holding a reference fails at the object, above the reference).
        """
        validator = call.tool.parameter_validator
        if call.references or call.tool.bind:
            # The fast path first: valid around the unknowns (the references, the bound
            # parameters) means there is nothing to report yet.
            known = call.params
            if call.tool.bind:
                known = {**known, **dict.fromkeys(call.tool.bind, UNKNOWN)}
            if validator.valid_around_unknowns(known):
                return
        probe = dict(call.params)
        unknown_locations = [reference.location for reference in call.references]
        for bound in call.tool.bind:
            probe[bound] = None
            unknown_locations.append((bound,))
        errors = [
            error
            for error in validator.iter_errors(probe)
            if not _about_unknown(error, unknown_locations)
        ]
        if errors:
            raise _Structural(_schema_message(call.tool, errors, "parameters"))

    def _check_output(self, tool: Tool, value: Any, *, structural: bool) -> None:
        if tool.output_validator is None:
            return
        try:
            errors = list(tool.output_validator.iter_errors(value))
        except RecursionError:  # a result hundreds deep against a recursive schema
            message = f"output of {tool.name!r} nests too deeply to check against its schema"
            if structural:
                raise _Structural(message) from None
            raise _OutputMismatch(message) from None
        if errors:
            message = _schema_message(tool, errors, "output")
            if structural:
                raise _Structural(message)
            raise _OutputMismatch(message)

    # -- accepting and waiting -------------------------------------------------------------

    def _accept(self, call: _Call) -> None:
        for term in call.writes:
            self._writers.add(term, call.id)
        self._plan.plan(call.id, call.writes)
        self._wait_for_earlier_tools(call)
        self._request_by_tool.setdefault(call.tool.name, []).append(call)
        call.status = call.record.status = "waiting"
        self._emit(CallAccepted(call.id, call.tool.name, call.wire))
        self._start_waiting(call)

    def _wait_for_earlier_tools(self, call: _Call) -> None:
        for dependency in call.tool.dependency_tools:
            for earlier in self._request_by_tool.get(dependency, ()):
                # Only calls that arrived before this one count (a replacement keeps the
                # place of the call it replaces, and later calls may have arrived since).
                if earlier.status not in FINAL_STATUSES and earlier.seq < call.seq:
                    call.tool_waits.add(earlier.id)
                    self._tool_dependents.setdefault(earlier.id, set()).add(call.id)

    def _start_waiting(self, call: _Call) -> None:
        self._waiting[call.id] = call
        watching = tuple(term for _, expression in call.expressions() for term in expression.terms)
        call.watching = watching
        for term in watching:
            self._waiters.add(term, call.id)
        self._plan.watch(call.id, call.seq, watching)
        self._dirty.add(call.id)

    def _stop_waiting(self, call: _Call) -> None:
        if self._waiting.pop(call.id, None) is None:
            return
        for term in call.watching:
            self._waiters.remove(term, call.id)
        call.watching = ()
        self._plan.unwatch(call.id)

    def _settle_everything_possible(self) -> None:
        """Re-examine affected calls until nothing changes, then start what can start."""
        while True:
            while self._dirty:
                batch = sorted(
                    (self._calls[call_id] for call_id in self._dirty),
                    key=lambda item: item.seq,
                )
                self._dirty.clear()
                for call in batch:
                    if call.status == "waiting":
                        self._examine(call)
            released = self._plan.releasable()
            for call_id in released:  # in plan order (PROTOCOL §4)
                self._apply_held(self._calls[call_id])
            if released:
                continue
            self._ask_next_approval()
            self._start_queued_calls()
            if self._dirty:
                continue
            if self._settle_deadlocks():
                continue
            break
        self._end_tick_if_done()

    def _examine(self, call: _Call) -> None:
        values: dict[tuple[str | int, ...], Any] = {}
        waiting = False
        slots = iter(self._plan.slots(call.id))
        for reference, expression in call.expressions():
            outcome, value = self._read(expression, [next(slots) for _ in expression.terms], call)
            if outcome == "dead":
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

    def _read(self, expression: Expression, slots: list[Slot], call: _Call) -> tuple[str, Any]:
        """("value", v) | ("wait", None) | ("dead", [dead terms]) for one expression."""
        if expression.op == "&&":
            value = None
            waiting = False
            for slot in slots:
                outcome, value = self._look(slot, call)
                if outcome == "dead":
                    return "dead", [slot.term]
                if outcome == "wait":
                    waiting = True
            return ("wait", None) if waiting else ("value", value)
        dead: list[Term] = []
        for slot in slots:  # a single term, or `||` in order
            outcome, value = self._look(slot, call)
            if outcome != "dead":
                return outcome, value
            dead.append(slot.term)
        return "dead", dead

    def _look(self, slot: Slot, call: _Call) -> tuple[str, Any]:
        """One term in plan order (PROTOCOL §3): wait while an earlier writer has not
        ended; then the value the calls before it left (kept if a later write came since);
        a forward reference waits while any call could still write it."""
        if slot.pending:
            return "wait", None
        if slot.captured:
            present, value = slot.present, slot.value
        else:
            present, value = self.log.lookup(slot.term)
        if present:
            return "value", value
        if slot.forward and self._could_be_written(slot.term, call):
            return "wait", None
        return "dead", None

    def _could_be_written(self, term: Term, reader: _Call) -> bool:
        if self._stream_open:
            return True
        # A call may read the path it writes: it waits for *another* call to write it.
        own = sum(1 for written in reader.writes if written.overlaps(term))
        return self._writers.count_overlapping(term) > own

    def _settle_dead(
        self, call: _Call, reference: Reference | None, expression: Expression, dead: list[Term]
    ) -> None:
        where = (
            f"parameter {format_location(reference.location)}"
            if reference is not None
            else f"depends_on of tool {call.tool.name!r}"
        )
        lost: list[str] = []
        skipped_only = True
        for term in dead:
            writers = sorted(self._lost_writers.ids_overlapping(term), key=self._seq_of)
            if writers:
                lost.extend(writers)
                skipped_only = False
            elif not self._skip_sources.count_overlapping(term):
                skipped_only = False
        self._stop_waiting(call)
        if skipped_only:
            self._settle(call, "skipped", None)
            return
        terms = " || ".join(str(term) for term in dead)
        if lost:
            culprit = self._calls[lost[0]]
            reason = (
                f"call {culprit.id} ({culprit.tool.name}), which should have written it, "
                f"ended {culprit.status}"
            )
        else:
            reason = "no call wrote it, and none will"
        self._settle(
            call,
            "invalid",
            {
                "type": "structural",
                "message": f"unresolved reference {terms} in {where}: {reason}",
                "reference": str(expression),
                **({"writer": lost[0]} if lost else {}),
            },
        )

    def _seq_of(self, call_id: str) -> int:
        return self._calls[call_id].seq

    # -- ready: resolve, check, approve ----------------------------------------------------

    def _on_ready(self, call: _Call, values: dict[tuple[str | int, ...], Any]) -> None:
        try:
            params = self._resolve(call, values)
        except RecursionError:
            # The call itself is shallow (checked on arrival), but what it read may be deep:
            # a value hundreds deep, placed deep in the call, against a recursive schema.
            message = (
                "resolved parameters nest too deeply to copy or check against the schema of "
                f"{call.tool.name!r}; read a less deeply nested part of the state"
            )
            self._settle(call, "invalid", _structural(message))
            return
        if params is None:
            return
        self._emit(CallReady(call.id, params))
        if not call.preapproved and call.tool.needs_approval(params):
            call.status = call.record.status = "approving"
            self._approval_queue.append(call.id)
        else:
            self._enqueue(call)

    def _resolve(
        self, call: _Call, values: dict[tuple[str | int, ...], Any]
    ) -> dict[str, Any] | None:
        """The call's resolved and checked parameters; None when they fail the schema."""
        # Always a fresh copy, even without references: `††x` literals must be unescaped,
        # and the handler must not get (and could not change) the call's own dict.
        params = substitute(call.params, {key: copy_json(value) for key, value in values.items()})
        assert isinstance(params, dict)
        for parameter, input_name in call.tool.bind.items():
            # Bound values come from the run's input only; without one, the parameter is
            # left out and the schema decides (its default, or a "required" error).
            present, value = self.log.lookup(Term("input", (input_name,)))
            if present:
                params[parameter] = copy_json(value)
        call.record.params = params
        # Validation is the dearest step per call; the check on arrival already covered a
        # call that had nothing to resolve (no reference, no binding, no `††` unescaped).
        if call.references or call.tool.bind or params != call.params:
            errors = list(call.tool.parameter_validator.iter_errors(params))
            if errors:
                message = _schema_message(call.tool, errors, "resolved parameters")
                self._settle(call, "invalid", _structural(message))
                return None
        return params

    def _pending(self, call: _Call) -> PendingCall:
        waits_on, dependents = _links(self, call)
        return PendingCall(
            id=call.id,
            tool=call.tool.name,
            params=copy_json(call.record.params),
            call=copy_json(call.wire),
            run_id=self.run_id,
            waits_on=waits_on,
            dependents=dependents,
            schema=call.tool.parameters,
            output_schema=call.tool.output,
        )

    def _ask_next_approval(self) -> None:
        """One question at a time, in the order calls became ready."""
        while self._asking is None and self._approval_queue:
            call = self._calls[self._approval_queue.popleft()]
            if call.status != "approving":
                continue
            self._asking = call.id
            self._emit(ApprovalRequested(self._pending(call)))

    def _apply_edit(self, call: _Call, params: Any) -> None:
        if not isinstance(params, dict):
            detail = f"the edited parameters must be an object, got {_json_type(params)}"
            self._settle(call, "invalid", _hook_fault(call, True, detail))
            return
        located = _locate_shape_fault(params, "edited parameters")
        if located is not None:
            self._settle(call, "invalid", _hook_fault(call, True, located[0]))
            return
        errors = list(call.tool.parameter_validator.iter_errors(params))
        if errors:
            message = _schema_message(call.tool, errors, "edited parameters")
            self._settle(call, "invalid", _hook_fault(call, True, message))
            return
        call.record.params = copy_json(params)
        self._enqueue(call)

    def _apply_replacement(self, call: _Call, replacement: Any) -> None:
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
            self._check(call, wire)
        except _Structural as fault:
            call.writes = old_writes  # `_settle` un-files them and wakes their readers
            self._settle(call, "invalid", _hook_fault(call, True, f"replacement call: {fault}"))
            return
        for term in old_writes:  # readers of a path no longer written must be re-examined
            self._writers.remove(term, call.id)
            self._dirty.update(self._waiters.ids_overlapping(term))
        call.record.tool = call.tool.name
        for term in call.writes:
            self._writers.add(term, call.id)
        # The replacement keeps the call's place in the plan (PROTOCOL §3): later readers
        # of what it wrote, or now writes, look again at which earlier calls they wait on.
        self._plan.unplan(call.id, old_writes)
        self._plan.plan(call.id, call.writes)
        for reader_id in sorted(
            self._plan.readers_after(call.seq, (*old_writes, *call.writes)), key=self._seq_of
        ):
            reader = self._calls[reader_id]
            self._plan.unwatch(reader_id)
            self._plan.watch(reader_id, reader.seq, reader.watching)
            self._dirty.add(reader_id)
        self._wait_for_earlier_tools(call)
        call.status = call.record.status = "waiting"
        self._start_waiting(call)

    # -- running ---------------------------------------------------------------------------

    def _enqueue(self, call: _Call) -> None:
        if call.tool.is_latent:
            self._complete(call, call.latent_output, branch=None, checked=True)
            return
        call.status = call.record.status = "queued"
        self._queued += 1
        name = call.tool.name
        queue = self._tool_queues.setdefault(name, deque())
        queue.append(call)
        if len(queue) == 1:
            self._offer_head(name)

    def _offer_head(self, name: str) -> None:
        """Put a tool's oldest queued call among the candidates, if the tool has a slot."""
        if name in self._tools_in_heads:
            return
        queue = self._tool_queues.get(name)
        if not queue:
            return
        limit = self.tools[name].max_concurrency
        if limit is not None and self._tool_running.get(name, 0) >= limit:
            return
        heapq.heappush(self._heads, (queue[0].seq, name))
        self._tools_in_heads.add(name)

    def _start_queued_calls(self) -> None:
        limit = self.max_concurrency
        while self._heads and (limit is None or len(self._running) < limit):
            _, name = heapq.heappop(self._heads)
            self._tools_in_heads.discard(name)
            call = self._tool_queues[name].popleft()
            self._queued -= 1
            self._tool_running[name] = self._tool_running.get(name, 0) + 1
            self._running.add(call.id)
            if not call.fire_and_forget:
                self._running_writers += 1
            call.status = call.record.status = "running"
            self._emit(StartCall(call.id, name, call.record.params, call.wire))
            self._offer_head(name)

    def _release_slot(self, name: str) -> None:
        self._tool_running[name] -= 1
        self._offer_head(name)

    # -- finishing -------------------------------------------------------------------------

    def _complete(
        self, call: _Call, value: Any, branch: str | None, *, checked: bool = False
    ) -> None:
        """A value for the call (returned, responded or latent): check it, then write it.

        `checked` is for a latent `_output`, already checked when the call arrived; a value
        a person responded with is checked here even for a latent tool. A write that an
        earlier call must precede is held, and applied in plan order (PROTOCOL §4).
        """
        try:
            if not checked:
                self._check_output(call.tool, value, structural=False)
            targets, untaken = self._targets(call, branch)
        except _OutputMismatch as problem:  # nothing written, no reader woken
            self._settle(call, "failed", {"type": "runtime", "message": str(problem)})
            return
        if targets:
            blockers = self._plan.blockers(call.id, call.seq, tuple(targets))
            if blockers:
                call.status = call.record.status = "held"
                call.held = (value, targets, untaken)
                self._plan.hold(call.id, call.seq, tuple(targets), blockers)
                return
        self._write(call, value, targets, untaken)

    def _apply_held(self, call: _Call) -> None:
        assert call.held is not None
        value, targets, untaken = call.held
        call.held = None
        self._write(call, value, targets, untaken)

    def _write(self, call: _Call, value: Any, targets: list[Term], untaken: list[Term]) -> None:
        try:
            if targets:
                # Earlier readers keep what the calls before them left (PROTOCOL §4).
                self._plan.capture(call.seq, targets)
            # A fan-out is written whole or not at all: every term is checked as the
            # earlier ones leave the views before the first is written (PROTOCOL §4).
            messages = self.log.write_many(
                targets, call.method, value, call=call.wire, date=self._date or None
            )
        except WriteError as problem:  # nothing written, no reader woken
            self._settle(call, "failed", {"type": "runtime", "message": str(problem)})
            return
        for term, message in zip(targets, messages, strict=True):
            self._emit(MessageAppended(message))
            self._written.add(term, call.id)
            self._dirty.update(self._waiters.ids_overlapping(term))
        for term in untaken:  # an if/else plan: readers of the untaken branch are skipped
            self._skip_sources.add(term, call.id)
        call.record.output = value
        self._settle(call, "done", None)

    def _targets(self, call: _Call, branch: str | None) -> tuple[list[Term], list[Term]]:
        output = call.output
        if output is None:
            return [], []
        terms = list(output.terms)
        if branch is None:
            if output.op == "||":
                return terms[:1], terms[1:]
            return terms, []
        if output.op != "||":
            raise _OutputMismatch(
                f"the activity chose branch {branch!r}, but the output path {str(output)!r} "
                "has no branches ('||')"
            )
        choices = ", ".join(str(term) for term in terms)
        if not isinstance(branch, str):
            raise _OutputMismatch(
                f"the activity chose branch {describe_key(branch)}, which is not a term: "
                f"return Branch(term, value) with term one of {choices}, as a string"
            )
        try:
            chosen = parse_term(branch)
        except ValueError as error:  # ReferenceSyntaxError is one
            reason = _syntax(error) if isinstance(error, ReferenceSyntaxError) else str(error)
            raise _OutputMismatch(
                f"the activity chose a malformed branch: {reason}; the branches are {choices}"
            ) from error
        if chosen not in terms:
            raise _OutputMismatch(
                f"the activity chose branch {short_repr(branch)}, which is not one of {choices}"
            )
        return [chosen], [term for term in terms if term != chosen]

    def _settle(self, call: _Call, status: str, error: dict[str, Any] | None) -> None:
        """Give a call its final status and wake everything its end can affect."""
        self._stop_waiting(call)
        call.status = call.record.status = status
        call.record.error = error
        if error is not None:
            self._errors.append(_error_message(call.wire, error))
        self._emit(CallSettled(call.id, status, error))
        if status in ("failed", "denied", "invalid"):
            for term in call.writes:
                self._lost_writers.add(term, call.id)
        elif status == "skipped":
            for term in call.writes:
                self._skip_sources.add(term, call.id)
        for term in call.writes:
            self._writers.remove(term, call.id)
            self._dirty.update(self._waiters.ids_overlapping(term))
        self._dirty.update(self._plan.ended(call.id))
        for dependent in self._tool_dependents.pop(call.id, ()):
            waiter = self._calls[dependent]
            waiter.tool_waits.discard(call.id)
            self._dirty.add(dependent)

    def _report_invalid(
        self, call: _Call, message: str, details: dict[str, Any], *, wire: Any
    ) -> None:
        """A call that failed its arrival checks: it never waits, runs or writes."""
        call.status = call.record.status = "invalid"
        error = _structural(message, **details)
        call.record.error = error
        self._errors.append(_error_message(wire, error))
        self._emit(CallSettled(call.record.id, "invalid", error))

    # -- deadlocks and the end of a tick ---------------------------------------------------

    def _settle_deadlocks(self) -> bool:
        """When nothing in flight can unblock them, waiting calls that wait on each other
        are cycles. A running fire-and-forget call writes nothing, so it holds this back
        only while a waiting call waits for it by tool name (PROTOCOL §4, §5)."""
        if (
            self._stream_open
            or not self._waiting
            or self._running_writers
            or self._queued
            or self._asking is not None
            or self._approval_queue
            or self._awaited_fire_and_forget()
        ):
            return False
        graph = nx.DiGraph()
        for call in self._waiting.values():
            graph.add_node(call.id)
            for blocker in self._blockers(call):
                graph.add_edge(call.id, blocker)
        held = self._plan.held
        for call_id in held:
            graph.add_node(call_id)
            for blocker in sorted(self._plan.held_blockers(call_id), key=self._seq_of):
                graph.add_edge(call_id, blocker)
        settled = False
        components = sorted(
            (
                sorted(component, key=self._seq_of)
                for component in nx.strongly_connected_components(graph)
            ),
            key=lambda component: self._seq_of(component[0]),
        )
        for component in components:
            if len(component) < 2:
                continue
            on_hold = [call_id for call_id in component if self._plan.is_held(call_id)]
            if on_hold:
                # The cycle runs through a forward reference (only those point to later
                # calls): plan order cannot hold here, so the earliest held write applies
                # now rather than wait forever (PROTOCOL §4, "forward references aside").
                self._plan.release(on_hold[0])
                self._apply_held(self._calls[on_hold[0]])
                return True
            cycle = _describe_cycle(graph.subgraph(component), component[0])
            for call_id in component:
                self._settle(
                    self._calls[call_id],
                    "invalid",
                    _structural(
                        f"cycle: {cycle} (each call waits on what the next one writes)",
                        cycle=cycle,
                    ),
                )
            settled = True
        return settled

    def _blockers(self, call: _Call) -> Iterable[str]:
        """The unfinished calls this waiting call waits on (deferred ones included)."""
        yield from sorted(call.tool_waits, key=self._seq_of)
        for slot in self._plan.slots(call.id):
            if slot.pending:  # earlier writers, in plan order (PROTOCOL §3)
                yield from sorted(slot.pending, key=self._seq_of)
                continue
            if not slot.forward or self.log.lookup(slot.term)[0]:
                continue
            for writer in sorted(self._writers.ids_overlapping(slot.term), key=self._seq_of):
                if writer != call.id:
                    yield writer

    def _awaited_fire_and_forget(self) -> bool:
        """Whether a running fire-and-forget call has a waiting call waiting for it.

        Only a `depends_on` tool name waits for a call that writes nothing, and only for
        calls of its own request (`_tool_dependents` maps each unfinished call to the
        calls that wait for it that way). A tick never ends while one of its calls waits
        like this, so a fire-and-forget call an earlier tick left running never counts
        here: the tick does not wait for it (PROTOCOL §4).
        """
        for call_id, dependents in self._tool_dependents.items():
            if call_id in self._running and self._calls[call_id].fire_and_forget:
                if any(dependent in self._waiting for dependent in dependents):
                    return True
        return False

    def _end_tick_if_done(self) -> None:
        if not self._tick_active or self._stream_open:
            return
        if self._asking is not None or self._approval_queue or self._queued:
            return
        if self._running_writers or (self._waiting and self._awaited_fire_and_forget()):
            return
        # Only calls parked behind a deferred decision, and fire-and-forget ones nothing
        # waits for (this tick's or an earlier one's), remain.
        self._tick_active = False
        paused = list(self._deferred)
        errors = self._append_errors()
        self._emit(TickEnded(self._iteration, errors, paused))

    def _append_errors(self) -> list[dict[str, Any]]:
        errors, self._errors = self._errors, []
        for message in errors:
            self.log.append(message)
            self._emit(MessageAppended(message))
        return errors

    def _emit(self, action: Action) -> None:
        self._actions.append(action)


class _OutputMismatch(Exception):
    """A value that cannot be written as the call's result (a runtime error of the call)."""


# Keywords whose error sits at a value but may come from what is inside it.
_JUDGED_BY_CONTENTS = frozenset(
    {
        "anyOf",
        "oneOf",
        "not",
        "contains",
        "enum",
        "const",
        "uniqueItems",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)


def _about_unknown(error: Any, unknown_locations: list[tuple[str | int, ...]]) -> bool:
    """Whether a schema error of the probe may be caused by a value not known yet."""
    path = tuple(error.absolute_path)
    for location in unknown_locations:
        if path[: len(location)] == location:
            return True  # at or under the unknown value
        if error.validator in _JUDGED_BY_CONTENTS and location[: len(path)] == path:
            return True  # above it, judging it among the rest
    return False


def _links(scheduler: Scheduler, call: _Call) -> tuple[list[str], list[str]]:
    """What a person deciding `call` is shown: the calls that wrote what its parameters
    read, and the calls known so far that wait to read what it writes, in arrival order."""
    sources: set[str] = set()
    for reference in call.references:
        for term in reference.expression.terms:
            sources.update(scheduler._written.ids_overlapping(term))
    readers: set[str] = set()
    for term in call.writes:
        readers.update(scheduler._waiters.ids_overlapping(term))
    sources.discard(call.id)
    readers.discard(call.id)
    return sorted(sources, key=scheduler._seq_of), sorted(readers, key=scheduler._seq_of)


def _describe_cycle(graph: Any, start: str) -> str:
    edges = nx.find_cycle(graph, source=start)
    ids = [edges[0][0], *(edge[1] for edge in edges)]
    return " -> ".join(ids)


_log = logging.getLogger("tickloop")


def _hook_fault(call: Any, changed: bool, detail: str) -> dict[str, Any]:
    """A reviewer's decision that cannot be carried out: the hook's bug, not the model's.

    The developer reads the detail on the `tickloop` logger; the model, which can fix
    none of it, is told only that a reviewer refused or changed the call.
    """
    _log.warning("approval hook bug on call %s (%s): %s", call.id, call.record.tool, detail)
    message = (
        "a reviewer changed this call, and the change could not run" if changed else HOOK_REFUSED
    )
    return {"type": "hook", "message": message}


def _structural(message: str, **details: Any) -> dict[str, Any]:
    return {"type": "structural", "message": message, **details}


def _error_message(call: Any, error: dict[str, Any]) -> dict[str, Any]:
    return {"type": "data", "kind": "error", "data": {"call": call, "error": error}}


def _parameters_of(wire: dict[str, Any]) -> dict[str, Any]:
    # Called before the call is checked: a key that is not a string (a Python caller's
    # `{1: 2}`) must not break the record of the call it makes invalid.
    return {
        key: value
        for key, value in wire.items()
        if not (isinstance(key, str) and key.startswith("_"))
    }


_CALL_DEPTH = MAX_NESTING + 1  # the call object itself, then each value at most MAX_NESTING
_CUT_NOTE = f"(shown cut at {MAX_NESTING} levels)"


def _locate_shape_fault(mapping: Any, what: str) -> tuple[str, dict[str, Any]] | None:
    """Name the key or value of a call (or edited parameters) that fails `shape_fault`."""
    if not isinstance(mapping, dict):
        return None
    for key, value in mapping.items():
        if not isinstance(key, str):
            return f"{what} keys must be strings, got {describe_key(key)}", {}
        if has_surrogate(key):
            return f"a key of the {what} {SURROGATE_FAULT}", {}
        fault = shape_fault(value, MAX_NESTING)
        if fault is not None:
            if key.startswith("_") and what == "call":
                return f"meta key {key} {fault}", {}
            location = format_location((key,))
            return f"parameter {location} {fault}", {"parameter": location}
    return None


def _syntax(error: ReferenceSyntaxError) -> str:
    """The error's text, quoting at most 200 characters of the expression: an expression of
    thousands of characters is a fault to point at, not to repeat."""
    return f"{error.reason} at position {error.position} in {short_repr(error.text, 200)}"


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"


def _schema_message(tool: Tool, errors: list[Any], what: str) -> str:
    """Name every failing parameter and what was expected, most specific first."""
    ordered = sorted(errors, key=lambda error: (list(map(str, error.absolute_path)), error.message))
    whole = "(output)" if what == "output" else "(params)"  # what an empty path points at
    parts = []
    for error in ordered[:_MAX_LISTED_SCHEMA_ERRORS]:
        path = tuple(error.absolute_path)
        where = format_location(path) if path else whole
        parts.append(f"{where}: {error.message}")
    more = len(ordered) - _MAX_LISTED_SCHEMA_ERRORS
    if more > 0:
        parts.append(f"and {more} more")
    verb = "does" if what == "output" else "do"
    return f"{what} of {tool.name!r} {verb} not match its schema: " + "; ".join(parts)

"""Typed run events: what happened, to which call, when (trio clock), with secrets hidden.

The scheduler speaks in actions meant for its driver (start this call, ask about that
one). Users want something steadier: a small, typed vocabulary of transitions they can
log, display or count. `EventSink` turns actions into these events, adds the run id and
the time, redacts parameters whose names look secret, and hands each event to its
listeners (the `on_event` callback, the tracer, an `EventStream`).

Redaction happens here, on the way out: the engine, the log and the tool itself always
see the real values.
"""

from __future__ import annotations

import fnmatch
import logging
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

import trio

from .._core import _scheduler_io as sched
from .._core._decisions import decision_to_dict
from .._core._log import LEAVES
from .._core._observer import ActionObserver
from .._errors import unwrap_single

_log = logging.getLogger("tickloop")

__all__ = [
    "DEFAULT_REDACT",
    "CallAwaitingApproval",
    "CallDecided",
    "CallFinished",
    "CallReady",
    "CallReceived",
    "CallStarted",
    "DataWritten",
    "EventSink",
    "EventStream",
    "QuestionAnswered",
    "QuestionAsked",
    "Redactor",
    "RequestFinished",
    "RequestRetried",
    "RequestStarted",
    "RunEnded",
    "RunEvent",
    "RunStarted",
    "TickEnded",
    "WriteListener",
    "event_from_dict",
    "open_event_stream",
]

DEFAULT_REDACT = (
    "*key*",
    "*token*",
    "*password*",
    "*passwd*",
    "*secret*",  # client_secret
    "*authorization*",  # also inside a `headers` dict, at any depth
    "*cookie*",
    "*credential*",
)
REDACTED = "[redacted]"


class Redactor:
    """Hides the values of parameters whose names match any of the glob patterns.

    Matching ignores case and applies at every depth of an object, so a nested
    `{"auth": {"api_key": ...}}` is hidden too. Only the copy shown is changed.
    """

    def __init__(self, patterns: Iterable[str] = DEFAULT_REDACT) -> None:
        if isinstance(patterns, str):
            patterns = (patterns,)
        self.patterns = tuple(patterns)
        joined = "|".join(fnmatch.translate(pattern.lower()) for pattern in self.patterns)
        self._match = re.compile(joined).match if joined else None
        self._secret: dict[str, bool] = {}  # parameter names repeat: match each once

    def __call__(self, value: Any) -> Any:
        """A redacted copy that shares nothing with `value` (events are handed out)."""
        return self._redact(value, True)

    def shared(self, value: Any) -> Any:
        """Redacted, sharing what needs no change with `value`: for a value about to be
        serialised, where a copy would be wasted work."""
        if type(value) is dict:
            # Most are flat objects of names seen before, none secret: `value` itself,
            # told without a call per member. Anything else takes the general walk.
            secret = self._secret
            for key, item in value.items():
                if secret.get(key) is not False or type(item) not in LEAVES:
                    return self._redact(value, False)
            return value
        return self._redact(value, False)

    def is_secret(self, key: str) -> bool:
        known = self._secret.get(key)
        if known is None:
            match = self._match
            known = match is not None and not key.startswith("_") and bool(match(key.lower()))
            self._secret[key] = known
        return known

    def _redact(self, value: Any, copy: bool) -> Any:
        if isinstance(value, dict):
            result = dict(value) if copy else value
            secret = self._secret
            for key, item in value.items():
                hidden = secret.get(key)  # one lookup for a name seen before (most are)
                if hidden is None:
                    hidden = isinstance(key, str) and self.is_secret(key)
                if hidden:
                    new = REDACTED
                elif isinstance(item, (dict, list)):  # a tuple: faster than `dict | list`
                    new = self._redact(item, copy)  # a copy when `copy`: never `item`
                else:
                    continue  # a leaf is kept as it is (`result` holds it): no call per leaf
                if new is not item:
                    if result is value:
                        result = dict(value)
                    result[key] = new
            return result
        if isinstance(value, list):
            items = [self._redact(item, copy) for item in value]
            if copy or any(new is not old for new, old in zip(items, value, strict=True)):
                return items
            return value
        return value


# --------------------------------------------------------------------------------------
# The events


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEvent:
    """Base of every event: the run, the call it is about (if any), and trio time.

    A sub-agent's event (PROTOCOL §11) has `path`, the ids of the agent calls above it,
    and `agent`, the sub-agent's name; its `call_id` is the full path ("c1.2/c1.0").
    """

    kind: ClassVar[str] = "event"
    run_id: str
    time: float
    call_id: str | None = None
    path: tuple[str, ...] = ()
    agent: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The event as JSON-ready data, with its `kind` (e.g. "call.started")."""
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(RunEvent):
    kind: ClassVar[str] = "run.started"
    resumed: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEnded(RunEvent):
    """`status` is "done", "paused" or "failed" (then `error` says why)."""

    kind: ClassVar[str] = "run.ended"
    status: str
    iterations: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestStarted(RunEvent):
    """The loop asked the model for iteration `iteration`'s solution."""

    kind: ClassVar[str] = "request.started"
    iteration: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRetried(RunEvent):
    """Attempt `attempt` failed; the loop waits `delay` seconds and asks again."""

    kind: ClassVar[str] = "request.retried"
    iteration: int
    attempt: int
    delay: float
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestFinished(RunEvent):
    """The model's stream ended; `error` when it broke off or could not be read."""

    kind: ClassVar[str] = "request.finished"
    iteration: int
    error: str | None = None
    worker: str | None = None  # the worker that ran the request, on Temporal


@dataclass(frozen=True, slots=True, kw_only=True)
class CallReceived(RunEvent):
    """A call arrived from the model's stream (`call` is the wire call, redacted)."""

    kind: ClassVar[str] = "call.received"
    tool: str | None
    call: Any
    # A code plan's call (PROTOCOL §14): the program line it was made on, and whether its
    # tool is read-only (its calls may start before earlier ones are known to succeed).
    line: int | None = None
    read_only: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CallReady(RunEvent):
    """Every reference resolved: `params` are what will run (redacted)."""

    kind: ClassVar[str] = "call.ready"
    tool: str | None
    params: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class CallAwaitingApproval(RunEvent):
    kind: ClassVar[str] = "call.awaiting_approval"
    tool: str | None
    params: Any
    line: int | None = None  # a code plan's call: the program line it was made on (§14)


@dataclass(frozen=True, slots=True, kw_only=True)
class CallDecided(RunEvent):
    """`decision` names it ("approve", "deny", "edit", "replace", "respond", "defer")."""

    kind: ClassVar[str] = "call.decided"
    tool: str | None
    decision: str
    detail: dict[str, Any] = field(default_factory=dict)
    worker: str | None = None  # the worker whose approval hook decided, on Temporal


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardrailChecked(RunEvent):
    """A guardrail's verdict (PROTOCOL §15): `guardrail` names it, `guardrail_kind` is
    "input", "tool", "result" or "output", `verdict` "pass", "trip", "deny", "replace" or
    "reject", `reason` the verdict's (a replacement's value is never shown)."""

    kind: ClassVar[str] = "guardrail.checked"
    guardrail: str
    guardrail_kind: str
    verdict: str
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class QuestionAsked(RunEvent):
    """An MCP server asked a person something during the call (`tl.Question`): its
    `server`, `message` and the JSON Schema of the answer (`schema`); `sampling` when it
    asks whether to let a request to the model through (`approve_sampling=True`)."""

    kind: ClassVar[str] = "question.asked"
    server: str
    message: str
    schema: Any = None
    sampling: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class QuestionAnswered(RunEvent):
    """The verdict on a server's question: "accept", "decline", "cancel" or "defer" (the
    answer itself is never shown: a person may have typed a secret)."""

    kind: ClassVar[str] = "question.answered"
    server: str
    verdict: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CallStarted(RunEvent):
    """The handler starts; `restarted` when an idempotent call re-runs after a crash."""

    kind: ClassVar[str] = "call.started"
    tool: str | None
    params: Any
    restarted: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CallFinished(RunEvent):
    """The call's final status (done, failed, denied, skipped, invalid) and error;
    `worker` names the worker that ran it when calls run on many (Temporal)."""

    kind: ClassVar[str] = "call.finished"
    tool: str | None
    status: str
    error: dict[str, Any] | None = None
    duration: float | None = None
    worker: str | None = None
    # The value of a call whose result is written nowhere (a code plan's call, PROTOCOL
    # §14), redacted; a call that writes its result tells it in `DataWritten` instead.
    output: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DataWritten(RunEvent):
    """A call's result was written to the log: `data` nested under `output_path` as the
    log holds it (redacted), applied with `method`. Made only for a `WriteListener`."""

    kind: ClassVar[str] = "data.written"
    data_kind: str
    output_path: str
    method: str
    data: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgramPrinted(RunEvent):
    """A code plan's program printed a line (PROTOCOL §14), in program order, once the
    statement that printed it has committed."""

    kind: ClassVar[str] = "program.printed"
    iteration: int
    line: int | None  # the program line of the statement that printed it
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TickEnded(RunEvent):
    """The tick of `iteration` is over: its Error Messages and the calls it paused on."""

    kind: ClassVar[str] = "tick.ended"
    iteration: int
    errors: list[dict[str, Any]]
    paused: list[str]


_KINDS: dict[str, type[RunEvent]] = {
    kind.kind: kind
    for kind in (
        RunStarted,
        RunEnded,
        QuestionAsked,
        QuestionAnswered,
        RequestStarted,
        RequestRetried,
        RequestFinished,
        CallReceived,
        CallReady,
        CallAwaitingApproval,
        CallDecided,
        CallStarted,
        CallFinished,
        DataWritten,
        ProgramPrinted,
        TickEnded,
    )
}


def event_from_dict(data: Mapping[str, Any]) -> RunEvent:
    """The typed event of `RunEvent.to_dict`'s data (events that crossed a process, e.g.
    a Temporal run's, read by its client). Fields it does not know are left out, so a
    newer sender's events still read."""
    kind = _KINDS.get(str(data.get("kind")))
    if kind is None:
        raise ValueError(f"not a run event: {data.get('kind')!r}")
    names = {item.name for item in fields(kind)}
    values = {key: value for key, value in data.items() if key in names}
    if isinstance(values.get("path"), list):
        values["path"] = tuple(values["path"])
    return kind(**values)


# --------------------------------------------------------------------------------------
# Actions in, events out


class WriteListener:
    """A listener that also takes `DataWritten` events: one per write a call makes.

    Writes are not transitions and most listeners have no use for them, so a run makes
    them only when a listener is one of these (a mirror of the state, e.g. the AG-UI
    stream's deltas). Subclasses define `__call__(event)`.
    """

    def __call__(self, event: RunEvent) -> Any:
        raise NotImplementedError


class EventSink(ActionObserver):
    """Turns scheduler actions into events and delivers events to listeners.

    It accepts both (an already typed event passes through), so any driver can hand it
    whatever it has. A listener that raises is logged on the `tickloop` logger and counted
    (`listener_errors`), and the run goes on: a broken dashboard must not stop an agent.
    `clock` stamps the events: trio's clock by default, a Temporal workflow's own there.
    """

    def __init__(
        self,
        run_id: str,
        redactor: Redactor,
        listeners: Iterable[Callable[[RunEvent], Any] | None] = (),
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.run_id = run_id
        self.clock = clock
        self.redact = redactor
        self.listeners = [listener for listener in listeners if listener is not None]
        self._tools: dict[str, str | None] = {}
        self._started: dict[str, float] = {}
        self.listener_errors = 0
        # A message appended to the log is the log's, not a call's transition: only a
        # `WriteListener` has a `NoteMessage` made into an event (a write's `DataWritten`),
        # so otherwise a driver may skip making them.
        self._wants_messages = any(isinstance(item, WriteListener) for item in self.listeners)

    @property
    def wants_messages(self) -> bool:
        return self._wants_messages

    @property
    def wants_notes(self) -> bool:
        """Whether the scheduler's facts (`Note...` actions) can become events here: not
        without a listener, so a driver handing actions to this sink may skip making them."""
        return bool(self.listeners)

    def __call__(self, item: Any) -> None:
        if not self.listeners:
            return
        if isinstance(item, RunEvent):
            self.emit(item)
            return
        event = self._translate(item)
        if event is not None:
            self.emit(event)

    def emit(self, event: RunEvent) -> None:
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:
                self.listener_errors += 1
                _log.exception(
                    "an on_event listener %r raised on a %s event (%d so far in run %s); "
                    "the run goes on",
                    listener,
                    event.kind,
                    self.listener_errors,
                    self.run_id or "(unnamed)",
                )

    def remember(self, records: Mapping[str, Any]) -> None:
        """Calls a resumed run received before: their later events name their tools.

        Replay rebuilds the scheduler without delivering its actions, so without this a
        call accepted before the pause would look, when it settles, like one that failed
        its arrival checks.
        """
        for call_id, record in records.items():
            self._tools.setdefault(call_id, record.tool)

    def restarted(self, action: sched.StartCall) -> None:
        """An idempotent call re-run after a crash (not a new scheduler action)."""
        self._tools[action.id] = action.tool
        self._started[action.id] = now = self.clock()
        self.emit(
            CallStarted(
                run_id=self.run_id,
                time=now,
                call_id=action.id,
                tool=action.tool,
                params=self.redact(action.params),
                restarted=True,
            )
        )

    def _translate(self, action: Any) -> RunEvent | None:
        now = self.clock()
        run_id = self.run_id
        if isinstance(action, sched.NoteAccepted):
            self._tools[action.id] = action.tool
            line = action.call.get("_line")
            return CallReceived(
                run_id=run_id,
                time=now,
                call_id=action.id,
                tool=action.tool,
                call=self.redact(action.call),
                line=line if type(line) is int else None,
                read_only=action.read_only,
            )
        if isinstance(action, sched.NoteReady):
            return CallReady(
                run_id=run_id,
                time=now,
                call_id=action.id,
                tool=self._tools.get(action.id),
                params=self.redact(action.params),
            )
        if isinstance(action, sched.AskApproval):
            pending = action.pending
            return CallAwaitingApproval(
                run_id=run_id,
                time=now,
                call_id=pending.id,
                tool=pending.tool,
                params=self.redact(pending.params),
                line=pending.line,
            )
        if isinstance(action, sched.NoteDecided):
            detail = decision_to_dict(action.decision)
            name = detail.pop("decision")
            return CallDecided(
                run_id=run_id,
                time=now,
                call_id=action.id,
                tool=self._tools.get(action.id),
                decision=name,
                detail=self.redact(detail),
            )
        if isinstance(action, sched.StartCall):
            self._tools[action.id] = action.tool
            self._started[action.id] = now
            return CallStarted(
                run_id=run_id,
                time=now,
                call_id=action.id,
                tool=action.tool,
                params=self.redact(action.params),
            )
        if isinstance(action, sched.NoteSettled):
            if action.id not in self._tools:  # failed its arrival checks: never accepted
                self._tools[action.id] = None
                self.emit(
                    CallReceived(run_id=run_id, time=now, call_id=action.id, tool=None, call=None)
                )
            started = self._started.pop(action.id, None)
            return CallFinished(
                run_id=run_id,
                time=now,
                call_id=action.id,
                tool=self._tools.get(action.id),
                status=action.status,
                error=action.error,
                duration=None if started is None else now - started,
                output=None if action.output is None else self.redact(action.output),
            )
        if isinstance(action, sched.NoteTickEnded):
            return TickEnded(
                run_id=run_id,
                time=now,
                iteration=action.iteration,
                errors=[self.redact(error) for error in action.errors],
                paused=list(action.paused),
            )
        if isinstance(action, sched.NoteMessage) and self._wants_messages:
            return self._written(action.message, now)
        return None

    def _written(self, message: dict[str, Any], now: float) -> RunEvent | None:
        """A call's write as an event; None for any other message (errors, the plan)."""
        call = message.get("_call")
        if message.get("type") != "data" or not isinstance(call, dict):
            return None
        return DataWritten(
            run_id=self.run_id,
            time=now,
            call_id=call.get("_id"),
            data_kind=message["kind"],
            output_path=message.get("_path") or message["kind"],
            method=message.get("_outputMethod", "set"),
            data=self.redact(message["data"]),
        )


# --------------------------------------------------------------------------------------
# Events as an async iterator


class EventStream:
    """The events of one run as an async iterator; `.result` once the run has ended."""

    def __init__(self, receive: trio.MemoryReceiveChannel[RunEvent]) -> None:
        self._receive = receive
        self.result: Any = None

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> RunEvent:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None


@asynccontextmanager
async def open_event_stream(
    run: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any
) -> AsyncIterator[EventStream]:
    """Run `run(*args, on_event=..., **kwargs)` in the background and iterate its events.

    ::

        async with tl.open_event_stream(agent.run_async, {"q": "..."}) as events:
            async for event in events:
                print(event.kind, event.call_id)
        result = events.result

    The iteration ends when the run does. Leaving the block early stops delivery but lets
    the run finish; an exception in the block cancels the run (it stays resumable).
    """
    send, receive = trio.open_memory_channel[RunEvent](math.inf)
    stream = EventStream(receive)
    also = kwargs.pop("on_event", None)

    def deliver(event: RunEvent) -> None:
        if also is not None:
            also(event)
        try:
            send.send_nowait(event)
        except trio.BrokenResourceError:
            pass  # the reader left the block: the run goes on without it

    async def drive() -> None:
        async with send:
            stream.result = await run(*args, on_event=deliver, **kwargs)

    with unwrap_single():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive)
            async with receive:
                yield stream

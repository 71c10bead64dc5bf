"""A run's events as AG-UI events: a pure translation, no I/O.

`Translation` takes tickloop's typed events in the order the run made them and returns
the AG-UI events each one means. The shapes it keeps:

- every call's `TOOL_CALL_START` comes first (when the model's stream delivers the call),
  then exactly one `TOOL_CALL_ARGS` (the parameters that ran, or for a call that never
  ran its resolved parameters, else `{}`), `TOOL_CALL_END`, and `TOOL_CALL_RESULT` when
  it settles; a call that never ran (skipped, denied, invalid, refused) still gets all
  four, its result holding the error;
- the state is mirrored from the snapshot of the state the run starts from (which a
  run of a session knows only once it holds the session) by the run's own writes, and
  each write that changes it is one `STATE_DELTA` (RFC 6902), so a client applying them
  holds the run's state (values under secret-looking names show as "[redacted]", as in every event);
- a sub-agent's events (a non-empty path) are wrapped in `SUBAGENT_STARTED` and
  `SUBAGENT_FINISHED` / `SUBAGENT_ERROR`, closed when the call that started it settles;
  one still open when the run pauses is suspended, not finished: `SUBAGENT_FINISHED`
  with AG-UI's `suspended` outcome (naming the interrupts it raised itself), and one
  still open when the run fails gets `SUBAGENT_ERROR`.
"""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuspendedOutcome,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from .._core._log import ContextLog, WriteError, copy_json
from .._core._paths import RunPath
from .._observe._events import (
    CallAwaitingApproval,
    CallDecided,
    CallFinished,
    CallReady,
    CallReceived,
    CallStarted,
    DataWritten,
    GuardrailChecked,
    QuestionAnswered,
    QuestionAsked,
    RunEvent,
)

__all__ = [
    "APPROVAL_DECIDED",
    "APPROVAL_REQUESTED",
    "CODE_CALL",
    "GUARDRAIL",
    "QUESTION",
    "QUESTION_ANSWERED",
    "Translation",
    "json_patch",
]

APPROVAL_REQUESTED = "tickloop.approval_requested"
APPROVAL_DECIDED = "tickloop.approval_decided"
GUARDRAIL = "tickloop.guardrail"  # every guardrail verdict (PROTOCOL §15)
QUESTION = "tickloop.question"  # an MCP server's question put to a person
QUESTION_ANSWERED = "tickloop.question_answered"  # its verdict (never the answer itself)
CODE_CALL = "tickloop.code_call"  # a code plan's call: its program line (PROTOCOL §14)


def _path(event: RunEvent) -> RunPath:
    """The path of the event's run (the root's is empty)."""
    return RunPath.of(event.path)


def _agent_name(event: RunEvent) -> str:
    """The name of the agent whose run made the event."""
    return event.agent or "agent"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class _Call:
    __slots__ = ("ended", "params", "result", "subagent")

    def __init__(self, subagent: str | None) -> None:
        self.subagent = subagent
        self.params: Any = None
        self.result: Any = None
        self.ended = False


class Translation:
    """One run's AG-UI events; feed `started`, `snapshot`, each `event`, then `finished`
    or `failed` (a run that fails before it starts has no snapshot)."""

    def __init__(self, thread_id: str, run_id: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        # The state the client holds: the run's starting state (`snapshot`), then each of
        # its writes to it. Empty until the snapshot, which comes before any write.
        self._mirror = ContextLog([{"type": "data", "kind": "state", "data": {}}])
        self._calls: dict[str, _Call] = {}
        self._open: list[RunPath] = []  # sub-agent runs started, not yet finished, outer first

    @property
    def state(self) -> Any:
        """The state as the events so far describe it."""
        return self._mirror.view("state")

    def started(self) -> list[BaseEvent]:
        return [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id)]

    def snapshot(self, state: dict[str, Any] | None) -> list[BaseEvent]:
        """The state the run starts from (None: an empty one), which the deltas of its
        writes then change: sent once, after `started` and before the run's events."""
        initial = {} if state is None else state
        self._mirror = ContextLog([{"type": "data", "kind": "state", "data": initial}])
        return [StateSnapshotEvent(snapshot=copy_json(self.state))]

    def event(self, event: RunEvent) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        subagent = self._enter(event, out)
        call_id = event.call_id
        if isinstance(event, CallReceived) and call_id is not None:
            self._calls[call_id] = _Call(subagent)
            out.append(
                ToolCallStartEvent(
                    tool_call_id=call_id,
                    tool_call_name=event.tool or "(unknown)",
                    subagent_run_id=subagent,
                )
            )
            if event.line is not None:
                value = {"callId": call_id, "line": event.line, "readOnly": event.read_only}
                out.append(CustomEvent(name=CODE_CALL, value=value, subagent_run_id=subagent))
        elif isinstance(event, CallReady) and call_id in self._calls:
            self._calls[call_id].params = event.params
        elif isinstance(event, CallStarted) and call_id in self._calls:
            self._end_call(call_id, event.params, out)
        elif isinstance(event, DataWritten):
            self._written(event, subagent, out)
        elif isinstance(event, CallAwaitingApproval):
            value = {"callId": call_id, "tool": event.tool, "params": event.params}
            out.append(CustomEvent(name=APPROVAL_REQUESTED, value=value, subagent_run_id=subagent))
        elif isinstance(event, CallDecided):
            value = {"callId": call_id, "decision": event.decision, **event.detail}
            out.append(CustomEvent(name=APPROVAL_DECIDED, value=value, subagent_run_id=subagent))
        elif isinstance(event, QuestionAsked):
            value = {
                "callId": call_id,
                "server": event.server,
                "message": event.message,
                "schema": event.schema,
            }
            if event.sampling is not None:
                value["sampling"] = event.sampling
            out.append(CustomEvent(name=QUESTION, value=value, subagent_run_id=subagent))
        elif isinstance(event, QuestionAnswered):
            value = {"callId": call_id, "server": event.server, "verdict": event.verdict}
            out.append(CustomEvent(name=QUESTION_ANSWERED, value=value, subagent_run_id=subagent))
        elif isinstance(event, GuardrailChecked):
            value = {
                "callId": call_id,
                "guardrail": event.guardrail,
                "kind": event.guardrail_kind,
                "verdict": event.verdict,
                "reason": event.reason,
            }
            out.append(CustomEvent(name=GUARDRAIL, value=value, subagent_run_id=subagent))
        elif isinstance(event, CallFinished) and call_id in self._calls:
            self._settled(call_id, event, out)
        return out

    def finished(self, output: Any, status: str, pending: list[Any]) -> list[BaseEvent]:
        """The run ended: its output as an assistant message, then `RUN_FINISHED` (with an
        interrupt per call waiting for a decision when the run paused)."""
        if status == "paused":  # a sub-agent still open waits with the run (a parked call)
            out = self._end_open_calls(suspended=_interrupts_by_run(pending))
        else:
            out = self._end_open_calls()
        if output is not None:
            message_id = f"{self.run_id}:output"
            text = _text(output)
            out.append(TextMessageStartEvent(message_id=message_id, role="assistant"))
            if text:
                out.append(TextMessageContentEvent(message_id=message_id, delta=text))
            out.append(TextMessageEndEvent(message_id=message_id))
        outcome = None
        if status == "paused":
            interrupts = [
                Interrupt(id=call.id, reason="tickloop.approval", tool_call_id=call.id)
                for call in pending
            ]
            outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
        out.append(
            RunFinishedEvent(
                thread_id=self.thread_id, run_id=self.run_id, result=output, outcome=outcome
            )
        )
        return out

    def failed(self, message: str) -> list[BaseEvent]:
        return [*self._end_open_calls(failed=True), RunErrorEvent(message=message)]

    def _end_open_calls(
        self, *, failed: bool = False, suspended: dict[str, list[str]] | None = None
    ) -> list[BaseEvent]:
        """A run that stops with calls unsettled (deferred, or waiting on one that is)
        still ends each call's AG-UI tool call; it has no result (an interrupt names the
        deferred ones). The sub-agents still open end as the run did: failed, or
        suspended (`suspended`: each one's own interrupts)."""
        out: list[BaseEvent] = []
        for call_id, call in self._calls.items():
            if not call.ended:
                self._end_call(call_id, call.params, out)
        return self._close_subagents("", out, failed=failed, suspended=suspended)

    # -- calls ---------------------------------------------------------------------------

    def _end_call(self, call_id: str, params: Any, out: list[BaseEvent]) -> None:
        call = self._calls[call_id]
        if call.ended:
            return
        call.ended = True
        delta = json.dumps({} if params is None else params, ensure_ascii=False)
        out.append(
            ToolCallArgsEvent(tool_call_id=call_id, delta=delta, subagent_run_id=call.subagent)
        )
        out.append(ToolCallEndEvent(tool_call_id=call_id, subagent_run_id=call.subagent))

    def _settled(self, call_id: str, event: CallFinished, out: list[BaseEvent]) -> None:
        call = self._calls[call_id]
        self._end_call(call_id, call.params, out)
        # A sub-agent this call started ends with it, before the call's own result.
        self._close_subagents(call_id, out, failed=event.status != "done")
        if event.status == "done":
            content = _text(call.result if event.output is None else event.output)
        else:
            content = _text({"status": event.status, "error": event.error})
        out.append(
            ToolCallResultEvent(
                message_id=f"{call_id}:result",
                tool_call_id=call_id,
                content=content,
                role="tool",
                subagent_run_id=call.subagent,
            )
        )

    def _written(self, event: DataWritten, subagent: str | None, out: list[BaseEvent]) -> None:
        call = self._calls.get(event.call_id or "")
        if call is not None and call.result is None:
            call.result = _unnest(event.data, event.output_path)
        if event.data_kind != "state" or subagent is not None:
            return  # a sub-agent's state is its own run's, not the one the client holds
        before = copy_json(self.state)
        message = {
            "type": "data",
            "kind": "state",
            "data": event.data,
            "_path": event.output_path,
            "_outputMethod": event.method,
        }
        try:
            self._mirror.append(message)
        except (ValueError, WriteError):
            return  # a redacted value the next write cannot apply to: the snapshot stands
        delta = json_patch(before, self.state)
        if delta:
            out.append(StateDeltaEvent.model_validate({"delta": delta}))

    # -- sub-agents ----------------------------------------------------------------------

    def _enter(self, event: RunEvent, out: list[BaseEvent]) -> str | None:
        """The sub-agent run id of the event (None at the root), starting the sub-agent
        runs on its path that have not started yet."""
        path = _path(event)
        if not path:
            return None
        for depth in range(1, path.depth + 1):
            run = RunPath(path.parts[:depth])
            if run not in self._open:
                self._open.append(run)
                shown = str(run)
                out.append(
                    SubagentStartedEvent(
                        subagent_run_id=shown,
                        name=_agent_name(event) if depth == path.depth else shown,
                        parent_subagent_run_id=str(run.parent) or None,
                        parent_tool_call_id=shown,
                    )
                )
        return str(path)

    def _close_subagents(
        self,
        call_id: str,
        out: list[BaseEvent],
        *,
        failed: bool = False,
        suspended: dict[str, list[str]] | None = None,
    ) -> list[BaseEvent]:
        """Finish the sub-agent runs started by `call_id` and those below them (all of
        them for ""), innermost first: failed, suspended (a paused run's), or done."""
        started_by = RunPath.parse(call_id)
        for run in reversed(list(self._open)):
            if not run.is_within(started_by):
                continue
            self._open.remove(run)
            shown = str(run)
            if failed:
                out.append(
                    SubagentErrorEvent(subagent_run_id=shown, message="the sub-agent failed")
                )
            elif suspended is not None:
                outcome = SubagentFinishedSuspendedOutcome(interrupt_ids=suspended.get(shown, []))
                out.append(SubagentFinishedEvent(subagent_run_id=shown, outcome=outcome))
            else:
                out.append(SubagentFinishedEvent(subagent_run_id=shown))
        return out


def _interrupts_by_run(pending: list[Any]) -> dict[str, list[str]]:
    """The deferred calls of a paused run by the sub-agent run that made them ("c1.0"
    for "c1.0/c1.2"; the root's under ""): each one's own interrupts."""
    by_run: dict[str, list[str]] = {}
    for call in pending:
        by_run.setdefault(str(RunPath.of(call.path)), []).append(call.id)
    return by_run


def _unnest(data: Any, path: str) -> Any:
    """The written value: a write's data is nested under its path's steps."""
    from .._core._expressions import parse_term

    for step in parse_term(path).path:
        if isinstance(step, str) and isinstance(data, dict) and step in data:
            data = data[step]
        elif isinstance(step, int) and isinstance(data, list) and step < len(data):
            data = data[step]
        else:
            return data
    return data


def _pointer(path: list[str | int]) -> str:
    return "".join("/" + str(step).replace("~", "~0").replace("/", "~1") for step in path)


def json_patch(before: Any, after: Any, at: list[str | int] | None = None) -> list[dict[str, Any]]:
    """RFC 6902 operations that turn `before` into `after` (JSON values)."""
    at = [] if at is None else at
    if type(before) is not type(after) or (not isinstance(before, dict | list) and before != after):
        return [{"op": "replace", "path": _pointer(at), "value": copy_json(after)}]
    ops: list[dict[str, Any]] = []
    if isinstance(before, dict):
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": _pointer([*at, key])})
        for key, value in after.items():
            if key not in before:
                ops.append({"op": "add", "path": _pointer([*at, key]), "value": copy_json(value)})
            else:
                ops.extend(json_patch(before[key], value, [*at, key]))
    elif isinstance(before, list):
        common = min(len(before), len(after))
        for index in range(common):
            ops.extend(json_patch(before[index], after[index], [*at, index]))
        for index in range(len(before) - 1, common - 1, -1):
            ops.append({"op": "remove", "path": _pointer([*at, index])})
        for index in range(common, len(after)):
            ops.append(
                {"op": "add", "path": _pointer([*at, "-"]), "value": copy_json(after[index])}
            )
    return ops

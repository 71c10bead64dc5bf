"""The program driver (PROTOCOL §14): one program's machine, driven against a tick.

A `ProgramMachine` (`tickloop._code`) evaluates a program statement by statement and
says what it needs done (`MakeCall`, `Printed`, `Commit`); it never does anything itself.
`ProgramDriver` is the other half: it hands each complete statement to the machine the
moment the model's stream completes it, turns every `MakeCall` into a call of the run's
scheduler (literal parameters, the call path as `_id`, no output path, the `_line`), and
gives each call's end back to the machine as its value or its `ToolError`. Everything
the scheduler does for a call — approval with the resolved parameters, budgets, ranks,
concurrency limits, sub-agents, events, the journal — therefore holds for code calls
unchanged.

The driver is synchronous: it is pumped (`pump`) by whoever runs it, after each thing
that may let the machine go on (a statement arrived, a call ended). The trio loop pumps
it from one task (`_agent._code`); a Temporal workflow can pump it from its own. It
reads no clock of its own: `clock` (evaluator time for `max_eval_seconds`) is given,
and a driver that must be deterministic gives none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._core._decisions import PendingCall
from .._core._expressions import REF
from .._core._scheduler import CallRecord
from .._core._status import FINAL_STATUSES, CallStatus
from .._errors import ResumeError

__all__ = ["YIELD_STEPS", "CallMaker", "ProgramDriver", "code_error", "literal_params"]

# The machine yields at least this often (PROTOCOL §14 "Limits"): a `step` that ran this
# many steps may have stopped with statements still runnable.
YIELD_STEPS = 1_000


class CallMaker(Protocol):
    """What the driver needs of the run's scheduler driver (`Engine`, a workflow's)."""

    @property
    def records(self) -> dict[str, CallRecord]: ...

    def receive(self, call: Any, date: str | None = None) -> None: ...


def literal_params(value: Any) -> Any:
    """A code call's parameters are values, never references (PROTOCOL §14): a string
    that starts with `†` is written escaped, `††…`, wherever the call is recorded."""
    if isinstance(value, str):
        return REF + value if value.startswith(REF) else value
    if isinstance(value, dict):
        return {key: literal_params(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [literal_params(item) for item in value]
    return value


def code_error(record: CallRecord) -> dict[str, Any]:
    """How an ended call that gave no value raises in the program: a `ToolError`'s
    fields (PROTOCOL §14 "Failures": failed, denied, invalid, or refused by a budget)."""
    error = dict(record.error or {})
    status = str(record.status)
    kind = str(error.get("type") or "runtime")
    if status == CallStatus.DENIED:
        kind = "denied"
    elif status == CallStatus.INVALID:
        kind = "structural"
    elif status == CallStatus.SKIPPED:  # not reached: a code call reads no reference
        kind, error["message"] = "structural", "the call was skipped"
    return {"type": kind, "message": str(error.get("message") or status), "status": status}


@dataclass
class _Made:
    """A call the machine made: what was handed to the scheduler (or found there)."""

    tool: str
    params: dict[str, Any]
    line: int | None
    fed: bool = False  # its end was given to the machine


@dataclass
class ProgramDriver:
    """Drives one program's machine against one code tick; see the module docstring.

    `names` maps a tool's Python name to its real name and its parameters' (PROTOCOL §14
    mangling); `on_printed(line, text)` and `on_commit(line, writes, deletes, index)` are
    told, in program order, what each committed statement printed and changed.
    """

    machine: Any
    maker: CallMaker
    params_of: Callable[[str, dict[str, Any]], tuple[str, dict[str, Any]]]
    on_printed: Callable[[int | None, str], None]
    on_commit: Callable[[Any], None]
    # Evaluator time (seconds, any monotonic origin) for `max_eval_seconds`; None: not
    # measured (a deterministic driver, a Temporal workflow).
    clock: Callable[[], float] | None = None
    max_eval_seconds: float | None = None
    # A resumed program: calls the journal holds are taken from there (same id, tool and
    # parameters, PROTOCOL §14 "Durability"), never made twice.
    resuming: bool = False
    evaluated: float = 0.0  # evaluator seconds spent on this program so far
    made: dict[str, _Made] = field(default_factory=dict)
    _ended: list[str] = field(default_factory=list)  # calls ended, not yet fed
    _stopped: bool = False
    _more: bool = False  # the last step stopped at its step limit, not at a wait

    # -- what comes in -----------------------------------------------------------------

    def add(self, statement: Any) -> None:
        """A complete top-level statement (already journaled by the caller)."""
        self.machine.add_statement(statement)

    def close(self) -> None:
        """No more statements: the program is what arrived."""
        self.machine.close()

    def settled(self, call_id: str) -> bool:
        """A call ended in the scheduler; True when it is one of this program's (its end
        is given to the machine at the next `pump`)."""
        made = self.made.get(call_id)
        if made is None or made.fed:
            return False
        self._ended.append(call_id)
        return True

    # -- the work ----------------------------------------------------------------------

    def pump(self, budget_steps: int | None = None) -> bool:
        """Give the machine what happened, and carry out what it asks, until it waits.

        Returns True when the machine may have more to do right now (it stopped at its
        step limit for one turn: the caller should yield to other tasks, then pump again).
        """
        records = self.maker.records
        while self._ended:
            call_id = self._ended.pop(0)
            self._feed_end(call_id, records[call_id])
        actions = self._step()
        busy = bool(actions) or self._more
        for action in actions:
            self._carry_out(action)
        return busy or bool(self._ended)

    def _step(self) -> list[Any]:
        clock = self.clock
        steps = self.machine.meter.steps
        if clock is None:
            actions = list(self.machine.step())
        else:
            start = clock()
            actions = list(self.machine.step())
            self.evaluated += clock() - start
        # A step ends after about YIELD_STEPS steps with work left: not waiting, busy.
        self._more = self.machine.meter.steps - steps >= YIELD_STEPS
        if clock is None:
            return actions
        limit = self.max_eval_seconds
        if limit is not None and self.evaluated > limit and not self._stopped:
            self._stopped = True
            self.machine.stop_for_limit("max_eval_seconds")
            actions.extend(self.machine.step())
        return actions

    def _carry_out(self, action: Any) -> None:
        kind = type(action).__name__
        if kind == "MakeCall":
            self._make(action)
        elif kind == "Printed":
            self.on_printed(getattr(action, "line", None), action.text)
        elif kind == "Commit":
            self.on_commit(action)

    def _make(self, action: Any) -> None:
        call_id: str = action.call_id
        tool, params = self.params_of(action.tool, dict(action.params))
        params = literal_params(params)
        line = getattr(action, "line", None)
        made = self.made[call_id] = _Made(tool, params, line)
        record = self.maker.records.get(call_id)
        if record is not None:  # a resumed program's call, journaled before the crash
            self._check_same(call_id, record, made)
            if record.status in FINAL_STATUSES:
                self._ended.append(call_id)
            return
        wire: dict[str, Any] = {"_tool": tool, **params, "_id": call_id}
        if line is not None:
            wire["_line"] = line
        self.maker.receive(wire)

    def _check_same(self, call_id: str, record: CallRecord, made: _Made) -> None:
        """A journaled call is this program's call only for the same tool and parameters
        (PROTOCOL §14): a resume that computes others for it cannot reuse it."""
        wire = record.call if isinstance(record.call, dict) else {}
        journaled = {key: value for key, value in wire.items() if not key.startswith("_")}
        if record.tool != made.tool or journaled != made.params:
            raise ResumeError(
                f"call {call_id} ({made.tool}) of the resumed program has other parameters "
                f"than the journaled call ({record.tool} with {journaled!r}, now "
                f"{made.params!r}); did a tool's result or the agent's tools change?"
            )

    def _feed_end(self, call_id: str, record: CallRecord) -> None:
        made = self.made[call_id]
        if made.fed:
            return
        made.fed = True
        if record.status == CallStatus.DONE:
            self.machine.call_finished(call_id, record.output)
        else:
            self.machine.call_finished(call_id, error=code_error(record))

    # -- what the caller asks ----------------------------------------------------------

    @property
    def finished(self) -> bool:
        return bool(self.machine.finished)

    def waits_only_on(self, pending: Mapping[str, PendingCall]) -> bool:
        """Every call of the program that has not ended is deferred (`pending`): nothing
        can go on until a person decides, so the run pauses (PROTOCOL §10)."""
        open_calls = [
            call_id
            for call_id, made in self.made.items()
            if not made.fed and call_id not in self._ended
        ]
        return bool(open_calls) and all(call_id in pending for call_id in open_calls)

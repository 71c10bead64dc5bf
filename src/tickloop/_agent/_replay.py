"""Replay and fork a stored run (docs/replay.md).

A stored run journals each request it sent beside the model's answer, every call's
outcome and decision, and which calls each call read from. `ReplayModel` answers a run's
requests from that record; `Agent.replay` runs the record again in memory (recorded
tools: no handler runs); `Agent.fork` runs a new stored run that reuses every recorded
answer and result nothing re-run reaches, like an incremental build:

* a call is re-run when it is named in `rerun`, is a call of a tool in `rerun_tools`, or
  depends on such a call (read what it wrote, directly or not; an agent call depends on
  the calls of its child run); everything else keeps its recorded result and decision;
* an iteration whose request is exactly the recorded one keeps its recorded answer; from
  the first request that differs, the model is asked again, and nothing recorded after it
  is reused (its calls are new calls, whatever their ids).

A tree of runs (PROTOCOL §11) is replayed run by run, by path: each child gets its own
recorded answers, and its calls' outcomes and decisions by their full paths. The record
is read once, before the run starts; nothing here writes to the recorded run.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

from .._core._budget import Budget
from .._core._budget_gate import RecordedRoom
from .._core._decisions import ApproveHook, Decision, Deny, PendingCall
from .._core._guardrails import Pass
from .._core._paths import RunPath
from .._core._suggest import did_you_mean
from .._durable._recording import RecordedCall, RecordedResponse, RecordedRun, Recording
from .._durable._store import SQLiteStore, as_store
from .._durable._writer import empty_journal
from .._engine._asking import ask
from .._engine._engine import Outcome
from .._errors import ConfigurationError, ReplayMismatchError, ResumeError
from .._models._base import (
    TOOL_RESULT_MESSAGES,
    ModelError,
    SolutionRequest,
    TextDelta,
    ToolResult,
    TurnItem,
    TurnRequest,
    TurnResponse,
    Usage,
)
from .._observe._events import Redactor
from ._session import budget_in
from ._turns import response_of

__all__ = [
    "ReplayMismatchError",
    "ReplayModel",
    "Replaying",
    "fork_note",
    "forked_from",
    "load_recording",
    "stale_calls",
]


def load_recording(
    store: SQLiteStore | str | Any, run_id: str, protocol: str = "solution"
) -> Recording:
    """The stored run, refused when another protocol's loop made it."""
    recording = _load(store, run_id, "replay and fork need the store that holds the run")
    _check_protocol(recording, protocol)
    return recording


def _load(store: SQLiteStore | str | Any, run_id: str, no_store: str) -> Recording:
    opened = as_store(store)
    if opened is None:
        raise ConfigurationError(no_store)
    recording = Recording.load(opened, run_id)
    if not recording.runs:
        raise ResumeError(empty_journal(run_id, "replay or fork"))
    return recording


def _check_protocol(recording: Recording, protocol: str) -> None:
    if recording.protocol != protocol:
        raise ConfigurationError(
            f"run {recording.run_id!r} was made with protocol={recording.protocol!r}; replay "
            f"or fork it with an agent of that protocol, not protocol={protocol!r}"
        )


def _unrecorded(run_id: str, run: RecordedRun, iteration: int) -> ModelError:
    where = f" (sub-agent run {run.path})" if run.path else ""
    return ModelError(
        f"run {run_id!r}{where} recorded {len(run.responses)} requests; nothing was "
        f"recorded for request {iteration}",
        status=400,
    )


class ReplayModel:
    """A model client that answers each request of a stored run with the recorded answer.

    Iteration k of a run gets the answer recorded for iteration k of `run_id`. With
    `strict=True`, a request that differs from the recorded one raises
    `ReplayMismatchError` naming the first difference (a test's guard that the prompt did
    not change). For tests: record a run once against a real model, replay it forever.

    Either protocol: a "tools" run's turns are answered as recorded, in the wire format
    the run was recorded in (`turn_format`), and tool results go back in that format, so
    the requests are the very ones the recording client sent. The store is read once, when
    the first request (or the agent's check of a "tools" client) needs it.
    """

    model = "replay"

    def __init__(
        self, store: SQLiteStore | str | Any, run_id: str, *, strict: bool = False
    ) -> None:
        self.run_id = run_id
        self.strict = strict
        self._store = store
        self._recording: Recording | None = None

    @property
    def recording(self) -> Recording:
        """The stored run (either protocol), read once."""
        if self._recording is None:
            self._recording = _load(
                self._store, self.run_id, "tl.ReplayModel needs the store that holds the run"
            )
        return self._recording

    @property
    def recorded(self) -> RecordedRun:
        """The root run's record."""
        return self.recording.root

    def run_at(self, path: tuple[str, ...]) -> RecordedRun:
        """The record of the run at `path` (a request's `path`: () the root). A recording
        of a run without sub-agents (a sub-agent recorded on its own) answers every run
        that uses it alike; a tree's answers each child run with its own, by path."""
        recording = self.recording
        if len(recording.runs) <= 1:
            return recording.root
        return recording.run(RunPath.of(path))

    @property
    def turn_format(self) -> str:
        """The wire format the run's turns were recorded in; "scripted" for a run that
        recorded none (it answers no request, so no message of any format is made)."""
        _check_protocol(self.recording, "tools")
        for run in self.recording.runs.values():
            for response in run.responses.values():
                if response.turn is not None and isinstance(response.turn.get("format"), str):
                    return str(response.turn["format"])
        return "scripted"

    def _answer(self, protocol: str, request: SolutionRequest | TurnRequest) -> RecordedResponse:
        _check_protocol(self.recording, protocol)
        run = self.run_at(request.path)
        recorded = run.responses.get(request.iteration)
        if recorded is None:
            raise _unrecorded(self.run_id, run, request.iteration)
        if self.strict:
            difference = first_difference(recorded.request, request.to_dict())
            if difference is not None:
                where = f" (sub-agent run {run.path})" if run.path else ""
                raise ReplayMismatchError(
                    f"request {request.iteration}{where} differs from the one recorded in "
                    f"run {self.run_id!r}: {difference}"
                )
        return recorded

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        yield TextDelta(self._answer("solution", request).text)

    async def stream_turn(self, request: TurnRequest) -> AsyncIterator[TurnItem]:
        yield response_of(self._answer("tools", request).turn or {})

    def tool_result_messages(
        self, response: TurnResponse, results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        """The results as the recording client's wire format answers them."""
        answer = TOOL_RESULT_MESSAGES.get(self.turn_format)
        if answer is None:
            raise ConfigurationError(
                f"run {self.run_id!r} was recorded in the {self.turn_format!r} wire format, "
                "which tl.ReplayModel cannot answer tool results in; replay it with "
                "agent.replay(), which uses the agent's own client"
            )
        return answer(response, results)


class _RunModel:
    """The model of one run of a replayed or forked tree.

    Replaying (`live` None): every request gets its recorded answer. Forking: requests
    get their recorded answers while each is exactly the recorded one; from the first that
    differs, `live` answers this run's requests. Either protocol: a "tools" run's turns
    are answered in the wire format of `like`, the run's own client, which made them.
    """

    def __init__(self, run_id: str, run: RecordedRun, like: Any, live: Any, turns: bool) -> None:
        self.run_id = run_id
        self.run = run
        self.live = live
        self.reused: set[int] = set()  # iterations answered from the record
        self.diverged = False
        if turns:
            self.turn_format = like.turn_format
            self.tool_result_messages = like.tool_result_messages

    def _recorded(self, iteration: int, request: dict[str, Any]) -> Any:
        """The recorded answer to take for request `iteration`, or None for a live one."""
        recorded = self.run.responses.get(iteration)
        if self.live is None:
            if recorded is None:
                raise _unrecorded(self.run_id, self.run, iteration)
        elif (
            self.diverged
            or recorded is None
            or first_difference(recorded.request, request) is not None
        ):
            self.diverged = True
            return None
        self.reused.add(iteration)
        return recorded

    def _usage(self, iteration: int) -> Usage | None:
        """What the record counted request `iteration` for (PROTOCOL §12): the budget
        counts a reused answer as the record did."""
        used = self.run.usage.get(iteration)
        return Usage(*used) if used is not None and any(used) else None

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        recorded = self._recorded(request.iteration, request.to_dict())
        if recorded is not None:
            yield TextDelta(recorded.text)
            usage = self._usage(request.iteration)
            if usage is not None:
                yield usage
            return
        async for item in self.live.stream_solution(request):
            yield item

    async def stream_turn(self, request: TurnRequest) -> AsyncIterator[TurnItem]:
        recorded = self._recorded(request.iteration, request.to_dict())
        if recorded is not None:
            usage = self._usage(request.iteration)
            if usage is not None:
                yield usage
            yield response_of(recorded.turn or {})
            return
        async for item in self.live.stream_turn(request):
            yield item


class Replaying:
    """What a replayed or forked tree of runs takes from its record, run by run.

    `fork`: requests are compared and a run goes live from the first that differs, and
    calls in `stale` run again; otherwise every request is answered from the record.
    `recorded_tools`: a replay's calls get their recorded outcomes (one with none fails,
    saying so); a replay with live tools and a fork run what they do not reuse. Recorded
    decisions of reused calls are reused; anything else is asked of `hook`.
    """

    def __init__(
        self,
        recording: Recording,
        *,
        fork: bool,
        recorded_tools: bool,
        hook: ApproveHook | None,
        stale: Iterable[str] = (),
        root_model: Any = None,
        redact: Redactor | None = None,
    ) -> None:
        self.recording = recording
        # How the record stored its calls' parameters (`Redactor.shared`): a call's live
        # parameters are compared with them redacted the same way.
        self.redact = redact if redact is not None else Redactor()
        self.fork = fork
        self.recorded_tools = recorded_tools
        self.hook = hook
        self.stale = set(stale)
        self.root_model = root_model  # a fork's model= for the root run; None: the agent's
        self._models: dict[RunPath, _RunModel] = {}
        # A resumed fork: per run path, the iterations it reused and whether it diverged.
        self._seeds: dict[RunPath, tuple[set[int], bool]] = {}

    def model_for(self, path: RunPath, model: Any, protocol: str) -> Any:
        """The model of the run at `path` of `protocol`, whose own client is `model`."""
        live = None
        if self.fork:
            live = self.root_model if not path and self.root_model is not None else model
        run_model = _RunModel(
            self.recording.run_id, self.recording.run(path), model, live, protocol == "tools"
        )
        seed = self._seeds.get(path)
        if seed is not None:  # a resumed fork: what it reused before
            run_model.reused, run_model.diverged = set(seed[0]), seed[1]
        self._models[path] = run_model
        return run_model

    def resuming(self, journal: Iterable[tuple[int, float, str, Any]]) -> None:
        """A fork resumed from its own `journal`: each of its runs reused the recorded
        answers of the requests it journaled equal to the recorded ones, up to the first
        that differed (as `_RunModel` decided then), so its calls get the same outcomes
        and budget decisions when the journal replays, and after."""
        forked = Recording(self.recording.run_id, self.recording.protocol)
        forked._read((kind, body) for _, _, kind, body in journal)
        for where, run in forked.runs.items():
            recorded = self.recording.run(where)
            reused: set[int] = set()
            diverged = False
            for iteration in sorted(run.responses):
                was = recorded.responses.get(iteration)
                now = run.responses[iteration].request
                if diverged or was is None or first_difference(was.request, now) is not None:
                    diverged = True
                else:
                    reused.add(iteration)
            self._seeds[where] = (reused, diverged)

    def recorded_compaction(self, path: RunPath, iteration: int) -> dict[str, Any] | None:
        """A replay reuses every recorded compaction; a fork only one made before its
        first changed request (PROTOCOL §16 "Ownership")."""
        model = self._models.get(path)
        if model is None or (self.fork and model.diverged):
            return None
        found = self.recording.run(path).compactions.get(iteration)
        return dict(found) if found is not None else None

    def answer_under(self, path: RunPath) -> Callable[[str, dict[str, Any]], Outcome | None] | None:
        """The engine's recorded outcomes for the run at `path`, by its calls' local ids
        and resolved parameters; None when every call runs its handler."""
        if not self.fork and not self.recorded_tools:
            return None
        return lambda call_id, params: self._answer(path / call_id, params)

    def screens_under(self, path: RunPath) -> Callable[[str], Pass | Deny | None]:
        """The tool guardrails' recorded verdicts for the run at `path`, by local call id:
        a reused call is not screened again (PROTOCOL §15); None asks them."""

        def screened(call_id: str) -> Pass | Deny | None:
            call = self._reusable(path / call_id)
            if call is None or call.screened is None:
                return None
            passed, reason = call.screened
            return Pass() if passed else Deny(reason or "")

        return screened

    def verdicts_under(self, path: RunPath) -> tuple[dict[str, Any], ...]:
        """The recorded input and output verdicts the run at `path` reuses (PROTOCOL §15):
        a replay every one (it asks no guardrail, and trips where the record did); a fork
        only the passes of input guardrails, its input being the record's: it asks the
        one that tripped again, and every output guardrail (docs/decisions.md)."""
        verdicts = self.recording.run(path).guardrails
        if not self.fork:  # and the trips of tool and result guardrails, by call
            return tuple(
                v
                for v in verdicts
                if v.get("kind") in ("input", "output") or v["verdict"] == "trip"
            )
        return tuple(v for v in verdicts if v.get("kind") == "input" and v["verdict"] == "pass")

    def room_under(self, path: RunPath) -> RecordedRoom:
        """The budget decisions the record made for the run at `path` (PROTOCOL §12): a
        reused call the budget refused is refused again, one that started is counted and
        never refused; a call run anew reserves room."""

        def decided(call_id: str) -> dict[str, Any] | bool | None:
            call = self._reusable(path / call_id)
            if call is None:
                return None
            if call.refused is not None:
                return call.refused
            return True if call.started else None

        return decided

    def budget(self) -> Budget | None:
        """The budget the replayed tree runs under: the recorded run's own (as a resume
        takes it, whatever the agent's is now) with every grant its record holds, so the
        room the record was given is given again; None when the run had none."""
        own = next(filter(None, map(budget_in, self.recording.root.notes)), None)
        if own is None:
            return None
        for grant in self.recording.grants:
            own = own + grant
        return own

    def _reusable(self, path: RunPath) -> RecordedCall | None:
        call_id = str(path)
        call = self.recording.calls.get(call_id)
        if call is None or call_id in self.stale:
            return None
        if self.fork:
            run_model = self._models.get(path.parent)
            if run_model is None or call.iteration not in run_model.reused:
                return None  # a call of a request the model answered anew
        return call

    def _params_changed(self, call: RecordedCall, params: Any) -> str | None:
        """How a call's parameters differ from those its record ran with (as stored);
        None when they are the same. A fork re-runs a call whose inputs changed, whatever
        its id (a code plan's call reads variables, which no recorded arrow names)."""
        if call.params is None:
            return None  # recorded by an older tickloop, without them
        return _difference(call.params, self.redact.shared(params), "params")

    def _answer(self, path: RunPath, params: dict[str, Any]) -> Outcome | None:
        if path in self.recording.runs:
            return None  # an agent call: its child run replays, answered from its record
        call = self._reusable(path)
        if call is not None and call.outcome is not None:
            changed = self._params_changed(call, params)
            if changed is None:
                return call.outcome
            if not self.recorded_tools:
                return None  # its inputs changed: it runs again
            why = f" with these parameters (it ran with others: {changed})"
            return _no_result(self.recording.run_id, path, why)
        if self.recorded_tools:
            return _no_result(self.recording.run_id, path, "")
        return None

    def recorded_decision(self, call_id: str, params: Any = None) -> Decision | None:
        """The decision the record holds for a call it reuses (full path), if any; given
        `params`, only when the call has the parameters it was decided on."""
        call = self._reusable(RunPath.parse(call_id))
        if call is None or (params is not None and self._params_changed(call, params)):
            return None
        return call.decision

    async def decide(self, pending: PendingCall) -> Decision | bool:
        decision = self.recorded_decision(pending.id, pending.params)
        if decision is not None:
            return decision
        if self.hook is None:
            return Deny(f"replay: run {self.recording.run_id!r} recorded no decision for it")
        return await ask(self.hook, pending)


def _no_result(run_id: str, path: RunPath, why: str) -> Outcome:
    message = f"replay: run {run_id!r} recorded no result for call {path}{why}"
    return (None, None, {"type": "runtime", "message": message})


FORK_NOTE = "fork"  # a fork's first commit names its record, so a resume can find it


def fork_note(replaying: Replaying) -> dict[str, Any]:
    """The note a fork journals with its input: the run it forks and what it re-runs."""
    return {
        "note": FORK_NOTE,
        "of": replaying.recording.run_id,
        "stale": sorted(replaying.stale),
    }


def forked_from(journal: Iterable[tuple[int, float, str, Any]]) -> dict[str, Any] | None:
    """The fork note of a stored run made by `fork`; None for any other run."""
    for _, _, kind, body in journal:
        if kind == "note" and isinstance(body, dict) and body.get("note") == FORK_NOTE:
            return body
        if kind == "event":
            return None  # the note comes with the input, before any event
    return None


def stale_calls(
    recording: Recording,
    rerun: Iterable[str],
    rerun_tools: Iterable[str],
    tools: Iterable[str] | None = (),
) -> set[str]:
    """The recorded calls a fork runs again: those named, those of the tools named, the
    calls of the child runs they started, and every call that depends on any of them. A
    name the run does not have is a caller's mistake; so is a tool that is neither the
    agent's (`tools`, its tree's; None when not all are known) nor called in the run."""
    rerun, rerun_tools = list(rerun), list(rerun_tools)
    for item, kind in [(i, "rerun") for i in rerun] + [(t, "rerun_tools") for t in rerun_tools]:
        if not isinstance(item, str):
            raise ConfigurationError(f"{kind} must hold strings, not {item!r}")
    unknown = [call_id for call_id in rerun if call_id not in recording.calls]
    if unknown:
        raise ConfigurationError(
            f"run {recording.run_id!r} has no call {', '.join(map(repr, unknown))} to re-run"
        )
    known = {call.tool for call in recording.calls.values() if call.tool is not None}
    known |= set(tools or ())
    for tool in rerun_tools if tools is not None else ():
        if tool not in known:
            raise ConfigurationError(
                f"rerun_tools names {tool!r}, which is no tool of the agent and no tool "
                f"run {recording.run_id!r} called{did_you_mean(tool, known)}; the tools: "
                + ", ".join(sorted(known))
            )
    named = set(rerun_tools)
    roots = set(rerun) | {c.id for c in recording.calls.values() if c.tool in named}
    # A guardrail's trip cut the calls then running short (PROTOCOL §15): a fork, which
    # asks the guardrail that tripped again, runs them again (docs/decisions.md).
    for path, run in recording.runs.items():
        for verdict in run.guardrails:
            roots.update(str(path / call_id) for call_id in verdict.get("cancelled") or ())
    return recording.downstream_of(roots | recording.below(roots))


def first_difference(recorded: Any, new: Any) -> str | None:
    """Where two requests first differ, in words; None when they are equal."""
    if recorded is None:
        return "the run was recorded without its requests (made by an older tickloop)"
    return _difference(recorded, new, "request")


def _difference(old: Any, new: Any, where: str) -> str | None:
    if type(old) is not type(new) and not (_number(old) and _number(new)):
        return f"at {where}: recorded {_short(old)}, now {_short(new)}"
    if isinstance(old, dict):
        for key in old:
            if key not in new:
                return f"at {where}: {key!r} was recorded and is gone"
        for key in new:
            if key not in old:
                return f"at {where}: {key!r} is new"
        for key in old:
            found = _difference(old[key], new[key], f"{where}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(old, list):
        for index, (a, b) in enumerate(zip(old, new, strict=False)):
            found = _difference(a, b, f"{where}[{index}]")
            if found is not None:
                return found
        if len(old) != len(new):
            return f"at {where}: {len(old)} items recorded, now {len(new)}"
        return None
    if old != new:
        if isinstance(old, str) and isinstance(new, str):
            at = next(
                (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
                min(len(old), len(new)),
            )
            return (
                f"at {where}, character {at}: recorded {_short(old[at : at + 60])}, "
                f"now {_short(new[at : at + 60])}"
            )
        return f"at {where}: recorded {_short(old)}, now {_short(new)}"
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True, default=repr)
    return text if len(text) <= 80 else text[:77] + "..."

"""Replay and fork a stored run (docs/replay.md).

A stored run journals each request it sent beside the model's answer, every call's
outcome and decision, and which calls each call read from. `ReplayModel` answers a run's
requests from that record; `Agent.replay` runs the record again in memory (recorded
tools: no handler runs); `Agent.fork` runs a new stored run that reuses every recorded
answer and result nothing re-run reaches, like an incremental build:

* a call is re-run when it is named in `rerun`, is a call of a tool in `rerun_tools`, or
  read (directly or through other calls) what such a call wrote; everything else keeps
  its recorded result and decision;
* an iteration whose request is exactly the recorded one keeps its recorded answer; from
  the first request that differs, the model is asked again, and nothing recorded after it
  is reused (its calls are new calls, whatever their ids).

The record is read once, before the run starts; nothing here writes to the recorded run.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Collection, Iterable
from typing import Any

from .._core._decisions import ApproveHook, Decision, Deny, PendingCall
from .._durable._recording import Recording
from .._durable._store import SQLiteStore, as_store
from .._engine._asking import ask
from .._engine._engine import Outcome
from .._errors import ConfigurationError, TickloopError
from .._models._base import (
    ModelError,
    SolutionRequest,
    TextDelta,
    TurnItem,
    TurnRequest,
    Usage,
)
from ._turns import response_of

__all__ = [
    "ReplayMismatchError",
    "ReplayModel",
    "Reuse",
    "fork_model",
    "load_recording",
    "replay_model",
    "stale_calls",
]


class ReplayMismatchError(TickloopError):
    """A strict `ReplayModel` got a request that differs from the recorded one."""


def load_recording(
    store: SQLiteStore | str | Any, run_id: str, protocol: str = "solution"
) -> Recording:
    """The stored run, refused when another protocol's loop made it."""
    opened = as_store(store)
    if opened is None:
        raise ConfigurationError("replay and fork need the store that holds the run")
    recording = Recording.load(opened, run_id)
    if recording.protocol != protocol:
        raise ConfigurationError(
            f"run {run_id!r} was made with protocol={recording.protocol!r}; replay or fork "
            f"it with an agent of that protocol, not protocol={protocol!r}"
        )
    return recording


class ReplayModel:
    """A model client that answers each request of a stored run with the recorded answer.

    Iteration k of a run gets the answer recorded for iteration k of `run_id`. With
    `strict=True`, a request that differs from the recorded one raises
    `ReplayMismatchError` naming the first difference (a test's guard that the prompt did
    not change). For tests: record a run once against a real model, replay it forever.
    """

    model = "replay"

    def __init__(
        self,
        store: SQLiteStore | str | Any,
        run_id: str,
        *,
        strict: bool = False,
        recording: Recording | None = None,
    ) -> None:
        self.run_id = run_id
        self.strict = strict
        self._store = store
        self._recording = recording

    @property
    def recording(self) -> Recording:
        if self._recording is None:
            self._recording = load_recording(self._store, self.run_id)
        return self._recording

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        recorded = self.recording.responses.get(request.iteration)
        if recorded is None:
            raise ModelError(
                f"run {self.run_id!r} recorded {len(self.recording.responses)} requests; "
                f"nothing was recorded for request {request.iteration}",
                status=400,
            )
        if self.strict:
            difference = first_difference(recorded.request, request.to_dict())
            if difference is not None:
                raise ReplayMismatchError(
                    f"request {request.iteration} differs from the one recorded in run "
                    f"{self.run_id!r}: {difference}"
                )
        yield TextDelta(recorded.text)


class _TurnReplay:
    """Protocol "tools": each request answered with its recorded assistant turn, in the
    wire format of `like` (the agent's own client, which made the record)."""

    def __init__(self, recording: Recording, like: Any) -> None:
        self.recording = recording
        self.turn_format = like.turn_format
        self.tool_result_messages = like.tool_result_messages

    async def stream_turn(self, request: TurnRequest) -> AsyncIterator[TurnItem]:
        turn = self.recording.turns.get(request.iteration)
        if turn is None:
            raise ModelError(
                f"run {self.recording.run_id!r} recorded no answer for request {request.iteration}",
                status=400,
            )
        yield response_of(turn)


class _ForkModel:
    """Recorded answers while the requests are the recorded ones, then the live model."""

    def __init__(self, recording: Recording, live: Any, protocol: str) -> None:
        self.recording = recording
        self.live = live
        self.reused: set[int] = set()  # iterations answered from the record
        self.diverged = False
        if protocol == "tools":
            self.turn_format = live.turn_format
            self.tool_result_messages = live.tool_result_messages

    def _reuses(self, iteration: int, request: dict[str, Any]) -> bool:
        """Whether request `iteration` takes its recorded answer: it and every request
        before it are exactly the recorded ones."""
        recorded = self.recording.responses.get(iteration)
        if (
            not self.diverged
            and recorded is not None
            and recorded.request is not None
            and first_difference(recorded.request, request) is None
        ):
            self.reused.add(iteration)
            return True
        self.diverged = True
        return False

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        if self._reuses(request.iteration, request.to_dict()):
            yield TextDelta(self.recording.responses[request.iteration].text)
            return
        async for item in self.live.stream_solution(request):
            yield item

    async def stream_turn(self, request: TurnRequest) -> AsyncIterator[TurnItem]:
        if self._reuses(request.iteration, request.to_dict()):
            yield response_of(self.recording.turns[request.iteration])
            return
        async for item in self.live.stream_turn(request):
            yield item


class Reuse:
    """Which recorded outcomes and decisions a replayed or forked run takes.

    `recorded_tools`: a call with a recorded outcome gets it instead of running (a call
    with none fails, saying so). `stale`: calls that run again and are asked again.
    `answered`: the iterations whose recorded answer was reused (None: all of them).
    """

    def __init__(
        self,
        recording: Recording,
        *,
        recorded_tools: bool,
        stale: Collection[str] = (),
        answered: Callable[[int], bool] | None = None,
        hook: ApproveHook | None = None,
    ) -> None:
        self.recording = recording
        self.recorded_tools = recorded_tools
        self.stale = stale
        self.answered = answered
        self.hook = hook

    def _reusable(self, call_id: str) -> Any:
        call = self.recording.calls.get(call_id)
        if call is None or call_id in self.stale:
            return None
        if self.answered is not None and not self.answered(call.iteration):
            return None  # a call of a request the model answered anew
        return call

    def answer(self, call_id: str) -> Outcome | None:
        call = self._reusable(call_id)
        if call is not None and call.outcome is not None:
            return call.outcome
        if self.recorded_tools:
            return (
                None,
                None,
                {
                    "type": "runtime",
                    "message": f"replay: run {self.recording.run_id!r} recorded no result for "
                    f"call {call_id}",
                },
            )
        return None

    async def decide(self, pending: PendingCall) -> Decision | bool:
        call = self._reusable(pending.id)
        if call is not None and call.decision is not None:
            return call.decision
        if self.hook is None:
            return Deny(f"replay: run {self.recording.run_id!r} recorded no decision for it")
        return await ask(self.hook, pending)


def fork_model(recording: Recording, live: Any, protocol: str) -> _ForkModel:
    return _ForkModel(recording, live, protocol)


def replay_model(recording: Recording, like: Any, protocol: str) -> Any:
    """The model of `agent.replay`: the recorded answers, in `like`'s wire format."""
    if protocol == "tools":
        return _TurnReplay(recording, like)
    return ReplayModel(None, recording.run_id, recording=recording)


def stale_calls(recording: Recording, rerun: Iterable[str], rerun_tools: Iterable[str]) -> set[str]:
    """The recorded calls a fork runs again: those named, those of the tools named, and
    everything downstream of them. A name the run does not have is a caller's mistake."""
    rerun, rerun_tools = list(rerun), list(rerun_tools)
    for item, kind in [(i, "rerun") for i in rerun] + [(t, "rerun_tools") for t in rerun_tools]:
        if not isinstance(item, str):
            raise ConfigurationError(f"{kind} must hold strings, not {item!r}")
    unknown = [call_id for call_id in rerun if call_id not in recording.calls]
    if unknown:
        raise ConfigurationError(
            f"run {recording.run_id!r} has no call {', '.join(map(repr, unknown))} to re-run"
        )
    tools = set(rerun_tools)
    roots = set(rerun) | {c.id for c in recording.calls.values() if c.tool in tools}
    return recording.downstream_of(roots)


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

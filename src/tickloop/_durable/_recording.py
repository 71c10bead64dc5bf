"""A stored run read back as a recording: what was asked, answered, decided and returned.

Replay and fork (docs/replay.md) run an agent again from what a run's journal holds:
each model request it sent (a `request` note beside its `solution` message), each call's
outcome (its `CallFinished` event) and decision, and the calls' dependency arrows (the
`deps` of their rows). This module only reads: it never writes to the store.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .._core._decisions import Decision, Defer, decision_from_dict
from ._store import SQLiteStore

__all__ = ["RecordedCall", "RecordedResponse", "Recording"]


@dataclass(slots=True)
class RecordedResponse:
    """One request of the run and the model's answer to it, as its log keeps them."""

    iteration: int
    text: str  # what the model streamed: the solution as JSON, or the raw text it wrote
    request: dict[str, Any] | None  # {"messages", "schema"}; None in a run made before


@dataclass(slots=True)
class RecordedCall:
    """One call of the run: how it ended, the decision it got, what it waited on."""

    id: str
    tool: str | None
    iteration: int
    status: str
    deps: list[str]
    outcome: tuple[Any, str | None, dict[str, Any] | None] | None = None
    decision: Decision | None = None


@dataclass(slots=True)
class Recording:
    run_id: str
    protocol: str
    opening: list[dict[str, Any]]  # the messages the run began with, before any request
    responses: dict[int, RecordedResponse] = field(default_factory=dict)
    calls: dict[str, RecordedCall] = field(default_factory=dict)
    # protocol "tools": each answered request's assistant turn, as the log keeps it
    turns: dict[int, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, store: SQLiteStore, run_id: str) -> Recording:
        """The run `run_id` of `store`; `ResumeError` when there is none, `StoreError`
        when the file is not a store."""
        protocol = store.protocol(run_id)
        journal = store.journal(run_id)
        recording = cls(run_id, protocol, [])
        for info in store.calls(run_id):
            recording.calls[info.id] = RecordedCall(
                info.id, info.tool, info.iteration, info.status, list(info.deps or ())
            )
        recording._read(body for _, _, kind, body in journal if kind in _READ)
        for info in store.calls(run_id):
            if info.decision is not None and recording.calls[info.id].decision is None:
                recording.calls[info.id].decision = decision_from_dict(info.decision)
        return recording

    def _read(self, entries: Iterable[Any]) -> None:
        requests: dict[int, dict[str, Any] | None] = {}
        asked = False
        for body in entries:
            if not isinstance(body, dict):
                continue
            if body.get("note") == "request":
                requests[body["iteration"]] = body.get("request")
                asked = True
            elif body.get("type") == "solution":
                asked = True
                self.responses[body["iteration"]] = RecordedResponse(
                    body["iteration"], _solution_text(body), requests.get(body["iteration"])
                )
            elif body.get("type") == "data" and body.get("kind") == TURN_KIND and asked:
                turn = body.get("data")
                if isinstance(turn, dict) and turn.get("role") == "assistant":
                    iteration = int(turn["iteration"])
                    if not turn.get("broken"):
                        self.turns[iteration] = turn
                        self.responses[iteration] = RecordedResponse(
                            iteration, str(turn.get("text", "")), requests.get(iteration)
                        )
            elif body.get("type") == "CallFinished":
                call = self.calls.get(body["call_id"])
                if call is not None:
                    call.outcome = (body.get("value"), body.get("branch"), body.get("error"))
            elif body.get("type") == "DecisionMade":
                call = self.calls.get(body["call_id"])
                decision = decision_from_dict(body["decision"])
                # A deferred call's last decision is the one it ran (or was denied) by.
                if call is not None and (call.decision is None or not isinstance(decision, Defer)):
                    call.decision = decision
            elif "type" in body and "note" not in body and not asked:
                self.opening.append(body)

    def downstream_of(self, roots: Iterable[str]) -> set[str]:
        """`roots` and every recorded call that read, directly or not, what they wrote."""
        readers: dict[str, list[str]] = {}
        for call in self.calls.values():
            for dep in call.deps:
                readers.setdefault(dep, []).append(call.id)
        seen: set[str] = set()
        todo = [root for root in roots if root in self.calls]
        while todo:
            call_id = todo.pop()
            if call_id in seen:
                continue
            seen.add(call_id)
            todo.extend(readers.get(call_id, ()))
        return seen


_READ = frozenset({"message", "note", "event"})
TURN_KIND = "turn"  # the data kind of protocol "tools" turns (`_agent._turns.TURN_KIND`)


def _solution_text(message: dict[str, Any]) -> str:
    """What the model streamed for a `solution` message: its raw text when the log kept
    it (an answer that could not be read, or one cut off), else the solution as JSON."""
    if "text" in message:
        return str(message["text"])
    return json.dumps(message.get("solution"), ensure_ascii=False)

"""A stored run read back as a recording: what was asked, answered, decided and returned.

Replay and fork (docs/replay.md) run an agent again from what a run's journal holds:
each model request it sent (a `request` note beside its answer), each call's outcome (its
`CallFinished` event) and decision, and the calls' dependency arrows (the `deps` of their
rows). A tree of runs (PROTOCOL §11) is one journal: a child's entries are tagged with its
path ("event@c1.2"), so each run of the tree is read back on its own, by path. This
module only reads: it never writes to the store.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .._core._budget import Budget
from .._core._decisions import Decision, Defer, decision_from_dict
from .._core._paths import RunPath, untag_kind
from ._store import SQLiteStore

__all__ = ["TURN_KIND", "RecordedCall", "RecordedResponse", "RecordedRun", "Recording"]

TURN_KIND = "turn"  # the data kind of protocol "tools" turns: the provider's wire messages


@dataclass(slots=True)
class RecordedResponse:
    """One request of a run and the model's answer to it, as its log keeps them."""

    iteration: int
    text: str  # what the model streamed: the solution as JSON, or the raw text it wrote
    request: dict[str, Any] | None  # what was sent; None in a run made before requests
    turn: dict[str, Any] | None = None  # protocol "tools": the assistant turn as logged


@dataclass(slots=True)
class RecordedCall:
    """One call of the tree (by full path): how it ended, its decision, what it read."""

    id: str
    tool: str | None
    iteration: int
    status: str
    deps: list[str]
    outcome: tuple[Any, str | None, dict[str, Any] | None] | None = None
    decision: Decision | None = None
    started: bool = False  # it started (its room was counted, PROTOCOL §12)
    # The budget refused it (never started): its Error Message's error.
    refused: dict[str, Any] | None = None
    # Its tool guardrails' journaled verdict (PROTOCOL §15): passed, or the denial's reason.
    screened: tuple[bool, str | None] | None = None
    # Its resolved parameters as stored (redacted: `Redactor.shared`); None when unknown.
    # A replay or fork reuses its outcome or decision only for the same parameters.
    params: Any = None


@dataclass(slots=True)
class RecordedRun:
    """One run of the tree: the messages it began with and the answers it got."""

    path: RunPath  # the root's is empty; "c1.2" for the child its call c1.2 started
    opening: list[dict[str, Any]] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)  # journaled with the opening
    responses: dict[int, RecordedResponse] = field(default_factory=dict)
    # The compactions it made (PROTOCOL §16), by the iteration whose request they were
    # made before: a replay shows them again instead of asking for a summary.
    compactions: dict[int, dict[str, Any]] = field(default_factory=dict)
    # The tokens each request was counted for (PROTOCOL §12): its reservation and what
    # replaced it, (input, output), as the budget journaled them (`BudgetSpent`).
    usage: dict[int, tuple[int, int]] = field(default_factory=dict)
    # Its guardrails' verdicts (PROTOCOL §15), as journaled (`guardrail` notes), in order.
    guardrails: list[dict[str, Any]] = field(default_factory=list)
    _requests: dict[int, dict[str, Any] | None] = field(default_factory=dict)
    _asked: bool = False
    _spent: tuple[int, int] = (0, 0)  # counted since the last request: the next one's
    _current: int | None = None  # the request the counts go to now

    def read(self, kind: str, body: Any) -> None:
        if not isinstance(body, dict):
            return
        if kind == "note":
            if body.get("note") == "request":
                iteration = int(body["iteration"])
                self._requests[iteration] = body.get("request")
                self._asked = True
                self.usage[iteration] = self._spent  # its reservation came just before
                self._spent, self._current = (0, 0), iteration
            elif body.get("note") == "guardrail":
                self.guardrails.append({k: v for k, v in body.items() if k != "note"})
            elif not self._asked:
                self.notes.append(body)
            return
        if kind == "event":
            self._asked = self._asked or body.get("type") == "TickOpened"
            if body.get("type") == "BudgetSpent" and isinstance(body.get("amount"), dict):
                self._count(body["amount"])
            return
        if body.get("type") == "compaction":
            self.compactions[int(body.get("iteration", 0))] = body
        elif body.get("type") == "solution":
            self._asked = True
            iteration = int(body["iteration"])
            self.responses[iteration] = RecordedResponse(
                iteration, _solution_text(body), self._requests.get(iteration)
            )
        elif body.get("type") == "data" and body.get("kind") == TURN_KIND and self._asked:
            turn = body.get("data")
            if isinstance(turn, dict) and turn.get("role") == "assistant":
                iteration = int(turn["iteration"])
                if not turn.get("broken"):
                    self.responses[iteration] = RecordedResponse(
                        iteration, str(turn.get("text", "")), self._requests.get(iteration), turn
                    )
        elif not self._asked:
            self.opening.append(body)

    def _count(self, amount: dict[str, Any]) -> None:
        tokens = (int(amount.get("input_tokens", 0)), int(amount.get("output_tokens", 0)))
        if amount.get("requests"):  # a reservation: the next request's
            self._spent = (self._spent[0] + tokens[0], self._spent[1] + tokens[1])
        elif self._current is not None:  # what replaced the last one's
            used = self.usage.get(self._current, (0, 0))
            self.usage[self._current] = (used[0] + tokens[0], used[1] + tokens[1])


@dataclass(slots=True)
class Recording:
    run_id: str
    protocol: str
    runs: dict[RunPath, RecordedRun] = field(default_factory=dict)  # by path
    calls: dict[str, RecordedCall] = field(default_factory=dict)  # by full path
    # Room the budget hook (or a resume's `budget=`) granted, anywhere in the tree: added
    # to the root's limits, in the order given (PROTOCOL §12).
    grants: list[Budget] = field(default_factory=list)
    # The store it was read from: where the bytes of its `$media` references are kept.
    store: SQLiteStore | None = None

    @classmethod
    def load(cls, store: SQLiteStore, run_id: str) -> Recording:
        """The run `run_id` of `store`; `ResumeError` when there is none, `StoreError`
        when the file is not a store."""
        recording = cls(run_id, store.protocol(run_id), store=store)
        infos = store.calls(run_id)
        for info in infos:
            recording.calls[info.id] = RecordedCall(
                info.id,
                info.tool,
                info.iteration,
                info.status,
                list(info.deps or ()),
                started=info.started is not None,
                refused=_refusal(info.status, info.started, info.error),
                params=info.params,
            )
        recording._read((kind, body) for _, _, kind, body in store.journal(run_id))
        for info in infos:
            call = recording.calls[info.id]
            if info.decision is not None and call.decision is None:
                call.decision = decision_from_dict(info.decision)
        return recording

    @property
    def root(self) -> RecordedRun:
        return self.run(RunPath.ROOT)

    def run(self, path: RunPath) -> RecordedRun:
        """The run at `path`; an empty one when the record has none."""
        return self.runs.get(path) or RecordedRun(path)

    def _read(self, entries: Iterable[tuple[str, Any]]) -> None:
        for tagged, body in entries:
            kind, path = untag_kind(tagged)
            run = self.runs.get(path)
            if run is None:
                run = self.runs[path] = RecordedRun(path)
            run.read(kind, body)
            if kind == "event" and isinstance(body, dict):
                self._read_event(path, body)

    def _read_event(self, path: RunPath, body: dict[str, Any]) -> None:
        kind = body.get("type")
        if kind == "BudgetAnswered" and isinstance(body.get("grant"), dict):
            self.grants.append(Budget.from_dict(body["grant"]))
            return
        if kind not in ("CallFinished", "DecisionMade", "CallScreened"):
            return
        call = self.calls.get(path.full(body["call_id"]))
        if call is None:
            return
        if kind == "CallScreened":
            denied = body.get("denied")
            call.screened = (denied is None, denied)
            return
        if kind == "CallFinished":
            call.outcome = (body.get("value"), body.get("branch"), body.get("error"))
            return
        decision = decision_from_dict(body["decision"])
        # A deferred call's last decision is the one it ran (or was denied) by.
        if call.decision is None or not isinstance(decision, Defer):
            call.decision = decision

    def downstream_of(self, roots: Iterable[str]) -> set[str]:
        """`roots` and every recorded call that depends on one of them: read, directly or
        not, what it wrote, or is the agent call whose child run it is part of (a child's
        result is its agent call's)."""
        readers: dict[str, list[str]] = {}
        for call in self.calls.values():
            for dep in call.deps:
                readers.setdefault(dep, []).append(call.id)
            run = RunPath.parse(call.id).parent
            if run:
                readers.setdefault(call.id, []).append(str(run))
        seen: set[str] = set()
        todo = [root for root in roots if root in self.calls]
        while todo:
            call_id = todo.pop()
            if call_id in seen:
                continue
            seen.add(call_id)
            todo.extend(readers.get(call_id, ()))
        return seen

    def below(self, call_ids: Iterable[str]) -> set[str]:
        """Every recorded call of the child runs the agent calls `call_ids` started."""
        runs = [RunPath.parse(call_id) for call_id in call_ids]
        found = set()
        for call_id in self.calls:
            above = RunPath.parse(call_id).parent
            if any(above.is_within(run) for run in runs):
                found.add(call_id)
        return found


def _refusal(
    status: str, started: float | None, error: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The budget error of a call the budget refused: failed before it started."""
    if status == "failed" and started is None and error and error.get("type") == "budget":
        return error
    return None


def _solution_text(message: dict[str, Any]) -> str:
    """What the model streamed for a `solution` message: its raw text when the log kept
    it (an answer that could not be read, or one cut off), else the solution as JSON."""
    if "text" in message:
        return str(message["text"])
    return json.dumps(message.get("solution"), ensure_ascii=False)

"""A run's place in a tree of runs, and what the root shares with it (PROTOCOL §11).

A sub-agent's call runs a **child run**: the same loop and the same scheduler as any run,
one level down, inside the same run. What the whole tree shares is given by the root
once, in one `TreeServices`: the approval hook (asked one question at a time across the
tree), the event listeners, redaction, `max_depth`, the store's journal; and what the
tree gathers for the root's result (its children's call records, the pending calls of
paused children). A run knows where it is through its `RunPlace`: the tree, and the path
of agent-call ids above it (`()` at the root).

Nothing crosses a run boundary but values: a child's input is a copy of its call's
parameters, its output a copy of its own, and ids are translated at the boundary (a
child's model sees `c1.0`; the tree, its events and its store see `c1.2/c1.0`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from .._core._budget import Ledger
from .._core._decisions import ApproveHook, Decision, PendingCall
from .._core._paths import RunPath
from .._core._scheduler import CallRecord
from .._core._tools import Tool
from .._engine._asking import ask
from .._observe._events import EventSink, Redactor, RunEvent, TickEnded

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "ChildSink",
    "RunPlace",
    "TreeServices",
    "TreeTool",
    "has_sub_agents",
]

DEFAULT_MAX_DEPTH = 5


class TreeTool(Tool):
    """A tool whose call runs a child run (an agent as a tool, `_subagent.AgentTool`).

    `child_tools()` names the tools of the agent it runs, so the root can check the whole
    tree's configuration (approval hooks) when it starts, before anything runs.
    """

    agent_name: str

    def child_tools(self) -> list[Tool]:
        raise NotImplementedError

    def recorded_calls(self, place: RunPlace) -> dict[str, CallRecord]:
        """The records of a child run at `place` that ended in an earlier process (read
        back from the tree's journal, nothing run), for the root's result; {} if none."""
        return {}


def has_sub_agents(tools: Iterable[Tool]) -> bool:
    return any(isinstance(tool, TreeTool) for tool in tools)


class TreeServices:
    """What every run of one tree shares; made by the root run, passed down by reference
    inside the process (never into a child's log, state or output).

    """

    def __init__(
        self,
        *,
        run_id: str,
        approve: ApproveHook | None,
        listeners: list[Callable[[RunEvent], Any]],
        redact: Redactor,
        max_depth: int,
        durable: Any = None,
        journal: list[tuple[int, float, str, Any]] | None = None,
        decisions: Mapping[str, Decision] | None = None,
        replaying: Any = None,
        on_budget: Any = None,
    ) -> None:
        self.run_id = run_id
        # A replayed or forked tree (`_replay.Replaying`): each child run's recorded model
        # and answers, by path; None for a run of its own.
        self.replaying = replaying
        self.approve = approve
        # A person answers one question at a time, for the whole tree (PROTOCOL §6): a
        # trio.Lock is fair, so questions are asked in the order they came.
        self._asking = trio.Lock()
        self.listeners = listeners
        self.redact = redact
        self.max_depth = max_depth
        # Durable runs: the root's journal binding (its writer is shared by every run of
        # the tree), the journal a resume replays (each child picks its own entries by
        # path) and the decisions recorded for the tree, by full path.
        self.durable = durable
        self.journal = journal or []
        self.decisions = dict(decisions or {})
        # Gathered for the root's result: every child call's record under its full path,
        # and, per parked agent call (full path), the pending calls of its paused child.
        self.records: dict[str, dict[str, CallRecord]] = {}  # per agent call (full path)
        self.parked: dict[str, list[PendingCall]] = {}
        self._journals: dict[str, list[tuple[int, float, str, Any]]] | None = None
        # Budgets (PROTOCOL §12): one count for the tree. Each run's ledger, by its path,
        # so a child's draws from its parent's (and so from the root's, which then holds
        # the usage of the whole tree); the root's budget hook answers for every run.
        self.ledgers: dict[tuple[str, ...], Ledger] = {}
        self.on_budget = on_budget
        # The time limits of the agent calls running now (`as_tool(timeout=)`), by the
        # prefix of their child run: a child cut off by one ends its calls (`cut_off`).
        self.time_limits: dict[str, trio.CancelScope] = {}
        # Its own queue, beside the approvals' (§12): every run's engine asks through it,
        # so the hook is asked one question at a time across the tree, in turn (fair).
        self.budget_questions = trio.Lock()

    def journal_of(self, path: str) -> list[tuple[int, float, str, Any]]:
        """The entries a child run at `path` journaled in earlier processes, their kinds
        untagged ("event@c1.2" -> "event"), for its replay; [] for a new child."""
        if self._journals is None:  # grouped once, on the first child that asks
            self._journals = {}
            for number, at, kind, body in self.journal:
                base, _, where = kind.partition("@")
                if where:
                    self._journals.setdefault(where, []).append((number, at, base, body))
        return self._journals.pop(path, [])

    def decisions_under(self, prefix: str) -> dict[str, Decision]:
        """The decisions recorded for calls below `prefix` ("c1.2/"), by their ids there."""
        return {
            call_id[len(prefix) :]: decision
            for call_id, decision in self.decisions.items()
            if call_id.startswith(prefix)
        }

    async def ask(self, pending: PendingCall) -> Decision:
        """Ask the root's hook about a call of any run of the tree, one at a time."""
        assert self.approve is not None  # the tree's configuration was checked
        async with self._asking:
            return await ask(self.approve, pending)


@dataclass(frozen=True, slots=True)
class RunPlace:
    """Where a run is in its tree: the tree, the agent-call ids above it, its agent."""

    tree: TreeServices
    path: tuple[str, ...] = ()
    agent: str | None = None

    @property
    def depth(self) -> int:
        return len(self.path)

    @property
    def prefix(self) -> str:
        """What a local call id is prefixed with to be a full path ("" at the root)."""
        return "/".join(self.path) + "/" if self.path else ""

    def cut_off(self) -> str | None:
        """The agent call (full path) at or above this run whose time limit ran out, if
        one did: this run ends for good (PROTOCOL §11)."""
        limits = self.tree.time_limits
        for depth in range(1, len(self.path) + 1):
            above = RunPath(self.path[:depth])
            scope = limits.get(above.prefix)
            if scope is not None and scope.cancel_called:
                return str(above)
        return None

    def child(self, call_id: str, agent: str) -> RunPlace:
        return RunPlace(self.tree, (*self.path, call_id), agent)

    def scoped(self, pending: PendingCall) -> PendingCall:
        """A pending call of this run as the tree shows it: full paths, path and agent."""
        prefix = self.prefix
        return dataclasses.replace(
            pending,
            id=prefix + pending.id,
            waits_on=[prefix + other for other in pending.waits_on],
            dependents=[prefix + other for other in pending.dependents],
            run_id=self.tree.run_id,
            path=self.path,
            agent=self.agent,
        )

    def pending_of(self, deferred: list[PendingCall]) -> list[PendingCall]:
        """This run's deferred calls as the tree lists them, each parked agent call
        replaced by the pending calls of its paused child."""
        found: list[PendingCall] = []
        parked = self.tree.parked
        for pending in deferred:
            below = parked.get(self.prefix + pending.id)
            if below is not None:
                found.extend(below)
            else:
                found.append(self.scoped(pending))
        return found

    def gather(
        self, records: Mapping[str, CallRecord], tools: Mapping[str, Tool]
    ) -> dict[str, CallRecord]:
        """This run's records under full paths, each agent call followed by the records
        of its child in arrival order: gathered when that child ended, or, for a child
        that ended in an earlier process of a resumed run, read back from the journal."""
        found: dict[str, CallRecord] = {}
        prefix = self.prefix
        below = self.tree.records
        for call_id, record in records.items():
            full = prefix + call_id
            found[full] = dataclasses.replace(record, id=full) if prefix else record
            child = below.pop(full, None) if below else None
            if child is None and self.tree.journal:
                tool = tools.get(record.tool) if record.tool is not None else None
                if isinstance(tool, TreeTool):
                    child = tool.recorded_calls(self.child(call_id, tool.agent_name))
            if child:
                found.update(child)
        return found

    def finished(self, records: Mapping[str, CallRecord], tools: Mapping[str, Tool]) -> None:
        """A child run ended (any way): its records wait for its parent to gather them."""
        self.tree.records[self.prefix[:-1]] = self.gather(records, tools)

    async def ask(self, pending: PendingCall) -> Decision:
        """The approval hook of a run of this tree: the root's, told the full path."""
        return await self.tree.ask(self.scoped(pending))


class ChildSink(EventSink):
    """A child run's events, delivered to the root's listeners with the child's path and
    agent, and its call ids as full paths."""

    def __init__(self, place: RunPlace, clock: Callable[[], float] = trio.current_time) -> None:
        tree = place.tree
        super().__init__(tree.run_id, tree.redact, list(tree.listeners), clock)
        self.place = place

    def emit(self, event: RunEvent) -> None:
        place = self.place
        prefix = place.prefix
        changes: dict[str, Any] = {"path": place.path, "agent": place.agent}
        if event.call_id is not None:
            changes["call_id"] = prefix + event.call_id
        if isinstance(event, TickEnded):
            changes["paused"] = [prefix + call_id for call_id in event.paused]
        super().emit(dataclasses.replace(event, **changes))

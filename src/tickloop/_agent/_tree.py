"""A run's place in a tree of runs, and what the root shares with it (PROTOCOL §11).

A sub-agent's call runs a **child run**: the same loop and the same scheduler as any run,
one level down, inside the same run. What the whole tree shares is given by the root
once, in one frozen `TreeServices`: the approval hook (asked one question at a time across
the tree), the event listeners, redaction, `max_depth`, the store's journal; what changes
while the tree runs is apart, in its `TreeState`: what the tree gathers for the root's
result (its children's call records, the pending calls of paused children), each run's
ledger, the locks of the questions. A run knows where it is through its `RunPlace`: the
tree, and the `RunPath` of agent calls above it (the root's is empty).

Nothing crosses a run boundary but values: a child's input is a copy of its call's
parameters, its output a copy of its own, and ids are translated at the boundary (a
child's model sees `c1.0`; the tree, its events and its store see `c1.2/c1.0`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from .._core._budget import Ledger
from .._core._budget_gate import RecordedRoom
from .._core._decisions import ApproveHook, Decision, Deny, PendingCall
from .._core._guardrails import Guardrail, Pass
from .._core._media import MediaKeeper
from .._core._paths import RunPath, untag_kind
from .._core._scheduler import CallRecord
from .._core._tools import RawTool, Tool
from .._durable._resume import DurableRun
from .._engine._asking import ask
from .._engine._budgeting import BudgetHook
from .._engine._engine import Outcome
from .._observe._events import EventSink, Redactor, RunEvent, TickEnded

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "ChildSink",
    "JournalEntry",
    "ReplayingTree",
    "RunPlace",
    "TreeServices",
    "TreeState",
    "TreeTool",
    "has_sub_agents",
    "open_tree_sources",
    "tree_tools",
]

DEFAULT_MAX_DEPTH = 5


class TreeTool(RawTool):
    """A tool whose call runs a child run (an agent as a tool, `_subagent.AgentTool`).

    `child_tools()` names the tools of the agent it runs, so the root can check the whole
    tree's configuration (approval hooks) when it starts, before anything runs.
    """

    agent_name: str

    def child_tools(self) -> list[Tool]:
        raise NotImplementedError

    def open_replay(self, place: RunPlace) -> tuple[Any, DurableRun] | None:
        """The child run at `place`, made to replay its entries of a resumed tree's
        journal (`_session.TreeReplay`): its loop and its durable run; None when it
        cannot be made before it runs again (it then replays itself when it starts)."""
        return None

    def open_sources(self) -> AbstractAsyncContextManager[Any]:
        """Open the tool sources (MCP servers) of the agent it runs, for a resumed tree
        (`open_tree_sources`): the configuration its child runs have while it is open,
        or None when it has no sources (its tools are known without opening anything)."""
        return nullcontext()

    def recorded_calls(self, place: RunPlace) -> dict[str, CallRecord]:
        """The records of a child run at `place` that ended in an earlier process (read
        back from the tree's journal, nothing run), for the root's result; {} if none."""
        return {}


def has_sub_agents(tools: Iterable[Tool]) -> bool:
    return any(isinstance(tool, TreeTool) for tool in tools)


JournalEntry = tuple[int, float, str, Any]  # (number, time, kind, body), as stored


class ReplayingTree(Protocol):
    """What a replayed or forked tree takes from its record for each of its runs
    (`_replay.Replaying`): the run's model, and its calls' recorded outcomes."""

    fork: bool  # a fork (new requests asked live) rather than a replay

    def model_for(self, path: RunPath, model: Any, protocol: str) -> Any:
        """The model the run at `path` asks, whose own client is `model`."""

    def answer_under(self, path: RunPath) -> Callable[[str, dict[str, Any]], Outcome | None] | None:
        """The recorded outcome of each call of the run at `path` (by its local id);
        None when every call runs its handler."""

    def room_under(self, path: RunPath) -> RecordedRoom:
        """The budget decisions the record made for each call of the run at `path`."""

    def recorded_decision(self, call_id: str, params: Any = None) -> Decision | None:
        """The decision the record holds for a call it reuses (full id), if any; given
        `params`, only when the call has the parameters it was decided on."""

    def recorded_compaction(self, path: RunPath, iteration: int) -> dict[str, Any] | None:
        """The compaction the record made before request `iteration` of the run at
        `path`, when it is reused (PROTOCOL §16); None: decide and ask anew."""

    def screens_under(self, path: RunPath) -> Callable[[str], Pass | Deny | None]:
        """The tool guardrails' recorded verdict of each reused call of the run at `path`."""

    def verdicts_under(self, path: RunPath) -> tuple[dict[str, Any], ...]:
        """The recorded input and output guardrail verdicts the run at `path` reuses."""


class TreeState:
    """What changes while a tree of runs runs, shared by its runs in one process.

    Every map is keyed by a `RunPath`: the path of the child run it is about (the full
    id of the agent call that started it).
    """

    def __init__(self) -> None:
        # Gathered for the root's result: the records of each child run that ended, under
        # their full ids (taken by its parent's `gather`), and the pending calls of each
        # paused child (its agent call is parked).
        self.records: dict[RunPath, dict[str, CallRecord]] = {}
        self.parked: dict[RunPath, list[PendingCall]] = {}
        # Budgets (PROTOCOL §12): one count for the tree. Each run's ledger, by its path,
        # so a child's draws from its parent's (and so from the root's, which then holds
        # the usage of the whole tree).
        self.ledgers: dict[RunPath, Ledger] = {}
        # A resumed tree's child runs rebuilt from its journal in the order it was
        # written (`_session.TreeReplay`), by path: (loop, durable run), each taken by
        # its agent call when it starts again.
        self.replayed: dict[RunPath, tuple[Any, DurableRun]] = {}
        # The configurations of the sub-agents whose tool sources a resume opened before
        # replaying the tree's journal (`open_tree_sources`), by their tool: their child
        # runs are rebuilt with these tools, so even theirs count from their journaled
        # starts (PROTOCOL §12). Open for as long as the resumed root runs.
        self.opened: dict[TreeTool, Any] = {}
        # The time limits of the agent calls running now (`as_tool(timeout=)`), by the
        # path of their child run: a child cut off by one ends its calls (`cut_off`).
        self.time_limits: dict[RunPath, trio.CancelScope] = {}
        # A person answers one question at a time, for the whole tree (PROTOCOL §6): a
        # trio.Lock is fair, so questions are asked in the order they came. The budget
        # hook has a queue of its own beside it (§12), in turn across the tree.
        self.asking = trio.Lock()
        self.budget_questions = trio.Lock()


@dataclass(frozen=True, eq=False)
class TreeServices:
    """What every run of one tree is given, fixed when the root starts; made by the root
    run, passed down by reference inside the process (never into a child's log, state or
    output). What changes while the tree runs is its `state`."""

    run_id: str
    approve: ApproveHook | None
    listeners: Sequence[Callable[[RunEvent], object]]
    redact: Redactor
    max_depth: int
    # Durable runs: the root's journal binding (its writer is shared by every run of the
    # tree), the journal a resume replays (each child picks its own entries by path) and
    # the decisions recorded for the tree's calls, by full id.
    durable: DurableRun | None = None
    journal: Sequence[JournalEntry] = ()
    decisions: Mapping[RunPath, Decision] = field(default_factory=dict)
    # A replayed or forked tree: each child run's recorded model and answers, by path;
    # None for a run of its own.
    replaying: ReplayingTree | None = None
    # The root's budget hook: it answers for every run of the tree (PROTOCOL §12).
    on_budget: BudgetHook | None = None
    # The root's guardrails of calls (tool and result, PROTOCOL §15): every child's calls
    # pass them before the child's own.
    guardrails: tuple[Guardrail, ...] = ()
    # Where every run of the tree keeps the bytes of its images and audio: the root's
    # (its store, or its memory), so a parent shows its child's media.
    media: MediaKeeper | None = None
    state: TreeState = field(default_factory=TreeState)
    # The journal's entries grouped by the child run that wrote them (made from
    # `journal` once, when the tree is made).
    _journals: Mapping[RunPath, tuple[JournalEntry, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        grouped: dict[RunPath, list[JournalEntry]] = {}
        for number, at, tagged, body in self.journal:
            kind, path = untag_kind(tagged)
            if path:
                grouped.setdefault(path, []).append((number, at, kind, body))
        journals = {path: tuple(entries) for path, entries in grouped.items()}
        object.__setattr__(self, "_journals", journals)

    @staticmethod
    def keyed_decisions(decisions: Mapping[str, Decision] | None) -> dict[RunPath, Decision]:
        """Decisions given by full id ("c1.2/c1.0"), keyed by path."""
        return {RunPath.parse(call_id): decision for call_id, decision in (decisions or {}).items()}

    def journal_of(self, path: RunPath) -> tuple[JournalEntry, ...]:
        """The entries the child run at `path` journaled in earlier processes, their kinds
        untagged ("event@c1.2" -> "event"), for its replay; () for a new child."""
        return self._journals.get(path, ())

    def decisions_under(self, path: RunPath) -> dict[str, Decision]:
        """The decisions recorded for calls of the run at `path` and below, by their ids
        seen from it."""
        return {
            str(full.relative_to(path)): decision
            for full, decision in self.decisions.items()
            if full.depth > path.depth and full.is_within(path)
        }

    async def ask(self, pending: PendingCall) -> Decision:
        """Ask the root's hook about a call of any run of the tree, one at a time."""
        assert self.approve is not None  # the tree's configuration was checked
        async with self.state.asking:
            return await ask(self.approve, pending)


@dataclass(frozen=True, slots=True)
class RunPlace:
    """Where a run is in its tree: the tree, the path of agent calls above it, its agent."""

    tree: TreeServices
    path: RunPath = RunPath.ROOT
    agent: str | None = None

    @property
    def depth(self) -> int:
        return self.path.depth

    def cut_off(self) -> str | None:
        """The agent call (full path) at or above this run whose time limit ran out, if
        one did: this run ends for good (PROTOCOL §11)."""
        limits = self.tree.state.time_limits
        outermost = None
        run = self.path
        while run:
            scope = limits.get(run)
            if scope is not None and scope.cancel_called:
                outermost = str(run)
            run = run.parent
        return outermost

    def child(self, call_id: str, agent: str) -> RunPlace:
        return RunPlace(self.tree, self.path / call_id, agent)

    def scoped(self, pending: PendingCall) -> PendingCall:
        """A pending call of this run as the tree shows it: full ids, path and agent."""
        path = self.path
        return dataclasses.replace(
            pending,
            id=path.full(pending.id),
            waits_on=[path.full(other) for other in pending.waits_on],
            dependents=[path.full(other) for other in pending.dependents],
            run_id=self.tree.run_id,
            path=path.parts,
            agent=self.agent,
        )

    def pending_of(self, deferred: list[PendingCall]) -> list[PendingCall]:
        """This run's deferred calls as the tree lists them, each parked agent call
        replaced by the pending calls of its paused child."""
        found: list[PendingCall] = []
        parked = self.tree.state.parked
        for pending in deferred:
            below = parked.get(self.path / pending.id)
            if below is not None:
                found.extend(below)
            else:
                found.append(self.scoped(pending))
        return found

    def gather(
        self, records: Mapping[str, CallRecord], tools: Mapping[str, Tool]
    ) -> dict[str, CallRecord]:
        """This run's records under full ids, each agent call followed by the records
        of its child in arrival order: gathered when that child ended, or, for a child
        that ended in an earlier process of a resumed run, read back from the journal."""
        found: dict[str, CallRecord] = {}
        path = self.path
        below = self.tree.state.records
        for call_id, record in records.items():
            child_path = path / call_id
            full = str(child_path)
            found[full] = dataclasses.replace(record, id=full) if path else record
            child = below.pop(child_path, None) if below else None
            if child is None and self.tree.journal:
                tool = tools.get(record.tool) if record.tool is not None else None
                if isinstance(tool, TreeTool):
                    child = tool.recorded_calls(self.child(call_id, tool.agent_name))
            if child:
                found.update(child)
        return found

    def finished(self, records: Mapping[str, CallRecord], tools: Mapping[str, Tool]) -> None:
        """A child run ended (any way): its records wait for its parent to gather them."""
        self.tree.state.records[self.path] = self.gather(records, tools)

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
        path = place.path
        changes: dict[str, Any] = {"path": path.parts, "agent": place.agent}
        if event.call_id is not None:
            changes["call_id"] = path.full(event.call_id)
        if isinstance(event, TickEnded):
            changes["paused"] = [path.full(call_id) for call_id in event.paused]
        super().emit(dataclasses.replace(event, **changes))


def tree_tools(tools: Iterable[Tool]) -> Iterator[tuple[tuple[str, ...], Tool]]:
    """Every tool of the tree, with the names of the sub-agents above it."""
    seen: set[int] = set()
    stack: list[tuple[tuple[str, ...], Tool]] = [((), tool) for tool in tools]
    while stack:
        agents, tool = stack.pop()
        if id(tool) in seen:  # an agent may be a tool of itself (bounded by max_depth)
            continue
        seen.add(id(tool))
        yield agents, tool
        if isinstance(tool, TreeTool):
            stack.extend(((*agents, repr(tool.agent_name)), child) for child in tool.child_tools())


@asynccontextmanager
async def open_tree_sources(
    place: RunPlace | None, tools: Iterable[Tool], journal: Sequence[JournalEntry] | None
) -> AsyncIterator[None]:
    """For a resumed tree whose journal holds child runs' entries: the tool sources of its
    sub-agents opened before the journal is replayed, and kept open while the root runs,
    so `TreeReplay` rebuilds every child run in its place (PROTOCOL §10, §12)."""
    if place is None or not journal or not any(untag_kind(kind)[1] for _, _, kind, _ in journal):
        yield
        return
    opened = place.tree.state.opened
    async with AsyncExitStack() as stack:
        for _, tool in tree_tools(tools):
            if not isinstance(tool, TreeTool):
                continue
            config = await stack.enter_async_context(tool.open_sources())
            if config is not None:
                opened[tool] = config
        try:
            yield
        finally:
            opened.clear()

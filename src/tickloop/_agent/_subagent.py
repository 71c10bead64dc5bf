"""Agents as tools: a call to one runs a child run (PROTOCOL §11).

The child run is the sub-agent's own loop (`OuterLoop`, either protocol) on its own log,
state, scheduler and limits, run as the activity of the call that started it, inside the
same run: the root's approval hook, events, redaction, `max_depth` and journal serve it
through its `RunPlace` (`_tree`). Its output is the call's result, written like any
tool's; a child that ends without one fails its call, and never its parent.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from functools import partial
from typing import Any

import trio

from .._core._budget import Budget, Price
from .._core._decisions import Approve, ApproveHook, Decision, Edit, PendingCall
from .._core._log import ContextLog, copy_json
from .._core._paths import RunPath
from .._core._scheduler import CallRecord
from .._core._suggest import did_you_mean
from .._core._tools import CallContext, Tool, ToolSet
from .._durable._resume import DurableRun
from .._engine._asking import ask
from .._engine._engine import PARKED, CallRefused
from .._engine._run import initial_log
from .._errors import ConfigurationError, RunStopped, TickloopError
from .._observe._events import EventSink, Redactor
from ._budgeting import check_pricing
from ._loop import AgentConfig, OuterLoop
from ._tree import DEFAULT_MAX_DEPTH, ChildSink, RunPlace, TreeServices, TreeTool, tree_tools

__all__ = ["DEFAULT_INPUT", "AgentTool", "check_tree", "run_child", "tree_tool_names"]

DEFAULT_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "what the agent is to do"}},
    "required": ["task"],
}


class AgentTool(TreeTool):
    """An agent as a tool: its call runs the agent as a child run.

    Made by `Agent.as_tool` (or by placing an `Agent` in a `tools=` list). `open_config`
    is the agent's own way of taking its configuration for one run (its tool sources
    opened); `agent_tools` its tools, for the tree's checks.
    """

    # Its `timeout` cuts the child run off here, which then ends the child's calls.
    times_itself = True
    # Started again on a resume, it goes on with its child's journal: still one call.
    resumes = True

    def __init__(
        self,
        *,
        name: str,
        description: str,
        parameters: Any,
        output: Any,
        open_config: Callable[[], AbstractAsyncContextManager[AgentConfig]],
        config: Callable[[], AgentConfig],
        agent_tools: ToolSet,
        agent: Any = None,
        requires_approval: Any = False,
        timeout: float | None = None,
        sources: bool = False,
    ) -> None:
        super().__init__(
            name,
            description,
            parameters,
            output,
            requires_approval=requires_approval,
            timeout=timeout,
            # A crash while the child runs starts the call again: its child then replays
            # its own journal, so no finished call of it runs again (§10 at every depth).
            idempotent=True,
        )
        # What events and pending calls name as `.agent`: the agent's own name, else the
        # tool's (an unnamed agent given a name by `as_tool(name=...)`).
        self.agent_name: str = getattr(agent, "name", None) or name
        self._open_config = open_config
        self._config = config  # without its tool sources opened: for reading records back
        self._agent_tools = agent_tools
        # The `Agent` itself, opaque here: a driver that runs child runs its own way (a
        # Temporal workflow) reads its options and registers its activities.
        self.agent = agent
        # Whether the agent lists tool sources (MCP servers): its tools are known only
        # once they are open, so a resume cannot rebuild its child runs ahead of them.
        self.sources = sources

    def child_tools(self) -> list[Tool]:
        return list(self._agent_tools.values())

    def recorded_calls(self, place: RunPlace) -> dict[str, CallRecord]:
        tree = place.tree
        replayed = tree.state.replayed.get(place.path)
        if replayed is not None:  # rebuilt with the tree's journal (`TreeReplay`)
            loop, _ = replayed
            return place.gather(loop.engine.records, loop.config.tools)
        journal = tree.journal_of(place.path)
        if not journal or tree.durable is None:
            return {}
        config = _child_config(self._config(), place)
        sink = EventSink(tree.run_id, tree.redact)  # a replay delivers no events
        durable = DurableRun(tree.durable.writer, config.tools, tree.redact, sink, path=place.path)
        loop = config.protocol.open_loop(config, ContextLog(), sink, durable)
        try:
            durable.replay(journal, loop)  # nothing runs, nothing is written
        except TickloopError:  # its tools changed since (a tool source's): no records
            return {}
        return place.gather(loop.engine.records, config.tools)

    def open_sources(self) -> AbstractAsyncContextManager[AgentConfig | None]:
        return self._open_config() if self.sources else nullcontext()

    def open_replay(self, place: RunPlace) -> tuple[OuterLoop, DurableRun] | None:
        tree = place.tree
        if tree.durable is None:
            return None
        # An agent with tool sources has its tools once they are open (`open_sources`,
        # opened by the resume ahead of the replay); without them it replays itself.
        opened = tree.state.opened.get(self) if self.sources else self._config()
        if opened is None:
            return None
        config = _child_config(opened, place)
        sink = ChildSink(place)
        top = tree.durable.rows.get(place.path.parts[0])
        durable = DurableRun(
            tree.durable.writer,
            config.tools,
            tree.redact,
            sink,
            path=place.path,
            row_seq=None if top is None else top.seq,
        )
        durable.decisions = tree.decisions_under(place.path)
        return config.protocol.open_loop(config, ContextLog(), sink, durable), durable

    async def run_raw(self, params: dict[str, Any], context: CallContext) -> Any:
        # The parameters are the child's input, checked against its schema already: they
        # are not converted to a signature's types.
        parent = context.scope
        if not isinstance(parent, RunPlace):  # `run_calls`: a tree of its own
            tree = TreeServices(
                run_id=context.run_id or "",
                approve=None,
                listeners=[],
                redact=Redactor(),
                max_depth=DEFAULT_MAX_DEPTH,
            )
            parent = RunPlace(tree)
        # The call's full path is the child run's (PROTOCOL §11).
        place = RunPlace(parent.tree, RunPath.parse(context.id), self.agent_name)
        tree = place.tree
        if place.depth > tree.max_depth:
            raise CallRefused(
                f"sub-agent {self.agent_name!r} would run at depth {place.depth}, deeper "
                f"than the root's max_depth of {tree.max_depth}"
            )
        tree.state.parked.pop(place.path, None)  # started (again): not parked
        if self.timeout is None:
            async with self._open_config() as config:
                return await run_child(config, place, params)
        # The call's time limit, kept here (`times_itself`): when it cuts the child off,
        # the child's calls that run end failed, cancelled (`_finish`).
        with trio.move_on_after(self.timeout) as cut:
            tree.state.time_limits[place.path] = cut
            try:
                async with self._open_config() as config:
                    return await run_child(config, place, params)
            finally:
                del tree.state.time_limits[place.path]
        raise TimeoutError(f"{self.name} ran over {self.timeout:g} s")


async def run_child(config: AgentConfig, place: RunPlace, params: dict[str, Any]) -> Any:
    """Run a sub-agent's loop as a child run at `place`; its output (JSON), or `PARKED`
    when it paused on decisions. A run that stops without an output raises RuntimeError
    saying why, which fails the call."""
    tree = place.tree
    config = _child_config(config, place)
    sink = ChildSink(place)
    root = tree.durable
    if root is None:
        loop = config.protocol.open_loop(config, initial_log(copy_json(params)), sink, None)
        return await _finish(place, loop, nullcontext())
    # A durable tree: the child is journaled in the root's run under its path, and a
    # child that journaled before (a crash, a pause) replays that and goes on from there.
    path = place.path
    replayed = tree.state.replayed.pop(path, None)
    if replayed is not None:  # rebuilt from the tree's journal when the root resumed
        loop, durable = replayed
        return await _finish(place, loop, durable.flushing())
    top = root.rows.get(path.parts[0])
    durable = DurableRun(
        root.writer,
        config.tools,
        tree.redact,
        sink,
        path=path,
        row_seq=None if top is None else top.seq,
    )
    journal = tree.journal_of(path)
    if journal:
        loop = config.protocol.open_loop(config, ContextLog(), sink, durable)
        durable.decisions = tree.decisions_under(path)
        durable.replay(journal, loop)
    else:
        log = initial_log(copy_json(params))
        durable.journal_messages(list(log.messages))
        loop = config.protocol.open_loop(config, log, sink, durable)
    return await _finish(place, loop, durable.flushing())


def _child_config(config: AgentConfig, place: RunPlace) -> AgentConfig:
    """A sub-agent's configuration as a child run at `place` sees it: the root's hook
    (after its own, when it has one), redaction and journal, no store, listeners or
    tracer of its own."""
    tree = place.tree
    approve = place.ask if tree.approve is not None else None
    if config.approve is not None and approve is not None:
        approve = partial(_own_hook_first, config.approve, place)
    if tree.replaying is not None:  # a replayed or forked tree: the child's record, by path
        config = dataclasses.replace(
            config,
            model=tree.replaying.model_for(place.path, config.model, config.protocol.name),
            answer=tree.replaying.answer_under(place.path),
            recorded_room=tree.replaying.room_under(place.path),
            recorded_screens=tree.replaying.screens_under(place.path),
            recorded_verdicts=tree.replaying.verdicts_under(place.path),
            replay_only=not tree.replaying.fork,
        )
    return dataclasses.replace(
        config,
        # One budget for the tree (PROTOCOL §12): the child draws from its parent's ledger
        # (its own budget can only make it tighter), and the root's hook answers.
        parent_ledger=tree.state.ledgers.get(place.path.parent),
        on_budget=tree.on_budget,
        approve=approve,
        guardrails=tree.guardrails + config.guardrails,  # the root's, then its own (§15)
        store=None,
        on_event=None,
        tracer=None,
        redact=tree.redact,
        place=place,
        media=tree.media if tree.media is not None else config.media,
    )


async def _own_hook_first(own: ApproveHook, place: RunPlace, pending: PendingCall) -> Decision:
    """A child's call asked of its sub-agent's own hook first (PROTOCOL §11): a Deny, or
    any answer that runs nothing or is asked again (Respond, Replace, Defer), is final;
    an Approve, or an Edit of what runs, goes on to the root's hook, which has the last
    word on anything that runs. A replayed tree's recorded decision asks nobody."""
    scoped = place.scoped(pending)
    replaying = place.tree.replaying
    if replaying is not None and replaying.recorded_decision(scoped.id, scoped.params) is not None:
        return await place.tree.ask(scoped)
    decision = await ask(own, scoped)
    if isinstance(decision, Approve):
        return await place.tree.ask(scoped)
    if not isinstance(decision, Edit):
        return decision
    edited = decision.apply_to(pending.params)
    if not isinstance(edited, dict):
        return decision  # refused by the scheduler's check, saying why
    answer = await place.tree.ask(dataclasses.replace(scoped, params=edited))
    if isinstance(answer, Approve):
        return decision
    if isinstance(answer, Edit):
        return Edit(answer.apply_to(edited))
    return answer


async def _finish(
    place: RunPlace, loop: OuterLoop, flushing: AbstractAsyncContextManager[Any]
) -> Any:
    """Run a child's loop to its end: its output, or `PARKED`."""
    tree = place.tree
    try:
        async with flushing:
            try:
                result = await loop.run()
            except* trio.Cancelled:
                # Cut off by the time limit of its agent call, or of one above it: that
                # call ends for good, and so do the child's. Any other cancel (of the
                # whole run) leaves the child to be resumed as it was.
                cut = place.cut_off()
                if cut is not None:
                    loop.engine.abandon(_cancelled(cut))
                raise
    except RunStopped as stopped:
        raise RuntimeError(
            f"sub-agent {place.agent!r} ended without an output: {stopped}"
        ) from None
    finally:
        place.finished(loop.engine.records, loop.config.tools)
    if result.status == "paused":
        tree.state.parked[place.path] = place.pending_of(result.pending)
        return PARKED
    output = result.output
    # A copy: nothing of the child's log is shared (a pydantic model's JSON is made anew
    # by the engine, like any tool's result).
    return copy_json(output) if isinstance(output, dict | list) else output


def _cancelled(call_id: str) -> dict[str, Any]:
    """The error of a child's call that ran when agent call `call_id` was cut off."""
    return {
        "type": "runtime",
        "message": f"Cancelled: the sub-agent call {call_id} ran out of time while this call ran",
    }


def check_tree(
    tools: Iterable[Tool],
    approve: Any,
    pricing: Mapping[str, Price] | None = None,
    budget: Budget | None = None,
    store: Any = None,
) -> None:
    """Checks of the whole tree, made when the root run starts, before anything runs: a
    tool that may require approval anywhere needs the root's hook, a sub-agent's store
    can only be the root's `store` (PROTOCOL §11), and where a `cost` limit holds (the
    root's budget, or a sub-agent's own) the root's `pricing` must price the sub-agent's
    model (PROTOCOL §12); a `per_tool` limit names a tool of the tree below it (a typo
    would switch the limit off)."""
    tools = list(tools)
    check_per_tool(budget, tools, "the run's budget")
    for agents, tool in tree_tools(tools):
        where = f" of sub-agent {' > '.join(agents)}" if agents else ""
        if approve is None and tool.may_require_approval:
            raise ConfigurationError(
                f"tool {tool.name!r}{where} may require approval, but no approval hook was "
                "given (pass approve=... to the root agent: it serves the whole tree)"
            )
        if isinstance(tool, AgentTool) and tool.agent is not None:
            child = tool.agent
            if child.store is not None and not _same_store(child.store, store):
                raise ConfigurationError(
                    f"sub-agent {tool.agent_name!r}{where} has store={child.store.path!s}, "
                    f"but a tree of runs is stored in one place, the root's "
                    f"({'none' if store is None else store.path!s}): give the store to the "
                    "root agent only"
                )
            if not child.tool_sources:  # else its tools are known only when it starts
                check_per_tool(
                    child.budget, tool.child_tools(), f"the budget of sub-agent {tool.agent_name!r}"
                )
            limited = budget if budget is not None and budget.cost is not None else child.budget
            try:
                check_pricing(pricing or {}, limited, child.model)
            except ConfigurationError as error:
                raise ConfigurationError(f"sub-agent {tool.agent_name!r}{where}: {error}") from None


def _same_store(store: Any, root: Any) -> bool:
    if root is None:
        return False
    return bool(store is root or os.path.realpath(store.path) == os.path.realpath(root.path))


def check_per_tool(budget: Budget | None, tools: Iterable[Tool], whose: str) -> None:
    """Each `per_tool` limit of `budget` names a tool of `tools` or of the sub-agents
    below them, else `ConfigurationError` naming it and the close match. A tree with a
    sub-agent whose tool sources (MCP servers) are listed only when it starts is not
    fully known here, and is not checked."""
    if budget is None or not budget.per_tool:
        return
    names = tree_tool_names(tools)
    if names is None:
        return
    for name in budget.per_tool:
        if name not in names:
            raise ConfigurationError(
                f"{whose} limits per_tool {name!r}, but no tool of the agent or its "
                f"sub-agents is called {name!r}{did_you_mean(name, names)}; the tools: "
                + ", ".join(sorted(names))
            )


def tree_tool_names(tools: Iterable[Tool]) -> set[str] | None:
    """The names of `tools` and of the tools of the sub-agents below them; None when a
    sub-agent lists tools from a source (an MCP server) only once it starts."""
    names: set[str] = set()
    for _, tool in tree_tools(tools):
        names.add(tool.name)
        if isinstance(tool, AgentTool) and tool.agent is not None and tool.agent.tool_sources:
            return None
    return names

"""`Agent`: the composition root of a run (PROTOCOL §8).

The agent checks its options once, then for each run takes a frozen `AgentConfig` of
them (its tool sources' tools added), and hands it to a `RunSession`, which asks the
agent's protocol (`_solution.SOLUTION` or `_turns.TOOLS`) for the loop. Nothing below
this module sees the `Agent`: it is imported by `tickloop` and the drivers above it only.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from types import UnionType
from typing import Any, Generic, Literal

import trio

from .._core._budget import Budget, BudgetRequest, Price, RunUsage
from .._core._decisions import ApproveHook, ReviewHook
from .._core._guardrails import (
    Guardrail,
    InputGuardrail,
    OutputGuardrail,
    ResultGuardrail,
    ToolGuardrail,
)
from .._core._media import MemoryMedia
from .._core._paths import RunPath
from .._core._questions import QuestionHook
from .._core._tools import MakesTool, Tool, ToolSet, ToolSource, split_tools
from .._durable._sessions import session_of
from .._durable._store import SQLiteStore, as_store
from .._engine._engine import check_configuration
from .._engine._event_loops import refuse_inside_trio, require_trio
from .._engine._questions import check_questions
from .._engine._sources import OpenedTools, check_sources, open_tools
from .._errors import ConfigurationError
from .._mcp._server import MCPPrompt
from .._models._base import ModelClient, TurnClient
from .._observe._events import DEFAULT_REDACT, Redactor, RunEvent, open_event_stream
from .._observe._trace import make_tracer
from ._budgeting import check_budget, check_carried, check_pricing
from ._code import CODE
from ._conversation import check_session_options, keeps_state, maybe_holding, maybe_resuming
from ._loop import AgentConfig, LoopProtocol, OutputT, RunResult
from ._output import OutputSpec
from ._prompt import DEFAULT_CONTEXT_BUDGET, solution_schema
from ._replay import Replaying, fork_note, forked_from, load_recording, stale_calls
from ._session import RunSession
from ._solution import SOLUTION
from ._stubs import render_stubs
from ._subagent import DEFAULT_INPUT, AgentTool, check_per_tool, check_tree, tree_tool_names
from ._text_stream import open_stream
from ._tool_search import menu_of, with_tool_search
from ._tree import DEFAULT_MAX_DEPTH
from ._turns import TOOLS

__all__ = ["Agent", "RunResult"]

PROTOCOLS: dict[str, LoopProtocol] = {
    protocol.name: protocol for protocol in (SOLUTION, TOOLS, CODE)
}
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def _check_on_event(callback: Any) -> Any:
    if callback is not None and not callable(callback):
        raise ConfigurationError(
            f"on_event must be a function taking one event, not {type(callback).__name__} "
            f"{callback!r}"
        )
    return callback


class Agent(MakesTool, Generic[OutputT]):
    """A model, tools and options: `agent.run(input)` loops until the model answers.

    Generic in its output: `Agent(model, output=Answer)` is an `Agent[Answer]`, whose
    runs' `RunResult.output` is an `Answer`; with a JSON Schema or no `output`, `Any`.
    """

    def __init__(
        self,
        model: ModelClient | TurnClient,
        *,
        tools: Sequence[Tool | ToolSource | Agent[Any]] | Mapping[str, Tool | Agent[Any]] = (),
        output: type[OutputT] | UnionType | Mapping[str, Any] | None = None,
        instructions: str | MCPPrompt | Sequence[str | MCPPrompt] | None = None,
        approve: ApproveHook | None = None,
        review_plan: ReviewHook | None = None,
        max_iterations: int = 10,
        max_llm_retries: int = 3,
        max_concurrency: int | None = None,
        schedule: Literal["critical_path", "fifo"] = "critical_path",
        protocol: Literal["solution", "tools", "code"] = "solution",
        strict: bool = True,
        on_event: Callable[[RunEvent], Any] | None = None,
        seed: int | None = None,
        store: SQLiteStore | str | os.PathLike[str] | None = None,
        redact: Sequence[str] = DEFAULT_REDACT,
        tracer_provider: Any = None,
        context_budget: int | None = DEFAULT_CONTEXT_BUDGET,
        name: str | None = None,
        description: str | None = None,
        input: Any = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
        budget: Budget | None = None,
        pricing: Mapping[str, Price] | None = None,
        on_budget: Callable[[BudgetRequest], Any] | None = None,
        max_calls: int = 1000,
        max_steps: int = 200_000,
        max_eval_seconds: float = 1.0,
        guardrails: Sequence[Guardrail] = (),
        tool_search: bool = False,
        context_window: int | None = None,
        compact: Callable[[list[dict[str, Any]]], str] | None = None,
        compact_target: float = 0.6,
        keep_state: bool | None = None,
        questions: QuestionHook | None = None,
    ) -> None:
        if name is not None and (not isinstance(name, str) or not _NAME.fullmatch(name)):
            raise ConfigurationError(
                f"name must be letters, digits, '_', '-' or '.' (1 to 64 of them), not {name!r}"
            )
        self.name = name  # identifies the agent where runs outlive the process (Temporal)
        if description is not None and not isinstance(description, str):
            raise ConfigurationError(f"description must be a string, not {description!r}")
        self.description = description  # what a parent agent's model reads of it as a tool
        # The parameters of a call to this agent as a tool (PROTOCOL §11): its input.
        self.input = DEFAULT_INPUT if input is None else input
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
            raise ConfigurationError(f"max_depth must be a whole number >= 0, not {max_depth!r}")
        self.max_depth = max_depth
        # A `ModelClient` for protocol="solution", a `TurnClient` for "tools" (checked
        # below by the protocol); kept untyped as either, for the code that drives it.
        self.model: Any = model
        # An agent in the list is a tool that runs it as a child run (PROTOCOL §11).
        items = _agents_as_tools(tools)
        plain, self.tool_sources = split_tools(items)
        self._tool_items = items
        # The tools known now; a run adds those of its tool sources (MCP servers), which
        # are known only once they are connected (see `_open_for_run`).
        self.tools = ToolSet(plain)
        self.output = OutputSpec(output)
        # MCP prompts among the instructions are fetched as each run starts (docs/decisions.md);
        # `instructions` keeps the text known now.
        self.instructions, self._prompted = _instructions(instructions)
        self.approve = approve
        if review_plan is not None and not callable(review_plan):
            raise ConfigurationError(f"review_plan must be callable, not {review_plan!r}")
        self.review_plan = review_plan  # PROTOCOL §15: asked about this agent's plans
        # Checks the run makes without a person (PROTOCOL §15), in the order given.
        self.guardrails = _check_guardrails(guardrails)
        self.max_iterations = _positive(max_iterations, "max_iterations")
        self.max_llm_retries = _positive(max_llm_retries, "max_llm_retries")
        # What one program of a code plan may do (PROTOCOL §14 "Limits").
        self.max_calls = _positive(max_calls, "max_calls")
        self.max_steps = _positive(max_steps, "max_steps")
        if (
            isinstance(max_eval_seconds, bool)
            or not isinstance(max_eval_seconds, int | float)
            or not 0 < max_eval_seconds < float("inf")
        ):
            raise ConfigurationError(
                f"max_eval_seconds must be a positive number of seconds, not {max_eval_seconds!r}"
            )
        self.max_eval_seconds = float(max_eval_seconds)
        self._single_program = False  # `tl.run_program`: one program, no model asked again
        self.max_concurrency = max_concurrency
        self.schedule = schedule  # the order of starts under a limit (PROTOCOL §13)
        # Characters of JSON a state value may take in a request (PROTOCOL §8); None: all.
        self.context_budget = (
            None if context_budget is None else _positive(context_budget, "context_budget")
        )
        if protocol not in PROTOCOLS:
            raise ConfigurationError(
                f"protocol must be one of {tuple(PROTOCOLS)}, not {protocol!r}"
            )
        self._set_compaction(context_window, compact, compact_target)
        self.protocol = protocol
        self.strict = strict
        self.on_event = _check_on_event(on_event)
        self._rng = random.Random(seed)
        # Durable runs (docs/durability.md): the store, what events and traces hide, spans.
        self.store = as_store(store)
        self.redact = Redactor(redact)
        self.tracer = make_tracer(tracer_provider)
        # A tool that may require approval needs a hook, the root's: checked when a run
        # starts (`check_tree`), since a sub-agent needs no hook of its own (PROTOCOL §11).
        check_configuration(ToolSet([]), approve, max_concurrency, schedule)
        check_sources(self.tool_sources, approve)
        PROTOCOLS[protocol].check(model, self.tools)
        if not isinstance(tool_search, bool):
            raise ConfigurationError(f"tool_search must be True or False, not {tool_search!r}")
        # Tool search (docs/mcp.md): every tool deferred, found through `search_tools`;
        # tools and servers made with `defer_loading=True` are deferred without it.
        self.tool_search = tool_search
        self._run_tools = self._searchable(self.tools)
        self.schema = self._schema_for(self._run_tools)
        # Budgets (PROTOCOL §12, docs/budgets.md): checked now, before anything runs.
        self.budget = check_budget(budget)
        self.pricing = check_pricing(pricing, self.budget, model)
        if on_budget is not None and not callable(on_budget):
            raise ConfigurationError(f"on_budget must be callable, not {on_budget!r}")
        self.on_budget = on_budget
        # A session run starts from the state its session left (PROTOCOL §16); None:
        # the default, true for code plans. A run's own `keep_state=` wins.
        check_session_options(None, None, keep_state, "wait", 0)
        self.keep_state = keep_state
        # Answers what its MCP servers ask a person (`tl.Question`, docs/mcp.md); a
        # child run without its own asks its parent's. None: every question declined.
        check_questions(questions)
        self.questions = questions

    # -- running -----------------------------------------------------------------------------

    def run(
        self,
        input: Any = None,
        *,
        messages: Sequence[dict[str, Any]] | None = None,
        on_event: Callable[[RunEvent], Any] | None = None,
        run_id: str | None = None,
        budget: Budget | None = None,
        usage: RunUsage | None = None,
        session: str | None = None,
        keep_state: bool | None = None,
        session_busy: Literal["wait", "raise"] = "wait",
        session_timeout: float = 60,
    ) -> RunResult[OutputT]:
        """Run to the end from synchronous code (starts its own trio run)."""
        refuse_inside_trio("agent.run", "await agent.run_async(...)")
        return trio.run(
            partial(
                self.run_async,
                input,
                messages=messages,
                on_event=on_event,
                run_id=run_id,
                budget=budget,
                usage=usage,
                session=session,
                keep_state=keep_state,
                session_busy=session_busy,
                session_timeout=session_timeout,
            )
        )

    def _config(self, budget: Budget | None = None) -> AgentConfig:
        """This agent's options as one run sees them, fixed for that run.

        Taken when a run starts, not at construction: an option set on the agent
        between runs (`agent.store = ...`) applies to the next run."""
        return AgentConfig(
            model=self.model,
            tools=self._run_tools,
            output=self.output,
            instructions=self.instructions,
            approve=self.approve,
            review_plan=self.review_plan,
            max_iterations=self.max_iterations,
            max_llm_retries=self.max_llm_retries,
            max_concurrency=self.max_concurrency,
            schedule=self.schedule,
            context_budget=self.context_budget,
            protocol=PROTOCOLS[self.protocol],
            strict=self.strict,
            schema=self.schema,
            store=self.store,
            redact=self.redact,
            tracer=self.tracer,
            on_event=self.on_event,
            rng=self._rng,
            name=self.name,
            max_depth=self.max_depth,
            budget=self.budget if budget is None else budget,
            pricing=self.pricing,
            on_budget=self.on_budget,
            max_calls=self.max_calls,
            max_steps=self.max_steps,
            max_eval_seconds=self.max_eval_seconds,
            single_program=self._single_program,
            guardrails=self.guardrails,
            media=self.store if self.store is not None else MemoryMedia(),
            context_window=self.context_window,
            compact=self.compact,
            compact_target=self.compact_target,
            keep_state=self.keep_state,
            questions=self.questions,
        )

    def _set_compaction(
        self,
        context_window: int | None,
        compact: Callable[[list[dict[str, Any]]], str] | None,
        compact_target: float,
    ) -> None:
        """Compaction's options (PROTOCOL §16): the window in tokens (the agent's, else
        the model client's own `context_window`, else none: never compacted)."""
        window = context_window
        if window is None:
            known = getattr(self.model, "context_window", None)  # a client may know it
            window = known if isinstance(known, int) and not isinstance(known, bool) else None
        self.context_window = None if window is None else _positive(window, "context_window")
        if compact is not None and not callable(compact):
            raise ConfigurationError(f"compact must be a function of messages, not {compact!r}")
        self.compact = compact
        if (
            isinstance(compact_target, bool)
            or not isinstance(compact_target, int | float)
            or not 0 < compact_target <= 1
        ):
            raise ConfigurationError(
                f"compact_target must be a share of the window in (0, 1], not {compact_target!r}"
            )
        self.compact_target = float(compact_target)

    async def run_async(
        self,
        input: Any = None,
        *,
        messages: Sequence[dict[str, Any]] | None = None,
        on_event: Callable[[RunEvent], Any] | None = None,
        run_id: str | None = None,
        budget: Budget | None = None,
        usage: RunUsage | None = None,
        session: str | None = None,
        keep_state: bool | None = None,
        session_busy: Literal["wait", "raise"] = "wait",
        session_timeout: float = 60,
    ) -> RunResult[OutputT]:
        """Run to the end inside trio. `messages` resumes from a log (e.g. an
        ExecuteError's), in which case `input` is already in it and is ignored.

        `session` runs it as the next run of that session of the agent's store
        (PROTOCOL §16): it starts from the session's history (and, with `keep_state`,
        its state) and joins it. A session with a running run makes this one wait for
        it, up to `session_timeout` seconds (`session_busy="raise"`: at once), then
        raise `SessionBusy`; a paused or crashed run makes it raise at once. Runs
        waiting on one session join it in the order they started.

        `run_id` names the run (a unique one is made otherwise); with a store, an id the
        store already has is refused with `ResumeError`: continue it with `resume`.
        `budget` replaces the agent's for this run (PROTOCOL §12). `usage` is what the
        run `messages` came from already used (a `BudgetExceeded`'s `.usage`): this run
        counts it in its usage and its limits, so a continued run goes on from what
        is left.
        """
        require_trio("agent.run_async", "use `await agent.run_asyncio(...)` instead")
        _check_on_event(on_event)
        check_pricing(self.pricing, check_budget(budget), self.model)
        carried = check_carried(usage, messages)
        check_session_options(self.store, session, keep_state, session_busy, session_timeout)
        keep = keeps_state(keep_state, self.keep_state, self.protocol)
        async with self._open_for_run(budget) as config:
            if carried is not None:
                config = dataclasses.replace(config, carried_usage=carried)
            async with maybe_holding(config.store, session, session_busy, session_timeout) as held:
                run = RunSession.new(
                    config,
                    input,
                    messages,
                    on_event or self.on_event,
                    run_id,
                    session=held,
                    keep_state=keep,
                )
                return await run.execute()

    def resume(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, Any] | None = None,
        on_event: Callable[[RunEvent], Any] | None = None,
        budget: Budget | None = None,
    ) -> RunResult[OutputT]:
        """Continue a paused or crashed run from the store (starts its own trio run)."""
        refuse_inside_trio("agent.resume", "await agent.resume_async(...)")
        return trio.run(
            partial(
                self.resume_async, run_id, decisions=decisions, on_event=on_event, budget=budget
            )
        )

    async def resume_async(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, Any] | None = None,
        on_event: Callable[[RunEvent], Any] | None = None,
        budget: Budget | None = None,
    ) -> RunResult[OutputT]:
        """Continue a paused or crashed run, from any process, inside trio.

        `decisions` maps deferred call ids to decisions (`tl.Approve()`, ...). Raises
        `ResumeError` before anything runs for an unknown or finished run, a decision
        for a call that is not waiting for one, or a call decided already. `budget` is
        more room, added to what the run has left (PROTOCOL §12).
        """
        require_trio(
            "agent.resume_async",
            "call `agent.resume(...)` in a thread (`await asyncio.to_thread(agent.resume, ...)`)",
        )
        _check_on_event(on_event)
        grant = check_budget(budget)
        async with self._open_for_run() as config:
            # A grant for a tool no run of the tree has would add room to nothing.
            check_per_tool(grant, config.tools.values(), "the grant (budget=)")
            # A run of a session holds its lease again while it goes on (PROTOCOL §16).
            session_id = session_of(config.store, run_id) if config.store is not None else None
            async with maybe_resuming(config.store, session_id, run_id):
                session = RunSession.claim(config, run_id, decisions, on_event or self.on_event)
                session.session_id = session_id
                session.grant = grant
                forked = forked_from(session.journal or [])
                if forked is not None:  # a fork goes on reusing its record (docs/replay.md)
                    session.config = self._resumed_fork(session, forked)
                return await session.execute()

    def _resumed_fork(self, session: RunSession, forked: dict[str, Any]) -> AgentConfig:
        """A resumed fork's configuration: its record's answers, outcomes and budget
        decisions for what it reused before, as the fork had them."""
        config = session.config
        replaying = Replaying(
            load_recording(config.store, forked["of"], self.protocol),
            fork=True,
            recorded_tools=False,
            hook=config.approve,
            stale=forked.get("stale") or (),
            redact=config.redact,
        )
        replaying.resuming(session.journal or [])
        return dataclasses.replace(
            config,
            model=replaying.model_for(RunPath.ROOT, config.model, self.protocol),
            approve=replaying.decide,
            answer=replaying.answer_under(RunPath.ROOT),
            recorded_room=replaying.room_under(RunPath.ROOT),
            recorded_screens=replaying.screens_under(RunPath.ROOT),
            replaying=replaying,
        )

    # -- replay and fork (docs/replay.md) ---------------------------------------------------

    def replay(
        self,
        run_id: str,
        *,
        store: SQLiteStore | str | os.PathLike[str],
        tools: str = "recorded",
        on_event: Callable[[RunEvent], Any] | None = None,
    ) -> RunResult:
        """Run a stored run again in memory, the model answered from the record.

        `tools="recorded"` answers every call from the journal (no handler runs);
        `"live"` runs the tools. Recorded decisions are reused. Nothing is written to the
        store. Starts its own trio run; `replay_async` inside trio."""
        return trio.run(
            partial(self.replay_async, run_id, store=store, tools=tools, on_event=on_event)
        )

    async def replay_async(
        self,
        run_id: str,
        *,
        store: SQLiteStore | str | os.PathLike[str],
        tools: str = "recorded",
        on_event: Callable[[RunEvent], Any] | None = None,
    ) -> RunResult[OutputT]:
        if tools not in ("recorded", "live"):
            raise ConfigurationError(f'tools must be "recorded" or "live", not {tools!r}')
        _check_on_event(on_event)
        recording = load_recording(store, run_id, self.protocol)
        replaying = Replaying(
            recording,
            fork=False,
            recorded_tools=tools == "recorded",
            hook=self.approve,
            redact=self.redact,
        )
        return await self._run_recorded(replaying, None, None, on_event)

    def fork(
        self,
        run_id: str,
        new_run_id: str,
        *,
        store: SQLiteStore | str | os.PathLike[str],
        rerun: Sequence[str] = (),
        rerun_tools: Sequence[str] = (),
        model: Any = None,
        on_event: Callable[[RunEvent], Any] | None = None,
    ) -> RunResult:
        """A new stored run `new_run_id` from run `run_id`, re-running only what changed.

        Every recorded result that reads nothing of the calls in `rerun` (ids) or of a
        call of a tool in `rerun_tools` is reused with its decision; those calls and
        everything downstream of them run again (and are asked again when they need
        approval). Each request equal to the recorded one reuses its answer; from the
        first that differs, `model` (else the agent's) is asked. Starts its own trio run;
        `fork_async` inside trio."""
        return trio.run(
            partial(
                self.fork_async,
                run_id,
                new_run_id,
                store=store,
                rerun=rerun,
                rerun_tools=rerun_tools,
                model=model,
                on_event=on_event,
            )
        )

    async def fork_async(
        self,
        run_id: str,
        new_run_id: str,
        *,
        store: SQLiteStore | str | os.PathLike[str],
        rerun: Sequence[str] = (),
        rerun_tools: Sequence[str] = (),
        model: Any = None,
        on_event: Callable[[RunEvent], Any] | None = None,
    ) -> RunResult[OutputT]:
        _check_on_event(on_event)
        if isinstance(rerun, str) or isinstance(rerun_tools, str):
            raise ConfigurationError("rerun and rerun_tools take lists of names, not a string")
        if model is not None:
            PROTOCOLS[self.protocol].check(model, self.tools)
        recording = load_recording(store, run_id, self.protocol)
        replaying = Replaying(
            recording,
            fork=True,
            recorded_tools=False,
            hook=self.approve,
            stale=stale_calls(recording, rerun, rerun_tools, self._tree_tool_names()),
            root_model=model,
            redact=self.redact,
        )
        return await self._run_recorded(replaying, as_store(store), new_run_id, on_event)

    def _tree_tool_names(self) -> set[str] | None:
        """The names of this agent's tools and its sub-agents'; None while some are
        known only once a tool source (an MCP server) is listed."""
        return None if self.tool_sources else tree_tool_names(self.tools.values())

    async def _run_recorded(
        self,
        replaying: Replaying,
        store: SQLiteStore | None,
        run_id: str | None,
        on_event: Callable[[RunEvent], Any] | None,
    ) -> RunResult[OutputT]:
        """Run the recorded run again from its opening messages, as `replaying` says:
        a replay in memory (`store` None), or a fork stored as `run_id`."""
        async with self._open_for_run(approve=replaying.decide) as config:
            config = dataclasses.replace(
                config,
                model=replaying.model_for(RunPath.ROOT, config.model, self.protocol),
                approve=replaying.decide,
                review_plan=None,  # the record's decisions answer (PROTOCOL §15)
                answer=replaying.answer_under(RunPath.ROOT),
                recorded_room=replaying.room_under(RunPath.ROOT),
                recorded_screens=replaying.screens_under(RunPath.ROOT),
                recorded_verdicts=replaying.verdicts_under(RunPath.ROOT),
                replay_only=not replaying.fork,
                budget=replaying.budget(),
                replaying=replaying,
                store=store,
                media=replaying.recording.store if store is None else store,
            )
            opening = replaying.recording.root.opening
            notes = [fork_note(replaying)] if store is not None else []
            session = RunSession.new(
                config, None, opening, on_event or self.on_event, run_id, notes
            )
            return await session.execute()

    @asynccontextmanager
    async def _open_for_run(
        self, budget: Budget | None = None, *, root: bool = True, approve: Any = None
    ) -> AsyncIterator[AgentConfig]:
        """This agent's configuration as one run sees it: its tool sources open (in this
        task), their tools added to its own, their instructions to its instructions.

        A root run checks its tree (a child run is served by the root's hook and store,
        `root=False`); `approve` is the hook that will answer, when not the agent's (a
        replay's recorded decisions)."""
        config = self._config(budget)
        if self._prompted is not None:
            texts = [
                part if isinstance(part, str) else await part.text() for part in self._prompted
            ]
            joined = "\n\n".join(text.strip() for text in texts if text.strip())
            config = dataclasses.replace(config, instructions=joined or None)
        if self.tool_sources:
            async with open_tools(self._tool_items) as opened:
                config = self._config_with(config, opened)
                if root:
                    self._check_tree(config, approve)
                yield config
            return
        if root:
            self._check_tree(config, approve)
        yield config

    def _check_tree(self, config: AgentConfig, approve: Any) -> None:
        hook = config.approve if approve is None else approve
        tools = config.tools.values()
        check_tree(tools, hook, config.pricing, config.budget, config.store)

    def _config_with(self, config: AgentConfig, opened: OpenedTools) -> AgentConfig:
        """`config` with a run's listed tool sources: their tools added to the agent's,
        their instructions to its instructions (also where the listing was made
        elsewhere: a Temporal run lists its MCP servers through an activity)."""
        instructions = config.instructions
        if opened.instructions:
            parts = [instructions.strip()] if instructions else []
            instructions = "\n\n".join([*parts, *opened.instructions])
        check_configuration(opened.tools, self.approve, self.max_concurrency, self.schedule)
        config.protocol.check(self.model, opened.tools)
        tools = self._searchable(opened.tools)
        return dataclasses.replace(
            config,
            tools=tools,
            instructions=instructions,
            schema=self._schema_for(tools),
        )

    def _searchable(self, tools: ToolSet) -> ToolSet:
        """`tools` with tool search when some are deferred (`_tool_search`)."""
        code = self.protocol == "code"
        return with_tool_search(tools, self.tool_search, partial(found_entry, code=code))

    def _schema_for(self, tools: ToolSet) -> dict[str, Any]:
        """The solution schema of the first request: the tools loaded from the start."""
        return solution_schema(menu_of(tools, ()), self.output.schema, strict=self.strict)

    def as_tool(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: Any = False,
        timeout: float | None = None,
    ) -> Tool:
        """This agent as a tool of another agent: a call to it runs this agent as a child
        run (PROTOCOL §11), its parameters the agent's `input` schema, its result the
        agent's output. Placing the agent itself in `tools=` is `agent.as_tool()`.

        `name` defaults to the agent's name (one of the two is required); `description`
        to the agent's `description`, else the first line of its instructions.
        """
        name = name if name is not None else self.name
        if name is None:
            raise ConfigurationError(
                "an agent used as a tool needs a name: tl.Agent(..., name='researcher') "
                "or agent.as_tool(name='researcher')"
            )
        if description is None:
            description = self.description
        if description is None:
            lines = (self.instructions or "").strip().splitlines()
            description = lines[0] if lines else ""
        return AgentTool(
            name=name,
            description=description,
            parameters=self.input,
            output=self.output.schema,
            open_config=partial(self._open_for_run, root=False),
            config=self._config,
            agent=self,
            agent_tools=self.tools,
            sources=bool(self.tool_sources),
            requires_approval=requires_approval,
            timeout=timeout,
        )

    def events(self, input: Any = None, **options: Any) -> Any:
        """`async with agent.events(input) as events: async for event in events: ...`

        Runs the agent in the background and yields its typed events; `events.result`
        holds the `RunResult` after the loop. Options are `run_async`'s.
        """
        return open_event_stream(self.run_async, input, **options)

    def stream(self, input: Any = None, **options: Any) -> Any:
        """`async with agent.stream(input) as stream: async for chunk in stream.text(): ...`

        Runs a protocol="tools" agent inside trio and yields its final answer's text as
        the model writes it; `stream.result` is the `RunResult` after the loop (or after
        the block). Options are `run_async`'s. See docs/tool-calling.md.
        """
        return open_stream(self._open_for_run, self.protocol, input, **options)

    async def run_asyncio(self, input: Any = None, **options: Any) -> RunResult[OutputT]:
        """Await a run from an asyncio program without blocking its event loop.

        trio runs as a guest on the asyncio loop (trio's guest mode), in the same
        thread: tools and hooks run exactly as under `run`, and cancelling the awaiting
        asyncio task cancels the run.
        """
        from .._engine._asyncio_bridge import run_trio_in_asyncio

        result: RunResult[OutputT] = await run_trio_in_asyncio(
            partial(self.run_async, input, **options)
        )
        return result


def _agents_as_tools(tools: Any) -> Sequence[Tool | ToolSource] | Mapping[str, Tool]:
    """`tools` with each `Agent` in it replaced by `agent.as_tool()`."""
    if isinstance(tools, Mapping):
        if not any(isinstance(item, Agent) for item in tools.values()):
            return tools
        return {key: _agent_tool(item) for key, item in tools.items()}
    if isinstance(tools, str | bytes) or not isinstance(tools, Sequence):
        return tools  # type: ignore[return-value]  # `split_tools` says what is wrong
    if not any(isinstance(item, Agent) for item in tools):
        return tools
    return [_agent_tool(item) for item in tools]


def found_entry(tool: Tool, *, code: bool) -> dict[str, Any]:
    """What `search_tools` says of a tool it found: its name and description, and for a
    code plan its Python stub (PROTOCOL §14 "The request")."""
    entry: dict[str, Any] = {"name": tool.name, "description": tool.description}
    if code:
        try:
            entry["stub"] = render_stubs(ToolSet([tool])).split("\n", 1)[1].strip()
        except ConfigurationError:  # depends on another tool: no stub alone
            pass
    return entry


def _agent_tool(item: Any) -> Any:
    return item.as_tool() if isinstance(item, Agent) else item


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a positive whole number, not {value!r}")
    return value


def _check_guardrails(guardrails: Any) -> tuple[Guardrail, ...]:
    kinds = (InputGuardrail, ToolGuardrail, ResultGuardrail, OutputGuardrail)
    if isinstance(guardrails, str | bytes) or not isinstance(guardrails, Sequence):
        raise ConfigurationError(f"guardrails must be a list of guardrails, not {guardrails!r}")
    for item in guardrails:
        if not isinstance(item, kinds):
            raise ConfigurationError(
                f"guardrails takes tl.InputGuardrail, tl.ToolGuardrail, tl.ResultGuardrail "
                f"or tl.OutputGuardrail, not {item!r}"
            )
    return tuple(guardrails)


def _instructions(
    given: Any,
) -> tuple[str | None, tuple[str | MCPPrompt, ...] | None]:
    """The text known now, and every part in order when some are MCP prompts."""
    if given is None or isinstance(given, str):
        return given, None
    parts = [given] if isinstance(given, MCPPrompt) else given
    if not isinstance(parts, Sequence) or not all(
        isinstance(part, str | MCPPrompt) for part in parts
    ):
        raise ConfigurationError(
            "instructions must be a string, a tl.MCPPrompt or a list of them, not "
            f"{type(given).__name__} {given!r}"
        )
    text = "\n\n".join(part.strip() for part in parts if isinstance(part, str)) or None
    if not any(isinstance(part, MCPPrompt) for part in parts):
        return text, None
    return text, tuple(parts)

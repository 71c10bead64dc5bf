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
from typing import Any

import trio

from .._core._decisions import ApproveHook
from .._core._tools import Tool, ToolSet, ToolSource, split_tools
from .._durable._store import SQLiteStore, as_store
from .._engine._engine import check_configuration
from .._engine._sources import OpenedTools, check_sources, open_tools
from .._errors import ConfigurationError
from .._observe._events import DEFAULT_REDACT, Redactor, RunEvent, open_event_stream
from .._observe._trace import make_tracer
from ._loop import AgentConfig, LoopProtocol, RunResult
from ._output import OutputSpec
from ._prompt import DEFAULT_CONTEXT_BUDGET, solution_schema
from ._session import RunSession
from ._solution import SOLUTION
from ._text_stream import open_stream
from ._turns import TOOLS

__all__ = ["Agent", "RunResult"]

PROTOCOLS: dict[str, LoopProtocol] = {protocol.name: protocol for protocol in (SOLUTION, TOOLS)}
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def _check_on_event(callback: Any) -> Any:
    if callback is not None and not callable(callback):
        raise ConfigurationError(
            f"on_event must be a function taking one event, not {type(callback).__name__} "
            f"{callback!r}"
        )
    return callback


class Agent:
    """A model, tools and options: `agent.run(input)` loops until the model answers."""

    def __init__(
        self,
        model: Any,
        *,
        tools: Sequence[Tool | ToolSource] | Mapping[str, Tool] = (),
        output: Any = None,
        instructions: str | None = None,
        approve: ApproveHook | None = None,
        max_iterations: int = 10,
        max_llm_retries: int = 3,
        max_concurrency: int | None = None,
        schedule: str = "critical_path",
        protocol: str = "solution",
        strict: bool = True,
        on_event: Callable[[RunEvent], Any] | None = None,
        seed: int | None = None,
        store: SQLiteStore | str | os.PathLike[str] | None = None,
        redact: Sequence[str] = DEFAULT_REDACT,
        tracer_provider: Any = None,
        context_budget: int | None = DEFAULT_CONTEXT_BUDGET,
        name: str | None = None,
    ) -> None:
        if name is not None and (not isinstance(name, str) or not _NAME.fullmatch(name)):
            raise ConfigurationError(
                f"name must be letters, digits, '_', '-' or '.' (1 to 64 of them), not {name!r}"
            )
        self.name = name  # identifies the agent where runs outlive the process (Temporal)
        self.model = model
        plain, self.tool_sources = split_tools(tools)
        self._tool_items = tools
        # The tools known now; a run adds those of its tool sources (MCP servers), which
        # are known only once they are connected (see `_open_for_run`).
        self.tools = ToolSet(plain)
        self.output = OutputSpec(output)
        if instructions is not None and not isinstance(instructions, str):
            raise ConfigurationError(
                f"instructions must be a string, not {type(instructions).__name__} {instructions!r}"
            )
        self.instructions = instructions
        self.approve = approve
        self.max_iterations = _positive(max_iterations, "max_iterations")
        self.max_llm_retries = _positive(max_llm_retries, "max_llm_retries")
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
        self.protocol = protocol
        self.strict = strict
        self.on_event = _check_on_event(on_event)
        self._rng = random.Random(seed)
        # Durable runs (docs/durability.md): the store, what events and traces hide, spans.
        self.store = as_store(store)
        self.redact = Redactor(redact)
        self.tracer = make_tracer(tracer_provider)
        check_configuration(self.tools, approve, max_concurrency, schedule)
        check_sources(self.tool_sources, approve)
        PROTOCOLS[protocol].check(model, self.tools)
        self.schema = solution_schema(self.tools, self.output.schema, strict=strict)

    # -- running -----------------------------------------------------------------------------

    def run(
        self,
        input: Any = None,
        *,
        messages: Sequence[dict[str, Any]] | None = None,
        on_event: Callable[[RunEvent], Any] | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Run to the end from synchronous code (starts its own trio run)."""
        return trio.run(
            partial(self.run_async, input, messages=messages, on_event=on_event, run_id=run_id)
        )

    def _config(self) -> AgentConfig:
        """This agent's options as one run sees them, fixed for that run.

        Taken when a run starts, not at construction: an option set on the agent
        between runs (`agent.store = ...`) applies to the next run."""
        return AgentConfig(
            model=self.model,
            tools=self.tools,
            output=self.output,
            instructions=self.instructions,
            approve=self.approve,
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
        )

    async def run_async(
        self,
        input: Any = None,
        *,
        messages: Sequence[dict[str, Any]] | None = None,
        on_event: Callable[[RunEvent], Any] | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Run to the end inside trio. `messages` resumes from a log (e.g. an
        ExecuteError's), in which case `input` is already in it and is ignored.

        `run_id` names the run (a unique one is made otherwise); with a store, an id the
        store already has is refused with `ResumeError`: continue it with `resume`.
        """
        _check_on_event(on_event)
        async with self._open_for_run() as config:
            session = RunSession.new(config, input, messages, on_event or self.on_event, run_id)
            return await session.execute()

    def resume(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, Any] | None = None,
        on_event: Callable[[RunEvent], Any] | None = None,
    ) -> RunResult:
        """Continue a paused or crashed run from the store (starts its own trio run)."""
        return trio.run(partial(self.resume_async, run_id, decisions=decisions, on_event=on_event))

    async def resume_async(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, Any] | None = None,
        on_event: Callable[[RunEvent], Any] | None = None,
    ) -> RunResult:
        """Continue a paused or crashed run, from any process, inside trio.

        `decisions` maps deferred call ids to decisions (`tl.Approve()`, ...). Raises
        `ResumeError` before anything runs for an unknown or finished run, a decision
        for a call that is not waiting for one, or a call decided already.
        """
        _check_on_event(on_event)
        async with self._open_for_run() as config:
            session = RunSession.claim(config, run_id, decisions, on_event or self.on_event)
            return await session.execute()

    @asynccontextmanager
    async def _open_for_run(self) -> AsyncIterator[AgentConfig]:
        """This agent's configuration as one run sees it: its tool sources open (in this
        task), their tools added to its own, their instructions to its instructions."""
        config = self._config()
        if not self.tool_sources:
            yield config
            return
        async with open_tools(self._tool_items) as opened:
            yield self._config_with(config, opened)

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
        return dataclasses.replace(
            config,
            tools=opened.tools,
            instructions=instructions,
            schema=solution_schema(opened.tools, self.output.schema, strict=self.strict),
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

    async def run_asyncio(self, input: Any = None, **options: Any) -> RunResult:
        """Await a run from an asyncio program without blocking its event loop.

        trio runs as a guest on the asyncio loop (trio's guest mode), in the same
        thread: tools and hooks run exactly as under `run`, and cancelling the awaiting
        asyncio task cancels the run.
        """
        from .._engine._asyncio_bridge import run_trio_in_asyncio

        return await run_trio_in_asyncio(partial(self.run_async, input, **options))


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a positive whole number, not {value!r}")
    return value

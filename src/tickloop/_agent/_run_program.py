"""`tl.run_program`: one code plan's program, run without a model (PROTOCOL §14).

The program is checked first (`tl.compile_program`: a program outside the language is a
`tl.CodeError`, before anything runs), then run as the one iteration of a code-plan
agent whose model answers with the program: so it runs exactly as a model's program
would — the same driver, scheduler, approvals, budget and journal — and nothing more is
asked after it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import trio

from .._code import compile_program
from .._core._budget import Budget
from .._core._decisions import ApproveHook
from .._core._tools import Tool
from .._durable._store import SQLiteStore
from .._engine._event_loops import refuse_inside_trio
from .._engine._run import initial_log
from .._models._base import SolutionRequest, TextDelta, Usage
from ._agent import Agent
from ._loop import RunResult

__all__ = ["run_program"]


class _Program:
    """A model client that answers with the program, whole."""

    model = "program"

    def __init__(self, source: str) -> None:
        self.source = source

    def __repr__(self) -> str:
        return "<the program of tl.run_program>"

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        yield TextDelta(self.source)


def run_program(
    source: str,
    *,
    tools: Sequence[Tool | Agent[Any]] | Mapping[str, Tool | Agent[Any]] = (),
    state: Mapping[str, Any] | None = None,
    approve: ApproveHook | None = None,
    store: SQLiteStore | str | None = None,
    budget: Budget | None = None,
) -> RunResult[Any]:
    """Run one program over `tools` and return its `RunResult` (see docs/api.md).

    `output` is its `final_answer`/`return` value, else its final expression's value,
    else None; `state` its variables (starting from `state=`); uncaught failures are in
    `errors`. A program outside the language raises `tl.CodeError` before anything runs.
    """
    refuse_inside_trio("tl.run_program", "await agent.run_async(...) with protocol='code'")
    agent = _program_agent(source, tools, approve, store, budget)
    messages = initial_log(None, state).messages if state else None
    return trio.run(lambda: agent.run_async(messages=messages))


def _program_agent(
    source: str,
    tools: Any,
    approve: ApproveHook | None,
    store: SQLiteStore | str | None,
    budget: Budget | None,
) -> Agent[Any]:
    if not isinstance(source, str):
        raise TypeError(f"run_program takes the program's source as a str, not {source!r}")
    agent: Agent[Any] = Agent(
        _Program(source),  # a ModelClient by its one method
        tools=tools,
        protocol="code",
        approve=approve,
        store=store,
        budget=budget,
        max_iterations=1,
    )
    compile_program(source, tools=agent.tools)
    agent._single_program = True
    return agent

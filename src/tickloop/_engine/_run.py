"""Running a plan of calls without a model: one tick, then a result.

This is the engine's smallest complete use, and what the agent loop does once per
iteration: open a tick, hand it the calls in order, close the stream, wait.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import trio

from .._core._decisions import ApproveHook, PendingCall
from .._core._driver import check_schedule
from .._core._jsonable import run_value_to_json
from .._core._log import ContextLog
from .._core._scheduler import CallRecord
from .._core._tools import Tool, ToolSource, missing_bindings, split_tools
from .._errors import ConfigurationError
from ._engine import Engine
from ._sources import check_sources, open_tools

__all__ = ["ExecutionResult", "execute", "run_calls"]

_YIELD_EVERY = 0.0005
"""Seconds of checking calls after which `execute` lets started calls run."""


class ExecutionResult:
    """What a run of calls produced: the log, its views, and a record per call."""

    def __init__(
        self,
        log: ContextLog,
        records: dict[str, CallRecord],
        pending: list[PendingCall] | None = None,
    ) -> None:
        self._log = log
        self.records = records
        self.pending = pending or []

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self._log.messages

    @property
    def state(self) -> dict[str, Any]:
        view = self._log.view("state")
        return view if isinstance(view, dict) else {}

    def view(self, kind: str) -> Any:
        return self._log.view(kind)

    @property
    def errors(self) -> list[dict[str, Any]]:
        """Every Error Message in the log, in the order they were appended."""
        return self._log.data_messages("error")

    def __repr__(self) -> str:
        statuses: dict[str, int] = {}
        for record in self.records.values():
            statuses[record.status] = statuses.get(record.status, 0) + 1
        summary = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
        return f"<ExecutionResult {summary or 'no calls'}, {len(self.errors)} errors>"


def initial_log(input: Any = None, state: Mapping[str, Any] | None = None) -> ContextLog:
    """A new run's log: its input, then its starting state, as data messages."""
    log = ContextLog()
    if input is not None:
        input = run_value_to_json(input, "input")
        log.append({"type": "data", "kind": "input", "data": input})
    if state is not None:
        _check_state(state)
        state = run_value_to_json(dict(state), "state")
        log.append({"type": "data", "kind": "state", "data": state})
    return log


async def execute(
    calls: Iterable[Any],
    *,
    tools: Sequence[Tool | ToolSource] | Mapping[str, Tool],
    state: Mapping[str, Any] | None = None,
    input: Any = None,
    approve: ApproveHook | None = None,
    max_concurrency: int | None = None,
    schedule: str = "critical_path",
) -> ExecutionResult:
    """Run one tick over `calls` inside trio; returns once every call has finished.

    Tool sources in `tools` (MCP servers) are opened first and closed after the tick.
    `schedule`: which held-back call starts first under a limit (PROTOCOL §13).
    """
    check_schedule(schedule)
    calls = _check_calls(calls)
    _check_state(state)
    log = initial_log(input, state)  # a value with no JSON form is refused before connecting
    check_sources(split_tools(tools)[1], approve)
    async with open_tools(tools) as opened:
        return await _execute(calls, opened.tools, log, approve, max_concurrency, schedule)


async def _execute(
    calls: list[Any],
    toolset: Any,
    log: ContextLog,
    approve: ApproveHook | None,
    max_concurrency: int | None,
    schedule: str = "critical_path",
) -> ExecutionResult:
    named = {call.get("_tool") for call in calls if isinstance(call, Mapping)}
    used = [toolset[name] for name in toolset if name in named]
    problems = missing_bindings(used, log.view("input"))
    if problems:
        raise ConfigurationError("; ".join(problems))
    engine = Engine(
        toolset, log, approve=approve, max_concurrency=max_concurrency, schedule=schedule
    )
    async with engine.session():
        engine.open_tick(1)
        now = trio.lowlevel.current_clock().current_time  # what trio.current_time() reads
        handed = now()
        date = engine.date()  # the plan's calls arrive together: one date until a yield
        for call in calls:
            engine.receive(call, date)
            # Checking a call takes tens of microseconds; in a long plan, calls that are
            # already started should not wait for the rest to be checked. Yielding now and
            # then lets them run (on a virtual clock no time passes, so this never yields).
            if now() - handed >= _YIELD_EVERY:
                await trio.lowlevel.checkpoint()
                handed = now()
                date = engine.date()
        engine.close_stream()
        await engine.wait_tick()
    return ExecutionResult(log, engine.records, engine.scheduler.deferred)


def _check_calls(calls: Any) -> list[Any]:
    """The plan as a list; a lone call, a JSON text or None is a mistake to name, not to
    iterate into one bogus "invalid call" per key or character."""
    if isinstance(calls, Mapping):
        raise TypeError("calls must be a list of call dicts; wrap a single call: [call]")
    if isinstance(calls, str | bytes):
        raise TypeError("calls must be a list of call dicts, not a JSON text: json.loads it first")
    if not isinstance(calls, Iterable):
        raise TypeError(f"calls must be a list of call dicts, not {type(calls).__name__}")
    return list(calls)


def _check_state(state: Any) -> None:
    if state is not None and not isinstance(state, Mapping):
        raise ConfigurationError(
            f"state must be a dict of starting values, not {type(state).__name__} {state!r}"
        )


def run_calls(
    calls: Iterable[Any],
    *,
    tools: Sequence[Tool | ToolSource] | Mapping[str, Tool],
    state: Mapping[str, Any] | None = None,
    input: Any = None,
    approve: ApproveHook | None = None,
    max_concurrency: int | None = None,
    schedule: str = "critical_path",
) -> ExecutionResult:
    """`execute` for synchronous code: starts its own trio run."""
    if trio.lowlevel.in_trio_run():
        raise RuntimeError(
            "tl.run_calls starts its own trio run and cannot be called inside one: "
            "use `await tl.execute(...)` instead"
        )
    return trio.run(
        partial(
            execute,
            calls,
            tools=tools,
            state=state,
            input=input,
            approve=approve,
            max_concurrency=max_concurrency,
            schedule=schedule,
        )
    )

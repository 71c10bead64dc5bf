"""Running a plan of calls without a model: one tick, then a result.

This is the engine's smallest complete use, and what the agent loop does once per
iteration: open a tick, hand it the calls in order, close the stream, wait.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import trio

from .._core._budget import Budget, Ledger, RunUsage
from .._core._decisions import ApproveHook, PendingCall
from .._core._driver import check_schedule
from .._core._jsonable import run_value_to_json
from .._core._log import ContextLog
from .._core._media import MEDIA_KEY, Media, MediaKeeper, media_of
from .._core._questions import QuestionHook
from .._core._scheduler import CallRecord
from .._core._tools import MakesTool, Tool, ToolSource, missing_bindings, split_tools
from .._errors import ConfigurationError
from ._budgeting import BudgetHook
from ._engine import Engine
from ._event_loops import refuse_inside_trio, require_trio
from ._questions import QuestionDesk, answering_with, check_questions
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
        usage: RunUsage | None = None,
    ) -> None:
        self._log = log
        self.records = records
        self.pending = pending or []
        #: What the run used (PROTOCOL §12): requests, tokens, tool calls, cost.
        self.usage = usage if usage is not None else RunUsage()
        # Where the run kept the bytes of its images and audio (`media`).
        self.keeper: MediaKeeper | None = None

    def media(self, ref: dict[str, Any] | str) -> Media | None:
        """The image or audio clip a `$media` reference (or its id) names, with its bytes:
        `result.media(result.state["shot"]).data`; None when they were not kept here."""
        media_id = ref.get(MEDIA_KEY) if isinstance(ref, dict) else ref
        found = None if self.keeper is None else self.keeper.get_media(str(media_id))
        if found is None:
            return None
        return media_of(*found)

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
    tools: Sequence[Tool | ToolSource | MakesTool] | Mapping[str, Tool | MakesTool],
    state: Mapping[str, Any] | None = None,
    input: Any = None,
    approve: ApproveHook | None = None,
    max_concurrency: int | None = None,
    budget: Budget | None = None,
    on_budget: BudgetHook | None = None,
    schedule: str = "critical_path",
    questions: QuestionHook | None = None,
) -> ExecutionResult:
    """Run one tick over `calls` inside trio; returns once every call has finished.

    Tool sources in `tools` (MCP servers) are opened first and closed after the tick.
    `budget` limits the tool calls that start (PROTOCOL §12); `on_budget` may grant more.
    `schedule`: which held-back call starts first under a limit (PROTOCOL §13).
    `questions`: answers the `tl.Question`s MCP servers ask during their calls (without
    it they are declined); a server's model requests need its own `sampling=` here.
    """
    require_trio(
        "tl.execute",
        "call `tl.run_calls(...)` in a thread (`await asyncio.to_thread(tl.run_calls, ...)`)",
    )
    check_schedule(schedule)
    calls = _check_calls(calls)
    _check_state(state)
    _check_budget(budget, on_budget)
    check_questions(questions)
    log = initial_log(input, state)  # a value with no JSON form is refused before connecting
    check_sources(split_tools(tools)[1], approve)
    async with open_tools(tools) as opened:
        with answering_with(QuestionDesk(questions)):
            return await _execute(
                calls,
                opened.tools,
                log,
                approve,
                max_concurrency,
                Ledger(budget),
                on_budget,
                schedule,
            )


async def _execute(
    calls: list[Any],
    toolset: Any,
    log: ContextLog,
    approve: ApproveHook | None,
    max_concurrency: int | None,
    ledger: Ledger | None = None,
    on_budget: BudgetHook | None = None,
    schedule: str = "critical_path",
) -> ExecutionResult:
    binding = [toolset[name] for name in toolset if toolset[name].bind]
    if binding:  # only the tools the plan calls need the input's keys
        named = {call.get("_tool") for call in calls if isinstance(call, Mapping)}
        used = [tool for tool in binding if tool.name in named]
        problems = missing_bindings(used, log.view("input"))
        if problems:
            raise ConfigurationError("; ".join(problems))
    engine = Engine(
        toolset,
        log,
        approve=approve,
        max_concurrency=max_concurrency,
        budget=ledger,
        on_budget=on_budget,
        schedule=schedule,
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
    usage = ledger.usage if ledger is not None else None
    result = ExecutionResult(log, engine.records, engine.scheduler.deferred, usage)
    result.keeper = engine.media
    return result


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


def _check_budget(budget: Any, on_budget: Any) -> None:
    if budget is not None and not isinstance(budget, Budget):
        raise ConfigurationError(f"budget must be a tl.Budget or None, not {budget!r}")
    if on_budget is not None and not callable(on_budget):
        raise ConfigurationError(f"on_budget must be callable, not {on_budget!r}")


def _check_state(state: Any) -> None:
    if state is not None and not isinstance(state, Mapping):
        raise ConfigurationError(
            f"state must be a dict of starting values, not {type(state).__name__} {state!r}"
        )


def run_calls(
    calls: Iterable[Any],
    *,
    tools: Sequence[Tool | ToolSource | MakesTool] | Mapping[str, Tool | MakesTool],
    state: Mapping[str, Any] | None = None,
    input: Any = None,
    approve: ApproveHook | None = None,
    max_concurrency: int | None = None,
    budget: Budget | None = None,
    on_budget: BudgetHook | None = None,
    schedule: str = "critical_path",
    questions: QuestionHook | None = None,
) -> ExecutionResult:
    """`execute` for synchronous code: starts its own trio run."""
    refuse_inside_trio("tl.run_calls", "await tl.execute(...)")
    return trio.run(
        partial(
            execute,
            calls,
            tools=tools,
            state=state,
            input=input,
            approve=approve,
            max_concurrency=max_concurrency,
            budget=budget,
            on_budget=on_budget,
            schedule=schedule,
            questions=questions,
        )
    )

"""The outer loop (PROTOCOL §8): request, stream calls into the tick, repeat until output.

Each iteration is built afresh from the log, and each call is handed to the tick the
moment its JSON object closes in the model's stream, so calls run while the model is
still writing. The loop only stops for three reasons: a valid output, the iteration limit,
or a model that could not be reached — never because a tool or the model misbehaved.
"""

from __future__ import annotations

import copy
import os
import random
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import jsonschema
import pydantic
import trio

from .._core._decisions import ApproveHook
from .._core._log import ContextLog
from .._core._tools import Tool, ToolSet, ToolSource, split_tools
from .._durable._resume import CUT_OFF, UNCHECKED, DurableRun
from .._durable._store import SQLiteStore, as_store
from .._engine._engine import Engine, check_configuration
from .._engine._sources import OpenedTools, check_sources, open_tools
from .._errors import ConfigurationError, ExecuteError
from .._json._stream import SolutionStream
from .._models._base import ModelError, SolutionRequest, TextDelta, Usage
from .._observe._events import (
    DEFAULT_REDACT,
    EventSink,
    Redactor,
    RequestFinished,
    RequestRetried,
    RequestStarted,
    RunEvent,
    open_event_stream,
)
from .._observe._trace import make_tracer
from ._loop import OuterLoop, RunResult
from ._output import has_references, resolve_output
from ._prompt import (
    DEFAULT_CONTEXT_BUDGET,
    PromptRenderer,
    solution_schema,
    strip_strict_nulls,
    strip_strict_output_nulls,
)
from ._retry import StreamBroken, attempts_made, stream_with_retries
from ._session import RunSession

__all__ = ["Agent", "RunResult", "StreamRestarted"]

PROTOCOLS = ("solution", "tools")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


class StreamRestarted:
    """An item a request's stream may yield: the answer starts over from its beginning.

    Only a driver that can lose a stream midway and ask again (a Temporal activity retried
    after its worker died) yields it; see `_SolutionLoop._iterate`.
    """


class _CallNotTaken(Exception):
    """The engine failed on a streamed call: told apart from a failing model client."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class OutputSpec:
    """The user's output: a pydantic model (typed result), a JSON Schema, or None (any)."""

    def __init__(self, output: Any) -> None:
        self.model: type[pydantic.BaseModel] | None = None
        if output is None:
            self.schema: dict[str, Any] | None = None
        elif isinstance(output, type) and issubclass(output, pydantic.BaseModel):
            self.model = output
            self.schema = output.model_json_schema()
        elif isinstance(output, Mapping):
            self.schema = dict(output)
        else:
            raise ConfigurationError(
                f"output must be a pydantic model class, a JSON Schema dict or None, not {output!r}"
            )
        if self.schema is not None:
            try:
                jsonschema.Draft202012Validator.check_schema(self.schema)
            except jsonschema.SchemaError as error:
                raise ConfigurationError(
                    f"output is not a valid JSON Schema: {error.message}"
                ) from error
            self._validator = jsonschema.Draft202012Validator(self.schema)

    def problem(self, value: Any) -> str | None:
        """Why `value` is not a valid output, or None."""
        if self.schema is None:
            return None
        errors = sorted(self._validator.iter_errors(value), key=lambda e: list(map(str, e.path)))
        if not errors:
            return None
        parts = [
            f"{'.'.join(map(str, error.absolute_path)) or '(output)'}: {error.message}"
            for error in errors[:5]
        ]
        return "the output does not match the output schema: " + "; ".join(parts)

    def convert(self, value: Any) -> Any:
        return self.model.model_validate(value) if self.model is not None else value


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
        # Characters of JSON a state value may take in a request (PROTOCOL §8); None: all.
        self.context_budget = (
            None if context_budget is None else _positive(context_budget, "context_budget")
        )
        if protocol not in PROTOCOLS:
            raise ConfigurationError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")
        self.protocol = protocol
        self.strict = strict
        self.on_event = _check_on_event(on_event)
        self._rng = random.Random(seed)
        # Durable runs (docs/durability.md): the store, what events and traces hide, spans.
        self.store = as_store(store)
        self.redact = Redactor(redact)
        self.tracer = make_tracer(tracer_provider)
        check_configuration(self.tools, approve, max_concurrency)
        check_sources(self.tool_sources, approve)
        if protocol == "solution" and not hasattr(model, "stream_solution"):
            raise ConfigurationError(
                f"{model!r} cannot stream solutions (it has no stream_solution method)"
            )
        if protocol == "tools":
            from ._turns import check_turn_configuration  # native tool calling's needs

            check_turn_configuration(model, self.tools)
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

    def _count_iterations(self, log: ContextLog) -> int:
        """Requests made so far, as this agent's protocol counts them: solutions, or the
        model's turns with protocol "tools"."""
        if self.protocol == "tools":
            from ._turns import turns_in

            return turns_in(log)
        return _iterations_in(log)

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
        async with self._open_for_run() as agent:
            session = RunSession.new(agent, input, messages, on_event or self.on_event, run_id)
            return await session.execute(agent._drive)

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
        async with self._open_for_run() as agent:
            session = RunSession.claim(agent, run_id, decisions, on_event or self.on_event)
            return await session.execute(agent._drive)

    @asynccontextmanager
    async def _open_for_run(self) -> AsyncIterator[Agent]:
        """This agent as one run sees it: its tool sources open (in this task), their
        tools added to its own, their instructions to its instructions."""
        if not self.tool_sources:
            yield self
            return
        async with open_tools(self._tool_items) as opened:
            yield self._with_tools(opened)

    def _with_tools(self, opened: OpenedTools) -> Agent:
        bound = copy.copy(self)
        bound.tool_sources = []
        bound.tools = opened.tools
        if opened.instructions:
            parts = [self.instructions.strip()] if self.instructions else []
            bound.instructions = "\n\n".join([*parts, *opened.instructions])
        check_configuration(bound.tools, self.approve, self.max_concurrency)
        if self.protocol == "tools":
            from ._turns import check_turn_configuration

            check_turn_configuration(self.model, bound.tools)
        bound.schema = solution_schema(bound.tools, self.output.schema, strict=self.strict)
        return bound

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
        from ._turns import open_stream

        return open_stream(self, input, **options)

    async def _drive(self, session: RunSession) -> RunResult:
        if self.protocol == "tools":
            from ._turns import run_turns  # the native tool-calling loop

            return await run_turns(self, session.log, on_event=session.sink, session=session)
        loop = _SolutionLoop(self, session.log, session.sink, session.durable)
        session.replay_into(loop)
        return await loop.run()

    async def run_asyncio(self, input: Any = None, **options: Any) -> RunResult:
        """Await a run from an asyncio program without blocking its event loop.

        trio runs as a guest on the asyncio loop (trio's guest mode), in the same
        thread: tools and hooks run exactly as under `run`, and cancelling the awaiting
        asyncio task cancels the run.
        """
        from .._engine._asyncio_bridge import run_trio_in_asyncio

        return await run_trio_in_asyncio(partial(self.run_async, input, **options))


class _SolutionLoop(OuterLoop):
    """One run of the solution protocol."""

    def __init__(
        self,
        agent: Agent,
        log: ContextLog,
        on_event: Callable[[RunEvent], Any] | None,
        durable: DurableRun | None = None,
    ) -> None:
        self.agent = agent
        self.log = log
        self._renderer = PromptRenderer()  # reads each log message once over the run
        self.usage = Usage()
        self.events = (
            on_event if isinstance(on_event, EventSink) else EventSink("", agent.redact, [on_event])
        )
        self.durable = durable
        self.paused = False  # a tick ended with deferred calls: the run pauses
        self.engine = self._make_engine(self.events, durable)

    def _make_engine(self, on_action: Callable[[Any], None], durable: DurableRun | None) -> Any:
        """The driver the loop runs its ticks on: trio's engine here, a workflow's elsewhere."""
        return Engine(
            self.agent.tools,
            self.log,
            approve=self.agent.approve,
            max_concurrency=self.agent.max_concurrency,
            on_action=on_action,
            journal=durable,
            run_id=self.events.run_id or None,
        )

    async def _recover(self) -> tuple[bool, Any]:
        """Settle what the crash (or the pause) left open in a solution-protocol run:
        the calls (`reopen`), then the request; (done, output) as `_iterate`."""
        durable = self.durable
        if durable is None:
            return False, None
        engine = self.engine
        if not durable.reopen(engine):
            return False, None
        scheduler = engine.scheduler
        iteration = scheduler.iteration
        if scheduler.stream_open:
            answered = iteration in durable.solutions
            if not answered and not any(r.iteration == iteration for r in durable.rows.values()):
                # The request failed or died before a single call arrived: nothing came
                # of it, so the empty tick is closed and the same iteration asked again.
                engine.close_stream()
            else:
                if not answered:
                    self._record_solution(iteration, None, "", None)
                    engine.report({"type": "structural", "message": CUT_OFF})
                    durable.verdict(iteration, None)
                elif iteration not in durable.verdicts:
                    engine.report({"type": "structural", "message": UNCHECKED})
                    durable.verdict(iteration, None)
                engine.close_stream()
                self._record_plan(iteration)
        elif durable.plan_due:
            self._record_plan(iteration)
        if scheduler.tick_active:
            outcome = await engine.wait_tick()
            self.paused = bool(outcome.paused)
        else:
            self.paused = bool(scheduler.deferred)
        output = durable.verdicts.get(iteration)
        if iteration in durable.unresolved and not self.paused:
            output = self.finish_output(iteration, output)
        return output is not None and not self.paused, output

    def _iterations_done(self) -> int:
        return _iterations_in(self.log)

    async def _iterate(self, iteration: int) -> tuple[bool, Any]:
        agent = self.agent
        request = SolutionRequest(
            messages=self._renderer.render(
                self.log,
                agent.tools,
                agent.instructions,
                agent.output.schema,
                agent.context_budget,
            ),
            schema=agent.schema,
            iteration=iteration,
        )
        stream = SolutionStream()
        text: list[str] = []
        handed = 0  # calls given to the tick (a restarted stream's first ones were)
        seen = 0  # calls the current stream has closed
        self.engine.open_tick(iteration)
        self._emit(RequestStarted, iteration=iteration)

        def on_item(item: TextDelta | Usage | StreamRestarted) -> None:
            nonlocal stream, seen, handed
            if isinstance(item, Usage):
                self.usage = self.usage + item
                return
            if isinstance(item, StreamRestarted):
                # The request is answered again from its start (a worker died mid-stream):
                # the calls already handed over stay, the new stream's first ones are
                # their repeats and are dropped, and its text replaces the old one.
                stream, seen = SolutionStream(), 0
                text.clear()
                return
            text.append(item.text)
            for call in stream.feed(item.text):
                seen += 1
                if seen <= handed:
                    continue
                handed = seen
                try:
                    self.engine.receive(strip_strict_nulls(call, agent.tools))
                except Exception as error:  # tickloop's own fault, not the model client's
                    raise _CallNotTaken(error) from error

        broken: StreamBroken | None = None
        try:
            await self._request(request, on_item)
        except StreamBroken as error:
            broken = error
        except _CallNotTaken as failure:
            cause = failure.error
            raise ExecuteError(
                f"tickloop could not take a call the model wrote ({type(cause).__name__}: "
                f"{cause}); this is a bug in tickloop, please report it",
                self.log.messages,
            ) from cause
        except ModelError as error:
            raise ExecuteError(
                f"the model request failed{attempts_made(error)}: {error}", self.log.messages
            ) from error
        except Exception as error:  # a client bug must still hand back the log
            raise ExecuteError(
                f"the model client raised {type(error).__name__}: {error}", self.log.messages
            ) from error
        outcome = stream.close()  # the stream of the attempt that answered
        solution = outcome.solution
        self._emit(
            RequestFinished,
            iteration=iteration,
            error=f"broke off: {broken}" if broken is not None else outcome.error,
        )
        self._record_solution(iteration, solution, "".join(text), outcome.error)
        output = None
        referring = False
        if broken is not None:
            self.engine.report(_fault(f"the model's answer broke off: {broken}"))
        elif outcome.error is not None:
            self.engine.report(_fault(f"the solution could not be read: {outcome.error}"))
        elif solution is not None:
            output, referring = self._check_solution(solution)
        if self.durable is not None:
            self.durable.verdict(iteration, output, unresolved=referring)
        self.engine.close_stream()
        self._record_plan(iteration)
        ended = await self.engine.wait_tick()
        self.paused = bool(ended.paused)
        if referring and not self.paused:
            output = self.finish_output(iteration, output)
        return output is not None and not self.paused, output

    def finish_output(self, iteration: int, output: Any) -> Any:
        """Resolve an output's references against the state the tick left, then check it
        (PROTOCOL §8); a fault is fed back at once, and the loop goes on."""
        resolved, fault = resolve_output(output, self.log)
        if fault is None:
            resolved, fault = self._check_output(resolved)
        if fault is not None:
            self.engine.report(_fault(fault), {"output": output})
            self.engine.flush_errors()
            resolved = None
        if self.durable is not None:
            self.durable.verdict(iteration, resolved)
        return resolved

    async def _request(
        self, request: SolutionRequest, on_item: Callable[[TextDelta | Usage], None]
    ) -> None:
        """Ask the model, handing every streamed item to `on_item`; retried by §8."""
        agent = self.agent
        await stream_with_retries(
            lambda: agent.model.stream_solution(request),
            on_item,
            attempts=agent.max_llm_retries,
            rng=agent._rng,
            on_retry=partial(self._on_retry, request.iteration),
        )

    def _emit(self, kind: type[RunEvent], **fields: Any) -> None:
        if self.events.listeners:
            self.events.emit(kind(run_id=self.events.run_id, time=trio.current_time(), **fields))

    def _on_retry(self, iteration: int, attempt: int, delay: float, error: ModelError) -> None:
        self._emit(
            RequestRetried, iteration=iteration, attempt=attempt, delay=delay, error=str(error)
        )
        if self.durable is not None:
            self.durable.note(
                "retry", iteration=iteration, attempt=attempt, delay=delay, error=str(error)
            )

    def _append(self, message: dict[str, Any]) -> None:
        """Append a message of the loop's own; a durable run commits it as well."""
        self.log.append(message)
        if self.durable is not None:
            self.durable.journal_messages([message])

    def _check_solution(self, solution: dict[str, Any]) -> tuple[Any, bool]:
        """The output, checked, or None; True with an output that holds references,
        which is resolved and checked once the tick is over (`finish_output`)."""
        if "calls" in solution and not isinstance(solution["calls"], list):
            self.engine.report(_fault('"calls" must be an array of call objects'))
        output = solution.get("output")
        if output is None:
            return None, False
        output = strip_strict_output_nulls(output, self.agent.output.schema)
        if has_references(output):
            return output, True
        output = resolve_output(output, self.log)[0]  # `††x` is the literal `†x` (§3)
        output, problem = self._check_output(output)
        if problem is not None:
            self.engine.report(_fault(problem), {"output": output})
            return None, False
        return output, False

    def _check_output(self, output: Any) -> tuple[Any, str | None]:
        problem = self.agent.output.problem(output)
        if problem is None and self.agent.output.model is not None:
            try:
                self.agent.output.model.model_validate(output)
            except pydantic.ValidationError as error:
                problem = f"the output does not validate: {error.errors()[0].get('msg')}"
        return output, problem

    def _record_solution(
        self, iteration: int, solution: dict[str, Any] | None, text: str, error: str | None
    ) -> None:
        message: dict[str, Any] = {"type": "solution", "iteration": iteration, "solution": solution}
        if error is not None or solution is None:
            message["text"] = text  # kept for audit: what the model actually wrote
        self._append(message)

    def _record_plan(self, iteration: int) -> None:
        # Records are kept in arrival order and iterations only grow: the iteration's
        # calls are the newest ones, so reading from the end keeps the cost of a plan
        # independent of how long the run has been.
        calls = []
        for record in reversed(self.engine.records.values()):
            if record.iteration < iteration:
                break
            if record.iteration == iteration:
                calls.append(record.call)
        calls.reverse()
        self._append({"type": "plan", "calls": calls})


def _iterations_in(log: ContextLog) -> int:
    return sum(1 for message in log.messages if message.get("type") == "solution")


def _fault(message: str) -> dict[str, Any]:
    return {"type": "structural", "message": message}


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a positive whole number, not {value!r}")
    return value

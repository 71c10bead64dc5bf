"""The solution protocol (PROTOCOL §8): request, stream calls into the tick, repeat.

Each iteration is built afresh from the log, and each call is handed to the tick the
moment its JSON object closes in the model's stream, so calls run while the model is
still writing. The loop only stops for three reasons: a valid output, the iteration limit,
or a model that could not be reached — never because a tool or the model misbehaved.

A run counts one iteration per `solution` message in its log; a resumed run finds the
iteration a crash or a pause interrupted from its journal (`_SolutionLoop._recover`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from .._core._log import ContextLog
from .._core._tools import ToolSet
from .._durable._resume import CUT_OFF, UNCHECKED, DurableRun
from .._errors import ConfigurationError, ExecuteError
from .._json._stream import SolutionStream
from .._models._base import ModelClient, SolutionRequest, TextDelta, Usage
from .._observe._events import EventSink, RequestFinished, RunEvent
from ._loop import AgentConfig, LoopProtocol, OuterLoop, StreamRestarted, structural
from ._output import has_references, resolve_output
from ._prompt import (
    PromptRenderer,
    json_text_by_tool,
    solution_schema,
    strip_strict_nulls,
    strip_strict_output_nulls,
)
from ._retry import StreamBroken, stream_with_retries

__all__ = ["SOLUTION", "SolutionProtocol", "StreamRestarted", "iterations_in"]


class _CallNotTaken(Exception):
    """The engine failed on a streamed call: told apart from a failing model client."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def iterations_in(log: ContextLog) -> int:
    """Requests the log records: one `solution` message each, cut-off ones included."""
    return sum(1 for message in log.messages if message.get("type") == "solution")


class SolutionProtocol(LoopProtocol):
    name = "solution"

    def check(self, model: Any, tools: Any) -> None:
        if not hasattr(model, "stream_solution"):
            raise ConfigurationError(
                f"{model!r} cannot stream solutions (it has no stream_solution method)"
            )

    def iterations_in(self, log: ContextLog) -> int:
        return iterations_in(log)

    def open_loop(
        self,
        config: AgentConfig,
        log: ContextLog,
        events: EventSink,
        durable: DurableRun | None,
        on_text: Callable[[str], Any] | None = None,
    ) -> OuterLoop:
        return _SolutionLoop(config, log, events, durable)


SOLUTION = SolutionProtocol()


class _SolutionLoop(OuterLoop):
    """One run of the solution protocol."""

    protocol = SOLUTION

    def __init__(
        self,
        config: AgentConfig,
        log: ContextLog,
        on_event: Callable[[RunEvent], Any] | None,
        durable: DurableRun | None = None,
    ) -> None:
        self._renderer = PromptRenderer()  # reads each log message once over the run
        self._menu_schema: tuple[ToolSet, dict[str, Any]] | None = None  # tool search's
        # What streams the solutions: checked when the agent was made (`SOLUTION.check`).
        assert isinstance(config.model, ModelClient)
        self.model: ModelClient = config.model
        # The parameters each tool's calls write as JSON text (strict output), once a run.
        self._as_text = json_text_by_tool(config.tools)
        super().__init__(config, log, on_event, durable)

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
                    engine.report(structural(CUT_OFF))
                    durable.verdict(iteration, None)
                elif iteration not in durable.verdicts:
                    engine.report(structural(UNCHECKED))
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

    def _schema_of(self, menu: ToolSet) -> dict[str, Any]:
        """The solution schema of a request showing `menu` (tool search: its own)."""
        config = self.config
        if menu is config.tools:
            return config.schema
        if self._menu_schema is None or self._menu_schema[0] is not menu:
            schema = solution_schema(menu, config.output.schema, strict=config.strict)
            self._menu_schema = (menu, schema)
        return self._menu_schema[1]

    def _solution_request(self, iteration: int, menu: ToolSet) -> SolutionRequest:
        config = self.config
        return SolutionRequest(
            messages=self._renderer.render(
                self.log,
                menu,
                config.instructions,
                config.output.schema,
                config.context_budget,
            ),
            schema=self._schema_of(menu),
            iteration=iteration,
            path=self._path(),
            media=self.engine_media(),
        )

    def compactable_turns(self) -> list[tuple[str, str]]:
        """The chat's earlier text messages (PROTOCOL §16): a plan request shows no
        earlier solution, only the previous plan, which is never compacted."""
        return self._renderer.compactable_turns(self.log, self.config.context_budget)

    async def _iterate(self, iteration: int) -> tuple[bool, Any]:
        config = self.config
        menu = await self._menu()
        request = self._solution_request(iteration, menu)
        if await self._fit_window(iteration, request):
            request = self._solution_request(iteration, menu)
        opened = await self._open_request(request, iteration)
        if opened is None:
            return False, None  # the budget hook deferred: the run pauses before asking
        reservation, before = opened
        stream = SolutionStream()
        text: list[str] = []
        handed = 0  # calls given to the tick (a restarted stream's first ones were)
        seen = 0  # calls the current stream has closed

        def on_item(item: TextDelta | Usage | StreamRestarted) -> None:
            nonlocal stream, seen, handed
            if isinstance(item, Usage):
                self._reported(item)
                return
            if isinstance(item, StreamRestarted):
                # The request is answered again from its start (a worker died mid-stream):
                # the calls already handed over stay, the new stream's first ones are
                # their repeats and are dropped, and its text replaces the old one.
                stream, seen = SolutionStream(), 0
                text.clear()
                return
            text.append(item.text)
            date = None  # the calls of one chunk arrive together, at one date
            for call in stream.feed(item.text):
                seen += 1
                if seen <= handed:
                    continue
                handed = seen
                try:
                    if date is None:
                        date = self.engine.date()
                    self.engine.receive(strip_strict_nulls(call, config.tools, self._as_text), date)
                except Exception as error:  # tickloop's own fault, not the model client's
                    raise _CallNotTaken(error) from error

        broken: StreamBroken | None = None
        try:
            await self._request(request, on_item)
        except StreamBroken as error:
            broken = error
        except _CallNotTaken as failure:
            self.meter.release(reservation)
            cause = failure.error
            raise ExecuteError(
                f"tickloop could not take a call the model wrote ({type(cause).__name__}: "
                f"{cause}); this is a bug in tickloop, please report it",
                self.log.messages,
            ) from cause
        except Exception as error:
            self.meter.release(reservation)  # nothing arrived: retries were used up
            raise self._request_failed(error) from error
        self._metered(reservation, before, "".join(text), cut_off=broken is not None)
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
            self.engine.report(structural(f"the model's answer broke off: {broken}"))
        elif outcome.error is not None:
            self.engine.report(structural(f"the solution could not be read: {outcome.error}"))
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
            fault = self.config.output.check(resolved)
        if fault is not None:
            self.engine.report(structural(fault), {"output": output})
            self.engine.flush_errors()
            resolved = None
        if self.durable is not None:
            self.durable.verdict(iteration, resolved)
        return resolved

    async def _request(
        self, request: SolutionRequest, on_item: Callable[[TextDelta | Usage], None]
    ) -> None:
        """Ask the model, handing every streamed item to `on_item`; retried by §8."""
        config = self.config
        if config.driver is not None:  # the request is its driver's (an activity)
            await config.driver.request_solution(request, on_item)
            return
        await stream_with_retries(
            lambda: self.model.stream_solution(request),
            on_item,
            attempts=config.max_llm_retries,
            rng=config.rng,
            on_retry=partial(self._on_retry, request.iteration),
        )

    def _check_solution(self, solution: dict[str, Any]) -> tuple[Any, bool]:
        """The output, checked, or None; True with an output that holds references,
        which is resolved and checked once the tick is over (`finish_output`)."""
        if "calls" in solution and not isinstance(solution["calls"], list):
            self.engine.report(structural('"calls" must be an array of call objects'))
        output = solution.get("output")
        if output is None:
            return None, False
        output = strip_strict_output_nulls(output, self.config.output.schema)
        if has_references(output):
            return output, True
        output = resolve_output(output, self.log)[0]  # `††x` is the literal `†x` (§3)
        problem = self.config.output.check(output)
        if problem is not None:
            self.engine.report(structural(problem), {"output": output})
            return None, False
        return output, False

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

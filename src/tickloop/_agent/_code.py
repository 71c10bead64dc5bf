"""Code plans (PROTOCOL §14): the model writes a Python program; tickloop runs it.

The third `LoopProtocol`. Each iteration asks the model for a program (the request of
`_stubs`: tools as Python stubs, the output type, `task_input`, earlier programs, the
variables) and reads the answer's text as it streams: each complete top-level statement
is journaled, then handed to the program's machine (`tickloop._code`), whose calls the
driver (`_engine._program.ProgramDriver`) turns into calls of the run's scheduler. So
approvals, budgets, ranks, sub-agents, events and durability are the scheduler's, as for
the other protocols; what is this protocol's own is the program's text, its printed
lines, its variables (the state: one `set` per changed variable per statement, `unset`
for a deleted one) and its end (`final_answer`, a result, an error, `reset`).

The log of an iteration: the `solution` message (its `program`, and the answer's whole
`text`) once the stream has closed, the state messages of its committed statements, and
a `program` data entry (printed lines, result, error, what carries over) once the
program has ended. A resumed run finds from these where the iteration was
(`_CodeLoop._recover`): a program whose stream had closed is never asked for again; one
cut by a crash is the statements journaled before it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio

from .._code import CodeTool, Globals, Limits, ProgramMachine, ProgramStream
from .._core._log import ContextLog
from .._core._scheduler_io import NoteSettled
from .._core._tools import Tool, ToolSet
from .._durable._resume import CUT_OFF, DurableRun
from .._engine._program import ProgramDriver
from .._errors import BudgetExceeded, ConfigurationError, unwrap_single
from .._models._base import (
    ModelClient,
    SolutionRequest,
    TextDelta,
    Usage,
)
from .._observe._events import (
    DataWritten,
    EventSink,
    ProgramPrinted,
    RequestFinished,
    RunEvent,
)
from ._latent import answer_latent_tools, budget_refusal, latent_request, read_answer
from ._loop import AgentConfig, LoopProtocol, OuterLoop, StreamRestarted, structural
from ._retry import StreamBroken, stream_with_retries
from ._stubs import (
    PROGRAM_KIND,
    CodeName,
    code_names,
    code_turns,
    render_code_request,
)

__all__ = ["CODE", "CodeProtocol"]


def programs_in(log: ContextLog) -> int:
    """Requests the log records: one `solution` message each, cut-off ones included."""
    return sum(1 for message in log.messages if message.get("type") == "solution")


class CodeProtocol(LoopProtocol):
    name = "code"

    def check(self, model: Any, tools: ToolSet) -> None:
        if not hasattr(model, "stream_solution"):
            raise ConfigurationError(
                f"{model!r} cannot stream a program (it has no stream_solution method)"
            )
        code_names(tools)  # names that collide once mangled (PROTOCOL §14)

    def iterations_in(self, log: ContextLog) -> int:
        return programs_in(log)

    def open_loop(
        self,
        config: AgentConfig,
        log: ContextLog,
        events: EventSink,
        durable: DurableRun | None,
        on_text: Callable[[str], Any] | None = None,
    ) -> OuterLoop:
        return _CodeLoop(config, log, events, durable)


CODE = CodeProtocol()


class _Program:
    """One iteration's program as it streams and runs: the text, the statements, the
    machine and its driver; pumped by one task (`run`) whenever something happened."""

    def __init__(self, loop: _CodeLoop, iteration: int, resuming: bool = False) -> None:
        self.loop = loop
        self.iteration = iteration
        self.stream = ProgramStream()
        self.text: list[str] = []  # the answer's text as it came
        self.statements = 0
        self.closed = False  # no more statements
        self.paused = False  # waits only on deferred calls: the run pauses
        self.inline = False  # pumped where it is fed and waited for (`_CodeLoop.beside`)
        self._wake = loop.new_event()
        self._complete = ""  # the program up to its last complete statement
        self._handed = 0  # statements given to the machine (a restarted stream repeats them)
        self._seen = 0  # statements the current stream has completed
        config = loop.config
        self.names = loop.names
        self._committed = loop.committed_statements(iteration) if resuming else set()
        self.machine = ProgramMachine(
            iteration=iteration,
            tools={name: _code_tool(entry, config.tools) for name, entry in self.names.items()},
            globals=loop.globals_before(),
            task_input=loop.log.view("input"),
            limits=Limits(
                max_calls=config.max_calls,
                max_steps=config.max_steps,
                max_eval_seconds=config.max_eval_seconds,
            ),
        )
        self.driver = ProgramDriver(
            self.machine,
            loop.engine,
            self._params_of,
            self._printed,
            self._commit,
            clock=time.perf_counter if loop.measures_time else None,
            max_eval_seconds=config.max_eval_seconds,
            resuming=resuming,
        )

    # -- statements in ----------------------------------------------------------------

    def feed(self, text: str) -> None:
        self.text.append(text)
        for statement in self.stream.feed(text):
            self._add(statement)
        if self.inline:
            self.pump_until_waiting()

    def pump_until_waiting(self) -> bool:
        """Pump until the machine waits (under another driver, which has no task for
        it); True once the program has ended (or waits only on people)."""
        while self.driver.pump():
            pass
        return self.driver.finished

    def restart(self) -> None:
        """The answer starts over (a worker died mid-stream, `StreamRestarted`): the
        statements already handed to the machine stay, and their repeats are dropped."""
        self.stream = ProgramStream()
        self.text.clear()
        self._seen = 0

    def close(self) -> None:
        if self.closed:
            return
        for statement in self.stream.close():
            self._add(statement)
        self.closed = True
        self.driver.close()
        self.wake()
        if self.inline:
            self.pump_until_waiting()

    def _add(self, statement: Any) -> None:
        self._seen += 1
        if self._seen <= self._handed:
            return  # a restarted stream's repeat of a statement handed over already
        self._handed = self._seen
        self.statements += 1
        # The program up to this statement's last line: what a resume runs (§14).
        end = statement.line - 1 + statement.source.rstrip("\n").count("\n") + 1
        lines = str(self.stream.program).splitlines(keepends=True)
        self._complete = "".join(lines[:end])
        durable = self.loop.durable
        if durable is not None and not self.driver.resuming:
            # Journaled before any of its calls starts (PROTOCOL §14 "Durability").
            durable.statement(self.iteration, statement.index, statement.line, self._complete)
        self.driver.add(statement)
        self.wake()

    def program_text(self) -> str:
        """The program: once the stream has closed, all it read; before, its complete
        statements."""
        return str(self.stream.program) if self.closed else self._complete

    def written(self) -> None:
        """The program's text is complete (closed): the plan review, if any, is asked
        now (PROTOCOL §15) about it, its gated sites and the calls made so far — not
        once it has run, since it may wait on the calls the review decides."""
        engine = self.loop.engine
        if not (engine.scheduler.review and engine.scheduler.text_open):
            return  # no review, or a resume whose journal has the text closed already
        tools = self.loop.config.tools
        sites = {
            site: tool
            for site, tool in self.machine.tool_sites().items()
            if tools[tool].may_require_approval
        }
        engine.close_text(self.program_text(), sites)

    # -- the pump ---------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Pump the driver until the program has ended, or waits only on people."""
        scheduler = self.loop.engine.scheduler
        while True:
            busy = self.driver.pump()
            if self.driver.finished:
                return
            if busy:
                await self.loop.yield_turn()  # the evaluator yields to the calls (§14)
                continue
            if self.closed and self.loop.pauses_on_deferred:
                deferred = {pending.id: pending for pending in scheduler.deferred}
                if deferred and self.driver.waits_only_on(deferred):
                    self.paused = True
                    return
            await self._wake.wait()
            self._wake = self.loop.new_event()

    # -- what the driver tells --------------------------------------------------------

    def _params_of(self, tool: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A `MakeCall`'s tool and parameters as the scheduler takes them: the tool's
        real name, its parameters' schema names; an optional parameter given None that
        its schema does not admit is left out (the stub shows it as `= None`)."""
        entry = self.names.get(tool) or next(
            (name for name in self.names.values() if name.tool == tool), None
        )
        if entry is None:
            return tool, params
        real = dict(entry.params)
        out: dict[str, Any] = {}
        for key, value in params.items():
            name = real.get(key, key)
            if value is None and name not in entry.required and key not in entry.defaults:
                continue
            out[name] = value
        return entry.tool, out

    def _printed(self, line: int | None, text: str) -> None:
        self.loop._emit(ProgramPrinted, iteration=self.iteration, line=line, text=text)

    def _commit(self, commit: Any) -> None:
        index = commit.statement_index
        if index in self._committed:  # a resumed program: its journal holds these already
            return
        changes = [(name, "set", value) for name, value in commit.writes.items()]
        changes += [(name, "unset", None) for name in commit.deletes]
        for name, method, value in changes:
            self.loop.write_variable(name, method, value, commit.line, [self.iteration, index])


def _code_tool(entry: CodeName, tools: ToolSet) -> CodeTool:
    tool = tools[entry.tool]
    optional = [python for python, key in entry.params if key not in entry.required]
    return CodeTool(
        name=entry.name,
        tool=entry.tool,
        params=entry.python_params,
        # Every parameter a call may leave out (the machine binds; it fills nothing in).
        defaults={python: entry.defaults.get(python) for python in optional},
        read_only=tool.read_only,
        depends_on=tool.dependency_references,
    )


class _CodeLoop(OuterLoop):
    """One run of the code protocol."""

    protocol = CODE
    final_answer = "final_answer"

    @property
    def measures_time(self) -> bool:
        """Evaluator time for max_eval_seconds: not under another driver (a workflow may
        not read a clock)."""
        return self.config.driver is None

    # A program that waits only on deferred calls pauses the run (PROTOCOL §10); a
    # Temporal workflow instead waits for their decisions, durably.
    @property
    def pauses_on_deferred(self) -> bool:
        return self.config.driver is None

    def __init__(
        self,
        config: AgentConfig,
        log: ContextLog,
        on_event: Callable[[RunEvent], Any] | None,
        durable: DurableRun | None = None,
    ) -> None:
        self.names = code_names(config.tools)
        self.program: _Program | None = None
        if config.driver is not None and any(t.is_latent for t in config.tools.values()):
            raise ConfigurationError(
                "latent tools in code plans are answered by a model request from the run's "
                "own process, which a workflow may not make: give the tool a handler"
            )
        # A latent tool's calls are answered by a one-shot request (PROTOCOL §14).
        config = dataclasses.replace(
            config, tools=answer_latent_tools(config.tools, self._answer_latent)
        )
        super().__init__(config, log, on_event, durable)

    async def _answer_latent(self, tool: Tool, params: dict[str, Any], call_id: str) -> Any:
        """A call of latent `tool`: the model's one-shot answer, reserved and counted like
        any request by a meter of its own (the program's request may still stream)."""
        request = latent_request(tool, params, self._iterations_done() or 1, self._path(), call_id)
        try:
            text = await self._one_shot(request)
        except BudgetExceeded as error:
            raise budget_refusal(error) from None
        if text is None:
            raise RuntimeError("budget: the budget hook deferred the request that answers it")
        return read_answer(tool, text)

    # -- plumbing: what a driver on another event loop replaces (Temporal) --------------

    def new_event(self) -> Any:
        """An event the program's pump waits on."""
        return trio.Event()

    async def yield_turn(self) -> None:
        await trio.sleep(0)

    @asynccontextmanager
    async def beside(self, program: _Program) -> AsyncIterator[None]:
        """Pump `program` while the block runs (the model's request), then until it has
        ended or waits only on people. On trio the pump is a task of its own; under
        another driver (a Temporal workflow) the program is pumped as its text arrives
        and inside the driver's waits, which are checked as the engine's calls end."""
        driver = self.config.driver
        if driver is None:
            with unwrap_single():
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(program.run)
                    yield
            return
        program.inline = True
        yield
        await driver.wait_until(program.pump_until_waiting)

    def _action_listener(self) -> Callable[[Any], None] | None:
        return self._on_action  # the program hears of every call's end, listened to or not

    def _on_action(self, action: Any) -> None:
        program = self.program
        if program is not None:
            if type(action) is NoteSettled:
                program.driver.settled(action.id)
            program.wake()  # a decision, a deferral, a refusal: the pump looks again
        self.events(action)

    def write_variable(
        self, name: str, method: str, value: Any, line: int | None, statement: list[int] | None
    ) -> None:
        """A variable's change as the run's state (PROTOCOL §14 "Names and the state"):
        one `data` message at `†state.<name>`, `set` or `unset`, with its `_line`."""
        message: dict[str, Any] = {
            "type": "data",
            "kind": "state",
            "_path": f"†state.{name}",
            "_outputMethod": method,
            "data": {name: value},
        }
        if line is not None:
            message["_line"] = line
        if statement is not None:
            message["_statement"] = statement  # what a resume finds committed already
        self._append(message)
        events = self.events
        if events.listeners and events.wants_messages:  # a mirror of the state (AG-UI)
            self._emit(
                DataWritten,
                data_kind="state",
                output_path=message["_path"],
                method=method,
                data=events.redact(message["data"]),
            )

    def committed_statements(self, iteration: int) -> set[int]:
        """Statements of `iteration` whose variable writes the log holds (a resume)."""
        done: set[int] = set()
        for message in self.log.data_messages("state"):
            mark = message.get("_statement")
            if isinstance(mark, list) and len(mark) == 2 and mark[0] == iteration:
                done.add(mark[1])
        return done

    def globals_before(self) -> Globals:
        """What carries over into the next program (PROTOCOL §14 "Names and the state"):
        the helpers and imports the last program left, and the variables (the state)."""
        last = None
        for entry in self.log.view(PROGRAM_KIND) or ():
            if isinstance(entry, dict) and entry.get("globals") is not None:
                last = entry["globals"]
            if isinstance(entry, dict) and entry.get("reset"):
                last = None
        found = Globals.from_json(last) if last is not None else Globals()
        state = self.log.view("state")
        found.variables = dict(state) if isinstance(state, dict) else {}
        return found

    # -- one iteration ------------------------------------------------------------------

    def _program_request(self, iteration: int, menu: ToolSet) -> SolutionRequest:
        config = self.config
        return SolutionRequest(
            messages=render_code_request(
                self.log,
                menu,
                config.instructions,
                config.output.schema,
                config.context_budget,
            ),
            schema=None,
            iteration=iteration,
            path=self._path(),
            schema_name="program",
            media=self.engine_media(),
        )

    async def _iterate(self, iteration: int) -> tuple[bool, Any]:
        menu = await self._menu()
        request = self._program_request(iteration, menu)
        if await self._fit_window(iteration, request):
            request = self._program_request(iteration, menu)
        opened = await self._open_request(request, iteration, code=True)
        if opened is None:
            return False, None  # the budget hook deferred: the run pauses before asking
        reservation, before = opened
        program = self.program = _Program(self, iteration)
        broken: StreamBroken | None = None

        def on_item(item: Any) -> None:
            if isinstance(item, Usage):
                self.usage = self.usage + item
            elif isinstance(item, TextDelta):
                program.feed(item.text)
            elif isinstance(item, StreamRestarted):
                program.restart()

        async with self.beside(program):
            try:
                await self._request(request, on_item)
            except StreamBroken as error:
                broken = error
            except Exception as error:
                self.meter.release(reservation)  # nothing arrived: retries were used up
                raise self._request_failed(error) from error
            text = "".join(program.text)
            self._metered(reservation, before, text, cut_off=broken is not None)
            self._emit(
                RequestFinished,
                iteration=iteration,
                error=f"broke off: {broken}" if broken is not None else None,
            )
            program.close()
            program.written()
            notes = (
                [f"your answer broke off ({broken}); the statements before it ran"]
                if broken
                else []
            )
            self._record_program(iteration, program, text, notes)
        return await self._finish(iteration, program)

    def compactable_turns(self) -> list[tuple[str, str]]:
        """Every earlier program but the last, with what it printed (PROTOCOL §16)."""
        return code_turns(self.log, self.config.context_budget)

    async def _request(
        self, request: SolutionRequest, on_item: Callable[[TextDelta | Usage], None]
    ) -> None:
        config = self.config
        if config.driver is not None:  # the request is its driver's (an activity)
            await config.driver.request_solution(request, on_item)
            return
        model = config.model
        assert isinstance(model, ModelClient)  # `CodeProtocol.check` made sure
        await stream_with_retries(
            lambda: model.stream_solution(request),
            on_item,
            attempts=config.max_llm_retries,
            rng=config.rng,
            on_retry=partial(self._on_retry, request.iteration),
        )

    def _record_program(
        self, iteration: int, program: _Program, text: str, notes: list[str]
    ) -> None:
        """The stream has closed: the program is known, and never asked for again."""
        message: dict[str, Any] = {
            "type": "solution",
            "iteration": iteration,
            "solution": None,
            "program": program.program_text(),
            "text": text,
        }
        prose = program.stream.prose.strip()
        if prose:
            message["prose"] = prose  # kept, never evaluated (§14 "The answer")
        if program.stream.second_block:
            notes.append(
                "the text after your program's code block was ignored (only the first "
                "```python block runs)"
            )
        if notes:
            message["notes"] = notes
        self._append(message)

    async def _finish(self, iteration: int, program: _Program) -> tuple[bool, Any]:
        """After the stream closed: wait for the program's end (or a pause), record it,
        end the tick; (done, output) as `_iterate`."""
        if not program.driver.finished and not program.paused:
            await program.run()
        if program.paused:
            self.paused = True
            return False, None
        self.program = None
        outcome = program.machine.outcome()
        notes = self._notes_of(iteration)
        output, done = self._judge(outcome)
        entry: dict[str, Any] = {
            "iteration": iteration,
            "printed": list(outcome.printed),
            "kind": outcome.kind,
        }
        if outcome.kind == "result":
            entry["result"] = outcome.value
        if outcome.error is not None:
            entry["error"] = outcome.error
            self.engine.report(_error_message(outcome.error))
        if notes:
            entry["notes"] = notes
        if outcome.kind == "reset":
            entry["reset"] = True
            self._clear_variables(iteration)
        else:
            entry["globals"] = program.machine.globals.to_json()
        self._append({"type": "data", "kind": PROGRAM_KIND, "_outputMethod": "push", "data": entry})
        if self.durable is not None:
            self.durable.verdict(iteration, output if done else None)
        self.engine.close_stream()
        ended = await self.engine.wait_tick()
        self.paused = bool(ended.paused)
        return done and not self.paused, output if done else None

    def _notes_of(self, iteration: int) -> list[str]:
        for message in reversed(self.log.messages):
            if message.get("type") == "solution" and message.get("iteration") == iteration:
                return list(message.get("notes") or ())
        return []

    def _judge(self, outcome: Any) -> tuple[Any, bool]:
        """The run's output and whether the run ends with it (PROTOCOL §14 "The end")."""
        spec = self.config.output
        if outcome.kind == "final":
            problem = spec.check(outcome.value)
            if problem is None:
                return outcome.value, True
            self.engine.report(structural(f"final_answer: {problem}"), {"output": outcome.value})
            return None, False
        if outcome.kind == "result" and spec.schema is not None:
            if spec.check(outcome.value) is None:
                return outcome.value, True
        if self.config.single_program and outcome.kind in ("result", "none"):
            return (outcome.value if outcome.kind == "result" else None), True
        if self.config.single_program:
            return None, True
        return None, False

    def _clear_variables(self, iteration: int) -> None:
        """`reset()`: the variables go (one `unset` each), and so do helpers and imports."""
        state = self.log.view("state")
        for name in list(state) if isinstance(state, dict) else ():
            self.write_variable(name, "unset", None, None, None)

    # -- resuming ---------------------------------------------------------------------

    async def _recover(self) -> tuple[bool, Any]:
        """Settle what a crash (or a pause) left open; (done, output) as `_iterate`."""
        durable, engine = self.durable, self.engine
        if durable is None or not durable.reopen(engine):
            return False, None
        scheduler = engine.scheduler
        iteration = scheduler.iteration
        if not scheduler.tick_active:
            self.paused = bool(scheduler.deferred)
            output = durable.verdicts.get(iteration)
            return output is not None and not self.paused, output
        if self._program_entry(iteration) is not None:  # ended: only its tick was open
            if scheduler.stream_open:
                engine.close_stream()
            ended = await engine.wait_tick()
            self.paused = bool(ended.paused)
            output = durable.verdicts.get(iteration)
            return output is not None and not self.paused, output
        solution = self._solution(iteration)
        if solution is None:
            text = durable.programs.get(iteration)
            if text is None and not any(r.iteration == iteration for r in engine.records.values()):
                # Nothing came of the request: its empty tick is closed, asked again.
                engine.close_stream()
                await engine.wait_tick()
                return False, None
        program = self.program = _Program(self, iteration, resuming=True)
        async with self.beside(program):
            if solution is None:
                program.feed(durable.programs.get(iteration) or "")
                program.close()
                program.written()
                program.driver.resuming = False
                self.engine.report(structural(CUT_OFF))
                self._record_program(iteration, program, "", [CUT_OFF])
            else:
                program.feed(str(solution.get("program") or ""))
                program.close()
                program.written()
        return await self._finish(iteration, program)

    def _solution(self, iteration: int) -> dict[str, Any] | None:
        for message in reversed(self.log.messages):
            if message.get("type") == "solution":
                return message if message.get("iteration") == iteration else None
        return None

    def _program_entry(self, iteration: int) -> dict[str, Any] | None:
        for entry in reversed(self.log.view(PROGRAM_KIND) or ()):
            if isinstance(entry, dict) and entry.get("iteration") == iteration:
                return entry
        return None


def _error_message(error: dict[str, Any]) -> dict[str, Any]:
    """A program's uncaught error as an Error Message's error (PROTOCOL §7, §14): its
    type, its message naming and quoting the line, what else ran."""
    kind = error.get("type") or "runtime"
    message = str(error.get("message", ""))
    line = error.get("line")
    if line is not None:
        text = error.get("text")
        message = f"line {line}" + (f" `{text}`" if text else "") + f": {message}"
    also = error.get("also_ran")
    if also:
        message += f" (also ran: {', '.join(map(str, also))})"
    shown: dict[str, Any] = {"type": kind if kind != "limit" else "structural", "message": message}
    if line is not None:
        shown["line"] = line
    return shown

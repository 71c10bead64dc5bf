"""The loop base both protocols share (PROTOCOL §8): its configuration, shape and result.

The solution protocol (`_solution._SolutionLoop`) and native tool calling
(`_turns._TurnLoop`) differ in what one iteration does and in how a resumed run finds
where it was; how a run counts its iterations, stops at the limit, talks to the engine,
the journal and the run's events, and reports its result is the same, and lives here once.

A loop is configured by an `AgentConfig`, a frozen snapshot the `Agent` takes for each
run: the loop, the session and the protocols never see the `Agent` itself, so nothing
below the composition root imports it.
"""

from __future__ import annotations

import json
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol

from typing_extensions import TypeVar

from .._core._budget import Budget, BudgetRequest, Ledger, Price, RunUsage
from .._core._budget_gate import RecordedRoom
from .._core._decisions import ApproveHook, Deny, PendingCall, ReviewHook
from .._core._guardrails import (
    Guardrail,
    InputGuardrail,
    OutputGuardrail,
    Pass,
    Reject,
    Trip,
    guardrail_name,
    verdict_to_dict,
)
from .._core._log import ContextLog
from .._core._media import MediaKeeper
from .._core._paths import RunPath
from .._core._questions import Question, QuestionHook
from .._core._scheduler import CallRecord
from .._core._status import FINAL_STATUSES, CallStatus
from .._core._tools import ToolSet
from .._durable._resume import DurableRun
from .._durable._store import SQLiteStore
from .._engine._engine import Engine, Outcome
from .._engine._guarding import check
from .._engine._questions import QuestionDesk, answering_with, current_desk
from .._engine._run import ExecutionResult
from .._errors import (
    BudgetExceeded,
    ContextOverflow,
    ExecuteError,
    GuardrailTripped,
    MaxIterationsError,
    RunStopped,
)
from .._models._base import (
    ModelClient,
    ModelError,
    SolutionRequest,
    TextDelta,
    TurnClient,
    TurnRequest,
    Usage,
    checked_usage,
    estimate_tokens,
)
from .._observe._events import (
    EventSink,
    GuardrailChecked,
    QuestionAnswered,
    QuestionAsked,
    Redactor,
    RequestRetried,
    RequestStarted,
    RunEvent,
)
from .._observe._trace import RunTracer
from ._budgeting import RequestMeter, Reservation, WallClock, run_ledger
from ._compaction import (
    COMPACT_GUIDE,
    HISTORY_KIND,
    Compact,
    Overflow,
    Turn,
    default_max_output,
    given_covers,
    latest_compaction,
    merged_covers,
    plan_compaction,
)
from ._output import OutputSpec
from ._retry import StreamBroken, attempts_made
from ._sampling import ModelSampler
from ._stubs import printed_of
from ._tool_search import SEARCH_TOOL, found_tools, menu_of
from ._tree import ReplayingTree, RunPlace

__all__ = [
    "AgentConfig",
    "LoopDriver",
    "LoopProtocol",
    "OuterLoop",
    "OutputT",
    "RunResult",
    "StreamRestarted",
    "structural",
]

# What a run's output is: the type given as `output=` (`Agent(model, output=Answer)` is an
# `Agent[Answer]`), `Any` for a JSON Schema or no output schema.
OutputT = TypeVar("OutputT", default=Any)


class StreamRestarted:
    """An item a request's stream may yield: the answer starts over from its beginning.

    Only a driver that can lose a stream midway and ask again (a Temporal activity retried
    after its worker died) yields it; see `_SolutionLoop._iterate`.
    """


class RunResult(ExecutionResult, Generic[OutputT]):
    """What a run ended with: `output` is of the agent's output type (`Agent[OutputT]`).

    Everything an `ExecutionResult` has (state, views, errors, messages, records), plus
    what only a run with a model has.
    """

    def __init__(
        self,
        output: OutputT,
        log: ContextLog,
        records: dict[str, CallRecord],
        iterations: int,
        usage: RunUsage | None = None,
        *,
        run_id: str | None = None,
        status: str = "done",
        pending: list[PendingCall] | None = None,
    ) -> None:
        super().__init__(log, records, pending, usage)
        self.output: OutputT = output
        self.iterations = iterations
        self.run_id = run_id
        self.status = status

    @property
    def printed(self) -> dict[int, list[str]]:
        """What each program of a code plan printed, by iteration (PROTOCOL §14); empty
        for the other protocols."""
        return printed_of(self._log)

    def __repr__(self) -> str:
        return (
            f"<RunResult {self.status} after {self.iterations} iterations, "
            f"{len(self.records)} calls, output={self.output!r}>"
        )


class LoopDriver(Protocol):
    """What drives a run's loop when trio in this process does not (a Temporal workflow,
    `tickloop._agent.seam`): the engine its ticks run on, its model requests and its
    waits. The loop, its protocol and its scheduler are the same."""

    def make_engine(
        self, log: ContextLog, on_action: Callable[[Any], None] | None, ledger: Ledger
    ) -> Any:
        """The engine of the loop's ticks over `log` (a `SchedulerDriver`)."""

    async def request_solution(
        self, request: SolutionRequest, on_item: Callable[[Any], None]
    ) -> None:
        """One solution request, its text handed to `on_item` as it arrives (a
        `TextDelta`, a `Usage`, a `StreamRestarted`); raises `ModelError`."""

    async def request_turn(self, request: TurnRequest, on_item: Callable[[Any], None]) -> None:
        """One request of protocol "tools": `on_item` gets its `Usage` and, last, its
        `TurnResponse`; raises `RunStopped` when the run cannot go on."""

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Until `condition()` holds (checked as the engine's calls end)."""


# What a guardrail's one-shot request is called (`SolutionRequest.schema_name`): a client
# or a test model can tell it from the run's own requests.
GUARDRAIL_SCHEMA_NAME = "guardrail"


@dataclass(frozen=True, eq=False)
class AgentConfig:
    """What one run of an agent is configured with, fixed when the run starts.

    Built by `Agent` (`Agent._config`) from its options, with a run's tool sources'
    tools and instructions added. Frozen, so a loop cannot change what the next run of
    the same agent sees; `rng` is the agent's own generator, shared on purpose (a seeded
    agent's retry delays go on from run to run).
    """

    model: ModelClient | TurnClient
    tools: ToolSet
    output: OutputSpec
    instructions: str | None
    approve: ApproveHook | None
    max_iterations: int
    max_llm_retries: int
    max_concurrency: int | None
    schedule: str
    context_budget: int | None
    protocol: LoopProtocol
    strict: bool
    schema: dict[str, Any]
    store: SQLiteStore | None
    redact: Redactor
    tracer: RunTracer | None
    on_event: Callable[[RunEvent], object] | None
    rng: random.Random
    name: str | None = None
    max_depth: int = 5  # of the tree this run is the root of (PROTOCOL §11)
    # Where the run is in a tree of runs (`_tree.RunPlace`), when it has sub-agents or is
    # one; its engine hands it to the calls (`CallContext.scope`) that start child runs.
    place: RunPlace | None = None
    # A replayed or forked run's recorded outcome for a call id, given instead of running
    # its handler (None: run it); see `_replay`.
    answer: Callable[[str, dict[str, Any]], Outcome | None] | None = None
    # And what its record decided of the budget for a call id it reuses: refused (the
    # error), started (True: counted, never refused), or None (it reserves room).
    recorded_room: RecordedRoom | None = None
    # The root of a replayed or forked tree: what each of its runs takes from the record
    # (`_replay.Replaying`: a child's model and answers, by path).
    replaying: ReplayingTree | None = None
    # Budgets (PROTOCOL §12): the run's limits, the prices of its models, the hook, and
    # for a child run the ledger of the run that started it (`run_ledger` says how).
    budget: Budget | None = None
    pricing: Mapping[str, Price] = field(default_factory=dict)
    on_budget: Callable[[BudgetRequest], object] | None = None
    parent_ledger: Ledger | None = None
    # What the run this one continues (`messages=` from a `BudgetExceeded`) already used:
    # spent once as the run starts, a journaled input like any spending, so it counts in
    # this run's usage and limits and a resume (which replays the journal) never adds it
    # again. None for every other run.
    carried_usage: RunUsage | None = None
    # Another driver of the run's loop than trio here (a Temporal workflow); None: trio.
    driver: LoopDriver | None = None
    # Code plans (PROTOCOL §14): what one program may do ("Limits"), and whether the run
    # is one program only (`tl.run_program`: no model asked again, whatever it ends with).
    max_calls: int = 1000
    max_steps: int = 200_000
    max_eval_seconds: float = 1.0
    single_program: bool = False
    # PROTOCOL §15 "Plan review": this agent's own hook, asked about its requests' plans.
    review_plan: ReviewHook | None = None
    # Guardrails (PROTOCOL §15): the agent's, in order; a child run's start with its root's.
    guardrails: tuple[Guardrail, ...] = ()
    # A replayed or forked run's recorded tool-guardrail verdicts, by call id (None: ask).
    recorded_screens: Callable[[str], Pass | Deny | None] | None = None
    # And its recorded input and output verdicts (`guardrail` notes) it reuses: every one
    # in a replay, which asks no guardrail; the passes of input guardrails in a fork.
    recorded_verdicts: tuple[dict[str, Any], ...] | None = None
    # A replay (not a fork): it asks no input or output guardrail at all.
    replay_only: bool = False
    # Where the bytes of the run's images and audio are kept (`_core._media`): the store,
    # or memory without one; a replay reads the recorded run's store. None: the engine's.
    media: MediaKeeper | None = None
    # Compaction (PROTOCOL §16): the model's window in tokens (None: never compacted),
    # the user's summariser (None: the agent's model writes the summary), and the share
    # of the window a compacted prompt is brought down to.
    context_window: int | None = None
    compact: Callable[[list[dict[str, Any]]], str] | None = None
    compact_target: float = 0.6
    # Sessions (PROTOCOL §16): whether a session run starts from the state its session
    # left (None: the default, true for code plans); a run's own `keep_state=` wins.
    keep_state: bool | None = None
    # The hook an MCP server's questions go to (`tl.Question`); None: the parent run's,
    # else declined.
    questions: QuestionHook | None = None


class LoopProtocol(ABC):
    """One way of talking to the model: what it needs, how it counts, how a run loops.

    The session asks the protocol, not the agent, how many iterations a log holds (a
    run that fails reports it) and for the loop that runs or resumes it.
    """

    name: ClassVar[str]

    @abstractmethod
    def check(self, model: Any, tools: ToolSet) -> None:
        """Refuse a model or tools this protocol cannot drive, before anything runs."""

    @abstractmethod
    def iterations_in(self, log: ContextLog) -> int:
        """Requests the log records, as this protocol counts them."""

    @abstractmethod
    def open_loop(
        self,
        config: AgentConfig,
        log: ContextLog,
        events: EventSink,
        durable: DurableRun | None,
        on_text: Callable[[str], Any] | None = None,
    ) -> OuterLoop:
        """The loop of one run (a resumed one replays its journal into it first)."""


class OuterLoop:
    """What the loops of both protocols share: resume, count, limit, iterate, result.

    A subclass says how to recover a resumed run, how many iterations the log already
    holds, and what one iteration does; the shape of a run, and the plumbing to the
    engine, the journal and the run's events, are kept here, once.
    """

    final_answer = "output"  # what the iteration-limit message says never came
    protocol: ClassVar[LoopProtocol]

    def __init__(
        self,
        config: AgentConfig,
        log: ContextLog,
        on_event: Callable[[RunEvent], Any] | None,
        durable: DurableRun | None = None,
    ) -> None:
        self.config = config
        self.log = log
        self.usage = Usage()  # the tokens the model reported (`ledger`: the whole count)
        self.ledger = run_ledger(config.budget, config.pricing, config.parent_ledger)
        if config.place is not None:  # a tree's run: its children draw from this ledger
            config.place.tree.state.ledgers[config.place.path] = self.ledger
        self.events = (
            on_event
            if isinstance(on_event, EventSink)
            else EventSink("", config.redact, [on_event])
        )
        self.durable = durable
        self.paused = False  # a tick ended with deferred calls: the run pauses
        self.grant: Budget | None = None  # more room a resume brings (added, journaled)
        # Tool search: the deferred tools found so far and the menu they make (`_menu`).
        self.found: tuple[str, ...] = ()
        self._menu_tools: ToolSet | None = None
        self.engine = self._make_engine(self._action_listener(), durable)
        self.meter = self._new_meter(config.schema)
        if isinstance(self.engine, Engine) and hasattr(config.model, "stream_solution"):
            self.engine.ask_model = self._ask_for_a_guardrail
        if isinstance(self.engine, Engine) and config.replay_only:
            self.engine.replayed_trips = {
                v["call_id"]: (v["guardrail"], v.get("reason", ""))
                for v in config.recorded_verdicts or ()
                if v.get("call_id") is not None and v["verdict"] == "trip"
            }

    async def _ask_for_a_guardrail(self, prompt: str) -> str:
        """A guardrail's one-shot request to the run's model (PROTOCOL §15): plain text,
        reserved and counted like any request by a meter of its own (the run's own request
        may be streaming meanwhile), as a latent tool's is (`_latent`)."""
        request = SolutionRequest(
            messages=[{"role": "user", "content": prompt}],
            schema=None,
            iteration=self._iterations_done() or 1,
            schema_name=GUARDRAIL_SCHEMA_NAME,
            metadata={"guardrail": True},
            path=self._path(),
        )
        text = await self._one_shot(request)
        if text is None:
            raise RuntimeError("budget: the budget hook deferred a guardrail's request")
        return text

    def _new_meter(self, schema: Any = None) -> RequestMeter:
        """A meter of the run's requests (PROTOCOL §12): the run's own, or one for a
        request made beside it (a guardrail's, a latent tool's, an MCP server's sampling),
        which must not take the place of the run's request in flight."""
        config = self.config
        return RequestMeter(
            self.ledger,
            self.engine,
            config.model,
            config.on_budget,
            durable=self.durable is not None,
            run_id=self.events.run_id or None,
            schema=schema,
        )

    async def _one_shot(self, request: SolutionRequest) -> str | None:
        """The whole text of a one-shot request to the run's model (a guardrail's, a
        latent tool's), reserved and counted like any request (PROTOCOL §12) by a meter
        of its own: the run's own request may be streaming meanwhile. None when the
        budget hook deferred it; `BudgetExceeded` when the budget refuses it."""
        meter = self._new_meter(request.schema)
        reservation = await meter.reserve(request, lambda: request.messages)
        if reservation is None:
            return None
        return await meter.answer(reservation, self.config.model, request)

    def _make_engine(
        self, on_action: Callable[[Any], None] | None, durable: DurableRun | None
    ) -> Any:
        """The driver the loop runs its ticks on: trio's engine here, a workflow's elsewhere."""
        config = self.config
        if config.driver is not None:
            return config.driver.make_engine(self.log, on_action, self.ledger)
        engine = Engine(
            config.tools,
            self.log,
            approve=config.approve,
            review_plan=config.review_plan,
            max_concurrency=config.max_concurrency,
            schedule=config.schedule,
            on_action=on_action,
            journal=durable,
            run_id=self.events.run_id or None,
            scope=config.place,
            path=config.place.path if config.place is not None else RunPath.ROOT,
            answer=config.answer,
            recorded_room=config.recorded_room,
            budget=self.ledger,
            on_budget=config.on_budget,
            # One budget question at a time for the whole tree (§12).
            budget_questions=(
                None if config.place is None else config.place.tree.state.budget_questions
            ),
            guardrails=config.guardrails,
            on_verdict=self._on_verdict,
            recorded_screens=config.recorded_screens,
            media=config.media,
        )
        return engine

    def _action_listener(self) -> Callable[[Any], None] | None:
        """What the engine hands each scheduler action it carries out: the run's events.

        The sink itself, not a method forwarding to it: an `ActionObserver`, it says whether it
        turns the scheduler's facts into events, so a run nobody listens to is spared
        making them, several per call; and a sink without listeners takes nothing at all.
        A loop that reads the actions itself overrides it.
        """
        return self.events if self.events.listeners else None

    async def run(self) -> RunResult:
        self._before_session()
        stopped: RunStopped | None = None
        output: Any = None
        # The wall_time budget, on the run's clock (§12): running calls end at it.
        clock = WallClock(self.ledger, self.engine)
        try:
            with self._answering():
                async with self.engine.session():
                    if self.config.carried_usage is not None:
                        self.meter.carry(self.config.carried_usage)
                    try:
                        with clock.scope() as wall:
                            await self._guard_input()
                            output = await self._iterate_until_done()
                        if wall is not None and wall.cancelled_caught:
                            raise self.meter.out_of_time()
                    except RunStopped as error:
                        # The run stops on its own (iteration limit, model unreachable), not on
                        # the caller's cancel: the session still ends normally, so fire-and-forget
                        # calls finish and their late errors are flushed into the log (§4).
                        stopped = error
                    clock.spent(self.meter)
        except GuardrailTripped as tripped:  # stopped at once: calls in flight cancelled
            stopped = tripped
        if stopped is not None:
            stopped.messages = list(self.log.messages)  # with what the session flushed
            if isinstance(stopped, BudgetExceeded | GuardrailTripped):
                stopped.usage = self.ledger.usage
            raise stopped
        paused = self.paused
        result = RunResult(
            None if paused else self.config.output.convert(output),
            self.log,
            self.engine.records,
            self._iterations_done(),
            self.ledger.usage,
            status="paused" if paused else "done",
            pending=self._pending() if paused else None,
        )
        result.keeper = self.config.media
        return result

    @contextmanager
    def _answering(self) -> Iterator[None]:
        """The run's question desk in the context of every task it starts: its MCP
        servers' questions go to its `questions=` hook (a child run's without one, to its
        parent's), their model requests to its model, metered in its budget. A workflow's
        calls run in other processes, which answer nothing here."""
        if self.config.driver is not None:
            yield
            return
        parent = current_desk()
        hook = self.config.questions if parent is None else parent.inherit(self.config.questions)
        durable = self.durable
        place = self.config.place
        desk = QuestionDesk(
            hook,
            sampler=ModelSampler(
                self.config.model,
                self._new_meter,
                place.path.parts if place is not None else (),
                self._iterations_done,
            ),
            journal=durable,
            recorded=durable.answers if durable is not None else None,
            parked_verdicts=durable.question_verdicts if durable is not None else None,
            run_id=self.events.run_id or None,
            on_question=self._on_question if self.events.listeners else None,
        )
        with answering_with(desk):
            yield

    def _on_question(self, question: Question, verdict: Any) -> None:
        """A server's question put to the hook (verdict None), then its verdict, as events."""
        if verdict is None:
            self._emit(
                QuestionAsked,
                call_id=question.call_id,
                server=question.server,
                message=question.message,
                schema=question.schema,
                sampling=None if question.sampling is None else question.sampling.to_dict(),
            )
        else:
            name = type(verdict).__name__.lower()
            self._emit(
                QuestionAnswered, call_id=question.call_id, server=question.server, verdict=name
            )

    def _pending(self) -> list[PendingCall]:
        """The calls a paused run waits on a person for: not those parked for budget
        room (PROTOCOL §12), which a resume with more room starts by itself."""
        life = self.ledger.life
        return [call for call in self.engine.scheduler.deferred if not life.is_parked(call.id)]

    async def _iterate_until_done(self) -> Any:
        """Iterate until an output, a pause or a stop; the output (None when paused)."""
        limit = self.config.max_iterations
        if self.grant is not None or self.ledger.life.tree.deferring():
            # A resume answers the budget questions it paused on, with the room it brings
            # (`budget=`, added to what is left; else none, and they are asked again):
            # journaled, so a replay clears them at the same point (PROTOCOL §12).
            self.meter.grant(self.grant or Budget())
        done, output = await self._recover()  # a resumed run: what it left open
        if done and not self.paused and self._output_guardrails:
            done, output = await self._guard_output(output)  # the journal's verdicts kept
        iteration = self._iterations_done()  # a resumed log continues its count
        while not done and not self.paused:
            iteration += 1
            if iteration > limit:
                raise MaxIterationsError(
                    f"the agent made {limit} requests without a final "
                    f"{self.final_answer}; raise max_iterations or check the "
                    "tools and instructions",
                    self.log.messages,
                )
            done, output = await self._iterate(iteration)
            if done and not self.paused and self._output_guardrails:
                done, output = await self._guard_output(output)
        return output

    async def _guard_input(self) -> None:
        """A fresh run's input guardrails (PROTOCOL §15), asked while the first request
        streams; a blocking one holds the request until it has passed. A resumed or
        replayed run asks none again."""
        guardrails = tuple(g for g in self.config.guardrails if isinstance(g, InputGuardrail))
        if not guardrails:
            return
        if self.config.recorded_verdicts is not None and not self._resumed:
            self._replay_input(guardrails, self.config.recorded_verdicts)
            return
        close = True
        if self._resumed:
            # Journaled verdicts are not asked again; the gate is as the journal left it.
            recorded = self._recorded("input", self.durable.guardrails if self.durable else ())
            self._raise_recorded_trip(recorded)
            if not self.engine.gate_closed and (recorded or self._iterations_done()):
                return  # every one had passed (the gate opened), or none was ever asked
            close = not self.engine.gate_closed
            guardrails = tuple(g for g in guardrails if guardrail_name(g) not in recorded)
        elif self.config.answer is not None or self._iterations_done():
            return
        passed = self.engine.check_input(guardrails, self.log.view("input"), close=close)
        await passed.wait()

    @property
    def _resumed(self) -> bool:
        return self.durable is not None and self.durable.resumed

    @staticmethod
    def _recorded(kind: str, verdicts: Any, iteration: int | None = None) -> dict[str, Any]:
        """The recorded verdicts of guardrails of `kind` by name (of `iteration`'s output)."""
        return {
            v["guardrail"]: v
            for v in verdicts
            if v.get("kind") == kind and (iteration is None or v.get("iteration") == iteration)
        }

    @staticmethod
    def _raise_recorded_trip(recorded: dict[str, Any]) -> None:
        for verdict in recorded.values():
            if verdict.get("verdict") == "trip":
                raise GuardrailTripped(verdict["guardrail"], verdict.get("reason", ""), None)

    def _replay_input(
        self, guardrails: tuple[InputGuardrail, ...], verdicts: tuple[dict[str, Any], ...]
    ) -> None:
        """A replayed or forked run's input guardrails (PROTOCOL §15): a recorded verdict
        is told again, not asked; a recorded trip stops the run where it did (a replay
        only: a fork reuses passes, and asks again the guardrails it has no pass of)."""
        recorded = self._recorded("input", verdicts)
        for name, verdict in recorded.items():
            self._on_verdict(None, name, "input", verdict)
        for name, verdict in recorded.items():
            if verdict.get("verdict") == "trip":
                after = frozenset(verdict.get("after") or ())
                self.engine.trip_again(name, verdict.get("reason", ""), after)
                return
        unasked = tuple(g for g in guardrails if guardrail_name(g) not in recorded)
        if unasked and not self.config.replay_only:
            self.engine.check_input(unasked, self.log.view("input"))

    @property
    def _output_guardrails(self) -> tuple[OutputGuardrail, ...]:
        """Asked about a final output (a replay asks none: see `_guard_output`)."""
        return tuple(g for g in self.config.guardrails if isinstance(g, OutputGuardrail))

    async def _guard_output(self, output: Any) -> tuple[bool, Any]:
        """The final output through the output guardrails, in order (PROTOCOL §15): a
        rejection is a structural error fed back (the loop goes on), a trip stops the run,
        and one that raises trips (fail closed). A verdict the journal holds for this
        output (a resumed run's) is not asked again; a replay asks none and stops where
        the record tripped."""
        iteration = self._iterations_done()
        if self._resumed:
            journaled = self.durable.guardrails if self.durable is not None else ()
            recorded = self._recorded("output", journaled, iteration)
        elif self.config.replay_only:
            recorded = self._recorded("output", self.config.recorded_verdicts or (), iteration)
            for name, verdict in recorded.items():
                self._on_verdict(None, name, "output", verdict)
            self._raise_recorded_trip(recorded)
            return True, output
        else:
            recorded = {}
        self._raise_recorded_trip(recorded)
        for guardrail in self._output_guardrails:
            name = guardrail_name(guardrail)
            if name in recorded and recorded[name].get("verdict") == "pass":
                continue
            context = self.engine.guardrail_context()
            verdict = await check(guardrail.fn, (output, context), (Pass, Reject, Trip), Trip)
            self._on_verdict(None, name, "output", verdict_to_dict(verdict))
            if isinstance(verdict, Trip):
                raise GuardrailTripped(name, verdict.reason, verdict.info)
            if isinstance(verdict, Reject):
                self._reject_output(f"{name}: {verdict.reason}", output)
                return False, None
        return True, output

    def _reject_output(self, feedback: str, output: Any) -> None:
        """Feed back an output a guardrail rejected, as a structural error (§15)."""
        self.engine.report(structural(feedback), {"output": output})
        self.engine.flush_errors()

    def _before_session(self) -> None:
        """Checks a loop makes before anything runs (none by default)."""

    async def _recover(self) -> tuple[bool, Any]:
        raise NotImplementedError

    def _path(self) -> tuple[str, ...]:
        """The agent-call ids above this run (PROTOCOL §11): () at the root, or alone."""
        place = self.config.place
        return place.path.parts if place is not None else ()

    def _iterations_done(self) -> int:
        return self.protocol.iterations_in(self.log)

    async def _iterate(self, iteration: int) -> tuple[bool, Any]:
        raise NotImplementedError

    # -- what both protocols do the same way ------------------------------------------------

    def _on_verdict(self, call_id: str | None, name: str, kind: str, entry: dict[str, Any]) -> None:
        """A guardrail's verdict, as an event (PROTOCOL §15); a durable run journals it
        (with the output's iteration, or the calls an input trip came after, for a
        resume and a replay)."""
        if self.durable is not None:
            note = {"guardrail": name, "kind": kind, "verdict": entry["verdict"]}
            if entry.get("reason") is not None:
                note["reason"] = entry["reason"]
            if call_id is not None:
                note["call_id"] = call_id
            if kind == "output":
                note["iteration"] = self._iterations_done()
            if entry["verdict"] == "trip":
                records = self.engine.records
                # What a replay waits for before it trips again, and what a fork runs again.
                note["after"] = sorted(i for i, r in records.items() if r.status in FINAL_STATUSES)
                note["cancelled"] = sorted(
                    i for i, r in records.items() if r.status == CallStatus.RUNNING
                )
            self.durable.guardrail(note)
        self._emit(
            GuardrailChecked,
            call_id=call_id,
            guardrail=name,
            guardrail_kind=kind,
            verdict=entry["verdict"],
            reason=entry.get("reason"),
        )

    async def _menu(self) -> ToolSet:
        """The tools the next request shows (tool search: the loaded ones, and what the
        run's `search_tools` calls found so far, `found`, which opens its tick).

        A search the model wrote without an output path runs fire-and-forget, past its
        tick: the next request waits for it, so what it finds is on that menu whatever
        the timing."""
        tools = self.config.tools
        if not tools.deferred:
            return tools
        records = self.engine.records

        def searched() -> bool:
            return all(
                record.status in FINAL_STATUSES
                for record in records.values()
                if record.tool == SEARCH_TOOL
            )

        if not searched():
            driver = self.config.driver
            await (
                driver.wait_until(searched)
                if driver is not None
                else self.engine.wait_until(searched)
            )
        found = found_tools(self.engine.records, tools)
        if found != self.found or self._menu_tools is None:
            self.found, self._menu_tools = found, menu_of(tools, found)
        return self._menu_tools

    def engine_media(self) -> Callable[[str], tuple[str, bytes] | None] | None:
        """How a request reads the bytes of the media its messages show: the run's keeper,
        which its calls kept them with."""
        media = self.config.media
        return None if media is None else media.get_media

    def _emit(self, kind: type[RunEvent], **fields: Any) -> None:
        if self.events.listeners:
            events = self.events  # stamped on the sink's clock: trio's, or a workflow's
            events.emit(kind(run_id=events.run_id, time=events.clock(), **fields))

    def _on_retry(self, iteration: int, attempt: int, delay: float, error: Exception) -> None:
        self._emit(
            RequestRetried, iteration=iteration, attempt=attempt, delay=delay, error=str(error)
        )
        if self.durable is not None:  # for the timeline
            self.durable.note(
                "retry", iteration=iteration, attempt=attempt, delay=delay, error=str(error)
            )

    def _append(self, message: dict[str, Any]) -> None:
        """Append a message of the loop's own; a durable run journals it as well."""
        self.log.append(message)
        if self.durable is not None:
            self.durable.journal_messages([message])

    async def _open_request(
        self, request: Any, iteration: int, *, code: bool = False
    ) -> tuple[Reservation, Usage] | None:
        """What every protocol does before it asks the model, written once: room for the
        request (PROTOCOL §12; None: the budget hook deferred, and the run pauses before
        asking), the request journaled beside the response it gets, the tick opened and
        `RequestStarted` told. Returns the reservation and the usage reported before it,
        which `_metered` takes when the request ends."""
        reservation = await self._reserve(request)
        if reservation is None:
            return None
        before = Usage(self.usage.input_tokens, self.usage.output_tokens)
        if self.durable is not None:
            # Beside the response it gets: what a replay or fork compares a new request
            # with (docs/replay.md). The last note of an iteration asked twice wins.
            self.durable.note("request", iteration=iteration, request=request.to_dict())
        self.engine.open_tick(iteration, code=code, found=self.found)
        self._emit(RequestStarted, iteration=iteration)
        return reservation, before

    async def _reserve(self, request: Any) -> Reservation | None:
        """Room for the next model request (PROTOCOL §12), before its tick opens; None:
        the budget hook deferred, and the run pauses here (a resume asks again)."""
        reservation = await self.meter.reserve(request, lambda: self.log.messages)
        if reservation is None:
            self.paused = True
        return reservation

    def _reported(self, usage: Usage) -> None:
        """Token counts the model client reported; counts only (`checked_usage`): a
        request whose usage is not one counts its estimate (PROTOCOL §12)."""
        checked = checked_usage(usage, self.config.model)
        if checked is not None:
            self.usage = self.usage + checked

    def _metered(self, reservation: Reservation, before: Usage, text: str, cut_off: bool) -> None:
        """The request ended: what it used replaces its reservation (`before`: the
        reported usage before it, so the difference is this request's)."""
        reported = Usage(
            self.usage.input_tokens - before.input_tokens,
            self.usage.output_tokens - before.output_tokens,
        )
        self.meter.settle(reservation, reported, text, cut_off)

    # -- compaction (PROTOCOL §16): one mechanism, every protocol ---------------------------
    # A protocol says what its next request's compactable turns are (`compactable_turns`)
    # and how it asks its model for text (`_request`, or `_ask_for_text`); measuring,
    # deciding (`plan_compaction`), reusing a recorded one, asking and journaling are here.

    def compactable_turns(self) -> list[tuple[str, str]]:
        """The next request's compactable turns, oldest first, as (key, text shown):
        the newest compaction's summary (key "compaction") first, if any. None by
        default: such a protocol's requests can only fit or overflow."""
        return []

    async def _fit_window(self, iteration: int, request: SolutionRequest | TurnRequest) -> bool:
        """Compact before `request` is sent if it would not fit the context window
        (PROTOCOL §16); True when a compaction was appended (render the request again).

        Sizes are estimated at four characters a token (`estimate_tokens`, the budgets'
        estimate), so the decision is the same on resume and replay; the decision is
        `plan_compaction`'s, this only measures, asks and journals."""
        config = self.config
        window = config.context_window
        if window is None:
            return False
        turns = self.compactable_turns()
        sized = [Turn(key, estimate_tokens(len(text))) for key, text in turns]
        prompt = estimate_tokens(_prompt_chars(request))
        fixed = max(0, prompt - sum(turn.tokens for turn in sized))
        max_output = self.meter.max_output or default_max_output(window)
        decision = plan_compaction(
            fixed, sized, window=window, max_output=max_output, target=config.compact_target
        )
        if isinstance(decision, Overflow):
            raise ContextOverflow(decision.fixed, decision.max_output, window, self.log.messages)
        if not isinstance(decision, Compact):
            return False
        recorded = self._recorded_compaction(iteration)
        if recorded is not None:  # replay and fork show it again, never ask (§16)
            self._append(recorded)
            return True
        covered = [(key, text) for key, text in turns if key in decision.covers]
        summary = await self._summary(iteration, covered, decision.summary_tokens)
        if summary is None:
            return False  # the budget hook deferred: the request pauses too
        _, before = latest_compaction(self.log)
        self._append(
            {
                "type": "compaction",
                "covers": merged_covers(
                    before, decision.covers, given_covers(self.log.view(HISTORY_KIND))
                ),
                "summary": summary,
                "iteration": iteration,
            }
        )
        return True

    def _recorded_compaction(self, iteration: int) -> dict[str, Any] | None:
        replaying = self.config.replaying
        if replaying is None:
            return None
        place = self.config.place
        return replaying.recorded_compaction(
            place.path if place is not None else RunPath.ROOT, iteration
        )

    async def _summary(
        self, iteration: int, covered: list[tuple[str, str]], tokens: int
    ) -> str | None:
        """The summary of `covered`: the user's `compact=` function's, else a request to
        the agent's model, reserved and counted like any request (PROTOCOL §12). Cut to
        `tokens` (at four characters a token) so the compacted request fits; None when
        the budget hook deferred the request (the run pauses)."""
        chat = [{"role": "user", "content": text} for _, text in covered]
        limit = tokens * 4
        if self.config.compact is not None:
            try:
                written = self.config.compact([dict(message) for message in chat])
            except Exception:  # the hook's mistake must not end the run: the model writes it
                written = None
            if isinstance(written, str):
                return written[:limit]
        request = self._summary_request(iteration, chat)
        reservation = await self._reserve(request)
        if reservation is None:
            return None
        cap = request.max_output_tokens
        request.max_output_tokens = tokens if cap is None else min(cap, tokens)
        before = Usage(self.usage.input_tokens, self.usage.output_tokens)
        parts: list[str] = []
        try:
            await self._ask_for_text(request, parts)
        except StreamBroken:
            pass  # what arrived is the summary, cut off
        except Exception as error:
            self.meter.release(reservation)
            raise self._request_failed(error) from error
        text = "".join(parts)
        self._metered(reservation, before, text, cut_off=False)
        return text[:limit]

    def _summary_request(
        self, iteration: int, chat: list[dict[str, Any]]
    ) -> SolutionRequest | TurnRequest:
        """A compaction request: the guide, then the covered turns as they were shown."""
        return SolutionRequest(
            messages=[{"role": "system", "content": COMPACT_GUIDE}, *chat],
            schema=None,
            iteration=iteration,
            path=self._path(),
            schema_name="compaction",
        )

    async def _ask_for_text(self, request: Any, parts: list[str]) -> None:
        """Ask for a plain-text answer, kept in `parts` (a restarted stream starts over);
        the protocols that stream solutions ask by their `_request`."""

        def on_item(item: Any) -> None:
            if isinstance(item, Usage):
                self._reported(item)
            elif isinstance(item, TextDelta):
                parts.append(item.text)
            elif isinstance(item, StreamRestarted):
                parts.clear()

        await self._request(request, on_item)

    async def _request(self, request: Any, on_item: Callable[[Any], None]) -> None:
        raise NotImplementedError

    def _request_failed(self, error: Exception) -> ExecuteError:
        """The run's error for a model request that failed for good: it carries the log."""
        if isinstance(error, ModelError):
            return ExecuteError(
                f"the model request failed{attempts_made(error)}: {error}", self.log.messages
            )
        # A client bug must still hand back the log.
        return ExecuteError(
            f"the model client raised {type(error).__name__}: {error}", self.log.messages
        )


def _prompt_chars(request: SolutionRequest | TurnRequest) -> int:
    """Characters of what a request sends: a solution request's messages and its schema,
    or a turn request (its system, conversation and tools) as JSON."""
    if isinstance(request, SolutionRequest):
        text = sum(len(str(message.get("content", ""))) for message in request.messages)
        schema = request.schema
        return text + (len(json.dumps(schema, ensure_ascii=False)) if schema is not None else 0)
    return len(json.dumps(request.to_dict(), ensure_ascii=False))


def structural(message: str) -> dict[str, Any]:
    """A structural Error Message (PROTOCOL §7) of the loop's own."""
    return {"type": "structural", "message": message}

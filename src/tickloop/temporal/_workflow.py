"""The workflow: the same scheduler and outer loops, driven on Temporal's deterministic loop.

Nothing here is a second scheduler or a second agent loop. `WorkflowEngine` is a
`SchedulerDriver` (the driver-agnostic half of the trio engine) whose calls are
activities; the loops are the protocols' own loops, opened through `tickloop._agent.seam`
on the agent's configuration with a `LoopDriver` (`_WorkflowDriver`): the engine, the
model request (an activity) and the waits are the workflow's, nothing else. So a run on
Temporal makes the same calls, statuses, state and output as a local run of the same
agent.

Determinism: the scheduler is pure, and every value that could differ on replay comes
from Temporal — time from `workflow.time()`/`workflow.now()`, everything else from
activity results and signals recorded in history. No trio, thread, clock or random number
is touched here. tickloop is passed through the sandbox (it holds no per-run global state),
so the registry of agents below is the one the worker filled.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    TimeoutError,
)

with workflow.unsafe.imports_passed_through():
    import pydantic

    from .._agent.seam import (
        Agent,
        AgentConfig,
        AgentTool,
        ChildSink,
        OuterLoop,
        RunPlace,
        RunResult,
        StreamBroken,
        StreamRestarted,
        TreeServices,
        config_of,
        config_with_tools,
        driven,
    )
    from .._core._budget import Budget, Ledger
    from .._core._decisions import (
        Decision,
        Defer,
        Deny,
        Edit,
        PendingCall,
        Plan,
        Replace,
        decision_from_dict,
    )
    from .._core._driver import SchedulerDriver
    from .._core._log import ContextLog, copy_json
    from .._core._media import media_refs
    from .._core._paths import RunPath
    from .._core._scheduler_io import (
        Decide,
        FinishCall,
        Flush,
        NoteTickEnded,
        Review,
        StartCall,
    )
    from .._core._status import CallStatus
    from .._core._tools import Tool
    from .._durable._resume import INTERRUPTED
    from .._engine._run import initial_log
    from .._engine._sources import merge_opened
    from .._errors import (
        ConfigurationError,
        ExecuteError,
        RunStopped,
        TickloopError,
        describe_error,
    )
    from .._mcp._server import MCPServer, MCPTool
    from .._models._base import (
        ModelError,
        SolutionRequest,
        TextDelta,
        TurnRequest,
        TurnResponse,
        TurnToolCall,
        Usage,
        marked_media,
    )
    from .._observe._events import (
        CallDecided,
        CallFinished,
        EventSink,
        RequestFinished,
        RunEnded,
        RunEvent,
        RunStarted,
    )
    from ._activities import DELTA_SIGNAL, activity_names, too_big, unknown_routes
    from ._media import ids_of, keep_payload, media_payload

__all__ = [
    "AGENTS",
    "DECIDE_UPDATE",
    "EVENTS_QUERY",
    "GRANT_UPDATE",
    "PENDING_QUERY",
    "SNAPSHOT_QUERY",
    "AgentWorkflow",
    "ask_person",
    "record_to_dict",
]

#: The agents a worker serves, by name (the workflow type is the agent's name).
AGENTS: dict[str, Agent] = {}

DECIDE_UPDATE = "tickloop.decide"
GRANT_UPDATE = "tickloop.grant"  # more room for the run's tree (PROTOCOL §12)
PENDING_QUERY = "tickloop.pending"
SNAPSHOT_QUERY = "tickloop.snapshot"
EVENTS_QUERY = "tickloop.events"
#: Events one query answer carries at most (an answer must stay far below gRPC's limit).
EVENTS_PAGE = 500
_FOREVER = timedelta(days=3650)


def ask_person(call: PendingCall) -> Decision:
    """An approval hook that leaves every decision to a person: each call that requires
    approval waits (deferred) for `handle.decide` or `tickloop temporal approve/deny`.
    On Temporal it costs no activity."""
    return Defer()


def _iso_now() -> str:
    return workflow.now().isoformat(timespec="microseconds").replace("+00:00", "Z")


def record_to_dict(record: Any) -> dict[str, Any]:
    return {
        "id": record.id,
        "tool": record.tool,
        "status": record.status,
        "params": record.params,
        "call": record.call,
        "iteration": record.iteration,
        "output": record.output,
        "error": record.error,
        "started": record.started,
        "finished": record.finished,
        "worker": getattr(record, "worker", None),
        "line": getattr(record, "line", None),  # a code plan's call (PROTOCOL §14)
        "read_only": getattr(record, "read_only", False),
        "approved_by": getattr(record, "approved_by", None),  # PROTOCOL §15 "Plan review"
        "guardrails": list(getattr(record, "guardrails", ())),
    }


def _pending_to_dict(pending: PendingCall, tools: Any) -> dict[str, Any]:
    row = {
        "id": pending.id,
        "tool": pending.tool,
        "params": pending.params,
        "call": pending.call,
        "run_id": pending.run_id,
        "waits_on": list(pending.waits_on),
        "dependents": list(pending.dependents),
        "path": list(pending.path),
        "agent": pending.agent,
        "line": pending.line,
        "downstream": list(pending.downstream),
        "resolved": pending.resolved,
    }
    tool = tools.get(pending.tool)
    # Known to the run only (an MCP server's tool, a sub-agent's): its schemas go along.
    if isinstance(tool, MCPTool) or (tool is not None and pending.path):
        row["schema"], row["output_schema"] = tool.parameters, tool.output
    return row


def _seconds(value: Any, default: float) -> timedelta:
    return timedelta(seconds=float(value if value is not None else default))


def _cause(error: ActivityError) -> str:
    cause = error.cause
    if isinstance(cause, ApplicationError):
        return cause.message
    return str(cause) if cause is not None else str(error)


# --------------------------------------------------------------------------------------
# The driver


class WorkflowEngine(SchedulerDriver):
    """Carries the scheduler's actions out as activities and workflow tasks."""

    def __init__(
        self,
        host: AgentWorkflow | _ChildHost,
        log: Any,
        on_action: Callable[[Any], None] | None,
        budget: Any = None,
    ) -> None:
        config = host.config
        super().__init__(
            config.tools,
            log,
            approve=config.approve,
            review=config.review_plan is not None,  # this agent's own (PROTOCOL §15)
            max_concurrency=config.max_concurrency,
            schedule=config.schedule,  # durations declared or 1: no measured means here
            on_action=on_action,
            clock=_iso_now,
            run_id=workflow.info().workflow_id,
            budget=budget,  # limits are enforced; no budget hook is asked here (§12)
        )
        self.host = host
        # The agent calls above this run (PROTOCOL §11): the root's path is empty.
        self.path: RunPath = host.path
        self._tasks: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None

    def scoped(self, pending: PendingCall) -> PendingCall:
        """A pending call as the tree shows it: its full path, its path and agent."""
        place = self.host.place
        return pending if place is None else place.scoped(pending)

    @asynccontextmanager
    async def session(self) -> AsyncIterator[WorkflowEngine]:
        try:
            yield self
        except BaseException:
            # The run stops: its calls are cancelled and their activities with them,
            # before the workflow's last command (a failure must come last).
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        await self.wait_until(lambda: not self._tasks)  # fire-and-forget calls too (§4)
        self.feed(Flush(self._date()))

    async def wait_tick(self) -> NoteTickEnded:
        """The end of the tick; a tick that parked deferred calls is not over on
        Temporal: it waits, durably and at no cost, for their decisions (`decide`)."""
        await self.wait_until(lambda: self._outcome is not None and not self._outcome.paused)
        assert self._outcome is not None
        return self._outcome

    def apply_decision(self, call_id: str, decision: Decision) -> None:
        """A person's decision on a deferred call (the update handler)."""
        if not self.scheduler.tick_active:
            self.expect_tick()  # the tick ended paused: it goes on with this call
        self.decide(call_id, decision)

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        await workflow.wait_condition(lambda: self._failure is not None or condition())
        if self._failure is not None:
            raise self._failure

    def _spawn(self, work: Any) -> None:
        async def guarded() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except BaseException as error:  # a bug of tickloop: the run fails, visibly
                if self._failure is None:
                    self._failure = error

        task = asyncio.get_running_loop().create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the scheduler's actions ----------------------------------------------------------

    def _tick_ended(self, action: NoteTickEnded) -> None:
        pass  # `wait_tick`'s condition sees `_outcome`

    def _request_approval(self, pending: PendingCall) -> None:
        self._spawn(self._ask(pending))

    def _request_review(self, plan: Plan) -> None:
        self._spawn(self._review(plan))

    def _start(self, action: StartCall) -> None:
        self.records[action.id].started = workflow.time()
        self._spawn(self._run(action))

    async def _ask(self, pending: PendingCall) -> None:
        host = self.host
        decision: Decision
        if host.config.approve is ask_person:
            decision = Defer()
        else:
            try:
                data = _pending_to_dict(self.scoped(pending), self.tools)
                answer = await self._ask_hook("approve", data)
                host.hook_workers[self.scoped(pending).id] = answer.pop("worker", None)
                decision = decision_from_dict(answer)
            except ActivityError as error:  # the hook could not be asked: fail closed (§6)
                decision = Deny(f"the approval hook could not be asked: {_cause(error)}")
        self.feed(Decide(pending.id, decision, self._date()))

    async def _review(self, plan: Plan) -> None:
        """The agent's plan review, an activity; one that cannot be asked decides nothing
        (every gated call then goes to the approval hook, as after a review that raised)."""
        data = {
            "calls": [_pending_to_dict(self.scoped(call), self.tools) for call in plan.calls],
            "arrows": [list(arrow) for arrow in plan.arrows],
            "iteration": plan.iteration,
            "run_id": plan.run_id,
            "program": plan.program,
            "sites": list(plan.sites),
            "site_tools": dict(plan.site_tools),
        }
        decisions: dict[str, Decision] = {}
        try:
            answer = await self._ask_hook("review", data)
            for key, decision in (answer.get("decisions") or {}).items():
                decisions[key] = decision_from_dict(decision)
        except ActivityError as error:
            workflow.logger.warning("the plan review could not be asked: %s", _cause(error))
        self.feed(Review(decisions, self._date()))

    async def _ask_hook(self, hook: str, data: dict[str, Any]) -> dict[str, Any]:
        """A question to one of the agent's hooks ("approve", "review"), as its activity."""
        host = self.host
        answer: dict[str, Any] = await workflow.execute_activity(
            host.names[hook],
            data,
            start_to_close_timeout=host.option("approve_timeout", 300),
            heartbeat_timeout=host.option("heartbeat_timeout", 10),
            retry_policy=RetryPolicy(maximum_attempts=3),
        )
        return answer

    async def _run(self, action: StartCall) -> None:
        host = self.host
        tool = self.tools[action.tool]
        if isinstance(tool, AgentTool):  # a child run, inside this workflow (§11)
            output, fault = await host.root.run_child(tool, action, self.path, host)
            self.records[action.id].finished = workflow.time()
            self.feed(FinishCall(action.id, output, None, fault, self._date()))
            return
        data: dict[str, Any] = {
            "id": self.path.full(action.id),  # its full path: unique in the tree (§11)
            "path": list(self.path.parts),
            "tool": tool.name,
            "params": action.params,
            "call": action.call,
            "run_id": self.run_id,
        }
        if isinstance(tool, MCPTool):  # run by the worker's connection to its server
            data["source"] = next(
                index for index, source in enumerate(host.sources) if source is tool.server
            )
            data["idempotent"] = tool.idempotent  # the worker knows only the run's listing
            # The agent whose `questions=` hook answers the server's questions (its own, or
            # the nearest above it with one), asked in the worker (docs/temporal.md).
            data["questions_of"] = host.questions_of
        elif tool.takes_context:
            data["views"] = {"input": self.log.view("input"), "state": self.log.view("state")}
        value: Any = None
        branch: str | None = None
        error: dict[str, Any] | None = None
        problem = too_big(data, f"the parameters of {tool.name!r}")
        if problem is not None:
            error = {"type": "runtime", "message": problem}
        else:
            timeout = host.options.get("tool_timeout") or 86400
            if tool.timeout is not None:  # the handler's own limit is enforced in the activity
                timeout = tool.timeout + 30
            try:
                result = await workflow.execute_activity(
                    host.names["tool"] + tool.name,
                    data,
                    task_queue=(host.options.get("tool_task_queues") or {}).get(tool.name),
                    start_to_close_timeout=_seconds(timeout, 86400),
                    heartbeat_timeout=host.option("heartbeat_timeout", 10),
                    # Only a missed heartbeat fails this activity (a handler's error is
                    # its result). The retry reports the result the worker kept, when
                    # the server was away and refused its report; otherwise (the worker
                    # died) an idempotent call runs again, any other ends interrupted
                    # without running again (`_kept`).
                    retry_policy=RetryPolicy(
                        maximum_attempts=host.options.get("idempotent_attempts", 10)
                        if tool.idempotent
                        else 2,
                        initial_interval=timedelta(seconds=1),
                    ),
                )
            except ActivityError as failure:
                if isinstance(failure.cause, TimeoutError):
                    error = dict(INTERRUPTED)
                else:
                    error = {"type": "runtime", "message": _cause(failure)}
            else:
                value, branch, error = result["value"], result["branch"], result["error"]
                self.records[action.id].worker = result.get("worker")
                if result.get("media") and self.host.config.media is not None:
                    keep_payload(self.host.config.media, result["media"])
        self.records[action.id].finished = workflow.time()
        self.feed(FinishCall(action.id, value, branch, error, self._date()))


# --------------------------------------------------------------------------------------
# The loops, with the model request as an activity


class _WorkflowDriver:
    """A `LoopDriver`: a loop of the root or of a child run (`host`), with its engine a
    `WorkflowEngine` and its model requests activities."""

    def __init__(self, host: AgentWorkflow | _ChildHost, log: ContextLog) -> None:
        self.host = host
        self.log = log
        self.engine: WorkflowEngine | None = None

    def make_engine(
        self, log: ContextLog, on_action: Callable[[Any], None] | None, ledger: Ledger
    ) -> WorkflowEngine:
        self.engine = WorkflowEngine(self.host, log, on_action, ledger)
        return self.engine

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        assert self.engine is not None
        await self.engine.wait_until(condition)

    async def request_solution(
        self, request: SolutionRequest, on_item: Callable[[Any], None]
    ) -> None:
        await self.host.solution_request(request, on_item)

    async def request_turn(self, request: TurnRequest, on_item: Callable[[Any], None]) -> None:
        host = self.host
        data: dict[str, Any] = {
            "protocol": "tools",
            "system": request.system,
            "conversation": request.conversation,
            "iteration": request.iteration,
        }
        # The worker's agent does not know the run's MCP tools: each request names them,
        # and they are the run's, fixed once listed.
        if host.sources:
            data["tools"] = [asdict(spec) for spec in request.tools]
        shown = media_payload(marked_media(request.conversation), request.media)
        if shown:  # the bytes of the images its turns show, kept by this workflow
            data["media"] = shown
        problem = too_big(data, f"the request of iteration {request.iteration}")
        if problem is not None:  # the run ends with its log, never a stuck workflow
            raise ExecuteError(problem, self.log.messages)
        started = workflow.time()
        try:
            result = await host.model_activity(data)
        except ActivityError as error:
            raise ExecuteError(
                f"the model request failed: {_cause(error)}", self.log.messages
            ) from error
        on_item(Usage(**result["usage"]))
        host.requests.append(
            {
                "iteration": request.iteration,
                "attempt": result.get("attempt", 1),
                "worker": result.get("worker"),
                "started": started,
                "finished": workflow.time(),
            }
        )
        response = result["response"]
        on_item(
            TurnResponse(
                text=response["text"],
                tool_calls=[TurnToolCall(**call) for call in response["tool_calls"]],
                messages=response["messages"],
                reasoning=response.get("reasoning"),
                finish_reason=response.get("finish_reason"),
            )
        )


def _open_loop(host: AgentWorkflow | _ChildHost, log: ContextLog) -> OuterLoop:
    """The protocol's own loop of `host`'s run, driven by the workflow."""
    config = driven(host.config, _WorkflowDriver(host, log))
    return config.protocol.open_loop(config, log, host.sink, None)


# --------------------------------------------------------------------------------------
# The workflow


@workflow.defn(dynamic=True)
class AgentWorkflow:
    """One agent run; the workflow type is the agent's name (see `tickloop.temporal`)."""

    def __init__(self) -> None:
        self.agent: Agent
        self.config: AgentConfig  # what this run sees: the agent's, with its MCP tools
        self.names: dict[str, str] = {}
        self.options: dict[str, Any] = {}
        self.requests: list[dict[str, Any]] = []
        self.sources: list[Any] = []  # the agent's MCP servers (listed once per run)
        self._deltas: dict[RunPath, list[dict[str, Any]]] = {}  # by the path of the run asking
        self.path = RunPath.ROOT  # the root's place in its tree (PROTOCOL §11)
        self.place: RunPlace | None = None  # a child's only: the root shows its own ids
        self.root = self
        self.children: dict[RunPath, Any] = {}  # each child run's loop, by its path
        self._tree: TreeServices | None = None
        self._loop: OuterLoop | None = None
        # The run's events, as a local run delivers them to `on_event`: made here from
        # the scheduler's actions (deterministic, stamped with the workflow's clock) and
        # read by clients through EVENTS_QUERY; workflow code delivers nothing itself.
        self.events: list[dict[str, Any]] = []
        self.hook_workers: dict[str, str | None] = {}
        self.sink: EventSink  # made once the agent is known (its redaction)

    def option(self, name: str, default: float) -> timedelta:
        return _seconds(self.options.get(name), default)

    @workflow.run
    async def run(self, args: Sequence[RawValue]) -> dict[str, Any]:
        kind = workflow.info().workflow_type
        agent = AGENTS.get(kind)
        if agent is None:
            raise ApplicationError(
                f"this worker serves no agent named {kind!r} (it serves: "
                f"{', '.join(sorted(AGENTS)) or 'none'})",
                type="UnknownAgent",
                non_retryable=True,
            )
        data = workflow.payload_converter().from_payload(args[0].payload, dict)
        self.agent = agent
        self.questions_of: str | None = agent.name if agent.questions is not None else None
        self.config = config_of(agent)
        self.sources = list(agent.tool_sources)
        self.names = activity_names(kind)
        self.options = dict(data.get("options") or {})
        self.sink = EventSink(
            workflow.info().workflow_id, agent.redact, [self._keep_event], clock=workflow.time
        )
        self.emit(RunStarted)
        try:
            result = await self._execute(data)
        except BaseException as error:
            if not isinstance(error, asyncio.CancelledError):
                self.emit(
                    RunEnded,
                    status="failed",
                    iterations=self.config.protocol.iterations_in(self._loop.log)
                    if self._loop
                    else 0,
                    error=f"{error.type}: {error.message}"
                    if isinstance(error, ApplicationError)
                    else f"{type(error).__name__}: {error}",
                )
            raise
        self.emit(RunEnded, status=result["status"], iterations=result["iterations"])
        return result

    async def _execute(self, data: dict[str, Any]) -> dict[str, Any]:
        agent = self.agent
        try:
            log = initial_log(data.get("input"))
            if self.sources:
                self.config = await self._with_listed_tools(agent, log)
            self._loop = _open_loop(self, log)
            result = await self._loop.run()
        except RunStopped as error:
            raise ApplicationError(
                str(error),
                {"messages": error.messages},
                type=type(error).__name__,
                non_retryable=True,
            ) from error
        except FailureError:
            raise
        except Exception as error:
            if type(error).__module__.startswith("temporalio"):
                raise  # Temporal's own (nondeterminism, sandbox): a task to retry once fixed
            # A fault of tickloop or of the agent's code in the workflow: the run fails
            # once, with the reason, instead of a workflow task retried forever.
            kind_name = "TickloopError" if isinstance(error, TickloopError) else "InternalError"
            raise ApplicationError(
                f"{type(error).__name__}: {error}", type=kind_name, non_retryable=True
            ) from error
        answer = self._result(result)
        problem = too_big(answer, "the run's result (its log and calls)")
        if problem is not None:
            raise ApplicationError(problem, type="PayloadTooLarge", non_retryable=True)
        return answer

    async def _with_listed_tools(self, agent: Agent, log: Any) -> AgentConfig:
        """The run's configuration with its MCP servers' tools, as one activity listed them for this
        run: the listing is in the history, so a replay builds the same tool set, and
        the run keeps it to its end (as a local run keeps the listing it opened with)."""
        try:
            listed = await workflow.execute_activity(
                self.names["list_tools"],
                {},
                start_to_close_timeout=self.option("model_timeout", 600),
                heartbeat_timeout=self.option("heartbeat_timeout", 10),
                retry_policy=RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1)),
            )
        except ActivityError as error:
            raise ExecuteError(
                f"the tools of the agent's MCP servers could not be listed: {_cause(error)}",
                log.messages,
            ) from error
        opened = []
        for server, source in zip(self.sources, listed["sources"], strict=True):
            assert isinstance(server, MCPServer)
            tools: list[Tool] = [server.tool_from_spec(spec) for spec in source["tools"]]
            opened.append(server.opened(tools, source["instructions"]))
        bound = config_with_tools(
            agent, self.config, merge_opened(list(agent.tools.values()), opened)
        )
        problem = unknown_routes(
            self.options.get("tool_task_queues") or {}, bound.tools, str(agent.name)
        )
        if problem is not None:
            raise problem
        return bound

    # -- events -----------------------------------------------------------------------------

    def emit(self, kind: type[RunEvent], **fields: Any) -> None:
        """An event of the run's own (its start and end), stamped with workflow time."""
        self.sink.emit(kind(run_id=self.sink.run_id, time=self.sink.clock(), **fields))

    def _keep_event(self, event: RunEvent) -> None:
        """Keep `event` for the clients, with the worker that ran what it is about."""
        worker: str | None = None
        if isinstance(event, CallFinished) and self._loop is not None:
            engine, local = self._engine_for(event.call_id or "")  # a child's by its path
            record = engine.records.get(local) if engine is not None else None
            worker = record.worker if record is not None else None
        elif isinstance(event, CallDecided):
            worker = self.hook_workers.get(event.call_id or "")
        elif isinstance(event, RequestFinished):
            worker = next(
                (r["worker"] for r in reversed(self.requests) if r["iteration"] == event.iteration),
                None,
            )
        data = event.to_dict()
        if worker is not None:
            data["worker"] = worker
        self.events.append(data)

    @workflow.query(name=EVENTS_QUERY)
    def events_since(self, since: int) -> dict[str, Any]:
        """The run's events from index `since` on, a page at a time (`next` continues)."""
        page = self.events[since : since + EVENTS_PAGE]
        return {"events": page, "next": since + len(page), "total": len(self.events)}

    def _result(self, result: RunResult) -> dict[str, Any]:
        return {
            "output": self.agent.output.dump(result.output),
            "status": result.status,
            "iterations": result.iterations,
            "usage": asdict(result.usage),
            **self.snapshot(),
        }

    # -- the model request ----------------------------------------------------------------

    def model_activity(self, data: dict[str, Any]) -> Any:
        return _model_activity(self, data)

    async def solution_request(
        self, request: Any, on_item: Callable[[Any], None], host: Any = None
    ) -> None:
        """One solution request of the root, or of the child run `host` (§11)."""
        await _solution_request(self, host or self, request, on_item)

    @workflow.signal(name=DELTA_SIGNAL)
    def delta(self, data: dict[str, Any]) -> None:
        self._deltas.setdefault(RunPath.parse(str(data.get("path") or "")), []).append(data)

    # -- sub-agents -------------------------------------------------------------------------

    async def run_child(
        self, tool: AgentTool, action: StartCall, above: RunPath, parent: Any
    ) -> tuple[Any, dict[str, Any] | None]:
        """Run a sub-agent's call as a child run inside this workflow: the same loop on
        the child's configuration, its calls activities of this workflow, its questions
        the root's, its decisions taken by path (`decide`). (value, error) for its call."""
        path = above / action.id
        agent = tool.agent
        if path.depth > self.agent.max_depth:
            return None, {
                "type": "structural",
                "message": f"sub-agent {tool.agent_name!r} would run at depth {path.depth}, "
                f"deeper than the root's max_depth of {self.agent.max_depth}",
            }
        child = _ChildHost(self, agent, path, parent.questions_of)
        log = initial_log(copy_json(action.params))
        loop = _open_loop(child, log)
        self.children[path] = loop
        try:
            result = await loop.run()
        except RunStopped as stopped:
            problem = RuntimeError(
                f"sub-agent {tool.agent_name!r} ended without an output: {stopped}"
            )
            return None, {"type": "runtime", "message": describe_error(problem)}
        output = result.output
        if isinstance(output, pydantic.BaseModel):
            output = output.model_dump(mode="json")
        return output, None

    def tree(self) -> TreeServices:
        """What the children share with this run: its event list and redaction."""
        if self._tree is None:
            self._tree = TreeServices(
                run_id=workflow.info().workflow_id,
                approve=None,
                listeners=[self._keep_event],
                redact=self.agent.redact,
                max_depth=self.agent.max_depth,
            )
        return self._tree

    def _engine_for(self, call_id: str) -> tuple[WorkflowEngine | None, str]:
        """The engine of the run a call id (a path) belongs to, and its local id."""
        path = RunPath.parse(call_id)
        loop = self.children.get(path.parent) if path.depth > 1 else self._loop
        local = path.last if path else ""
        engine = loop.engine if loop is not None else None
        assert engine is None or isinstance(engine, WorkflowEngine)
        return engine, local

    def _tree_records(self, engine: Any, run: RunPath = RunPath.ROOT) -> list[dict[str, Any]]:
        """Every call of the tree under its path, each agent call followed by its child's."""
        rows: list[dict[str, Any]] = []
        for call_id, record in engine.records.items():
            row = record_to_dict(record)
            row["id"] = run.full(call_id)
            rows.append(row)
            child = self.children.get(run / call_id)
            if child is not None:
                rows.extend(self._tree_records(child.engine, run / call_id))
        return rows

    def _tree_pending(self) -> list[tuple[PendingCall, Any]]:
        found = []
        for loop in [self._loop, *self.children.values()]:
            if loop is None:
                continue
            engine = loop.engine
            assert isinstance(engine, WorkflowEngine)
            found += [(engine.scoped(p), engine.tools) for p in engine.scheduler.deferred]
        return found

    # -- a person's decisions -------------------------------------------------------------

    @workflow.update(name=DECIDE_UPDATE)
    def decide(self, call_id: str, decision: dict[str, Any]) -> str:
        engine, local = self._engine_for(call_id)  # a child's call by its path (§11)
        assert engine is not None
        engine.apply_decision(local, decision_from_dict(decision))
        return engine.scheduler.status(local) or ""

    @decide.validator
    def _check_decision(self, call_id: str, decision: dict[str, Any]) -> None:
        """A bad decision is refused to its sender, before anything is recorded."""
        engine, local = self._engine_for(call_id)
        status = engine.scheduler.status(local) if engine is not None else None
        if engine is None or status != CallStatus.DEFERRED:
            waiting = [pending.id for pending, _ in self._tree_pending()]
            raise ValueError(
                f"call {call_id!r} is not waiting for a decision"
                + (f" (it is {status})" if status else " (no such call)")
                + f"; waiting: {', '.join(waiting) or 'none'}"
            )
        try:
            parsed = decision_from_dict(decision)
        except (KeyError, TypeError) as error:
            raise ValueError(f"not a decision: {decision!r}") from error
        if isinstance(parsed, Defer):
            raise ValueError(f"call {call_id!r} is deferred already")
        record = engine.records[local]
        tool = engine.tools.get(record.tool) if record.tool else None
        if isinstance(parsed, Edit):
            params = parsed.params
            if parsed.changes is not None:  # Edit(cents=...): the named ones change
                params = {**(record.params or {}), **parsed.changes}
            if not isinstance(params, dict):
                raise ValueError("the edited parameters must be an object")
            if tool is not None:
                errors = list(tool.parameter_validator.iter_errors(params))
                if errors:
                    raise ValueError(
                        f"the edited parameters do not match {tool.name!r}'s schema: "
                        + "; ".join(error.message for error in errors[:3])
                    )
        if isinstance(parsed, Replace):
            call = parsed.call
            if not isinstance(call, dict) or call.get("_tool") not in engine.tools:
                raise ValueError(
                    f"the replacement must be a call of a known tool ({', '.join(engine.tools)})"
                )

    @workflow.update(name=GRANT_UPDATE)
    def grant(self, budget: dict[str, Any]) -> dict[str, Any]:
        """More room, added to the root's budget as a local resume's `budget=` is (a
        scheduler input, so history replays it); the root's limits now."""
        assert self._loop is not None
        self._loop.meter.grant(Budget.from_dict(budget))
        return self._loop.ledger.root.limits.to_dict()

    @grant.validator
    def _check_grant(self, budget: dict[str, Any]) -> None:
        if self._loop is None:
            raise ValueError("the run has not started yet; grant more once it runs")
        try:
            Budget.from_dict(budget)
        except (ConfigurationError, TypeError) as error:
            raise ValueError(f"not a budget: {error}") from error

    @workflow.query(name=PENDING_QUERY)
    def pending(self) -> list[dict[str, Any]]:
        return [_pending_to_dict(pending, tools) for pending, tools in self._tree_pending()]

    @workflow.query(name=SNAPSHOT_QUERY)
    def snapshot(self) -> dict[str, Any]:
        """The run so far: its log, its calls (with the worker of each) and its requests."""
        if self._loop is None:
            return {"messages": [], "records": [], "requests": []}
        return {
            "messages": list(self._loop.log.messages),
            "records": self._tree_records(self._loop.engine),
            "requests": list(self.requests),
        }


class _ChildHost:
    """What a child run's loop and engine read of their host (PROTOCOL §11): the
    sub-agent's own configuration, activities and requests, with the root's hook,
    options, redaction and event list. Its loop is opened as the root's is (`_open_loop`)."""

    def __init__(
        self, root: AgentWorkflow, agent: Agent, path: RunPath, questions_of: str | None
    ) -> None:
        self.root = root
        self.agent = agent
        self.path = path
        # Whose `questions=` hook answers its MCP servers: its own, else its parent's.
        self.questions_of = agent.name if agent.questions is not None else questions_of
        self.config = dataclasses.replace(
            config_of(agent), approve=root.config.approve, redact=root.agent.redact
        )
        assert agent.name is not None  # a worker refuses a sub-agent without one
        # Its model and tools are its own activities; its questions go to the root's hook.
        self.names = {**activity_names(agent.name), "approve": root.names["approve"]}
        self.options = root.options
        self.sources: list[Any] = []
        self.requests: list[dict[str, Any]] = []
        self.hook_workers = root.hook_workers
        self.place: RunPlace | None = RunPlace(root.tree(), path, agent.name)
        self.sink = ChildSink(self.place, clock=workflow.time)

    def option(self, name: str, default: float) -> timedelta:
        return self.root.option(name, default)

    def model_activity(self, data: dict[str, Any]) -> Any:
        return _model_activity(self, data)

    async def solution_request(self, request: Any, on_item: Callable[[Any], None]) -> None:
        await self.root.solution_request(request, on_item, host=self)


def _model_activity(host: Any, data: dict[str, Any]) -> Any:
    """A model request of `host`'s agent (the root's, or a child run's) as an activity."""
    agent = host.agent
    return workflow.start_activity(
        host.names["model"],
        data,
        start_to_close_timeout=host.option("model_timeout", 600),
        heartbeat_timeout=host.option("heartbeat_timeout", 10),
        # PROTOCOL §8 as Temporal's retry policy: the activity marks a non-retryable
        # answer (a 4xx other than 408/409/429, a client bug) as such.
        retry_policy=RetryPolicy(
            maximum_attempts=agent.max_llm_retries,
            initial_interval=timedelta(seconds=2),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=60),
        ),
    )


async def _solution_request(
    root: AgentWorkflow, host: Any, request: Any, on_item: Callable[[Any], None]
) -> None:
    """One solution request: its calls reach the tick as their objects close.

    The activity signals the text up to each closed call (`delta`), keyed by
    iteration, attempt and index; a later attempt (the worker died mid-stream)
    restarts the stream, and the loop drops the calls it had already handed over.
    """
    iteration = request.iteration
    key: RunPath = host.path  # whose deltas: a child run's ("c1.2") or the root's
    data: dict[str, Any] = {
        # A code plan's request asks for plain text (PROTOCOL §14): no schema.
        "protocol": "code" if request.schema is None else "solution",
        "messages": request.messages,
        "iteration": iteration,
    }
    if key:
        data["path"] = str(key)
    if host.sources and request.schema is not None:  # the worker's agent lacks MCP tools
        data["schema"] = host.config.schema
    shown = media_payload(ids_of(media_refs(request.messages)), request.media)
    if shown:  # the bytes of the images its messages show, kept by this workflow
        data["media"] = shown
    problem = too_big(data, f"the request of iteration {iteration}")
    if problem is not None:  # the run ends with its log, never a stuck workflow
        raise ModelError(problem, status=413)
    handle = host.model_activity(data)
    deltas = root._deltas.setdefault(key, [])
    started = workflow.time()
    attempt, index, fed = 1, 0, 0

    def take(delta: dict[str, Any]) -> None:
        nonlocal attempt, index, fed
        if delta.get("iteration") != iteration or delta.get("attempt", 0) < attempt:
            return  # an earlier request's, or an abandoned attempt's
        if delta["attempt"] > attempt:
            on_item(StreamRestarted())
            attempt, index, fed = delta["attempt"], 0, 0
        if delta.get("index") != index:
            return  # out of order: the activity's full text makes up for it
        index += 1
        fed += len(delta["text"])
        on_item(TextDelta(delta["text"]))

    while True:
        await workflow.wait_condition(lambda: bool(deltas) or handle.done())
        while deltas:
            take(deltas.pop(0))
        if handle.done() and not deltas:
            break
    try:
        result = handle.result()
    except ActivityError as error:
        raise ModelError(_cause(error)) from error
    if result["attempt"] != attempt:
        on_item(StreamRestarted())
        attempt, fed = result["attempt"], 0
    rest = result["text"][fed:]
    if rest:
        on_item(TextDelta(rest))
    on_item(Usage(**result["usage"]))
    host.requests.append(
        {
            "iteration": iteration,
            "attempt": attempt,
            "worker": result.get("worker"),
            "started": started,
            "finished": workflow.time(),
        }
    )
    if result.get("broken"):
        raise StreamBroken(ModelError(result["broken"]))

"""Run tickloop agents on Temporal: the same agent, each call an activity.

```python
from tickloop import temporal as tlt

agent = tl.Agent(model, tools=[...], name="billing", approve=tlt.ask_person)
client = await temporalio.client.Client.connect("127.0.0.1:7233")
async with tlt.worker(client, [agent], task_queue="agents"):
    handle = await tlt.start(client, agent, {"question": "..."}, run_id="order-42",
                             task_queue="agents")
    await handle.pending()                       # [PendingCall, ...]
    await handle.decide("c1.2", tl.Approve())    # a bad call id raises ResumeError
    result = await handle.result(on_event=print) # a RunResult; the run's events too
```

The workflow type is the agent's name; the activities are `<name>.model`,
`<name>.approve`, `<name>.tool.<tool>` and, for an agent with MCP servers,
`<name>.list_tools`. See docs/temporal.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import pydantic_core
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from .._agent.seam import Agent, AgentTool, RunResult
from .._core._budget import Budget, RunUsage
from .._core._decisions import (
    Decision,
    PendingCall,
    decision_to_dict,
    normalize_decision,
)
from .._core._log import ContextLog
from .._core._scheduler import CallRecord
from .._errors import ConfigurationError, ExecuteError, MaxIterationsError, ResumeError
from .._mcp._server import MCPServer
from .._observe._events import EventSink, Redactor, RunEnded, RunEvent, event_from_dict
from ._activities import activity_names, make_activities, mcp_call_activity, unknown_routes
from ._devserver import dev_server
from ._mcp_host import HOST
from ._workflow import (
    AGENTS,
    DECIDE_UPDATE,
    EVENTS_QUERY,
    GRANT_UPDATE,
    PENDING_QUERY,
    SNAPSHOT_QUERY,
    AgentWorkflow,
    ask_person,
)

_log = logging.getLogger("tickloop")

__all__ = [
    "AgentWorkflow",
    "RunHandle",
    "activity_names",
    "ask_person",
    "dev_server",
    "get",
    "start",
    "worker",
    "workflow_runner",
]


def _check_agent(agent: Agent) -> str:
    if not isinstance(agent, Agent):
        raise ConfigurationError(f"expected a tl.Agent, got {agent!r}")
    if agent.name is None:
        raise ConfigurationError(
            "an agent run on Temporal needs a name (tl.Agent(..., name='billing')): it is "
            "the workflow type and the prefix of its activities"
        )
    for source in agent.tool_sources:
        if not isinstance(source, MCPServer):
            raise ConfigurationError(
                f"agent {agent.name!r}: tool source {source!r} is not a tl.MCPServer; "
                "tickloop.temporal runs the tools of MCP servers and tl.Tool objects"
            )
    return agent.name


def _with_sub_agents(agents: Sequence[Agent]) -> list[Agent]:
    """`agents` and every sub-agent of their trees (PROTOCOL §11), each once: a worker
    serves the activities (model, tools, hook) of every agent of the trees it is given.
    A child runs inside its root's workflow, so a sub-agent needs a name (its activities'
    prefix), and no MCP servers or approval hook of its own there."""
    found: list[Agent] = []
    stack = list(reversed(agents))
    while stack:
        agent = stack.pop()
        if any(agent is known for known in found):
            continue
        found.append(agent)
        for tool in agent.tools.values():
            if isinstance(tool, AgentTool):
                child = tool.agent
                if isinstance(child, Agent) and child.tool_sources:
                    raise ConfigurationError(
                        f"sub-agent {child.name!r} has MCP servers, which tickloop.temporal "
                        "runs for a root agent only"
                    )
                if isinstance(child, Agent) and child.approve is not None:
                    # Its own hook would go unasked there: refused, never lost silently.
                    raise ConfigurationError(
                        f"sub-agent {child.name!r} has an approval hook of its own, which "
                        "tickloop.temporal does not ask yet (only the root's): run the tree "
                        "locally, or give the hook's policy to the root agent's hook"
                    )
                stack.append(child)
    return found


def workflow_runner() -> SandboxedWorkflowRunner:
    """Temporal's sandbox with tickloop passed through: tickloop keeps no per-run global
    state, and re-importing it per workflow would cost more than the run. Use it for a
    `Replayer` too: `Replayer(workflows=[tlt.AgentWorkflow], workflow_runner=...)`."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(
            "tickloop",
            "trio",
            "pydantic",
            "pydantic_core",
            "jsonschema",
            "jsonschema_specifications",
            "referencing",
            "re2",  # schema patterns (docs/decisions.md): deterministic, no state per run
            "networkx",
            "httpx",
        )
    )


def worker(
    client: Client,
    agents: Sequence[Agent],
    *,
    task_queue: str,
    identity: str | None = None,
    max_concurrent_activities: int = 200,
    **options: Any,
) -> Worker:
    """A temporalio `Worker` serving `agents` (use it as an async context manager, or
    `await worker.run()`). `options` go to `Worker` as they are."""
    if not agents:
        raise ConfigurationError("worker() needs at least one agent")
    agents = _with_sub_agents(agents)
    names = [_check_agent(agent) for agent in agents]
    if len(set(names)) != len(names):
        raise ConfigurationError(f"two agents share a name: {names}")
    for agent in agents:
        known = AGENTS.get(agent.name)  # type: ignore[arg-type]
        if known is not None and known is not agent:
            raise ConfigurationError(
                f"another agent named {agent.name!r} is served in this process already"
            )
        AGENTS[agent.name] = agent  # type: ignore[index]
    identity = identity or client.identity
    # Each activity runs its trio code in a thread of its own: as many as may run at once.
    executor = concurrent.futures.ThreadPoolExecutor(
        max_workers=max_concurrent_activities, thread_name_prefix="tickloop-activity"
    )
    activities = [
        function for agent in agents for function in make_activities(agent, identity, executor)
    ]
    if any(agent.tool_sources for agent in agents):
        # MCP servers: one connection each per worker process, open while a worker runs.
        activities.append(mcp_call_activity(agents, identity))
        plugin = SimplePlugin("tickloop.mcp", run_context=HOST.running)
        options["plugins"] = [*options.get("plugins", ()), plugin]
    options.setdefault("workflow_runner", workflow_runner())
    # A fan-out makes many short activities: poll for them on several connections.
    options.setdefault("max_concurrent_activity_task_polls", 16)
    options.setdefault("max_concurrent_workflow_task_polls", 8)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentWorkflow],
        activities=activities,
        identity=identity,
        max_concurrent_activities=max_concurrent_activities,
        **options,
    )


async def start(
    client: Client,
    agent: Agent,
    input: Any = None,
    *,
    run_id: str | None = None,
    task_queue: str,
    heartbeat_timeout: float = 10.0,
    model_timeout: float = 600.0,
    tool_timeout: float = 86400.0,
    tool_task_queues: Mapping[str, str] | None = None,
    idempotent_attempts: int = 10,
) -> RunHandle:
    """Start a run of `agent` as workflow `run_id` (made up when None).

    `heartbeat_timeout`: how soon a dead worker's activities are noticed (then an
    idempotent call runs again, another ends failed as interrupted). `tool_task_queues`
    sends a tool's calls to workers of another queue (tools that must run elsewhere).
    """
    name = _check_agent(agent)
    routes = dict(tool_task_queues or {})
    for tool, queue in routes.items():
        if not isinstance(queue, str) or not queue:
            raise ConfigurationError(
                f"tool_task_queues[{tool!r}] must be a task queue's name, not {queue!r}"
            )
    # A route for a tool the agent does not have would be ignored: a typo said now. The
    # tools of MCP servers are known once a run lists them: the workflow checks those.
    problem = None if agent.tool_sources else unknown_routes(routes, agent.tools, name)
    if problem is not None:
        raise problem
    try:
        input = pydantic_core.to_jsonable_python(input)
    except pydantic_core.PydanticSerializationError as error:
        raise ConfigurationError(f"the input has no JSON form: {error}") from error
    options = {
        "heartbeat_timeout": heartbeat_timeout,
        "model_timeout": model_timeout,
        "tool_timeout": tool_timeout,
        "tool_task_queues": routes,
        "idempotent_attempts": idempotent_attempts,
    }
    handle = await client.start_workflow(
        name,
        {"input": input, "options": options},
        id=run_id or f"{name}-{uuid.uuid4().hex[:12]}",
        task_queue=task_queue,
    )
    return RunHandle(handle, agent)


def get(client: Client, run_id: str, agent: Agent | None = None) -> RunHandle:
    """A handle on an existing run (from another process: the CLI, an approval UI)."""
    return RunHandle(client.get_workflow_handle(run_id), agent)


class RunHandle:
    """One run on Temporal: its pending calls, decisions on them, and its result."""

    def __init__(self, handle: WorkflowHandle[Any, Any], agent: Agent | None = None) -> None:
        self.workflow = handle
        self.agent = agent

    @property
    def run_id(self) -> str:
        return self.workflow.id

    async def pending(self) -> list[PendingCall]:
        """The calls waiting for a person's decision, with their resolved parameters."""
        rows = await self.workflow.query(PENDING_QUERY)
        tools = self.agent.tools if self.agent is not None else {}
        return [
            PendingCall(
                row["id"],
                row["tool"],
                row["params"],
                row["call"],
                run_id=row.get("run_id"),
                waits_on=row.get("waits_on") or [],
                dependents=row.get("dependents") or [],
                path=tuple(row.get("path") or ()),
                agent=row.get("agent"),
                schema=tools[row["tool"]].parameters if row["tool"] in tools else row.get("schema"),
                output_schema=(
                    tools[row["tool"]].output if row["tool"] in tools else row.get("output_schema")
                ),
            )
            for row in rows
        ]

    async def decide(self, call_id: str, decision: Decision | bool) -> None:
        """Decide a waiting call (any decision of PROTOCOL §6). A call that is not waiting
        or a decision that cannot apply (an edit that fails the schema) raises
        `ResumeError`, and nothing is recorded."""
        body = decision_to_dict(normalize_decision(decision))
        try:
            await self.workflow.execute_update(DECIDE_UPDATE, args=[call_id, body])
        except WorkflowUpdateFailedError as error:
            cause = error.cause
            message = cause.message if isinstance(cause, ApplicationError) else str(cause)
            raise ResumeError(f"run {self.run_id!r}: {message}") from None

    async def grant(self, budget: Budget) -> Budget:
        """More room for the run (PROTOCOL §12): added to its root's budget, as
        `agent.resume(run_id, budget=...)` adds it locally; the limits now. A run that
        has not started its loop yet refuses it with `ResumeError`."""
        if not isinstance(budget, Budget):
            raise ConfigurationError(f"grant takes a tl.Budget, not {budget!r}")
        try:
            limits = await self.workflow.execute_update(GRANT_UPDATE, args=[budget.to_dict()])
        except WorkflowUpdateFailedError as error:
            cause = error.cause
            message = cause.message if isinstance(cause, ApplicationError) else str(cause)
            raise ResumeError(f"run {self.run_id!r}: {message}") from None
        return Budget.from_dict(limits)

    async def snapshot(self) -> dict[str, Any]:
        """The run so far: messages, calls (with the worker of each), model requests."""
        snapshot: dict[str, Any] = await self.workflow.query(SNAPSHOT_QUERY)
        return snapshot

    async def events(self, since: int = 0, *, follow: bool = True) -> AsyncIterator[RunEvent]:
        """The run's typed events (those a local run gives `on_event`), from the first
        (or the `since`-th) on, as the run makes them; the iteration ends with the run,
        or, with `follow=False`, with the events made so far.

        The workflow keeps its events; this follows the run's history (a long poll, no
        cost while nothing happens) and, each time the workflow has taken a step, reads
        the new events with a query. Any process can follow any run, from its start.
        """
        if not follow:
            while True:
                page = await self.workflow.query(EVENTS_QUERY, since)
                for data in page["events"]:
                    yield event_from_dict(data)
                since = page["next"]
                if since >= page["total"]:
                    return
        changed = asyncio.Event()
        closed = False

        async def watch() -> None:
            nonlocal closed
            try:
                async for event in self.workflow.fetch_history_events(wait_new_event=True):
                    if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                        changed.set()
            finally:
                closed = True
                changed.set()

        watcher = asyncio.get_running_loop().create_task(watch())
        changed.set()  # what the run made before we came
        try:
            while True:
                await changed.wait()
                changed.clear()
                last = closed  # the history ended: this read is the final one
                while True:
                    page = await self.workflow.query(EVENTS_QUERY, since)
                    for data in page["events"]:
                        event = event_from_dict(data)
                        yield event
                        if isinstance(event, RunEnded):
                            return
                    since = page["next"]
                    if since >= page["total"]:
                        break
                if last:
                    if watcher.done() and not watcher.cancelled() and watcher.exception():
                        raise watcher.exception()  # type: ignore[misc]
                    return
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher

    async def result(self, *, on_event: Callable[[RunEvent], Any] | None = None) -> RunResult:
        """Wait for the run's end: a `RunResult`, or the error the run ended with.

        `on_event`, and the agent's own `on_event` and tracer when the handle knows the
        agent, get the run's events while it goes on, as in a local run (a listener that
        raises is logged, and the run goes on)."""
        listeners: list[Callable[[RunEvent], Any] | None] = [on_event]
        agent = self.agent
        if agent is not None:
            listeners.append(agent.on_event)
            if agent.tracer is not None:
                listeners.append(agent.tracer.listener())
        sink = EventSink(self.run_id, Redactor(()), listeners)
        if not sink.listeners:
            return await self._result()

        async def follow() -> None:
            try:
                async for event in self.events():
                    sink.emit(event)
            except Exception:  # events are lost, never the result
                _log.exception("could not follow the events of run %s", self.run_id)

        follower = asyncio.get_running_loop().create_task(follow())
        try:
            return await self._result()
        except asyncio.CancelledError:
            follower.cancel()
            raise
        finally:
            # The run is over: its last events (RunEnded) are read, then `follow` ends.
            with contextlib.suppress(asyncio.CancelledError):
                await follower

    async def _result(self) -> RunResult:
        try:
            data = await self.workflow.result()
        except WorkflowFailureError as failure:
            cause = failure.cause
            if isinstance(cause, ApplicationError):
                messages = (cause.details[0] or {}).get("messages") if cause.details else None
                if cause.type == "MaxIterationsError":
                    raise MaxIterationsError(cause.message, messages) from None
                if cause.type == "ExecuteError":
                    raise ExecuteError(cause.message, messages) from None
            raise
        return result_from_dict(data, self.agent, self.run_id)


def result_from_dict(data: dict[str, Any], agent: Agent | None, run_id: str) -> RunResult:
    log = ContextLog(data["messages"])
    records = {row["id"]: CallRecord(**row) for row in data["records"]}
    output = data["output"]
    if agent is not None:
        output = agent.output.convert(output)
    return RunResult(
        output,
        log,
        records,
        data["iterations"],
        RunUsage(**data["usage"]),
        run_id=run_id,
        status=data.get("status", "done"),
    )

"""`a2a.app(agent, url=)`: a tickloop agent as an A2A server, on a2a-sdk.

A message starts a run and the run is the task (one run per task: a message naming an
existing task is refused, `_OneRunPerTask`): `working` while it runs, `input-required`
while a call waits for a decision (decided where the agent's own hook asks: its
`BrowserApproval` page, the `tickloop serve` inbox, a console), `working` again once
decided, then `completed` with the output as an artifact or `failed`. The executor keeps
the request open for the whole run, so a streaming client sees every status, and a
non-streaming one gets the task at `input-required` and reads the rest with GetTask.

a2a-sdk runs on asyncio; the run is a trio guest of its loop (`Agent.run_asyncio`), in the
same thread, so the run's events reach the executor through a plain asyncio queue.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import jsonschema
import pydantic_core
from a2a.helpers.proto_helpers import new_data_part, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCard, Message, Part, SendMessageRequest, Task, TaskState
from a2a.utils.errors import UnsupportedOperationError
from google.protobuf.json_format import MessageToDict, ParseDict

from .._agent._subagent import DEFAULT_INPUT
from .._core._tools import Tool
from .._durable._codec import new_run_id
from .._observe._events import CallAwaitingApproval, CallDecided, RunEvent

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from a2a.server.context import ServerCallContext
    from a2a.server.events import Event
    from starlette.applications import Starlette

    from .._agent._agent import Agent

__all__ = ["SCHEMAS_EXTENSION", "agent_card", "app", "input_of", "plain_json"]

SCHEMAS_EXTENSION = "urn:tickloop:a2a:schemas"
"""The card extension whose params hold the skill's input and output JSON Schemas (an
A2A skill has no field for them)."""


def _input_schema(agent: Agent) -> dict[str, Any] | None:
    """The agent's declared `input=` schema as JSON Schema; None when it declared none."""
    if agent.input is DEFAULT_INPUT:
        return None
    return Tool("input", parameters=agent.input).parameters


def _description(agent: Agent) -> str:
    """The agent's `description=`, else the first line of its instructions."""
    if agent.description is not None:
        return agent.description
    lines = (agent.instructions or "").strip().splitlines()
    return lines[0] if lines else ""


def agent_card(agent: Agent, url: str) -> AgentCard:
    """The agent's card: its name, description, one skill (the agent itself), and the
    input and output schemas in the `SCHEMAS_EXTENSION` extension's params."""
    name = agent.name or "agent"
    description = _description(agent)
    schemas: dict[str, Any] = {"skill": name}
    input_schema = _input_schema(agent)
    if input_schema is not None:
        schemas["input"] = input_schema
    if agent.output.schema is not None:
        schemas["output"] = agent.output.schema
    card = {
        "name": name,
        "description": description or f"the tickloop agent {name}",
        "version": "1.0",
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {
            "streaming": True,
            "extensions": [{"uri": SCHEMAS_EXTENSION, "params": schemas}],
        },
        "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [
            {
                "id": name,
                "name": name,
                "description": description or f"run the agent {name}",
                "tags": ["tickloop"],
            }
        ],
    }
    return ParseDict(card, AgentCard())


def app(agent: Agent, *, url: str) -> Starlette:
    """An ASGI app serving `agent` over A2A (JSON-RPC at `/`, the card at
    `/.well-known/agent-card.json`); `url` is where clients reach it. It checks no token
    itself: serve it with `tickloop serve --a2a`, or behind your own authentication."""
    from starlette.applications import Starlette

    card = agent_card(agent, url)
    handler = _OneRunPerTask(_Executor(agent), InMemoryTaskStore(), card)
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")]
    return Starlette(routes=routes)


class _OneRunPerTask(DefaultRequestHandler):
    """Refuses a message that names an existing task, before it reaches the executor.

    A task is one run: a second message to it would start a second run (a2a-sdk hands
    the executor every message of a task), running again what the first run already did.
    A task waiting for decisions is decided where the agent's hook asks, not by message
    (docs/decisions.md "Web protocols").
    """

    def __init__(self, executor: AgentExecutor, tasks: InMemoryTaskStore, card: AgentCard) -> None:
        super().__init__(agent_executor=executor, task_store=tasks, agent_card=card)
        self.tasks = tasks

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Message | Task:
        await self._refuse_a_message_to_a_task(params, context)
        answer: Message | Task = await super().on_message_send(params, context)
        return answer

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        await self._refuse_a_message_to_a_task(params, context)
        async for event in super().on_message_send_stream(params, context):
            yield event

    async def _refuse_a_message_to_a_task(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> None:
        task_id = params.message.task_id
        task = await self.tasks.get(task_id, context) if task_id else None
        if task is not None:
            raise UnsupportedOperationError(message=refusal(task))


def refusal(task: Task) -> str:
    """Why a message naming `task` starts nothing, and what to do instead."""
    run_id = plain_json(MessageToDict(task.metadata)).get("runId", "?")
    state = task.status.state
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        pending: list[dict[str, Any]] = []
        for part in task.status.message.parts:
            if part.HasField("data"):
                pending = MessageToDict(part.data).get("pending", [])
        ids = ", ".join(str(call.get("id")) for call in pending) or "its calls"
        return (
            f"task {task.id} waits for decisions on {ids} (run {run_id}); a message does "
            "not decide them and starts no second run: decide where the agent asks "
            "(tickloop approve, the tickloop serve inbox, its page)"
        )
    if state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING):
        return (
            f"task {task.id} is running (run {run_id}); one run per task: a message "
            "naming it starts nothing (follow it with GetTask or SubscribeToTask)"
        )
    return (
        f"task {task.id} has ended ({TaskState.Name(state)}, run {run_id}); one run per "
        "task: send a message without a taskId to start a new run"
    )


class InputError(ValueError):
    """A message that is not an input the agent takes."""


def plain_json(value: Any) -> Any:
    """A value read from protobuf, with whole numbers as ints again (protobuf keeps every
    number as a double)."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: plain_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_json(item) for item in value]
    return value


def input_of(message: Message | None, schema: dict[str, Any] | None) -> Any:
    """The run's input: a data part as it is (checked against `schema`), else the text
    parts as `{"task": text}`."""
    if message is None:
        raise InputError("the request has no message")
    for part in message.parts:
        if part.HasField("data"):
            value = plain_json(MessageToDict(part.data))
            if schema is not None:
                try:
                    jsonschema.validate(value, schema)
                except jsonschema.ValidationError as error:
                    raise InputError(
                        f"the input does not match the agent's schema: {error.message}"
                    ) from None
            return value
    text = "\n".join(part.text for part in message.parts if part.HasField("text"))
    if not text:
        raise InputError("the message has neither a text nor a data part")
    return {"task": text}


def _agent_message(updater: TaskUpdater, text: str, data: Any = None) -> Message:
    parts: list[Part] = [new_text_part(text)]
    if data is not None:
        parts.append(new_data_part(data))
    return updater.new_agent_message(parts)


def _output_part(output: Any) -> Part:
    if isinstance(output, str):
        return new_text_part(output)
    return new_data_part(pydantic_core.to_jsonable_python(output))


class _Executor(AgentExecutor):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None and context.message is not None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        try:
            input = input_of(context.message, _input_schema(self.agent))
        except InputError as error:
            await updater.reject(_agent_message(updater, str(error)))
            return
        run_id = new_run_id()  # known before the run starts, so the task names it at once
        await updater.update_status(TaskState.TASK_STATE_WORKING, metadata={"runId": run_id})
        events: asyncio.Queue[RunEvent | None] = asyncio.Queue()
        agent_listener = self.agent.on_event

        def listen(event: RunEvent) -> None:  # in the trio guest, on this loop's thread
            if agent_listener is not None:
                agent_listener(event)
            events.put_nowait(event)

        options: dict[str, Any] = {"on_event": listen, "run_id": run_id}
        if self.agent.store is not None:  # the context is a session (PROTOCOL §16)
            options["session"] = context.context_id
        run = asyncio.ensure_future(self.agent.run_asyncio(input, **options))
        run.add_done_callback(lambda _: events.put_nowait(None))
        try:
            await self._follow(events, updater)
            result = await run
        except asyncio.CancelledError:
            run.cancel()
            raise
        except Exception as error:  # the client is told; the server goes on
            await updater.failed(_agent_message(updater, f"{type(error).__name__}: {error}"))
            return
        if result.status == "paused":
            pending = [
                {
                    **_pending(call.id, call.tool, call.line),
                    "params": self.agent.redact(call.params),
                }
                for call in result.pending or ()
            ]
            text = "the run is paused until its calls are decided (tickloop approve / serve)"
            await updater.requires_input(_agent_message(updater, text, {"pending": pending}))
            return
        if result.status != "done":
            await updater.failed(_agent_message(updater, f"the run ended {result.status}"))
            return
        await updater.add_artifact([_output_part(result.output)], name="output")
        await updater.complete()

    async def _follow(self, events: asyncio.Queue[RunEvent | None], updater: TaskUpdater) -> None:
        """Task status from the run's events: `input-required` while a call waits."""
        waiting: dict[str, dict[str, Any]] = {}
        while (event := await events.get()) is not None:
            if isinstance(event, CallAwaitingApproval) and event.call_id is not None:
                waiting[event.call_id] = {
                    **_pending(event.call_id, event.tool, event.line),
                    "params": event.params,
                }
                text = "waiting for a decision on " + ", ".join(sorted(waiting))
                data = {"pending": list(waiting.values())}
                await updater.requires_input(_agent_message(updater, text, data))
            elif isinstance(event, CallDecided) and event.call_id in waiting:
                del waiting[event.call_id]
                if not waiting:
                    await updater.start_work()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancelling the request's task cancels the run (a2a-sdk cancels `execute`)."""


def _pending(call_id: str, tool: str | None, line: int | None) -> dict[str, Any]:
    """A call waiting for a decision, as the task's data shows it; a code plan's call
    with the program line that made it (PROTOCOL §14)."""
    shown: dict[str, Any] = {"id": call_id, "tool": tool}
    if line is not None:
        shown["line"] = line
    return shown

"""The activities of an agent on Temporal: one per model request, tool call, hook question.

Everything here runs on a worker, outside the workflow: it may do I/O, read clocks and
start threads. Models, tools and hooks are written for trio, so each activity runs its
trio code under `trio.run` in a thread of its own and stays an asyncio coroutine only to
heartbeat and to signal the workflow. Inputs and results are plain JSON dicts, so the
history records exactly what was asked and what came back.

A handler's own failure is its call's result (an error dict), never an activity failure:
Temporal retries an activity only when its worker stopped (heartbeat timeout) or when the
model answered with a retryable error (PROTOCOL §8).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import math
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import asdict
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import trio
from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from .._agent.seam import MAX_BACKOFF, visible_parameters
from .._code import ProgramStream
from .._core._decisions import PendingCall, Plan, decision_to_dict
from .._core._media import MediaKeeper, MemoryMedia, media_refs
from .._core._tools import CallContext
from .._durable._resume import INTERRUPTED
from .._engine._asking import ask, review
from .._engine._engine import run_handler
from .._errors import ConfigurationError
from .._json._stream import SolutionStream
from .._mcp._server import MCPServer
from .._models._base import (
    ModelError,
    SolutionRequest,
    TextDelta,
    ToolCallStarted,
    ToolSpec,
    TurnRequest,
    TurnResponse,
    Usage,
)
from ._kept import KEPT, call_key
from ._mcp_host import HOST
from ._media import ids_of, media_lookup, media_payload

if TYPE_CHECKING:
    from .._agent.seam import Agent

__all__ = [
    "DELTA_SIGNAL",
    "PAYLOAD_LIMIT",
    "activity_names",
    "make_activities",
    "mcp_call_activity",
    "too_big",
    "unknown_routes",
]

DELTA_SIGNAL = "tickloop.delta"  # the model activity's closed calls, to its own workflow
#: Temporal refuses a payload over 2 MB by default (the server's blob size limit); a value
#: is checked against a little less, so the rest of the payload fits around it.
PAYLOAD_LIMIT = 2 * 1024 * 1024 - 64 * 1024


def activity_names(agent_name: str) -> dict[str, str]:
    """Stable activity names of an agent: model, approve, review, and the prefix of its
    tools."""
    return {
        "model": f"{agent_name}.model",
        "approve": f"{agent_name}.approve",
        "review": f"{agent_name}.review",  # its own plan review (PROTOCOL §15)
        "tool": f"{agent_name}.tool.",
        "list_tools": f"{agent_name}.list_tools",  # an agent with MCP servers
    }


def unknown_routes(
    routes: Iterable[str], tools: Collection[str], agent_name: str
) -> ConfigurationError | None:
    """The error for `tool_task_queues` routes naming no tool of the agent (a typo would be
    ignored otherwise), or None when every route names one."""
    unknown = sorted(set(routes) - set(tools))
    if not unknown:
        return None
    return ConfigurationError(
        f"tool_task_queues names {', '.join(map(repr, unknown))}, which agent "
        f"{agent_name!r} has no tool of (its tools: {', '.join(tools) or 'none'})"
    )


def too_big(value: Any, what: str, limit: int = PAYLOAD_LIMIT) -> str | None:
    """Why `value` cannot travel through Temporal (over its payload limit), or None."""
    size = len(json.dumps(value, ensure_ascii=False).encode())
    if size <= limit:
        return None
    return (
        f"{what} is {size:,} bytes of JSON, over Temporal's payload limit "
        f"({limit:,} bytes, the server's 2 MB blob size limit): write less, or store it "
        "elsewhere and pass a reference to it"
    )


class _Heartbeat:
    """Heartbeats every `period` seconds while the activity's trio thread works."""

    def __init__(self, period: float) -> None:
        self.period = period

    async def __aenter__(self) -> _Heartbeat:
        self._task = asyncio.get_running_loop().create_task(self._beat())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _beat(self) -> None:
        while True:  # a short call ends before its first beat: no RPC at all
            await asyncio.sleep(self.period)
            activity.heartbeat()


def _period() -> float:
    timeout = activity.info().heartbeat_timeout
    seconds = timeout.total_seconds() if timeout else 30.0
    return max(seconds / 3, 0.05)


def make_activities(
    agent: Agent, identity: str, executor: concurrent.futures.Executor
) -> list[Callable[..., Any]]:
    """The activities a worker registers for `agent`; `identity` names the worker in every
    result, so records and events say where each call ran."""
    assert agent.name is not None
    names = activity_names(agent.name)

    async def in_thread(function: Callable[..., Any], *args: Any) -> Any:
        """`trio.run(function, *args)` in a thread of the worker's pool."""
        return await asyncio.get_running_loop().run_in_executor(executor, trio.run, function, *args)

    functions: list[Callable[..., Any]] = []

    # -- the model request ----------------------------------------------------------------

    async def model_request(data: dict[str, Any]) -> dict[str, Any]:
        info = activity.info()
        attempt = info.attempt
        if data.get("protocol") == "tools":
            async with _Heartbeat(_period()):
                answer = await in_thread(_ask_turn, agent, data, identity)
            answer["attempt"] = attempt
            turn: dict[str, Any] = answer
            return turn
        if info.workflow_id is None:  # a standalone activity: no workflow to stream into
            raise ApplicationError(
                "the model request runs only inside an agent workflow", non_retryable=True
            )
        handle = activity.client().get_workflow_handle(
            info.workflow_id, run_id=info.workflow_run_id
        )
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        signalled = 0  # characters of the text the workflow was sent
        failed = asyncio.Event()

        async def send() -> None:
            nonlocal signalled
            index = 0
            while True:
                piece = await queue.get()
                if piece is None:
                    return
                while not queue.empty():  # coalesce what piled up while a signal flew
                    more = queue.get_nowait()
                    if more is None:
                        queue.put_nowait(None)
                        break
                    piece += more
                try:
                    await handle.signal(
                        DELTA_SIGNAL,
                        {
                            "iteration": data["iteration"],
                            "attempt": attempt,
                            "index": index,
                            "text": piece,
                            # whose request: a sub-agent's ("c1.2") or the root's ("")
                            "path": data.get("path", ""),
                        },
                    )
                except Exception:  # eagerness is lost, not a call: the result has all text
                    failed.set()
                    return
                index += 1
                signalled += len(piece)

        def hand(piece: str) -> None:  # from the trio thread
            if not failed.is_set():
                loop.call_soon_threadsafe(queue.put_nowait, piece)

        sender = loop.create_task(send())
        try:
            async with _Heartbeat(_period()):
                outcome = await in_thread(_stream_solution, agent, data, hand)
        finally:
            queue.put_nowait(None)
            await sender
        if outcome.get("raise") is not None:
            raise outcome["raise"]
        outcome.update(attempt=attempt, signalled=signalled, worker=identity)
        answered: dict[str, Any] = outcome
        return answered

    functions.append(activity.defn(name=names["model"])(model_request))

    # -- the approval hook ----------------------------------------------------------------

    def pending_call(data: dict[str, Any]) -> PendingCall:
        tool = agent.tools.get(data["tool"])
        return PendingCall(
            data["id"],
            data["tool"],
            data["params"],
            data.get("call") or {},
            run_id=data.get("run_id"),
            waits_on=data.get("waits_on") or [],
            dependents=data.get("dependents") or [],
            path=tuple(data.get("path") or ()),  # a sub-agent's call (PROTOCOL §11)
            agent=data.get("agent"),
            # an MCP server's tool is known to the run, not to the worker's agent
            schema=tool.parameters if tool is not None else data.get("schema"),
            output_schema=tool.output if tool is not None else data.get("output_schema"),
            line=data.get("line"),
            downstream=data.get("downstream") or [],
            resolved=data.get("resolved", True),
        )

    if agent.approve is not None:

        async def approve(data: dict[str, Any]) -> dict[str, Any]:
            pending = pending_call(data)
            async with _Heartbeat(_period()):
                decision = await in_thread(ask, agent.approve, pending)
            return {**decision_to_dict(decision), "worker": identity}

        functions.append(activity.defn(name=names["approve"])(approve))

    # -- the plan review ------------------------------------------------------------------

    if agent.review_plan is not None:
        review_plan = agent.review_plan

        async def review_activity(data: dict[str, Any]) -> dict[str, Any]:
            plan = Plan(
                calls=[pending_call(call) for call in data["calls"]],
                arrows=[(writer, reader) for writer, reader in data["arrows"]],
                iteration=data["iteration"],
                run_id=data.get("run_id"),
                program=data.get("program"),
                sites=list(data.get("sites") or ()),
                site_tools=dict(data.get("site_tools") or {}),
            )
            async with _Heartbeat(_period()):
                decisions = await in_thread(review, review_plan, plan)
            answer = {key: decision_to_dict(decision) for key, decision in decisions.items()}
            return {"decisions": answer, "worker": identity}

        functions.append(activity.defn(name=names["review"])(review_activity))

    # -- the tools ------------------------------------------------------------------------

    for tool in agent.tools.values():
        if tool.is_latent:
            continue

        def bind(tool: Any = tool) -> Callable[..., Any]:
            async def call(data: dict[str, Any]) -> dict[str, Any]:
                views = data.get("views") or {}
                context = CallContext(
                    data["id"],
                    tool.name,
                    data["call"],
                    views.get,
                    data.get("run_id"),
                    path=tuple(data.get("path") or ()),
                )

                media = MemoryMedia()  # the bytes of what it returns, sent to the workflow

                async def run() -> tuple[Any, str | None, dict[str, Any] | None]:
                    return await run_handler(
                        tool, data["params"], context, trio.CapacityLimiter(math.inf), media
                    )

                async def work() -> dict[str, Any]:
                    value, branch, error = await in_thread(run)
                    return _call_result(value, branch, error, tool.name, identity, media)

                async with _Heartbeat(_period()):
                    return await _once(tool.idempotent, work)

            return activity.defn(name=names["tool"] + tool.name)(call)

        functions.append(bind())

    # -- the tool listing of its MCP servers ---------------------------------------------

    if agent.tool_sources:

        async def list_tools(data: dict[str, Any]) -> dict[str, Any]:
            """Every server's tools, once per run: the run's tool set is what this
            returned, recorded in its history (so replay sees the same tools)."""
            sources = []
            for server in agent.tool_sources:
                assert isinstance(server, MCPServer)
                try:
                    tools, instructions = await HOST.run(HOST.listing, server)
                except Exception as error:
                    raise ApplicationError(
                        f"{server.label} could not be listed: {error}", type="MCPListing"
                    ) from None
                sources.append(
                    {
                        "label": server.label,
                        "tools": [tool.spec() for tool in tools],  # type: ignore[attr-defined]
                        "instructions": instructions,
                    }
                )
            return {"sources": sources, "worker": identity}

        functions.append(activity.defn(name=names["list_tools"])(list_tools))
    return functions


def _no_view(name: str) -> Any:
    return None  # an MCP tool reads no view of the run


def mcp_call_activity(agents: Sequence[Agent], identity: str) -> Callable[..., Any]:
    """The activity of every MCP tool call of `agents` (`<agent>.tool.<tool>`): one
    dynamic activity, since those tools are known only once a run lists them. The call
    runs on this process's connection to the server (`_mcp_host`)."""
    by_name = {agent.name: agent for agent in agents if agent.tool_sources}
    hooks = {agent.name: agent.questions for agent in agents if agent.questions is not None}

    async def call(args: Sequence[RawValue]) -> dict[str, Any]:
        kind = activity.info().activity_type
        agent_name, _, tool = kind.rpartition(".tool.")
        agent = by_name.get(agent_name)
        if agent is None or not args:
            raise ApplicationError(
                f"this worker has no activity {kind!r} (it serves MCP tools of: "
                f"{', '.join(map(str, by_name)) or 'no agent'})",
                type="UnknownActivity",
                non_retryable=True,
            )
        data = activity.payload_converter().from_payload(args[0].payload, dict)
        server = agent.tool_sources[data["source"]]
        assert isinstance(server, MCPServer)
        context = CallContext(
            data["id"],
            tool,
            data["call"],
            _no_view,
            data.get("run_id"),
            path=tuple(data.get("path") or ()),
        )

        media = MemoryMedia()  # the bytes of the images and audio it returns

        questions_of = data.get("questions_of")
        questions = hooks.get(questions_of)

        async def work() -> dict[str, Any]:
            value, branch, error = await HOST.run(
                HOST.call, server, tool, data["params"], context, media, questions, questions_of
            )
            return _call_result(value, branch, error, tool, identity, media)

        async with _Heartbeat(_period()):
            return await _once(bool(data.get("idempotent")), work)

    return activity.defn(dynamic=True)(call)


def _call_result(
    value: Any,
    branch: str | None,
    error: dict[str, Any] | None,
    tool: str,
    identity: str,
    media: MediaKeeper | None = None,
) -> dict[str, Any]:
    """A tool call's activity result: what the handler returned, unless it cannot travel.

    The bytes of the images and audio it refers to (`$media`) travel with it, as
    `media_payload` makes them: the workflow keeps them for the requests that show them.
    """
    result: dict[str, Any] = {"value": value, "branch": branch, "error": error}
    if error is None:
        if media is not None:
            result["media"] = media_payload(ids_of(media_refs(value)), media.get_media)
        problem = too_big(result, f"the result of {tool!r}")
        if problem is not None:
            error = {"type": "runtime", "message": problem}
            result = {"value": None, "branch": None, "error": error}
    result["worker"] = identity
    return result


async def _once(idempotent: bool, work: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """A tool call's result, with the handler run at most once per call unless idempotent.

    A retried attempt reports what this process's earlier attempt returned (the server
    timed that attempt out while unreachable and refused its report: `_kept`). When no
    earlier attempt ran here, only an idempotent call runs again; any other is reported
    interrupted, as after a worker's death (PROTOCOL §10)."""
    key = call_key()
    if activity.info().attempt > 1:
        earlier = KEPT.find(key)
        if earlier is not None:
            return await asyncio.shield(earlier)
        if not idempotent:
            return {"value": None, "branch": None, "error": dict(INTERRUPTED), "worker": None}
    return await KEPT.run(key, work)


# -- what runs in the activity's trio thread ----------------------------------------------


async def _stream_solution(
    agent: Agent, data: dict[str, Any], hand: Callable[[str], None]
) -> dict[str, Any]:
    """Stream one solution request; hand the text over each time a call's object closes."""
    code = data.get("protocol") == "code"  # a program: plain text (PROTOCOL §14)
    request = SolutionRequest(
        messages=data["messages"],
        schema=None if code else data.get("schema") or agent.schema,  # with its MCP tools
        iteration=data["iteration"],
        schema_name="program" if code else "solution",
        media=media_lookup(data.get("media")),
    )
    # The text is handed over each time a call's object closes, or a program's statement
    # is complete: the workflow may start its calls now.
    stream: Any = ProgramStream() if code else SolutionStream()
    text: list[str] = []
    held: list[str] = []  # text not handed over yet
    usage = Usage()
    try:
        async for item in agent.model.stream_solution(request):
            if isinstance(item, Usage):
                usage = usage + item
                continue
            if not isinstance(item, TextDelta):
                continue
            text.append(item.text)
            held.append(item.text)
            if stream.feed(item.text):  # a call closed, a statement completed
                hand("".join(held))
                held.clear()
    except ModelError as error:
        if text:  # it began: calls may be running, so it is reported, not retried
            return {"text": "".join(text), "broken": str(error), "usage": asdict(usage)}
        return {"raise": _model_failure(error)}
    except Exception as error:  # a client bug fails the request, never loops on it
        return {
            "raise": ApplicationError(
                f"the model client raised {type(error).__name__}: {error}",
                type="ModelClientError",
                non_retryable=True,
            )
        }
    return {"text": "".join(text), "broken": None, "usage": asdict(usage)}


async def _ask_turn(agent: Agent, data: dict[str, Any], identity: str) -> dict[str, Any]:
    """One native tool-calling request, held until complete (as `_TurnLoop._attempt`)."""
    request = TurnRequest(
        system=data["system"],
        conversation=data["conversation"],
        tools=[ToolSpec(**spec) for spec in data["tools"]]
        if data.get("tools") is not None  # the run's, with its MCP tools
        else [
            ToolSpec(tool.name, tool.description, visible_parameters(tool))
            for tool in agent.tools.values()
        ],
        iteration=data["iteration"],
        media=media_lookup(data.get("media")),
    )
    response: TurnResponse | None = None
    usage = Usage()
    try:
        async for item in agent.model.stream_turn(request):
            if isinstance(item, Usage):
                usage = usage + item
            elif isinstance(item, TurnResponse):
                response = item
            elif isinstance(item, TextDelta | ToolCallStarted):
                continue
    except ModelError as error:
        raise _model_failure(error) from None
    except Exception as error:
        raise ApplicationError(
            f"the model client raised {type(error).__name__}: {error}",
            type="ModelClientError",
            non_retryable=True,
        ) from None
    if response is None:
        raise _model_failure(
            ModelError(f"{agent.model!r} ended its stream without a complete response")
        )
    return {"response": asdict(response), "usage": asdict(usage), "worker": identity}


def _model_failure(error: ModelError) -> ApplicationError:
    """§8's classification as Temporal's: retryable or not, and the server's Retry-After."""
    delay = None
    if error.retry_after is not None and error.retry_after >= 0:
        delay = timedelta(seconds=min(float(error.retry_after), MAX_BACKOFF))
    return ApplicationError(
        str(error),
        {"status": error.status},
        type="ModelError",
        non_retryable=not error.retryable,
        next_retry_delay=delay,
    )

"""`agui.app(agent)`: an ASGI app that runs the agent per AG-UI request and streams its
events as server-sent events.

The app runs on either an asyncio server (uvicorn, Hypercorn's asyncio worker: the run is
a trio guest of the loop, `Agent.run_asyncio`) or a trio one (Hypercorn's trio worker, as
`tickloop serve --agui` uses). Events cross from the run to the response through a
memory stream in the same thread; the response ends when the run does, and a client that
goes away cancels the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import pydantic
import pydantic_core
import sniffio
from ag_ui.core import BaseEvent, RunAgentInput, TextPart, UserMessage
from ag_ui.encoder import EventEncoder
from anyio.streams.memory import MemoryObjectSendStream

from .._core._log import MAX_VALUE_DEPTH, ContextLog, shape_fault
from .._engine._run import initial_log
from .._observe._events import DataWritten, RunEvent, RunStarted, WriteListener
from ._translate import Translation

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from .._agent._agent import Agent
    from .._durable._store import SQLiteStore

__all__ = ["app", "run_input", "thread_session"]


def app(agent: Agent) -> Starlette:
    """An ASGI app for `agent`: POST / takes an AG-UI `RunAgentInput`, answers the run's
    AG-UI events as server-sent events (docs/web.md). It checks no token itself: serve it
    with `tickloop serve --agui`, or behind your own authentication."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def run(request: Request) -> Any:  # a Response, or the stream (an ASGI app)
        try:
            body = await request.json()
        except RecursionError:  # the JSON decoder's own limit: a body nested ~1,000 deep
            return JSONResponse({"error": "the body nests too deeply to be read"}, 422)
        except ValueError as error:
            return JSONResponse({"error": f"not JSON: {error}"}, 422)
        # Every string goes out again as UTF-8 (the events, the store): a lone surrogate
        # ("\ud800" in the JSON) anywhere would cut the stream mid-run, so it is refused
        # here, before the stream starts.
        fault = shape_fault(body, MAX_VALUE_DEPTH)
        if fault is not None:
            return JSONResponse({"error": f"the body {fault}"}, 422)
        try:
            given = RunAgentInput.model_validate(body)
        except (ValueError, pydantic.ValidationError) as error:
            return JSONResponse({"error": f"not an AG-UI RunAgentInput: {error}"}, 422)
        state = given.state
        if state is not None and not isinstance(state, dict):
            return JSONResponse({"error": "RunAgentInput.state must be an object"}, 422)
        session = thread_session(agent, given)
        if session is not None and not state:
            # The thread is a session (PROTOCOL §16): a client that sends no state (or
            # an empty one, as AG-UI clients do by default) has the run start from the
            # session's (with keep_state), read by the run once it holds the session's
            # lease; a run queued behind another starts from the state that one left.
            # The snapshot waits for it (`_EventStream`).
            state = None
        return _EventStream(agent, given, run_input(given), state, session)

    return Starlette(routes=[Route("/", run, methods=["POST"])])


def thread_session(agent: Agent, given: RunAgentInput) -> str | None:
    """The session a request's thread names: its `threadId` when the agent has a store
    (PROTOCOL §16 "Web threads"), else None (each request a run of its own)."""
    return given.thread_id if agent.store is not None and given.thread_id else None


def run_input(given: RunAgentInput) -> Any:
    """The run's input: `forwardedProps["input"]` when given, else the last user
    message's text as `{"task": text}`, else `{}`."""
    props = given.forwarded_props
    if isinstance(props, Mapping) and "input" in props:
        return props["input"]
    for message in reversed(given.messages):
        if isinstance(message, UserMessage):
            content = message.content
            if isinstance(content, str):
                return {"task": content}
            return {"task": "".join(p.text for p in content if isinstance(p, TextPart))}
    return {}


class _Forward(WriteListener):
    """Hands each of the run's events (writes too) to the response, in the same thread,
    after the agent's own `on_event` (which a run's listener would otherwise replace).

    With `opening` (a run whose starting state is known only once it starts: a run of
    a session), the run's start is preceded by a `_Baseline`: the state it starts from.
    """

    def __init__(
        self,
        send: MemoryObjectSendStream[Any],
        also: Callable[[RunEvent], Any] | None,
        opening: Callable[[str], dict[str, Any]] | None = None,
    ) -> None:
        self.send = send
        self.also = also
        self.opening = opening

    def __call__(self, event: RunEvent) -> None:
        if self.also is not None and not isinstance(event, DataWritten):
            self.also(event)
        if self.opening is not None and isinstance(event, RunStarted) and not event.path:
            # Read now, in the run, before its first step: its journal then holds only
            # what it was given.
            self._send(_Baseline(self.opening(event.run_id)))
        self._send(event)

    def _send(self, item: Any) -> None:
        try:
            self.send.send_nowait(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the response has ended (the client left): the run is being cancelled


def _opening_state(store: SQLiteStore, run_id: str) -> dict[str, Any]:
    """The state a stored run started from: the view of the messages its journal opens
    with (read as the run starts, it holds nothing else)."""
    log = ContextLog(body for _, _, kind, body in store.journal(run_id) if kind == "message")
    state = log.view("state")
    return state if isinstance(state, dict) else {}


class _Baseline:
    """The state the run starts from, for the snapshot."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state


async def _cancel_when_the_client_leaves(receive: Any, scope: Any, left: anyio.Event) -> None:
    """The request's body is read: the next message is the client going away, which
    cancels the run (it stays resumable when it has a store)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    left.set()
    scope.cancel()


class _Ended:
    def __init__(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result = result
        self.error = error


class _EventStream:
    """The response: the run's AG-UI events, one SSE message each, as the run goes."""

    def __init__(
        self, agent: Agent, given: RunAgentInput, input: Any, state: Any, session: str | None
    ) -> None:
        self.agent = agent
        self.given = given
        self.input = input
        self.state = state  # the client's, which the run starts from; None: none given
        self.session = session  # the thread's session, when the agent has a store

    @property
    def starts_from_session(self) -> bool:
        """Whether the run's starting state is the session's, known only once the run
        holds the session's lease (PROTOCOL §16): then the snapshot waits for it."""
        return self.session is not None and self.state is None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        encoder = EventEncoder()
        translation = Translation(self.given.thread_id, self.given.run_id)

        async def emit(events: list[BaseEvent]) -> None:
            for event in events:
                chunk = encoder.encode(event).encode()
                await send({"type": "http.response.body", "body": chunk, "more_body": True})

        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", encoder.get_content_type().encode()),
                    (b"cache-control", b"no-store"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        await emit(translation.started())
        if not self.starts_from_session:
            await emit(translation.snapshot(self.state))
        sender, receiver = anyio.create_memory_object_stream[Any](math.inf)
        left = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(self._run, sender)
            group.start_soon(_cancel_when_the_client_leaves, receive, group.cancel_scope, left)
            async with receiver:
                async for item in receiver:
                    if isinstance(item, _Ended):
                        await emit(self._ending(translation, item))
                        break
                    if isinstance(item, _Baseline):
                        await emit(translation.snapshot(item.state))
                        continue
                    await emit(translation.event(item))
            group.cancel_scope.cancel()  # the run has ended: stop watching the client
        if not left.is_set():
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _ending(self, translation: Translation, ended: _Ended) -> list[BaseEvent]:
        if ended.error is not None:
            return translation.failed(f"{type(ended.error).__name__}: {ended.error}")
        result = ended.result
        if result.status == "failed":
            return translation.failed("the run failed")
        output = pydantic_core.to_jsonable_python(result.output)
        return translation.finished(output, result.status, list(result.pending))

    async def _run(self, sender: MemoryObjectSendStream[Any]) -> None:
        async with sender:
            store = self.agent.store
            opening = None
            if self.starts_from_session and store is not None:
                opening = partial(_opening_state, store)
            options: dict[str, Any] = {
                "on_event": _Forward(sender, self.agent.on_event, opening),
                "run_id": self.given.run_id,
            }
            input = self.input
            if self.session is not None:  # the thread's history starts it (PROTOCOL §16)
                options["session"] = self.session
            if self.state is not None:  # the client's state starts the run's (PROTOCOL §1)
                options["messages"] = initial_log(input, self.state).messages
                input = None
            try:
                if sniffio.current_async_library() == "trio":
                    result = await self.agent.run_async(input, **options)
                else:
                    result = await self.agent.run_asyncio(input, **options)
            except Exception as error:  # the client is told; the server goes on
                sender.send_nowait(_Ended(error=error))
                return
            sender.send_nowait(_Ended(result=result))

"""MCP servers on a Temporal worker: one connection per server per worker process.

An MCP connection is owned by one trio task (`_mcp._connection`), and a tool activity runs
its trio code under a `trio.run` of its own, which ends with the call. So the connections
live in a trio run of their own instead: one thread per worker process, started when the
first worker that serves an agent with MCP servers starts, stopped when the last one stops
(a `run_context` of the worker's plugin). Each server is opened there with
`async with server:` (its shared connection) by a keeper task, and every listing and call
of every run on this process is sent to that trio run and answered on that connection.

A server whose connection failed or broke is opened again by the next listing or call
that needs it; the call that found it broken reports its error like a local run would.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import trio

from .._core._media import MediaKeeper
from .._core._questions import QuestionHook
from .._core._tools import CallContext, Tool
from .._engine._engine import run_handler
from .._engine._questions import QuestionDesk, answering_with
from .._mcp._server import MCPServer

__all__ = ["HOST", "MCPHost"]

T = TypeVar("T")


class _Kept:
    """One server held open by its keeper task (one generation of its connection)."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.ready = trio.Event()
        self.retire = trio.Event()
        self.closed = trio.Event()
        self.error: BaseException | None = None

    def usable(self) -> bool:
        shared = self.server._shared
        return self.error is None and shared is not None and shared.broken is None


class MCPHost:
    """The process's MCP connections, in a trio thread of their own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._kept: dict[int, _Kept] = {}
        # One question desk per run (and hook) while its calls are in flight here: a
        # server's question goes to the one desk its in-flight calls share, as locally.
        # Touched only in the host's trio thread, so it needs no lock.
        self._desks: dict[tuple[str | None, str | None], tuple[QuestionDesk, int]] = {}

    # -- its life: as long as one worker that needs it runs --------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        with self._lock:
            self._users += 1
            if self._thread is None:
                started = threading.Event()
                self._thread = threading.Thread(
                    target=trio.run,
                    args=(self._main, started),
                    name="tickloop-mcp",
                    daemon=True,  # a worker killed mid-run leaves no thread behind
                )
                self._thread.start()
                started.wait()
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                thread = self._thread if self._users == 0 else None
                if thread is not None:
                    token, nursery = self._token, self._nursery
                    self._thread = self._token = self._nursery = None
                    self._kept = {}
                    assert token is not None and nursery is not None
                    token.run_sync_soon(nursery.cancel_scope.cancel)
            if thread is not None:  # every server closes in the task that opened it
                await asyncio.to_thread(thread.join)

    async def _main(self, started: threading.Event) -> None:
        async with trio.open_nursery() as nursery:
            self._token = trio.lowlevel.current_trio_token()
            self._nursery = nursery
            started.set()
            await trio.sleep_forever()

    # -- from a worker's asyncio loop -------------------------------------------------------

    async def run(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """`await function(*args)` in the host's trio run, awaited from asyncio; cancelling
        the awaiting activity cancels it there."""
        token, nursery = self._token, self._nursery
        if token is None or nursery is None:
            raise RuntimeError(
                "the MCP connections of this worker are not running (the worker was not "
                "started, or it is stopping)"
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        scopes: list[trio.CancelScope] = []

        def settle(value: Any, error: BaseException | None) -> None:
            if not future.done():
                if error is None:
                    future.set_result(value)
                else:
                    future.set_exception(error)

        async def task() -> None:
            value: Any = None
            error: BaseException | None = RuntimeError("the MCP connections stopped")
            try:
                with trio.CancelScope() as scope:
                    scopes.append(scope)
                    try:
                        value, error = await function(*args), None
                    except Exception as problem:
                        error = problem
            finally:
                with contextlib.suppress(RuntimeError):  # the asyncio loop closed
                    loop.call_soon_threadsafe(settle, value, error)

        token.run_sync_soon(nursery.start_soon, task)
        try:
            return await future
        except asyncio.CancelledError:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(lambda: [scope.cancel() for scope in scopes])
            raise

    # -- in the host's trio run ------------------------------------------------------------

    async def listing(self, server: MCPServer) -> tuple[list[Tool], str | None]:
        """The server's tools and instructions, on its connection (opened if need be)."""
        kept = self._kept.get(id(server))
        if kept is None or (kept.ready.is_set() and not kept.usable()):
            if kept is not None:
                kept.retire.set()
            fresh = _Kept(server)
            self._kept[id(server)] = fresh
            assert self._nursery is not None
            self._nursery.start_soon(self._keep, fresh, kept)
            kept = fresh
        await kept.ready.wait()
        if kept.error is not None:
            raise kept.error
        return list(server._shared_tools), server._shared_instructions

    async def _keep(self, kept: _Kept, previous: _Kept | None) -> None:
        try:
            if previous is not None:  # `async with server:` is not re-entrant
                await previous.closed.wait()
            try:
                async with kept.server:
                    kept.ready.set()
                    await kept.retire.wait()
            except Exception as error:
                if not kept.ready.is_set():
                    kept.error = error
        finally:
            kept.ready.set()  # a keeper cancelled while opening still answers its waiters
            if kept.error is None and kept.server._shared is None:
                kept.error = RuntimeError(f"the connection to {kept.server.label} was closed")
            kept.closed.set()

    async def call(
        self,
        server: MCPServer,
        name: str,
        params: dict[str, Any],
        context: CallContext,
        media: MediaKeeper | None = None,
        questions: QuestionHook | None = None,
        questions_of: str | None = None,
    ) -> tuple[Any, str | None, dict[str, Any] | None]:
        """Run the call of `server`'s tool `name` as a local run would: (value, branch, error).

        The server's questions go to `questions` (the hook of the agent `questions_of`),
        asked here in the worker; its model requests to the server's `sampling=` function
        only: the run's model is the workflow's, metered there (docs/decisions.md)."""
        try:
            tools, _ = await self.listing(server)
        except Exception as error:
            return None, None, {"type": "runtime", "message": f"{server.label}: {error}"}
        tool = next((tool for tool in tools if tool.name == name), None)
        if tool is None:
            return (
                None,
                None,
                {
                    "type": "runtime",
                    "message": f"{server.label} no longer lists a tool {name!r} on this "
                    f"worker (it lists: {', '.join(t.name for t in tools) or 'none'})",
                },
            )
        with self._desk(context.run_id, questions_of, questions) as desk, answering_with(desk):
            return await run_handler(tool, params, context, trio.CapacityLimiter(math.inf), media)

    @contextlib.contextmanager
    def _desk(
        self, run_id: str | None, questions_of: str | None, questions: QuestionHook | None
    ) -> Iterator[QuestionDesk]:
        """The desk of `run_id`'s calls answered by `questions_of`'s hook on this worker,
        made by the first such call in flight and dropped with the last."""
        key = (run_id, questions_of)
        desk, users = self._desks.get(key) or (
            QuestionDesk(questions, run_id=run_id, defers=False, no_model=_NO_MODEL),
            0,
        )
        self._desks[key] = (desk, users + 1)
        try:
            yield desk
        finally:
            desk, users = self._desks[key]
            if users == 1:
                del self._desks[key]
            else:
                self._desks[key] = (desk, users - 1)


# The run's model is the workflow's, metered by its budget: a worker cannot answer with it.
_NO_MODEL = (
    "on Temporal the run's model does not answer an MCP server's requests (its budget "
    "is kept by the workflow); give the server sampling=fn"
)


#: The MCP connections of this process, shared by every worker in it.
HOST = MCPHost()

"""One connection to an MCP server, owned by one task.

The `mcp` client is built on anyio cancel scopes, which must be left by the task that
entered them; the classic failure of MCP integrations ("Attempted to exit cancel scope in
a different task than it was entered in") comes from opening a session in one task and
closing it in another. Here a single owner task opens the transport and the session,
serves every call, and closes them. Calls reach it over a trio memory channel; each call
runs as a child task of the owner (inside the session's scopes), so many calls are in
flight at once on the one session, multiplexed by the protocol's request ids.

When the session dies (the server process exited, an HTTP server forgot the session),
the owner opens a new one, trying with backoff while the server cannot be reached. A
call that was on the wire when it died may have taken effect, so it is sent again only
when its tool is idempotent; a call the server refused because the session was gone
never ran and is always sent again.
"""

from __future__ import annotations

import contextvars
import math
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any

import trio

from .._errors import ConfigurationError, describe_error
from ._asking import Asking

__all__ = ["Connection", "MCPConnectionError", "Request"]

#: Extra HTTP headers of the call being sent: read by the HTTP client's auth hook in the
#: task that posts the request (the `mcp` transport carries the sender's context there).
CALL_HEADERS: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "tickloop_mcp_call_headers", default=None
)

#: Where the HTTP transport notes an error response (status, the server's words) for the
#: call being sent: a dict the call's task makes, filled in the task that posts it (the
#: `mcp` transport runs that in a copy of the sender's context, which shares the dict).
HTTP_ERROR: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "tickloop_mcp_http_error", default=None
)

#: The connecting deadline of the session being opened in this task tree, which a person
#: authorizing (OAuth) must not run out: set by the owner task before it opens the
#: transport, so the transport's tasks (where the OAuth flow runs) see it.
CONNECTING: contextvars.ContextVar[trio.CancelScope | None] = contextvars.ContextVar(
    "tickloop_mcp_connecting", default=None
)


@contextmanager
def connect_deadline_paused() -> Iterator[None]:
    """No connect deadline while the block runs; afterwards the rest of the handshake
    gets a whole connect timeout again."""
    scope = CONNECTING.get()
    if scope is None or scope.deadline == math.inf:
        yield
        return
    allowed = scope.deadline - trio.current_time()
    scope.deadline = math.inf
    try:
        yield
    finally:
        scope.deadline = trio.current_time() + max(allowed, 0.0)


#: How long calls still on a dead session get to come back with their own error before
#: they are cut off (and then count as possibly effective).
LOSS_GRACE = 2.0

#: How long a lost connection keeps trying to open a new session (a server restarting,
#: a network blip) before its calls fail; the tries back off from RETRY_FIRST seconds,
#: doubling up to RETRY_MOST.
RECONNECT_FOR = 30.0
RETRY_FIRST = 0.1
RETRY_MOST = 2.0


class MCPConnectionError(Exception):
    """The connection to the server failed under a call (the call's runtime error)."""


class Request:
    """One tools/call on its way through the owner task; the caller waits on `done`."""

    __slots__ = (
        "abandoned",
        "answered",
        "arguments",
        "call_id",
        "desk",
        "done",
        "error",
        "headers",
        "idempotent",
        "meta",
        "operation",
        "parked",
        "replays",
        "result",
        "scope",
        "tool",
    )

    def __init__(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        idempotent: bool,
        headers: Mapping[str, str] | None = None,
        meta: Mapping[str, Any] | None = None,
        operation: Callable[[Any], Awaitable[Any]] | None = None,
        desk: Any = None,
        call_id: str | None = None,
    ) -> None:
        self.tool = tool
        # What to send on the session instead of tools/call (resources/read, prompts/get):
        # the same owner task, retry and abandon rules serve every request.
        self.operation = operation
        self.arguments = arguments
        self.idempotent = idempotent
        self.headers = headers
        self.meta = meta
        self.done = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.scope: trio.CancelScope | None = None
        self.abandoned = False
        self.replays = 0
        # The question desk of the run that made the call (None outside a run that
        # answers) and the call's full id: whom the server's questions during it go to.
        self.desk = desk
        self.call_id = call_id
        self.parked = False  # a question on it was deferred: it stops and waits, parked
        self.answered = trio.Event()  # the server's answer to the call came (or it ended)

    def park(self) -> None:
        """A question asked during the call was deferred: the caller stops waiting (and
        the server is told to stop); the call waits, parked, for a recorded verdict."""
        if not self.done.is_set():
            self.parked = True
            self.done.set()

    def succeed(self, result: Any) -> None:
        if not self.done.is_set():
            self.result = result
            self.done.set()

    def fail(self, error: BaseException) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()

    def abandon(self) -> None:
        """The caller stopped waiting (timeout, cancellation): stop the request too, so
        the client tells the server to cancel it."""
        self.abandoned = True
        if self.scope is not None:
            self.scope.cancel()


Transport = Callable[[], AbstractAsyncContextManager[tuple[Any, Any]]]


class Connection:
    """The owner task's state: its channel, the tools it listed, how it ended."""

    def __init__(
        self,
        label: str,
        transport: Transport,
        connect_timeout: float | None,
        on_listing: Callable[[list[Any], str | None], None],
        sampling: Callable[..., Any] | None = None,
        approve_sampling: bool = False,
    ) -> None:
        self.label = label
        self._transport = transport
        self._connect_timeout = connect_timeout
        self._on_listing = on_listing
        self._send, self._receive = trio.open_memory_channel[Request](math.inf)
        self._retry: list[Request] = []
        self._lost = False
        self._closing = False
        self._ready = trio.Event()
        self._owner_scope = trio.CancelScope()
        self._taking: trio.CancelScope | None = None
        self.failure: ConfigurationError | None = None  # it never came up
        self.broken: str | None = None  # it came up, then could not be restored
        self.pages = 0  # tools/list pages read (the listing follows every cursor)
        self._in_flight: set[Request] = set()  # sent on the wire, not answered yet
        # The server's questions and model requests, to the desk of the call's run.
        self._asking = Asking(label, self._in_flight, sampling, approve_sampling)
        self.trio_token = trio.lowlevel.current_trio_token()

    # -- the caller's side ------------------------------------------------------------------

    def submit(self, request: Request) -> None:
        if self.broken is not None:
            raise MCPConnectionError(self.broken)
        try:
            self._send.send_nowait(request)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise MCPConnectionError(f"the connection to {self.label} is closed") from None

    def close(self) -> None:
        self._closing = True
        self._send.close()
        if not self._ready.is_set():  # still connecting: stop that (in the owner task)
            self._owner_scope.cancel()

    # -- the owner task -------------------------------------------------------------------------

    async def own(self) -> None:
        """Connect, list, serve until closed; after a loss, open a new session, trying
        again with backoff for RECONNECT_FOR seconds while the server cannot be reached
        (a restart takes a moment: one try during it must not fail every later call)."""
        first = True
        down_since: float | None = None
        delay = RETRY_FIRST
        try:
            while True:
                outcome, problem = await self._one_session(first=first)
                if outcome == "closed":
                    return
                if outcome == "failed":
                    if first:
                        self.failure = ConfigurationError(
                            f"MCP server {self.label} could not be used: {problem}"
                        )
                        return
                    now = trio.current_time()
                    down_since = now if down_since is None else down_since
                    if now - down_since < RECONNECT_FOR and not self._closing:
                        await trio.sleep(delay)
                        delay = min(delay * 2, RETRY_MOST)
                        continue
                    self.broken = (
                        f"the connection to {self.label} was lost and could not be "
                        f"restored within {RECONNECT_FOR:g} s: {problem}"
                    )
                    return
                first = False  # "lost": go round and open a new session
                down_since, delay = None, RETRY_FIRST
        finally:
            self._send.close()
            reason = self.broken or f"the connection to {self.label} is closed"
            for request in self._retry:
                request.fail(MCPConnectionError(reason))
            self._retry = []
            while True:
                try:
                    request = self._receive.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
                request.fail(MCPConnectionError(reason))

    async def _one_session(self, *, first: bool) -> tuple[str, str | None]:
        from mcp import ClientSession

        served = False
        try:
            with trio.CancelScope() as connecting:
                if self._connect_timeout is not None:  # None: wait as long as it takes
                    connecting.deadline = trio.current_time() + self._connect_timeout
                CONNECTING.set(connecting)
                async with self._transport() as (read, write):
                    async with ClientSession(
                        read,
                        write,
                        message_handler=self._on_message,
                        elicitation_callback=self._asking.elicit,
                        sampling_callback=self._asking.sample,
                    ) as session:
                        initialized = await session.initialize()
                        # Listed on a new session too: the client checks results against
                        # the output schemas it has seen listed on its own session.
                        tools = await self._list_every_page(session)
                        if first:
                            self._on_listing(tools, initialized.instructions)
                        connecting.deadline = math.inf
                        served = True
                        if first:
                            self._started()
                        return await self._serve(session), None
            return "failed", f"it did not answer within {self._connect_timeout:g} s"
        except ConfigurationError as error:
            return "failed", str(error)
        except Exception as error:  # spawning, the handshake, the transport
            if served:
                return "lost", _describe(error)
            return "failed", _describe(error)

    async def _on_message(self, message: Any) -> None:
        """What the session hands on besides answers: a message from the server that the
        client could not parse arrives here as the exception, and the answer it may have
        been is otherwise dropped, so its call would wait for ever."""
        if isinstance(message, Exception):
            self._unreadable(message)

    def _unreadable(self, error: Exception) -> None:
        errors = getattr(error, "errors", None)
        try:
            reason = str(errors()[0]["msg"]) if callable(errors) else describe_error(error)
        except Exception:
            reason = describe_error(error)
        waiting = [request for request in self._in_flight if not request.done.is_set()]
        if len(waiting) == 1:
            whose = "its answer to this call"
        else:
            whose = (
                f"an answer sent while {len(waiting)} calls were in flight (which one it "
                "answered cannot be told)"
            )
        for request in waiting:
            request.fail(
                MCPConnectionError(
                    f"{self.label} sent {whose}, which the client cannot parse: {reason}"
                )
            )
            request.abandon()  # the server is told to stop, if it is still working

    def _started(self) -> None:
        self._ready.set()

    def spawn(self, nursery: trio.Nursery) -> None:
        """Start the owner in `nursery`; `ready` waits until it has listed the tools.
        Several connections spawned before any is awaited connect at the same time."""

        async def run() -> None:
            with self._owner_scope:
                try:
                    await self.own()
                finally:
                    self._ready.set()

        nursery.start_soon(run)

    async def ready(self) -> None:
        await self._ready.wait()
        if self.failure is not None:
            raise self.failure

    async def _list_every_page(self, session: Any) -> list[Any]:
        import mcp_types

        tools: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            self.pages += 1
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools
            if cursor in seen:  # a server that pages in a circle would never end
                raise ConfigurationError(f"its tool listing repeats the cursor {cursor!r}")
            seen.add(cursor)

    async def _serve(self, session: Any) -> str:
        self._lost = False
        async with trio.open_nursery() as calls:
            retry, self._retry = self._retry, []
            for request in retry:
                calls.start_soon(self._perform, session, request)
            with trio.CancelScope() as taking:
                self._taking = taking
                async for request in self._receive:
                    calls.start_soon(self._perform, session, request)
            if self._lost:
                calls.cancel_scope.deadline = trio.current_time() + LOSS_GRACE
            else:  # closed: nothing of a finished run is still waiting
                calls.cancel_scope.cancel()
        return "lost" if self._lost else "closed"

    async def _perform(self, session: Any, request: Request) -> None:
        from mcp.shared.exceptions import MCPError

        if request.abandoned or request.done.is_set():
            return
        token = CALL_HEADERS.set(request.headers)
        noted: dict[str, Any] = {}
        error_token = HTTP_ERROR.set(noted)
        try:
            with trio.CancelScope() as scope:
                request.scope = scope
                if request.abandoned:
                    return
                self._in_flight.add(request)
                try:
                    if request.operation is not None:
                        result = await request.operation(session)
                    else:
                        result = await session.call_tool(
                            request.tool, request.arguments, meta=dict(request.meta or {}) or None
                        )
                finally:
                    self._in_flight.discard(request)
                request.succeed(result)
        except MCPError as error:
            gone = _session_gone(error, noted)
            if gone is None:
                request.fail(_with_http_status(error, noted))
            else:
                self._on_loss(request, may_have_run=gone)
        except trio.Cancelled:
            # Not the caller (that is `abandoned`): the connection is closing, or the
            # transport failed under the session and took its tasks down with it.
            if not request.done.is_set() and not request.abandoned:
                if self._closing:
                    request.fail(MCPConnectionError(f"the connection to {self.label} closed"))
                else:
                    self._on_loss(request, may_have_run=True)
            raise
        except Exception as error:
            request.fail(error)
        finally:
            request.answered.set()
            HTTP_ERROR.reset(error_token)
            CALL_HEADERS.reset(token)

    def _on_loss(self, request: Request, *, may_have_run: bool) -> None:
        self._lost = True
        if self._taking is not None:
            self._taking.cancel()
        if request.replays >= 1:
            request.fail(
                MCPConnectionError(f"the connection to {self.label} was lost twice under this call")
            )
        elif may_have_run and not request.idempotent:
            request.fail(
                MCPConnectionError(
                    f"the connection to {self.label} was lost while {request.tool!r} ran; "
                    "it was not sent again because it may have taken effect (the tool is "
                    "not idempotent)"
                )
            )
        else:
            request.replays += 1
            self._retry.append(request)


def _describe(error: BaseException) -> str:
    """The error, without the task-group wrappers around a lone cause."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return describe_error(error)


def _with_http_status(error: Exception, noted: dict[str, Any]) -> Exception:
    """The error, with the HTTP status and the server's own words when the client only
    said "Server returned an error response"."""
    if "status" not in noted:
        return error
    words = f": {noted['body']}" if noted.get("body") else ""
    return MCPConnectionError(f"{error} (HTTP {noted['status']}{words})")


def _session_gone(error: Any, noted: dict[str, Any] | None = None) -> bool | None:
    """None when the session is alive; otherwise whether the call may have run: True when
    the connection dropped under it, False when the server refused it for want of a
    session (an HTTP server that restarted answers 404 to the old session id)."""
    import mcp_types

    code = getattr(getattr(error, "error", None), "code", None)
    message = str(getattr(getattr(error, "error", None), "message", "") or error).lower()
    if noted and noted.get("status") in (400, 404):
        message += " " + str(noted.get("body", "")).lower()
    if code == mcp_types.CONNECTION_CLOSED:
        return True
    # "Session terminated" is the client's word for HTTP 404 on a session (what the spec
    # says a server answers for a session it does not know); the MCP reference servers
    # answer 400 "Bad Request: No valid session ID provided" instead.
    if (
        "session terminated" in message
        or "session not found" in message
        or "no valid session" in message
    ):
        return False
    return None


# -- transports ---------------------------------------------------------------------------------


def stdio_transport(
    command: str, args: list[str], env: Mapping[str, str] | None, cwd: str | None
) -> Transport:
    @asynccontextmanager
    async def open_stdio() -> AsyncIterator[tuple[Any, Any]]:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        parameters = StdioServerParameters(
            command=command, args=list(args), env=dict(env) if env else None, cwd=cwd
        )
        async with stdio_client(parameters, errlog=_errlog()) as streams:
            yield streams

    return open_stdio


def http_transport(
    url: str, headers: Mapping[str, str] | None, auth: Callable[[], Any] | None = None
) -> Transport:
    """`auth`, when given, makes the `httpx` auth of each new connection (`tl.OAuth`)."""

    @asynccontextmanager
    async def open_http() -> AsyncIterator[tuple[Any, Any]]:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        async def note_error(response: Any) -> None:
            noted = HTTP_ERROR.get()
            if noted is None or response.status_code < 400:
                return
            try:
                body = (await response.aread()).decode("utf-8", "replace")
            except Exception:  # the words are only for the message
                body = ""
            noted["status"] = response.status_code
            noted["body"] = " ".join(body.split())[:300]

        async def add_call_headers(request: Any) -> None:
            """The per-call headers (`MCPServer.call_options`), as the request leaves
            (after OAuth, when there is one, has added its token)."""
            extra = CALL_HEADERS.get()
            if extra:
                request.headers.update(extra)

        client = httpx2.AsyncClient(
            headers=dict(headers or {}),
            timeout=httpx2.Timeout(30.0, read=300.0),
            auth=None if auth is None else auth(),
            event_hooks={"request": [add_call_headers], "response": [note_error]},
        )
        async with client, streamable_http_client(url, http_client=client) as streams:
            yield streams

    return open_http


_DEVNULL: list[Any] = []


def _errlog() -> Any:
    """Where the server's stderr goes: ours, when it is a real file (a test runner's
    capture may not be); otherwise one null device, opened once for the process."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        if not _DEVNULL:
            _DEVNULL.append(open(os.devnull, "w"))
        return _DEVNULL[0]

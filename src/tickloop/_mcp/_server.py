"""`tl.MCPServer`: the tools of a Model Context Protocol server, in any `tools=` list.

Nothing here imports `mcp` at module level: the package loads when a server is first
connected, so `import tickloop` stays light and `mcp` stays an extra (`tickloop[mcp]`).
"""

from __future__ import annotations

import contextvars
import importlib.util
import math
import re
import shlex
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from functools import partial
from typing import Any

import trio

from .._core._questions import Sampling
from .._core._tools import TOOL_NAME, ApprovalRule, CallContext, RawTool, Tool, ToolSource
from .._engine._engine import PARKED
from .._engine._questions import current_desk
from .._engine._sources import OpenedSource
from .._errors import ConfigurationError, unwrap_single
from ._connection import (
    Connection,
    MCPConnectionError,
    Request,
    Transport,
    http_transport,
    stdio_transport,
)
from ._oauth import OAuth
from ._prompts import check_arguments, check_name, prompt_text, unknown_prompt
from ._resources import RESOURCE_METHODS, operation_for, resource_tool_specs
from ._results import MCPToolError, convert_result

__all__ = ["MCPConnectionError", "MCPPrompt", "MCPServer", "MCPToolError"]

CALL = "tools/call"
DEFAULT_CONNECT_TIMEOUT = 10.0
#: Seconds an MCP call may take unless `timeout=` says otherwise (None: no limit). A
#: server that never answers (or whose answer was lost) must not hold a run for ever.
DEFAULT_CALL_TIMEOUT = 300.0
#: Seconds a call parked by a deferred question waits for the server to end it, before it
#: is cancelled at the server.
PARK_GRACE = 2.0

_EXTRA_HINT = "MCP servers need the `mcp` package: pip install 'tickloop[mcp]'"

#: Per-run call options (`MCPServer.call_options`), by server: a context variable, so a
#: run started inside the `with` block (and every call task it spawns) carries them.
_CALL_OPTIONS: contextvars.ContextVar[
    Mapping[int, tuple[dict[str, str], dict[str, Any]]] | None
] = contextvars.ContextVar("tickloop_mcp_call_options", default=None)


def _require_mcp() -> None:
    if importlib.util.find_spec("mcp") is None:
        raise ConfigurationError(_EXTRA_HINT)


class MCPServer(ToolSource):
    """An MCP server whose tools a run can call. Make one with `MCPServer.stdio(...)` or
    `MCPServer.http(...)`; it stands, in `tools=[...]`, for every tool the server lists.

    A run opens the connection in its own task tree, lists the tools (every page), and
    closes it at the end; `async with server:` keeps one connection open across runs.
    """

    def __init__(
        self,
        label: str,
        transport: Transport,
        *,
        prefix: str | None = None,
        allowed: Iterable[str] | None = None,
        requires_approval: ApprovalRule = False,
        include_instructions: bool = False,
        timeout: float | None = DEFAULT_CALL_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        defer_loading: bool = False,
        resources: bool = False,
        sampling: Callable[[Sampling], Any] | None = None,
        approve_sampling: bool = False,
    ) -> None:
        _require_mcp()
        self.label = label
        self._transport = transport
        if prefix is not None and (not isinstance(prefix, str) or not TOOL_NAME.fullmatch(prefix)):
            raise ConfigurationError(
                f"MCP server {label}: prefix {prefix!r} must be a valid tool name start "
                "(letters, digits, _ and -)"
            )
        self.prefix = prefix
        if isinstance(allowed, str):
            raise ConfigurationError(
                f"MCP server {label}: allowed must be a list of tool names, not a string"
            )
        self.allowed: frozenset[str] | None = None if allowed is None else frozenset(allowed)
        if not (isinstance(requires_approval, bool) or callable(requires_approval)):
            raise ConfigurationError(
                f"MCP server {label}: requires_approval must be True, False or a predicate "
                f"over the parameters, not {requires_approval!r}"
            )
        self.requires_approval = requires_approval
        self.include_instructions = bool(include_instructions)
        self.timeout = _positive(timeout, label, "timeout")
        self.connect_timeout = _positive(connect_timeout, label, "connect_timeout")
        if not isinstance(defer_loading, bool):
            raise ConfigurationError(
                f"MCP server {label}: defer_loading must be True or False, not {defer_loading!r}"
            )
        # Its tools stay off an agent's menu until `search_tools` finds them (tool search).
        self.defer_loading = defer_loading
        if not isinstance(resources, bool):
            raise ConfigurationError(
                f"MCP server {label}: resources must be True or False, not {resources!r}"
            )
        # Two tools more, list_resources and read_resource (`_resources`).
        self.resources = resources
        if sampling is not None and not callable(sampling):
            raise ConfigurationError(
                f"MCP server {label}: sampling must be a function of a tl.Sampling that "
                f"returns text, not {sampling!r}"
            )
        # Answers the server's model requests instead of the run's model (sync or async).
        self.sampling = sampling
        if not isinstance(approve_sampling, bool):
            raise ConfigurationError(
                f"MCP server {label}: approve_sampling must be True or False, not "
                f"{approve_sampling!r}"
            )
        # Each of the server's model requests goes to the run's questions= hook first.
        self.approve_sampling = approve_sampling
        self._shared: Connection | None = None
        self._shared_tools: list[Tool] = []
        self._shared_instructions: str | None = None
        self._stack: AsyncExitStack | None = None

    # -- making one -------------------------------------------------------------------------

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        **options: Any,
    ) -> MCPServer:
        """A server run as a child process, spoken to over its stdin and stdout.

        `env` is added to a small safe environment (PATH, HOME...), as the `mcp` client
        does: the child does not inherit every secret of this process. Options:
        `prefix`, `allowed`, `requires_approval`, `include_instructions`, `defer_loading`
        (its tools found through an agent's `search_tools`), `resources` (two tools
        more: `list_resources`, `read_resource(uri)`), `timeout` (per
        call, seconds; default 300, None for no limit), `connect_timeout` (start,
        handshake and listing; default 10 s).
        """
        if not isinstance(command, str) or not command:
            raise ConfigurationError(
                f"MCP server command must be a non-empty string, not {command!r}"
            )
        if isinstance(args, str):
            raise ConfigurationError(
                f"MCP server {command}: args must be a list of strings, not one string"
            )
        args = [str(arg) for arg in args]
        label = f"`{shlex.join([command, *args])}`"
        return cls(label, stdio_transport(command, args, env, cwd), **options)

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        auth: OAuth | None = None,
        **options: Any,
    ) -> MCPServer:
        """A server reached over streamable HTTP at `url` (e.g. `http://127.0.0.1:8000/mcp`).

        `headers` go with every request (e.g. an `Authorization` token); per-run ones are
        added with `server.call_options(headers=...)`. `auth=tl.OAuth(...)`: OAuth 2.1
        as MCP's authorization spec says (a person authorizes once; tokens refresh).
        Options as for `stdio`.
        """
        if not isinstance(url, str) or not re.match(r"https?://", url):
            raise ConfigurationError(f"MCP server url must be an http(s) URL, not {url!r}")
        if auth is not None and not isinstance(auth, OAuth):
            raise ConfigurationError(
                f"MCP server {url}: auth must be a tl.OAuth(...), not {type(auth).__name__}"
            )
        oauth = None if auth is None else partial(auth.provider, url, url)
        return cls(url, http_transport(url, headers, oauth), **options)

    def __repr__(self) -> str:
        return f"MCPServer({self.label})"

    # -- what a run asks ------------------------------------------------------------------

    def may_require_approval(self) -> bool:
        return self.requires_approval is not False

    @asynccontextmanager
    async def open_for_run(self) -> AsyncIterator[Callable[[], Awaitable[OpenedSource]]]:
        """This server's tools for one run: on the `async with server:` connection when
        there is one in this trio run, otherwise on a connection of the run's own. What
        it yields is awaited for the tools once every source has started connecting."""
        if self._usable_shared():
            tools, instructions = self._shared_tools, self._shared_instructions

            async def shared() -> OpenedSource:
                return self.opened(tools, instructions)

            yield shared
            return
        async with self._connect() as listing:

            async def own() -> OpenedSource:
                return self.opened(*await listing())

            yield own

    def tool_from_spec(self, spec: Mapping[str, Any]) -> MCPTool:
        """One of this server's tools from `MCPTool.spec()`, bound to no connection: where
        a listing is made in one process and the calls run in another (a Temporal
        workflow lists through an activity, its workers call)."""
        return MCPTool(
            spec["name"],
            description=spec.get("description") or "",
            parameters=spec["parameters"],
            output=spec.get("output"),
            remote_name=spec["remote_name"],
            method=spec.get("method", CALL),
            server=self,
            connection=None,
            requires_approval=self.requires_approval,
            timeout=self.timeout,
            idempotent=bool(spec.get("idempotent")),
            # PROTOCOL §15: an MCP tool is read-only when the server says so.
            read_only=bool((spec.get("annotations") or {}).get("readOnlyHint") is True),
            annotations=spec.get("annotations"),
            defer_loading=self.defer_loading,
        )

    def opened(self, tools: list[Tool], instructions: str | None) -> OpenedSource:
        """What this server gives a run that has `tools` and `instructions` listed (here,
        or by a Temporal activity)."""
        text = None
        if self.include_instructions and instructions and instructions.strip():
            text = f"## Instructions from the MCP server {self.label}\n{instructions.strip()}"
        return OpenedSource(self.label, tools, text)

    async def list_tools(self) -> list[Tool]:
        """The tools this server stands for (after `prefix` and `allowed`), each a `Tool`."""
        if self._usable_shared():
            return list(self._shared_tools)
        async with self._connect() as listing:
            tools, _ = await listing()
            return list(tools)

    async def prompt(self, name: str, args: Mapping[str, str] | None = None) -> str:
        """The text of this server's prompt `name` filled with `args` (strings by name):
        its messages' text in order, separated by blank lines. On the `async with
        server:` connection when there is one, otherwise on a short one of its own."""
        from mcp.shared.exceptions import MCPError

        arguments = check_arguments(name, args)

        async def get(session: Any) -> str:
            try:
                result = await session.get_prompt(name, arguments)
            except MCPError as error:
                listed = await session.list_prompts()
                raise unknown_prompt(self.label, name, listed.prompts, str(error)) from None
            return prompt_text(self.label, name, result)

        text: str = await self._ask(f"prompts/get {name}", get)
        return text

    async def _ask(self, what: str, operation: Callable[[Any], Awaitable[Any]]) -> Any:
        """`operation` sent on this server's session (shared, or opened for it)."""
        if self._usable_shared():
            assert self._shared is not None
            return await _send(self._shared, what, operation, self.timeout)
        kept: dict[str, Connection] = {}
        async with self._connect(keep=kept) as listing:
            await listing()
            return await _send(kept["connection"], what, operation, self.timeout)

    async def __aenter__(self) -> MCPServer:
        if self._stack is not None:
            raise RuntimeError(f"{self!r} is already open (async with server: is not re-entrant)")
        stack = AsyncExitStack()
        try:
            listing = await stack.enter_async_context(self._connect(shared=True))
            tools, instructions = await listing()
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        self._shared_tools, self._shared_instructions = tools, instructions
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        stack, self._stack = self._stack, None
        self._shared, self._shared_tools, self._shared_instructions = None, [], None
        if stack is not None:
            return await stack.__aexit__(*exc_info)
        return None

    @contextmanager
    def call_options(
        self,
        *,
        headers: Mapping[str, str] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Iterator[None]:
        """`with server.call_options(headers={"Authorization": ...}):` — every call to
        this server made by a run started inside the block sends these HTTP headers and
        this `_meta` as well, without a new server object or connection. Nothing of them
        is stored, logged or shown to the model."""
        current = dict(_CALL_OPTIONS.get() or {})
        current[id(self)] = (dict(headers or {}), dict(meta or {}))
        token = _CALL_OPTIONS.set(current)
        try:
            yield
        finally:
            _CALL_OPTIONS.reset(token)

    # -- the connection -------------------------------------------------------------------

    def _usable_shared(self) -> bool:
        if self._shared is None or self._shared.broken is not None:
            return False
        try:
            return trio.lowlevel.current_trio_token() is self._shared.trio_token
        except RuntimeError:
            return False

    @asynccontextmanager
    async def _connect(
        self, *, shared: bool = False, keep: dict[str, Connection] | None = None
    ) -> AsyncIterator[Callable[[], Awaitable[tuple[list[Tool], str | None]]]]:
        listed: dict[str, Any] = {}

        def on_listing(tools: list[Any], instructions: str | None) -> None:
            listed["tools"] = self._tools_of(tools, connection)
            listed["instructions"] = instructions

        connection = Connection(
            self.label,
            self._transport,
            self.connect_timeout,
            on_listing,
            self.sampling,
            self.approve_sampling,
        )
        if keep is not None:
            keep["connection"] = connection
        with unwrap_single():
            async with trio.open_nursery() as nursery:
                connection.spawn(nursery)

                async def listing() -> tuple[list[Tool], str | None]:
                    await connection.ready()
                    if shared:
                        self._shared = connection
                    return listed["tools"], listed["instructions"]

                try:
                    yield listing
                finally:
                    connection.close()

    def _tools_of(self, listing: list[Any], connection: Connection) -> list[Tool]:
        names = [tool.name for tool in listing]
        if self.allowed is not None:
            unknown = sorted(self.allowed - set(names))
            if unknown:
                raise ConfigurationError(
                    f"allowed names {', '.join(map(repr, unknown))}, which it does not list "
                    f"(it lists {', '.join(map(repr, names)) or 'no tools'})"
                )
        tools: list[Tool] = []
        originals: dict[str, str] = {}  # the name a tool gets here -> its name there
        for listed in listing:
            if self.allowed is not None and listed.name not in self.allowed:
                continue
            tool = self._tool(listed, connection)
            first = originals.setdefault(tool.name, listed.name)
            if first != listed.name:
                raise ConfigurationError(
                    f"its tools {first!r} and {listed.name!r} both become {tool.name!r} here "
                    "(names keep letters, digits, _ and -); leave one out with allowed=[...]"
                )
            tools.append(tool)
        if self.resources:
            tools.extend(self._resource_tools(connection))
        return tools

    def _resource_tools(self, connection: Connection) -> list[Tool]:
        tools: list[Tool] = []
        for spec in resource_tool_specs(self.label):
            name = f"{self.prefix}_{spec['name']}" if self.prefix else spec["name"]
            tools.append(
                MCPTool(
                    name,
                    description=spec["description"],
                    parameters=spec["parameters"],
                    remote_name=spec["method"],
                    method=spec["method"],
                    server=self,
                    connection=connection,
                    requires_approval=self.requires_approval,
                    timeout=self.timeout,
                    idempotent=True,
                    read_only=True,
                    defer_loading=self.defer_loading,
                )
            )
        return tools

    def _tool(self, listed: Any, connection: Connection) -> Tool:
        name = _tool_name(listed.name)
        if self.prefix:
            name = f"{self.prefix}_{name}"[:64]
        annotations = (
            listed.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
            if listed.annotations is not None
            else {}
        )
        try:
            return MCPTool(
                name,
                description=listed.description or annotations.get("title") or listed.title or "",
                parameters=_input_schema(listed.input_schema),
                output=listed.output_schema or None,
                remote_name=listed.name,
                server=self,
                connection=connection,
                requires_approval=self.requires_approval,
                timeout=self.timeout,
                idempotent=bool(annotations.get("idempotentHint")),
                # PROTOCOL §15: read-only when the server says so (`readOnlyHint: true`).
                read_only=annotations.get("readOnlyHint") is True,
                annotations=annotations,
                defer_loading=self.defer_loading,
            )
        except ConfigurationError as error:
            raise ConfigurationError(
                f"its tool {listed.name!r} cannot be used ({error}); leave it out with "
                "allowed=[...]"
            ) from error


class MCPTool(RawTool):
    """A tool of an MCP server: calling it sends tools/call on the server's connection."""

    # A schema the server lists that cannot be used safely fails that tool's calls (their
    # Error Message names why), not the listing of every tool.
    unsafe_schema_fails_definition = False

    def __init__(
        self,
        name: str,
        *,
        remote_name: str,
        server: MCPServer,
        connection: Connection | None,
        method: str = CALL,
        **options: Any,
    ) -> None:
        self.remote_name = remote_name
        # tools/call, or one of the resource methods (`MCPServer(resources=True)`).
        self.method = method
        self.server = server
        self._connection = connection
        super().__init__(name, **options)

    def spec(self) -> dict[str, Any]:
        """The tool as JSON, for `MCPServer.tool_from_spec` in another process."""
        return {
            "name": self.name,
            "remote_name": self.remote_name,
            "method": self.method,
            "description": self.description,
            "parameters": self.parameters,
            "output": self.output,
            "idempotent": self.idempotent,
            "annotations": self.annotations,
        }

    async def run_raw(self, params: dict[str, Any], context: CallContext) -> Any:
        # The parameters were checked against the server's schema; they go as they are.
        headers, meta = (_CALL_OPTIONS.get() or {}).get(id(self.server), ({}, {}))
        resource = self.method in RESOURCE_METHODS
        request = Request(
            self.remote_name,
            params,
            idempotent=self.idempotent,
            headers=headers or None,
            meta=meta or None,
            operation=operation_for(self.method, params) if resource else None,
            desk=current_desk(),
            call_id=context.id,
        )
        if self._connection is None:  # a listing's stand-in (`tool_from_spec`)
            raise MCPConnectionError(f"{self.name!r} of {self.server.label} has no connection")
        await _sent(self._connection, request)
        if request.parked:  # a question was deferred: stop the server's work, wait parked
            # The server was told the question was cancelled and usually ends the call at
            # once; a moment for that answer, then the call is cancelled at the server (a
            # stream cut under an answer on its way makes the client log an error).
            with trio.move_on_after(PARK_GRACE):
                await request.answered.wait()
            request.abandon()
            return PARKED
        if request.error is not None:
            raise request.error
        return request.result if resource else convert_result(request.result)


class MCPPrompt:
    """A prompt of an MCP server, for `tl.Agent(instructions=...)` (alone or in a list
    with strings): each run gets it from the server as it starts (`server.prompt`)."""

    __slots__ = ("args", "name", "server")

    def __init__(self, server: MCPServer, name: str, args: Mapping[str, str] | None = None) -> None:
        if not isinstance(server, MCPServer):
            raise ConfigurationError(
                f"MCPPrompt needs an MCPServer, not {type(server).__name__} {server!r}"
            )
        self.server = server
        self.name = check_name(name)
        self.args = check_arguments(name, args)

    def __repr__(self) -> str:
        return f"MCPPrompt({self.server.label}, {self.name!r})"

    async def text(self) -> str:
        return await self.server.prompt(self.name, self.args)


async def _send(
    connection: Connection,
    what: str,
    operation: Callable[[Any], Awaitable[Any]],
    timeout: float | None,
) -> Any:
    request = Request(what, {}, idempotent=True, operation=operation)
    await _sent(connection, request, timeout)
    if request.error is not None:
        raise request.error
    return request.result


async def _sent(connection: Connection, request: Request, timeout: float | None = None) -> None:
    """Submit `request` and wait for its end; a timeout or a cancellation abandons it
    (the server is told to stop)."""
    connection.submit(request)
    try:
        with trio.fail_after(math.inf if timeout is None else timeout):
            await request.done.wait()
    except BaseException:
        request.abandon()
        raise


def _tool_name(name: str) -> str:
    """MCP allows names tickloop's calls cannot carry (dots, slashes): those characters
    become `_`; the server still gets its own name."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64]
    if not cleaned or not re.match(r"[A-Za-z_]", cleaned):
        cleaned = f"_{cleaned}"[:64]
    return cleaned


def _input_schema(schema: Any) -> dict[str, Any]:
    result = dict(schema or {})
    result.setdefault("type", "object")
    return result


def _positive(value: Any, label: str, option: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigurationError(f"MCP server {label}: {option} must be a positive number")
    return float(value)

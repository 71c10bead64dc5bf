"""`tl.OAuth`: OAuth 2.1 for an HTTP MCP server, as MCP's authorization spec says.

The protocol is the `mcp` package's own client (`OAuthClientProvider`): on a 401 it
discovers the protected resource and authorization server metadata, registers a client
dynamically, runs the authorization code grant with PKCE, and refreshes tokens before
they expire. What is tickloop's here:

- where tokens live (`TokenStore`): in this object's memory, or a JSON file created with
  mode 0600; never in a run's store, events, pages, exceptions or logs;
- the redirect: a one-shot listener on 127.0.0.1 that takes the authorization code; a
  person opens the authorization address (printed, and opened in a browser), or
  `open_url=` hands it to code (a test plays the browser headlessly);
- what a new connection remembers: a run opens its own connection, so the token's expiry
  and the authorization server's metadata are kept with the tokens, and a new
  connection refreshes an expired token rather than asking the person again.
"""

from __future__ import annotations

import html
import inspect
import json
import os
import socket
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from .._errors import ConfigurationError
from ._connection import connect_deadline_paused

__all__ = ["OAuth", "TokenStore"]

#: Seconds the redirect listener waits for the person to finish authorizing.
DEFAULT_AUTHORIZE_TIMEOUT = 300.0

#: The most of a redirect request the listener reads (its request line and headers).
MAX_REQUEST_HEAD = 16 * 1024

_DONE_PAGE = (
    "<!doctype html><meta charset=utf-8><title>tickloop</title>"
    "<p>{message}</p><p>You can close this tab.</p>"
)


class TokenStore:
    """Tokens, client registrations and discovered metadata, one record per server URL:
    in memory, or in a JSON file (mode 0600, replaced atomically on every change).

    Implements the `mcp` client's `TokenStorage` for one URL through `for_url`."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else Path(path).expanduser()
        self._records: dict[str, dict[str, Any]] = {}

    def record(self, url: str) -> dict[str, Any]:
        if self.path is not None and self.path.exists():
            try:
                self._records = json.loads(self.path.read_text())
            except (OSError, ValueError) as error:
                raise ConfigurationError(
                    f"the OAuth token file {self.path} cannot be read ({type(error).__name__})"
                ) from None
        return dict(self._records.get(url) or {})

    def save(self, url: str, record: dict[str, Any]) -> None:
        self._records[url] = record
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        # Created 0600 (not chmod-ed after): no moment when another user can read it.
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            json.dump(self._records, file)
        os.replace(temporary, self.path)

    def for_url(self, url: str) -> _Storage:
        return _Storage(self, url)


class _Storage:
    """The `mcp` client's `TokenStorage` over one URL's record. `context` (the provider's
    state, set once it exists) is read when tokens change, to keep what a later
    connection needs: the expiry as a time, and the discovered metadata."""

    def __init__(self, store: TokenStore, url: str) -> None:
        self.store = store
        self.url = url
        self.context: Any = None

    async def get_tokens(self) -> Any:
        from mcp.shared.auth import OAuthToken

        tokens = self.store.record(self.url).get("tokens")
        return None if tokens is None else OAuthToken.model_validate(tokens)

    async def set_tokens(self, tokens: Any) -> None:
        record = self.store.record(self.url)
        record["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        context = self.context
        if context is not None:
            record["expires_at"] = context.token_expiry_time
            for field in ("oauth_metadata", "protected_resource_metadata"):
                value = getattr(context, field, None)
                if value is not None:
                    record[field] = value.model_dump(mode="json", exclude_none=True)
        self.store.save(self.url, record)

    async def get_client_info(self) -> Any:
        from mcp.shared.auth import OAuthClientInformationFull

        info = self.store.record(self.url).get("client_info")
        return None if info is None else OAuthClientInformationFull.model_validate(info)

    async def set_client_info(self, client_info: Any) -> None:
        record = self.store.record(self.url)
        record["client_info"] = client_info.model_dump(mode="json", exclude_none=True)
        self.store.save(self.url, record)

    def restore_into(self, context: Any) -> None:
        """A new connection's provider starts where the last one stopped: it knows when
        the stored token expires (so it refreshes it) and where the token endpoint is."""
        from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata

        self.context = context
        record = self.store.record(self.url)
        context.token_expiry_time = record.get("expires_at")
        if record.get("oauth_metadata"):
            context.oauth_metadata = OAuthMetadata.model_validate(record["oauth_metadata"])
            context.auth_server_url = str(context.oauth_metadata.issuer)
        if record.get("protected_resource_metadata"):
            context.protected_resource_metadata = ProtectedResourceMetadata.model_validate(
                record["protected_resource_metadata"]
            )

    def redirect_port(self) -> int | None:
        """The loopback port the stored registration was made for, if any."""
        info = self.store.record(self.url).get("client_info") or {}
        for uri in info.get("redirect_uris") or []:
            parsed = urllib.parse.urlsplit(str(uri))
            if parsed.hostname == "127.0.0.1" and parsed.port:
                return parsed.port
        return None


class OAuth:
    """OAuth 2.1 for `MCPServer.http(url, auth=tl.OAuth(...))`.

    `scopes`: what to ask for (default: what the server's metadata names). `token_file`:
    where tokens persist across processes (a 0600 JSON file); without it they last as
    long as this object. `open_url(url)` (sync or async) is given the authorization
    address to open; by default it is printed to stderr and opened in a browser.
    `redirect_port`: the 127.0.0.1 port of the redirect (default: one free port, kept
    with the registration). `timeout`: seconds to wait for the person (default 300).
    """

    def __init__(
        self,
        *,
        scopes: Sequence[str] | None = None,
        client_name: str = "tickloop",
        token_file: str | os.PathLike[str] | None = None,
        open_url: Callable[[str], Any] | None = None,
        redirect_port: int | None = None,
        timeout: float = DEFAULT_AUTHORIZE_TIMEOUT,
    ) -> None:
        if isinstance(scopes, str):
            raise ConfigurationError("OAuth scopes must be a list of strings, not one string")
        self.scopes = None if scopes is None else [str(scope) for scope in scopes]
        self.client_name = client_name
        self.tokens = TokenStore(token_file)
        if open_url is not None and not callable(open_url):
            raise ConfigurationError(f"OAuth open_url must be callable, not {open_url!r}")
        self.open_url = open_url
        if redirect_port is not None and (
            isinstance(redirect_port, bool)
            or not isinstance(redirect_port, int)
            or not 0 < redirect_port < 65536
        ):
            raise ConfigurationError(
                f"OAuth redirect_port must be a port number, not {redirect_port!r}"
            )
        self.redirect_port = redirect_port
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigurationError(f"OAuth timeout must be a positive number, not {timeout!r}")
        self.timeout = float(timeout)

    def __repr__(self) -> str:  # nothing of the tokens
        where = f"token_file={str(self.tokens.path)!r}" if self.tokens.path else "in memory"
        return f"OAuth({where})"

    def provider(self, url: str, label: str) -> Any:
        """The `mcp` client's `httpx` auth for one connection to `url`."""
        from mcp.client.auth import OAuthClientProvider
        from mcp.shared.auth import OAuthClientMetadata

        storage = self.tokens.for_url(url)
        port = self.redirect_port or storage.redirect_port() or _free_port()
        redirect = Redirect(port, label, self.open_url, self.timeout)
        metadata = OAuthClientMetadata(
            client_name=self.client_name,
            redirect_uris=[redirect.uri],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="client_secret_post",
            scope=" ".join(self.scopes) if self.scopes else None,
        )
        provider = OAuthClientProvider(
            url,
            metadata,
            storage,
            redirect_handler=redirect.remember,
            callback_handler=redirect.wait_for_code,
        )
        storage.restore_into(provider.context)
        return provider


class Redirect:
    """The authorization code's way back: the address goes to the person (or `open_url`),
    and a listener on 127.0.0.1 takes the one request the browser is redirected to."""

    def __init__(
        self, port: int, label: str, open_url: Callable[[str], Any] | None, timeout: float
    ) -> None:
        self.port = port
        self.uri = f"http://127.0.0.1:{port}/callback"
        self.label = label
        self.open_url = open_url
        self.timeout = timeout
        self._address: str | None = None

    async def remember(self, address: str) -> None:
        # Opened once the listener is up (`wait_for_code`), so the redirect finds it.
        self._address = address

    async def wait_for_code(self) -> Any:
        from mcp.client.auth import AuthorizationCodeResult

        address, self._address = self._address, None
        if address is None:
            raise ConfigurationError("the OAuth flow asked for a code before an address")
        got: dict[str, str] = {}
        done = trio.Event()
        try:
            listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        except OSError as error:
            raise ConfigurationError(
                f"the OAuth redirect for {self.label} needs 127.0.0.1:{self.port}, which "
                f"cannot be listened on ({error.strerror}); pass OAuth(redirect_port=...)"
            ) from None
        # The person takes as long as they take: the connect timeout waits meanwhile.
        with connect_deadline_paused(), trio.move_on_after(self.timeout) as waited:
            async with trio.open_nursery() as nursery:
                for listener in listeners:
                    nursery.start_soon(self._serve, listener, got, done)
                nursery.start_soon(self._open, address)
                await done.wait()
                nursery.cancel_scope.cancel()
        for listener in listeners:
            await listener.aclose()
        if waited.cancelled_caught:
            raise ConfigurationError(
                f"nobody authorized tickloop for {self.label} within {self.timeout:g} s"
            )
        if "error" in got:
            description = got.get("error_description", "")
            raise ConfigurationError(
                f"the authorization server of {self.label} refused: {got['error']}"
                + (f" ({description})" if description else "")
            )
        return AuthorizationCodeResult(code=got["code"], state=got.get("state"), iss=got.get("iss"))

    async def _open(self, address: str) -> None:
        if self.open_url is None:
            print(
                f"To let tickloop use the MCP server {self.label}, open: {address}",
                file=sys.stderr,
            )
            import webbrowser

            await trio.to_thread.run_sync(webbrowser.open, address)
            return
        # A sync hook runs in a thread: it may block (follow the redirect itself) while
        # this loop serves the listener.
        if inspect.iscoroutinefunction(self.open_url):
            await self.open_url(address)
            return
        result = await trio.to_thread.run_sync(self.open_url, address)
        if inspect.isawaitable(result):
            await result

    async def _serve(
        self, listener: trio.SocketListener, got: dict[str, str], done: trio.Event
    ) -> None:
        while not done.is_set():
            stream = await listener.accept()
            async with stream:
                with trio.move_on_after(10):
                    params = await self._read_redirect(stream)
                    if params is None:
                        await _answer(stream, "404 Not Found", "Not the OAuth redirect.")
                        continue
                    received = "code" in params or "error" in params
                    message = (
                        f"tickloop received the authorization for {self.label}."
                        if "code" in params
                        else f"Authorization for {self.label} was not given."
                    )
                    await _answer(stream, "200 OK" if received else "400 Bad Request", message)
                    if received:
                        got.update(params)
                        done.set()

    async def _read_redirect(self, stream: trio.SocketStream) -> dict[str, str] | None:
        head = b""
        while b"\r\n\r\n" not in head and len(head) < MAX_REQUEST_HEAD:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != "GET":
            return None
        target = urllib.parse.urlsplit(parts[1])
        if target.path != "/callback":
            return None
        return dict(urllib.parse.parse_qsl(target.query))


async def _answer(stream: trio.SocketStream, status: str, message: str) -> None:
    body = _DONE_PAGE.format(message=html.escape(message)).encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
    try:
        await stream.send_all(head.encode() + body)
    except trio.BrokenResourceError:
        pass


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port

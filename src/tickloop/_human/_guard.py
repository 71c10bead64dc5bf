"""The access rule of tickloop's servers, as ASGI middleware for apps it did not write.

The inbox checks its token itself (`_web.WebApp`); the AG-UI and A2A apps are served by
`tickloop serve --agui/--a2a` behind this guard, with the same rule: every request
carries the token printed with the URL, as `Authorization: Bearer <token>` (programmatic
clients) or `?token=` (a browser opening the printed URL); no token, no answer (401),
and a request whose `Origin` is not the server's own is refused (403), so another site
cannot drive the agent from a visitor's browser.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs, quote

__all__ = ["TokenGuard"]

Scope = MutableMapping[str, Any]
ASGI = Callable[[Scope, Any, Any], Awaitable[None]]


class TokenGuard:
    """Wraps an ASGI app: only requests with the token, from no or an allowed Origin."""

    def __init__(self, app: ASGI, *, token: str | None = None) -> None:
        self.app = app
        self.token = token or secrets.token_urlsafe(24)
        self.origins: set[str] = set()

    def url(self, host: str, port: int, path: str = "/") -> str:
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}{path}?token={quote(self.token)}"

    def bound(self, host: str, port: int) -> None:
        """The server listens: its own origins are the ones a browser may send."""
        shown = f"[{host}]" if ":" in host else host
        self.origins = {f"http://{shown}:{port}", f"http://localhost:{port}"}
        if host in ("0.0.0.0", "::"):
            self.origins.add(f"http://127.0.0.1:{port}")

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan: no request to check
            await self.app(scope, receive, send)
            return
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", ())
        }
        if not self._has_token(scope, headers):
            await _refuse(send, 401, "this server needs the access token printed when it started")
            return
        origin = headers.get("origin")
        if origin is not None and origin not in self.origins:
            await _refuse(send, 403, f"refused: a request from another site ({origin})")
            return
        await self.app(scope, receive, send)

    def _has_token(self, scope: Scope, headers: dict[str, str]) -> bool:
        given = None
        authorization = headers.get("authorization", "")
        if authorization[:7].lower() == "bearer ":
            given = authorization[7:].strip()
        else:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = (query.get("token") or [None])[0]
        return given is not None and hmac.compare_digest(
            given.encode("utf-8", "replace"), self.token.encode()
        )


async def _refuse(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _config(host: str, port: int) -> Any:
    from hypercorn.config import Config

    config = Config()
    shown = f"[{host}]" if ":" in host else host
    config.bind = [f"{shown}:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.5
    return config


def _port(binds: Any) -> int:
    return int(str(binds[0]).rsplit(":", 1)[1])


async def serve_trio(
    guard: TokenGuard,
    host: str,
    port: int,
    *,
    task_status: Any = None,
) -> None:
    """Serve `guard` on Hypercorn's trio worker until cancelled; reports the bound port."""
    import trio
    from hypercorn.trio import serve

    app: Any = guard  # an ASGI app; hypercorn's type names its own scope types
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve(app, _config(host, port), task_status=task_status)
        )
        bound = _port(binds)
        guard.bound(host, bound)
        if task_status is not None:
            task_status.started(bound)


async def serve_asyncio(
    guard: TokenGuard,
    host: str,
    port: int,
    *,
    started: Callable[[int], None] | None = None,
    shutdown: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve `guard` on Hypercorn's asyncio worker (apps that need asyncio: a2a-sdk's)
    until cancelled or `shutdown` returns; `started` gets the bound port."""
    import asyncio
    import socket

    from hypercorn.asyncio import serve

    # Bind first, so the port is known before serving (port 0: any free one).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)  # connections made before Hypercorn accepts wait in the backlog
    bound = sock.getsockname()[1]
    config = _config(host, bound)
    config.bind = [f"fd://{sock.fileno()}"]
    guard.bound(host, bound)
    if started is not None:
        started(bound)
    app: Any = guard
    try:
        await serve(app, config, shutdown_trigger=shutdown or asyncio.Future)
    finally:
        sock.detach()  # Hypercorn served on this descriptor and has closed it

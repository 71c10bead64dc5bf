"""The approval web app (Starlette, served by Hypercorn's trio worker), for both a live
process (`tl.BrowserApproval`) and a store (`tickloop serve`).

Security, because a page that decides what an agent may do is worth attacking: it binds
127.0.0.1 unless told otherwise; every request needs the random token printed with the
URL (403 without); decisions are POSTs only, carrying the token, and a POST whose
`Origin` is not this server is refused (another site cannot make the browser decide);
responses forbid framing by others, caching and referrers (the token is in the URL), and
the page's script runs only with a per-response nonce. A call is decided once: a second
answer for it is refused with the decision it already has.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Awaitable, Callable
from html import escape as html_escape
from typing import Any, Protocol
from urllib.parse import quote, unquote

import trio

from .._errors import ConfigurationError
from ._common import CallView, Refused
from ._page import CallRow, RunView, render_index, render_run
from ._question_form import FIELD

__all__ = ["Backend", "Changes", "WebApp", "require_web", "serve"]

EXTRA_HINT = "pip install 'tickloop[web]'"
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# The headers of a plain-text answer (an error): nothing in it runs, is framed or sniffed.
_PLAIN_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _host_name(host: str) -> str:
    """The name of a Host header, without its port: `[::1]:80` -> `::1`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def require_web() -> None:
    """Import the web stack now, or say which extra provides it."""
    try:
        import hypercorn.trio  # noqa: F401
        import starlette.applications  # noqa: F401
    except ImportError as error:
        raise ConfigurationError(
            f"the approval page needs the web extra ({error.name} is missing): {EXTRA_HINT}"
        ) from error


class Changes:
    """A version number that grows on every change, and a way to wait for the next one.

    `bump` must be called in the server's trio thread (other threads go through its
    `TrioToken`); the live page and the server-sent events wait on it.
    """

    def __init__(self) -> None:
        self.version = 0
        self._event = trio.Event()

    def bump(self) -> None:
        self.version += 1
        self._event.set()
        self._event = trio.Event()

    async def wait_change(self, seen: int) -> int:
        while self.version == seen:
            await self._event.wait()
        return self.version


class Backend(Protocol):
    """What the pages show and where decisions go: a live process, or a store."""

    title: str
    changes: Changes

    def snapshot(self) -> tuple[list[RunView], list[CallView]]: ...

    def run_page(self, run_id: str) -> tuple[RunView, list[CallRow], list[CallView]] | None: ...

    def timeline(self, run_id: str) -> str | None: ...

    async def decide(
        self, run_id: str, call_id: str, action: str, reason: str, text: str, slot: str = ""
    ) -> str:
        """Decide a call; `slot` is the page's number for a call without a run id."""
        ...


class WebApp:
    """The Starlette app over one backend, with its token and the origins it accepts."""

    def __init__(self, backend: Backend, *, token: str | None = None) -> None:
        require_web()
        self.backend = backend
        self.token = token or secrets.token_urlsafe(24)
        self.origins: set[str] = set()
        # The names a request may give in its Host header (None: any). A page of another
        # site whose name an attacker pointed at 127.0.0.1 (DNS rebinding) reaches this
        # port with its own name there, and is refused.
        self.hosts: set[str] | None = set(_LOOPBACK_NAMES)
        self.asgi = self._guard_host(self._build())

    def url(self, host: str, port: int) -> str:
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/?token={quote(self.token)}"

    def bound(self, host: str, port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        self.origins = {f"http://{shown}:{port}", f"http://localhost:{port}"}
        if host in ("0.0.0.0", "::"):
            self.origins.add(f"http://127.0.0.1:{port}")
            self.hosts = None  # every address of the machine, by any of its names
        else:
            self.hosts = {*_LOOPBACK_NAMES, host.lower()}

    def _guard_host(self, app: Any) -> Any:
        """The app, refusing (403) a request whose Host is not a name of this server."""
        from starlette.responses import Response

        async def guarded(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and self.hosts is not None:
                given = dict(scope.get("headers") or ()).get(b"host", b"")
                if _host_name(given.decode("latin-1")) not in self.hosts:
                    refused = Response(
                        "refused: this request names a host that is not this server\n",
                        status_code=403,
                        media_type="text/plain",
                        headers=_PLAIN_HEADERS,
                    )
                    await refused(scope, receive, send)
                    return
            await app(scope, receive, send)

        return guarded

    # -- the routes ----------------------------------------------------------------------

    def _build(self) -> Any:
        from starlette.applications import Starlette
        from starlette.responses import Response, StreamingResponse
        from starlette.routing import Route

        backend = self.backend

        def headers(nonce: str, *, frame: str = "'none'") -> dict[str, str]:
            return {
                "Content-Security-Policy": (
                    f"default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-{nonce}'; "
                    f"connect-src 'self'; img-src 'self' data:; form-action 'self'; "
                    f"frame-src 'self'; frame-ancestors {frame}; base-uri 'none'"
                ),
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-store",
            }

        def forbidden() -> Any:
            return Response(
                "forbidden: this page needs the access token of the URL printed when it started\n",
                status_code=403,
                media_type="text/plain",
                headers=headers(secrets.token_urlsafe(8)),
            )

        def allowed(given: Any) -> bool:
            return isinstance(given, str) and hmac.compare_digest(
                given.encode("utf-8", "replace"), self.token.encode()
            )

        def html(text_of: Callable[[str], str], status: int = 200) -> Any:
            nonce = secrets.token_urlsafe(16)
            return Response(
                text_of(nonce), status_code=status, media_type="text/html", headers=headers(nonce)
            )

        async def index(request: Any, flash: str | None = None, kind: str = "ok") -> Any:
            if not allowed(request.query_params.get("token")):
                return forbidden()
            runs, pending = await trio.to_thread.run_sync(backend.snapshot)
            note = flash if flash is not None else request.query_params.get("flash")
            return html(
                lambda nonce: render_index(
                    title=backend.title,
                    runs=runs,
                    pending=pending,
                    token=self.token,
                    nonce=nonce,
                    flash=note,
                    flash_kind=kind,
                ),
                status=409 if kind == "refused" else 200,
            )

        def not_found(run_id: str) -> Any:
            # Plain text that no browser may sniff as markup, the id escaped all the same.
            return Response(
                f"no run {html_escape(run_id)}\n",
                status_code=404,
                media_type="text/plain",
                headers=_PLAIN_HEADERS,
            )

        async def run_route(request: Any) -> Any:
            """/runs/ID and /runs/ID/timeline, ID path-quoted: it may hold a `/`."""
            if not allowed(request.query_params.get("token")):
                return forbidden()
            raw = request.scope.get("raw_path") or quote(request.scope["path"]).encode()
            rest = raw.decode("latin-1").split("/runs/", 1)[1]
            if rest.endswith("/timeline"):
                return await timeline(unquote(rest.removesuffix("/timeline")))
            return await run_page(request, unquote(rest))

        async def run_page(request: Any, run_id: str) -> Any:
            found = await trio.to_thread.run_sync(backend.run_page, run_id)
            if found is None:
                return not_found(run_id)
            run, calls, pending = found
            return html(
                lambda nonce: render_run(
                    title=backend.title,
                    run=run,
                    calls=calls,
                    pending=pending,
                    token=self.token,
                    nonce=nonce,
                    flash=request.query_params.get("flash"),
                )
            )

        async def timeline(run_id: str) -> Any:
            page = await trio.to_thread.run_sync(backend.timeline, run_id)
            if page is None:
                return not_found(run_id)
            nonce = secrets.token_urlsafe(16)
            page = page.replace("<script>", f'<script nonce="{nonce}">')
            return Response(page, media_type="text/html", headers=headers(nonce, frame="'self'"))

        async def decide(request: Any) -> Any:
            wants_json = "application/json" in request.headers.get("accept", "")
            origin = request.headers.get("origin")
            form = await request.form()
            if not allowed(form.get("token")) and not allowed(
                request.headers.get("x-tickloop-token")
            ):
                return forbidden()
            if origin is not None and origin not in self.origins:
                message = f"refused: a decision from another site ({html_escape(origin)})"
                return Response(
                    message + "\n", status_code=403, media_type="text/plain", headers=_PLAIN_HEADERS
                )
            run_id = str(form.get("run") or "")
            call_id = str(form.get("call") or "")
            action = str(form.get("action") or "")
            reason = str(form.get("reason") or "")
            text = str(form.get("params") or form.get("value") or "")
            if action == "accept":  # an MCP server's question: its fields, as JSON
                text = json.dumps(
                    {
                        key[len(FIELD) :]: [str(value) for value in form.getlist(key)]
                        for key in form.keys()  # a multidict: keys once
                        if key.startswith(FIELD)
                    }
                )
            slot = str(form.get("slot") or "")
            try:
                message = await backend.decide(run_id, call_id, action, reason, text, slot)
            except Refused as refusal:
                if wants_json:
                    return json_response({"error": str(refusal)}, 409)
                return await index(_WithToken(self.token), str(refusal), "refused")
            if wants_json:
                return json_response({"message": message}, 200)
            target = f"/?token={quote(self.token)}&flash={quote(message)}"
            return Response(status_code=303, headers={"Location": target, **headers("x")})

        def json_response(body: dict[str, Any], status: int) -> Any:
            return Response(
                json.dumps(body),
                status_code=status,
                media_type="application/json",
                headers=headers("x"),
            )

        async def events(request: Any) -> Any:
            if not allowed(request.query_params.get("token")):
                return forbidden()

            async def stream() -> Any:
                seen = backend.changes.version
                yield "retry: 1500\n\n"
                while True:
                    changed = None
                    with trio.move_on_after(15):
                        changed = await backend.changes.wait_change(seen)
                    if changed is None:
                        yield ": still here\n\n"
                    else:
                        seen = changed
                        yield f"data: {seen}\n\n"

            return StreamingResponse(stream(), media_type="text/event-stream", headers=headers("x"))

        return Starlette(
            routes=[
                Route("/", index),
                Route("/runs/{rest:path}", run_route),
                Route("/decide", decide, methods=["POST"]),
                Route("/events", events),
            ]
        )


class _WithToken:
    """What `index` reads of a request, to render a refusal on the inbox page."""

    def __init__(self, token: str) -> None:
        self.query_params = {"token": token}


async def serve(
    app: WebApp,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    shutdown: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve `app` until cancelled (or `shutdown` returns); reports the bound port."""
    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve

    config = Config()
    shown = f"[{host}]" if ":" in host else host
    config.bind = [f"{shown}:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.5
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: hypercorn_serve(
                app.asgi, config, shutdown_trigger=shutdown, task_status=task_status
            )
        )
        bound = int(str(binds[0]).rsplit(":", 1)[1])
        app.bound(host, bound)
        task_status.started(bound)

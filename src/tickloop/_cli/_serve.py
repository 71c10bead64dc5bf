"""`tickloop serve`: the approval inbox over a store, in the browser.

It prints its URL (with the access token) once it listens, serves until interrupted,
and with `--agent MODULE:ATTR` resumes a paused run once every call it waits on has a
decision, in this process (the agent's tools run here).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

import trio

from .._errors import ConfigurationError, ResumeError, StoreError
from ._serve_web import cannot_listen, run_web

__all__ = ["add_serve_command", "run_serve"]


def add_serve_command(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve the approval inbox for stored runs in the browser",
        description="Serve a page listing every stored run and every call waiting for a "
        "decision; decisions are written to the store as `tickloop approve` writes them. "
        "With --agent, a paused run is resumed here once every call it waits on is "
        "decided. Needs the web extra: pip install 'tickloop[web]'.",
    )
    serve.add_argument("--store", default="runs.db", metavar="PATH", help="the store file")
    serve.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)"
    )
    serve.add_argument("--port", type=int, default=0, help="the port (default: any free one)")
    serve.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="the agent (or a function returning it) that resumes decided runs",
    )
    web = serve.add_mutually_exclusive_group()
    web.add_argument(
        "--agui",
        metavar="MODULE:AGENT",
        help="instead of the inbox, serve this agent to AG-UI frontends (POST /, events "
        "as server-sent events); needs the agui extra",
    )
    web.add_argument(
        "--a2a",
        metavar="MODULE:AGENT",
        help="instead of the inbox, serve this agent over A2A; needs the a2a extra",
    )


def run_serve(arguments: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if arguments.agui is not None or arguments.a2a is not None:
        return run_web(arguments, out, sys.stderr)
    try:
        from .._human._inbox import StoreInbox
        from .._human._web import WebApp, require_web, serve
        from ._runs import _existing_store, load_agent

        require_web()
        store = _existing_store(arguments.store)
        agent = None
        if arguments.agent is not None:
            agent = load_agent(arguments.agent)
            agent.store = store
        inbox = StoreInbox(store, agent)
        app = WebApp(inbox)
    except (ConfigurationError, ResumeError, StoreError) as error:
        print(f"tickloop serve: {error}", file=sys.stderr)
        return 2

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve, app, arguments.host, arguments.port)
            out.write(f"tickloop serve: {app.url(arguments.host, port)}\n")
            out.flush()
            nursery.start_soon(inbox.run)

    try:
        trio.run(main)
    except BaseException as error:  # trio raises what ended it inside exception groups
        return cannot_listen(error, arguments.host, arguments.port, sys.stderr)
    return 0

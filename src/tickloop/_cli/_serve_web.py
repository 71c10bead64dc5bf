"""`tickloop serve --agui MODULE:AGENT` and `--a2a MODULE:AGENT`: an agent for AG-UI
frontends or A2A clients, with the inbox's rules (docs/web.md): 127.0.0.1 unless told
otherwise, the printed URL carries the access token, programmatic clients send it as
`Authorization: Bearer`, a browser's Origin must be this server's; no token, no answer.

The AG-UI app is served on Hypercorn's trio worker (the run is trio's own); the A2A app
on its asyncio worker, because a2a-sdk's server is asyncio (the run is a trio guest).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterator
from typing import Any, TextIO

import trio

from .._errors import ConfigurationError, ResumeError

__all__ = ["cannot_listen", "run_web"]


def run_web(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    protocol = "agui" if arguments.agui is not None else "a2a"
    try:
        from .._human._guard import TokenGuard
        from ._runs import load_agent

        agent = load_agent(arguments.agui or arguments.a2a)
        if protocol == "agui":
            from .. import agui

            guard = TokenGuard(agui.app(agent))
        else:
            from .. import a2a  # noqa: F401  (fails here, before listening, without the extra)

            guard = TokenGuard(_not_yet_bound)
    except ImportError as error:
        print(
            f"tickloop serve: --{protocol} needs the {protocol} extra ({error.name} is "
            f"missing): pip install 'tickloop[{protocol}]'",
            file=err,
        )
        return 2
    except (ConfigurationError, ResumeError) as error:
        print(f"tickloop serve: {error}", file=err)
        return 2

    host, port = arguments.host, arguments.port

    def announce(bound: int) -> None:
        out.write(f"tickloop serve: {guard.url(host, bound)}\n")
        out.flush()

    try:
        if protocol == "agui":
            trio.run(_serve_agui, guard, host, port, announce)
        else:
            asyncio.run(_serve_a2a(guard, agent, host, port, announce))
    except BaseException as error:  # trio's nursery wraps a busy port in a group
        return cannot_listen(error, host, port, err)
    return 0


async def _serve_agui(guard: Any, host: str, port: int, announce: Any) -> None:
    from .._human._guard import serve_trio

    async with trio.open_nursery() as nursery:
        announce(await nursery.start(serve_trio, guard, host, port))


async def _serve_a2a(guard: Any, agent: Any, host: str, port: int, announce: Any) -> None:
    from .. import a2a
    from .._human._guard import serve_asyncio

    def started(bound: int) -> None:  # bound, not yet serving: the card names this URL
        shown = f"[{host}]" if ":" in host else host
        guard.app = a2a.app(agent, url=f"http://{shown}:{bound}/")
        announce(bound)

    await serve_asyncio(guard, host, port, started=started)


async def _not_yet_bound(scope: Any, receive: Any, send: Any) -> None:
    raise RuntimeError("the A2A app is made once the port is bound")


def cannot_listen(error: BaseException, host: str, port: int, err: TextIO) -> int:
    """How a server's end is told: Ctrl-C is the way to stop it (0); an address it
    cannot listen on (a busy port) one line and exit 2; anything else raised as it is.
    `error` may be an exception group holding them (trio's nurseries raise those)."""
    leaves = list(_leaves(error))
    if all(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
        return 0
    listening = [leaf for leaf in leaves if isinstance(leaf, OSError)]
    if not listening or len(listening) != len(leaves):
        raise error
    print(f"tickloop serve: cannot listen on {host}:{port}: {listening[0]}", file=err)
    return 2


def _leaves(error: BaseException) -> Iterator[BaseException]:
    """The exceptions an exception group holds, however deeply; else the exception."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error

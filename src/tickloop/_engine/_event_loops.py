"""Which event loop a run was called from, and the call that fits it.

A synchronous entry point (`agent.run`, `tl.run_calls`) starts its own trio run, which
cannot happen inside one; an async one (`agent.run_async`, `tl.execute`) runs inside
trio and cannot be awaited from asyncio. Both are the caller's mistake, so each is a
RuntimeError before anything runs that names the call to use instead, rather than trio's
own "must be called from async context" or "Attempted to call run() from inside a run()".
"""

from __future__ import annotations

import sniffio
import trio

__all__ = ["refuse_inside_trio", "require_trio"]


def refuse_inside_trio(call: str, instead: str) -> None:
    """Raise when synchronous `call` is made from inside a trio run."""
    if trio.lowlevel.in_trio_run():
        raise RuntimeError(
            f"{call} starts its own trio run and cannot be called inside one: "
            f"use `{instead}` instead"
        )


def require_trio(call: str, from_asyncio: str) -> None:
    """Raise when async `call` is awaited outside trio; `from_asyncio` says what to do
    from asyncio (the usual case: a FastAPI app, a notebook, `asyncio.run`)."""
    if trio.lowlevel.in_trio_run():
        return
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = "no event loop"
    if library == "asyncio":
        raise RuntimeError(
            f"{call} runs inside trio, but it was awaited from asyncio: {from_asyncio} "
            "(see docs/asyncio.md)"
        )
    raise RuntimeError(f"{call} runs inside trio, but it was awaited from {library}")

"""Awaiting a trio run from asyncio, through trio's guest mode.

Guest mode runs trio's scheduler inside the asyncio event loop's thread, so an asyncio
web app can await an agent run without a second thread and without blocking its loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

__all__ = ["run_trio_in_asyncio"]

T = TypeVar("T")


async def run_trio_in_asyncio(function: Callable[[], Awaitable[T]]) -> T:
    """Run `function` (a trio async function) to completion as a guest of this loop."""
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[Any] = loop.create_future()
    handle: dict[str, Any] = {}

    async def guest() -> T:
        handle["token"] = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            handle["scope"] = scope
            return await function()
        raise asyncio.CancelledError  # the asyncio side cancelled the run

    def done(outcome: Any) -> None:
        if not finished.done():
            finished.set_result(outcome)

    trio.lowlevel.start_guest_run(
        guest,
        run_sync_soon_threadsafe=loop.call_soon_threadsafe,
        done_callback=lambda outcome: loop.call_soon_threadsafe(done, outcome),
        host_uses_signal_set_wakeup_fd=True,
    )
    try:
        outcome = await asyncio.shield(finished)
    except asyncio.CancelledError:
        # Cancel the trio side and wait for it to unwind, so no task outlives the caller.
        token = handle.get("token")
        if token is not None:
            token.run_sync_soon(lambda: handle["scope"].cancel())
        await asyncio.wait([finished])
        raise
    return outcome.unwrap()

"""Which framework drives a run: trio alone, or asyncio through the guest-mode bridge.

Kept apart from the bridge so that a plain trio run never imports asyncio.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    import asyncio

__all__ = ["HOST_LOOP", "host_loop", "run_on_host"]

HOST_LOOP: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "tickloop_host_loop", default=None
)
"""The asyncio loop a trio guest run serves; trio tasks inherit it from the job's task."""


def host_loop() -> asyncio.AbstractEventLoop | None:
    """The asyncio loop driving this trio run (`run_asyncio`), or None under plain trio."""
    return HOST_LOOP.get()


async def run_on_host(loop: asyncio.AbstractEventLoop, coroutine: Any) -> Any:
    """Await an asyncio coroutine as a task of the host loop, from trio.

    Guest mode runs trio's steps inside the host loop's thread, so the task is made
    directly; its end wakes trio through the run's token (an asyncio callback runs
    outside trio's context). Cancelling the trio side cancels the task and waits for it
    to unwind, so nothing it started outlives the call.
    """
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()
    task = loop.create_task(coroutine)
    task.add_done_callback(lambda _: token.run_sync_soon(done.set))
    try:
        await done.wait()
    except trio.Cancelled:
        task.cancel()
        with trio.CancelScope(shield=True):
            await done.wait()
        raise
    return task.result()

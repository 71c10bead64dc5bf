"""Awaiting trio code from asyncio, through trio's guest mode.

Guest mode runs trio's scheduler inside the asyncio event loop's thread, so an asyncio
web app can await an agent run without a second thread and without blocking its loop.
Only one trio run may exist per thread, so every job of one asyncio loop shares one guest
run: the first job starts it, later jobs join it, and it ends when its last job does.

Everything here runs on the asyncio loop's thread (guest mode runs trio's steps as
asyncio callbacks), so a check followed by an update is never interleaved with trio.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio

from ._host import HOST_LOOP as _HOST_LOOP

__all__ = ["run_trio_in_asyncio"]

_guests: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Guest] = weakref.WeakKeyDictionary()


class _Job:
    """One awaited trio function and the asyncio future that receives its result."""

    def __init__(self, function: Callable[[], Awaitable[Any]], result: asyncio.Future[Any]):
        self.function = function
        self.result = result
        self.scope: trio.CancelScope | None = None
        self.cancel_requested = False

    async def run(self, guest: _Guest) -> None:
        _HOST_LOOP.set(guest.loop)  # this task's context: the run's tasks inherit it
        try:
            with trio.CancelScope() as scope:
                self.scope = scope
                if self.cancel_requested:
                    scope.cancel()
                value = await self.function()
                self._settle(partial(_set_result, value=value))
                return
            self._settle(lambda future: future.set_exception(asyncio.CancelledError()))
        except Exception as error:  # handed to the awaiting asyncio task, not lost
            self._settle(partial(_set_exception, error=error))
        finally:
            guest.job_finished()

    def cancel(self) -> None:
        self.cancel_requested = True
        if self.scope is not None:
            self.scope.cancel()

    def _settle(self, how: Callable[[asyncio.Future[Any]], None]) -> None:
        if not self.result.done():
            how(self.result)


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    future.set_result(value)


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    future.set_exception(error)


class _Guest:
    """A trio guest run hosting the jobs of one asyncio loop while any is active."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.open = True  # accepts jobs; False once the last job has finished
        self.active = 0
        self.done: asyncio.Future[Any] = loop.create_future()
        self._first: _Job | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._idle: trio.Event | None = None

    def start(self, job: _Job) -> None:
        self.active = 1
        self._first = job
        trio.lowlevel.start_guest_run(
            self._main,
            run_sync_soon_threadsafe=self.loop.call_soon_threadsafe,
            done_callback=self._finished,
            host_uses_signal_set_wakeup_fd=True,
        )

    def submit(self, job: _Job) -> None:
        assert self.open and self._token is not None
        self.active += 1
        self._token.run_sync_soon(self._spawn, job)

    def cancel(self, job: _Job) -> None:
        if self._token is not None:
            self._token.run_sync_soon(job.cancel)
        else:
            job.cancel()

    def job_finished(self) -> None:
        self.active -= 1
        if self.active == 0:
            self.open = False
            assert self._idle is not None
            self._idle.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._idle = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            assert self._first is not None
            nursery.start_soon(self._first.run, self)
            self._first = None
            await self._idle.wait()

    def _spawn(self, job: _Job) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(job.run, self)

    def _finished(self, outcome: Any) -> None:
        self.open = False
        if not self.done.done():
            self.done.set_result(outcome)


async def run_trio_in_asyncio(function: Callable[[], Awaitable[Any]]) -> Any:
    """Run `function` (a trio async function) to completion as a guest of this loop."""
    loop = asyncio.get_running_loop()
    job = _Job(function, loop.create_future())
    while True:
        guest = _guests.get(loop)
        if guest is None:
            guest = _Guest(loop)
            _guests[loop] = guest
            guest.start(job)
            break
        if guest.open and guest._token is not None:
            guest.submit(job)
            break
        if guest.open:  # just created, not started yet: let it start
            await asyncio.sleep(0)
            continue
        await asyncio.shield(guest.done)  # a guest that is ending: wait, then start anew
        if _guests.get(loop) is guest:
            del _guests[loop]
    try:
        await asyncio.shield(job.result)
    except asyncio.CancelledError:
        if not job.result.done():
            # Cancel the trio side and let it unwind, so no task outlives its caller.
            guest.cancel(job)
            await asyncio.wait([job.result])
            await _let_guest_end(guest)
        _retrieve(job.result)
        raise
    except BaseException:
        await _let_guest_end(guest)
        raise
    await _let_guest_end(guest)
    return job.result.result()


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark the outcome seen: the caller was cancelled and re-raises its own
    CancelledError, so asyncio must not log "Future exception was never retrieved"."""
    if future.done() and not future.cancelled():
        future.exception()


async def _let_guest_end(guest: _Guest) -> None:
    """The last job waits for the guest run to end, so it never outlives the loop."""
    if not guest.open:
        await asyncio.shield(guest.done)

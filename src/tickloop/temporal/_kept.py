"""Results a worker keeps, so that a result a handler returned is never lost.

A tool activity whose worker is alive can still be failed by the server: when the server
was unreachable for longer than the heartbeat timeout, it times the activity out (the
heartbeats never arrived) and rejects the worker's report that the call finished. The
handler ran and returned; only the report was lost. Temporal then retries the activity.

So each call's work runs as a task this process keeps, by (workflow id, workflow run id,
activity id) — the same for every attempt of one call. A retried attempt that finds the
call here awaits that task (still running, or finished) and reports its result instead of
running the handler again. A retried attempt that finds nothing (the worker that ran the
call died, or the retry went to another worker) runs the handler again only for an
idempotent tool; any other call ends interrupted (PROTOCOL §10).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import activity

__all__ = ["KEPT", "Kept", "call_key"]

Key = tuple[str, str, str]

#: Finished results kept at most (the oldest go first). A retry comes a second or two
#: after the server is back, so only the calls that finished during an outage matter.
KEEP_FINISHED = 1000


def call_key() -> Key:
    """The running activity's call, the same for each of its attempts."""
    info = activity.info()
    return (info.workflow_id or "", info.workflow_run_id or "", info.activity_id)


class Kept:
    """The calls this process ran, by key: each a task that outlives its attempt."""

    def __init__(self, keep_finished: int = KEEP_FINISHED) -> None:
        self._keep_finished = keep_finished
        self._tasks: dict[Key, asyncio.Task[dict[str, Any]]] = {}
        self._finished: OrderedDict[Key, None] = OrderedDict()
        # Workers of one process may run on different threads' event loops.
        self._lock = threading.Lock()

    def find(self, key: Key) -> asyncio.Task[dict[str, Any]] | None:
        """The task of `key` on this event loop, if this process ran that call here."""
        with self._lock:
            task = self._tasks.get(key)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            return None
        if task.cancelled():  # it never ran to an end: nothing was returned
            return None
        return task

    async def run(self, key: Key, work: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """Run `work` as a task kept under `key`, and its result. The task goes on when
        this attempt is cancelled (the server gave up on it), for a retry to collect."""
        task = asyncio.get_running_loop().create_task(_call(work))
        with self._lock:
            self._tasks[key] = task
        task.add_done_callback(lambda _: self._finish(key, task))
        return await asyncio.shield(task)

    def _finish(self, key: Key, task: asyncio.Task[dict[str, Any]]) -> None:
        with self._lock:
            if self._tasks.get(key) is not task:
                return
            self._finished[key] = None
            while len(self._finished) > self._keep_finished:
                oldest, _ = self._finished.popitem(last=False)
                self._tasks.pop(oldest, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._tasks)


async def _call(work: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    return await work()


#: This process's calls (one store for every worker the process runs).
KEPT = Kept()

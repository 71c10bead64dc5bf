"""Issue 16 items 2 and 11: async tools under `agent.run_asyncio()` run on the asyncio loop,
a tool written for the other framework is named with the fix, and cancelling a run from
asyncio leaves no unretrieved future behind."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import trio

import tickloop as tl


@tl.tool
async def asyncio_tool(n: int) -> dict[str, Any]:
    """Uses what only asyncio has: its current task and an asyncio.Event."""
    await asyncio.sleep(0)
    event = asyncio.Event()
    asyncio.get_running_loop().call_soon(event.set)
    async with asyncio.timeout(None):  # asyncio.timeout needs a current asyncio task
        await event.wait()
    return {"n": n, "in_task": asyncio.current_task() is not None}


@tl.tool
async def trio_tool(n: int) -> int:
    await trio.lowlevel.checkpoint()
    await trio.sleep(0)
    return n


def _agent(tool: tl.Tool) -> tl.Agent:
    calls = [{"_tool": tool.name, "n": 1, "_outputPath": "†state.x"}]
    model = tl.ScriptedModel([{"calls": calls, "output": None}, {"calls": [], "output": "ok"}])
    return tl.Agent(model, tools=[tool])


def test_an_asyncio_tool_runs_on_the_host_loop_under_run_asyncio() -> None:
    result = asyncio.run(_agent(asyncio_tool).run_asyncio({}))
    assert result.errors == []
    assert result.state == {"x": {"n": 1, "in_task": True}}


def test_an_asyncio_tool_under_trio_is_named_with_the_fix() -> None:
    result = _agent(asyncio_tool).run({})
    [error] = result.errors
    assert "'asyncio_tool'" in error["data"]["error"]["message"]
    assert "run_asyncio" in error["data"]["error"]["message"]
    assert "unrecognized yield" not in error["data"]["error"]["message"]


def test_a_trio_tool_still_runs_in_trio_under_run_asyncio() -> None:
    result = asyncio.run(_agent(trio_tool).run_asyncio({}))
    assert result.errors == [] and result.state == {"x": 1}


@tl.tool
async def mixed(n: int) -> int:
    await asyncio.sleep(0)
    await trio.sleep(0)
    return n


def test_a_tool_may_await_both_frameworks_under_run_asyncio() -> None:
    result = asyncio.run(_agent(mixed).run_asyncio({}))
    assert result.errors == [] and result.state == {"x": 1}


def test_cancelling_run_asyncio_leaves_no_unretrieved_future() -> None:
    reported: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
        # The model's second chunk comes an hour (trio time) later: the run is waiting.
        model = tl.ScriptedModel([{"calls": [], "output": "ok"}], chunk_chars=4, chunk_delay=3600)
        task = asyncio.ensure_future(tl.Agent(model).run_asyncio({}))
        for _ in range(50):  # let the run reach the tool: loop turns, no wall clock
            await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        gc.collect()
        for _ in range(3):
            await asyncio.sleep(0)

    asyncio.run(main())
    gc.collect()
    assert not [m for m in reported if "never retrieved" in m]

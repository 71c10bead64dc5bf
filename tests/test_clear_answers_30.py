"""Issue 30: clear answers for a new user (event loops, tools=, references, FunctionModel,
OpenTelemetry, ids, the trace's clock, missing descriptions, the docs).

Each test names the item of the issue it covers; each failed before its fix.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import trio

import tickloop as tl


@tl.tool
async def echo(text: str) -> str:
    """Return the text."""
    return text


def _answer(calls: list[dict[str, Any]] | None = None, output: Any = "ok") -> dict[str, Any]:
    return {"calls": calls or [], "output": output}


# -- item 1: the right call for the event loop at hand ------------------------------------


def test_run_async_awaited_from_asyncio_names_run_asyncio() -> None:
    agent = tl.Agent(tl.ScriptedModel([_answer()]), tools=[echo])

    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"await agent\.run_asyncio\("):
            await agent.run_async({"q": 1})
        with pytest.raises(RuntimeError, match=r"agent\.resume_async runs inside trio"):
            await agent.resume_async("r1")
        with pytest.raises(RuntimeError, match=r"tl\.execute runs inside trio"):
            await tl.execute([], tools=[echo])

    asyncio.run(main())


def test_run_inside_trio_names_run_async() -> None:
    agent = tl.Agent(tl.ScriptedModel([_answer()]), tools=[echo])

    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"await agent\.run_async\("):
            agent.run({"q": 1})
        with pytest.raises(RuntimeError, match=r"await agent\.resume_async\("):
            agent.resume("r1")

    trio.run(main)


# -- item 3: tools={...} -------------------------------------------------------------------


def test_a_tools_mapping_whose_key_is_not_the_tools_name_is_refused() -> None:
    message = r"tools= maps 'say' to tool 'echo'.*tools=\[echo, \.\.\.\].*name='say'"
    with pytest.raises(tl.ConfigurationError, match=message):
        tl.Agent(tl.ScriptedModel([_answer()]), tools={"say": echo})
    with pytest.raises(tl.ConfigurationError, match=message):
        tl.run_calls([{"_tool": "say", "text": "hi"}], tools={"say": echo})
    with pytest.raises(tl.ConfigurationError, match=r"maps 'x' to 'echo', which is not a"):
        tl.run_calls([], tools={"x": "echo"})


def test_a_tools_mapping_keyed_by_the_tools_names_is_the_same_as_a_list() -> None:
    calls = [{"_tool": "echo", "text": "hi", "_outputPath": "†state.said"}]
    assert tl.run_calls(calls, tools={"echo": echo}).state == {"said": "hi"}

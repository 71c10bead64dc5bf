"""Issue 16: every mistake a new user (or an attacker) makes gets a clear answer.

Each test names the item of the issue it covers; each failed on main before the fix.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest
import trio

import tickloop as tl


@tl.tool
async def echo(text: str) -> str:
    return text


def _answer(calls: list[dict[str, Any]] | None = None, output: Any = "ok") -> dict[str, Any]:
    return {"calls": calls or [], "output": output}


# -- item 3: an on_event callback that raises -------------------------------------------


def test_a_raising_on_event_callback_is_logged_counted_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    seen: list[str] = []

    def broken(event: tl.RunEvent) -> None:
        seen.append(event.kind)
        raise RuntimeError("dashboard down")

    calls = [{"_tool": "echo", "text": "hi", "_outputPath": "†state.x"}]
    agent = tl.Agent(
        tl.ScriptedModel([_answer(calls), _answer()]),
        tools=[echo],
        store=tmp_path / "runs.db",
    )
    caplog.set_level(logging.ERROR, logger="tickloop")
    result = agent.run({"q": 1}, run_id="r1", on_event=broken)
    assert result.status == "done"
    assert result.state == {"x": "hi"}
    assert "run.started" in seen and "run.ended" in seen
    messages = [r.getMessage() for r in caplog.records if r.name == "tickloop"]
    assert any("on_event" in m and "run.started" in m for m in messages)
    # The run is not left claimed: it is done in the store.
    assert tl.SQLiteStore(tmp_path / "runs.db").run("r1").status == "done"


def test_on_event_that_is_not_callable_is_refused_at_construction() -> None:
    with pytest.raises(tl.ConfigurationError, match="on_event"):
        tl.Agent(tl.ScriptedModel([]), on_event="x")  # type: ignore[arg-type]
    agent = tl.Agent(tl.ScriptedModel([_answer()]))
    with pytest.raises(tl.ConfigurationError, match="on_event"):
        agent.run({}, on_event=5)  # type: ignore[arg-type]


# -- item 5: run_calls and tools= given the wrong shape ----------------------------------


@pytest.mark.parametrize(
    ("calls", "match"),
    [
        ({"_tool": "echo", "text": "a"}, r"\[call\]"),
        ('[{"_tool": "echo"}]', "json.loads"),
        (None, "NoneType"),
    ],
)
def test_run_calls_refuses_what_is_not_a_list_of_calls(calls: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        tl.run_calls(calls, tools=[echo])


@pytest.mark.parametrize("tools", [echo, "echo"])
def test_tools_must_be_a_list(tools: Any) -> None:
    with pytest.raises(tl.ConfigurationError, match=r"tools= expects a list"):
        tl.run_calls([], tools=tools)
    with pytest.raises(tl.ConfigurationError, match=r"tools= expects a list"):
        tl.Agent(tl.ScriptedModel([]), tools=tools)


# -- item 7: options checked when defined -----------------------------------------------


def test_tool_options_are_checked_at_definition() -> None:
    def f(x: int) -> int:
        return x

    with pytest.raises(tl.ConfigurationError, match="timeout"):
        tl.tool(f, timeout=math.nan)
    with pytest.raises(tl.ConfigurationError, match=r"depends_on=\['other'\]"):
        tl.tool(f, depends_on="other")
    with pytest.raises(tl.ConfigurationError, match="idempotent"):
        tl.tool(f, idempotent="no")  # type: ignore[arg-type]
    with pytest.raises(tl.ConfigurationError, match="name="):
        tl.tool(lambda x: x)
    assert tl.tool(lambda x: x, name="ident").name == "ident"


def test_agent_and_run_calls_options_are_checked() -> None:
    with pytest.raises(tl.ConfigurationError, match="instructions"):
        tl.Agent(tl.ScriptedModel([]), instructions=5)  # type: ignore[arg-type]
    with pytest.raises(tl.ConfigurationError, match="state"):
        tl.run_calls([], tools=[echo], state=[1, 2])  # type: ignore[arg-type]


def test_run_calls_inside_trio_says_use_execute() -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match="await tl.execute"):
            tl.run_calls([], tools=[echo])

    trio.run(main)

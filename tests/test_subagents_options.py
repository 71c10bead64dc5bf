"""Sub-agents cut off, and a sub-agent's own options (PROTOCOL §11).

A sub-agent whose call runs out of time leaves no call of its tree `running`: each ends
`failed`, cancelled, everywhere a call is shown. A sub-agent's own approval hook decides
its calls first (its Deny is final, its Approve goes on to the root's hook), and its own
store, when it is not the root's, is refused before anything runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import tickloop as tl
from tickloop.events import CallFinished


def solution(*calls: dict[str, Any], output: Any = None) -> dict[str, Any]:
    return {"calls": list(calls), "output": output}


def on_mock_clock(agent: tl.Agent, input: Any = None, **options: Any) -> tl.RunResult:
    async def main() -> tl.RunResult:
        return await agent.run_async(input, **options)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@tl.tool
async def crawl(site: str) -> str:
    """Crawl a site (slow)."""
    await trio.sleep(100)
    return f"all of {site}"


def _crawler(name: str, *agents: tl.Agent) -> tl.Agent:
    """A sub-agent that crawls (100 s) and, beside it, calls each agent of `agents`."""
    calls = [{"_tool": "crawl", "site": name, "_outputPath": "†state.site"}]
    calls += [
        {"_tool": agent.name, "task": "go", "_outputPath": f"†state.a{i}"}
        for i, agent in enumerate(agents)
    ]
    return tl.Agent(
        tl.ScriptedModel([solution(*calls), solution(output="crawled")]),
        tools=[crawl, *agents],
        name=name,
        description=f"Crawl for {name}.",
    )


def test_a_sub_agent_cut_off_by_its_timeout_leaves_no_call_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outer = _crawler("outer", _crawler("inner"))
    store = tl.SQLiteStore(tmp_path / "runs.db")
    events: list[tl.RunEvent] = []
    root = tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "outer", "task": "go", "_outputPath": "†state.o"}),
                solution(output="gave up"),
            ]
        ),
        tools=[outer.as_tool(timeout=5)],
        store=store,
        on_event=events.append,
    )
    result = on_mock_clock(root, {}, run_id="cut")
    assert result.output == "gave up"
    assert "TimeoutError" in result.records["c1.0"].error["message"]
    below = ["c1.0/c1.0", "c1.0/c1.1", "c1.0/c1.1/c1.0"]
    for call_id in below:
        record = result.records[call_id]
        assert record.status == "failed", call_id
        assert record.error["message"].startswith("Cancelled"), call_id
    rows = {call.id: call for call in store.calls("cut")}
    assert {call_id: rows[call_id].status for call_id in below} == dict.fromkeys(below, "failed")
    assert all(rows[call_id].finished is not None for call_id in below)
    finished = {e.call_id for e in events if isinstance(e, CallFinished)}
    assert finished >= {"c1.0", *below}

    from tickloop._cli._main import main

    assert main(["trace", "cut", "--store", str(tmp_path / "runs.db")]) == 0
    trace = capsys.readouterr().out
    assert "running" not in trace and trace.count("Cancelled") == 3


def test_a_run_cancelled_from_outside_leaves_its_childs_calls_to_the_resume(
    tmp_path: Path,
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    root = tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "outer", "task": "go", "_outputPath": "†state.o"}),
                solution(output="done"),
            ]
        ),
        tools=[_crawler("outer").as_tool(timeout=500)],
        store=store,
    )

    async def cancelled_after_5_s() -> None:
        with trio.move_on_after(5):
            await root.run_async({}, run_id="stopped")

    trio.run(cancelled_after_5_s, clock=trio.testing.MockClock(autojump_threshold=0))
    # Not the agent call's own time limit: the run stays resumable, its child as it was.
    rows = {call.id: call.status for call in store.calls("stopped")}
    assert rows == {"c1.0": "running", "c1.0/c1.0": "running"}
    resumed = trio.run(
        lambda: root.resume_async("stopped"), clock=trio.testing.MockClock(autojump_threshold=0)
    )
    assert resumed.output == "done"
    assert "interrupted" in resumed.records["c1.0/c1.0"].error["message"]

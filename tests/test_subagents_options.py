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


# -- a sub-agent's own hook and store ----------------------------------------------------

WIRED: list[int] = []


@tl.tool(requires_approval=True)
def wire(cents: int) -> str:
    """Wire money."""
    WIRED.append(cents)
    return f"wired {cents}"


def _treasurer(approve: Any = None, store: Any = None) -> tl.Agent:
    return tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "wire", "cents": 1_000_000, "_outputPath": "†state.w"}),
                solution(output="†state.w"),
            ]
        ),
        tools=[wire],
        name="treasurer",
        description="Moves money.",
        approve=approve,
        store=store,
    )


def _root(child: tl.Agent, approve: Any, store: Any = None) -> tl.Agent:
    return tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "treasurer", "task": "pay", "_outputPath": "†state.t"}),
                solution(output="ok"),
            ]
        ),
        tools=[child],
        approve=approve,
        store=store,
    )


def test_a_sub_agents_own_deny_is_final_whatever_the_roots_hook_says() -> None:
    WIRED.clear()
    asked_root: list[str] = []

    def approve_everything(call: tl.PendingCall) -> bool:
        asked_root.append(call.id)
        return True

    never_wire = _treasurer(approve=lambda call: tl.Deny("never wire money"))
    result = on_mock_clock(_root(never_wire, approve_everything), {})
    assert WIRED == []
    denied = result.records["c1.0/c1.0"]
    assert denied.status == "denied" and "never wire money" in denied.error["message"]
    assert asked_root == []  # its Deny is final: the root's hook is not asked


def test_a_sub_agents_own_approve_still_goes_to_the_roots_hook() -> None:
    WIRED.clear()
    seen: list[tuple[str, str]] = []

    def child_hook(call: tl.PendingCall) -> Any:
        seen.append(("child", call.id))
        return tl.Edit(cents=500) if call.params["cents"] > 1000 else True

    def root_hook(call: tl.PendingCall) -> bool:
        seen.append(("root", call.id))
        return call.params["cents"] <= 1000

    result = on_mock_clock(_root(_treasurer(approve=child_hook), root_hook), {})
    # The child's hook saw the full path and capped the amount; the root's approved that.
    assert seen == [("child", "c1.0/c1.0"), ("root", "c1.0/c1.0")]
    assert WIRED == [500] and result.records["c1.0/c1.0"].status == "done"

    WIRED.clear()
    refused = on_mock_clock(_root(_treasurer(approve=lambda call: True), lambda c: False), {})
    assert WIRED == [] and refused.records["c1.0/c1.0"].status == "denied"


def test_a_sub_agents_store_can_only_be_the_roots(tmp_path: Path) -> None:
    WIRED.clear()
    root_store = tl.SQLiteStore(tmp_path / "root.db")
    other = _treasurer(store=tl.SQLiteStore(tmp_path / "other.db"))
    with pytest.raises(tl.ConfigurationError, match=r"sub-agent 'treasurer' has store=.*other\.db"):
        on_mock_clock(_root(other, lambda call: True, root_store), {}, run_id="r")
    with pytest.raises(tl.ConfigurationError, match="sub-agent 'treasurer' has store="):
        on_mock_clock(_root(other, lambda call: True), {})
    assert WIRED == [] and list(root_store.runs()) == []  # refused before anything ran
    same = _treasurer(store=tl.SQLiteStore(tmp_path / "root.db"))
    result = on_mock_clock(_root(same, lambda call: True, root_store), {}, run_id="r")
    assert result.output == "ok" and WIRED == [1_000_000]


def test_a_sub_agent_with_its_own_hook_is_refused_on_temporal_not_lost() -> None:
    from tickloop import temporal as tlt

    child = _treasurer(approve=lambda call: tl.Deny("never"))
    root = tl.Agent(tl.ScriptedModel([]), tools=[child], approve=lambda c: True, name="root")
    with pytest.raises(tl.ConfigurationError, match="'treasurer' has an approval hook of its own"):
        tlt.worker(None, [root], task_queue="q")  # type: ignore[arg-type]


def test_a_resumed_agent_call_keeps_the_time_it_first_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    WIRED.clear()
    store = tl.SQLiteStore(tmp_path / "runs.db")
    root = _root(_treasurer(), lambda call: tl.Defer(), store)
    assert root.run({}, run_id="later").status == "paused"
    first = {call.id: call for call in store.calls("later")}
    done = root.resume("later", decisions={"c1.0/c1.0": tl.Approve()})
    assert done.status == "done" and WIRED == [1_000_000]
    rows = {call.id: call for call in store.calls("later")}
    # Still one call, from its first start to its end, around everything its child did.
    assert rows["c1.0"].started == first["c1.0"].started
    assert rows["c1.0"].started <= rows["c1.0/c1.0"].received
    assert rows["c1.0"].finished >= rows["c1.0/c1.0"].finished
    records = done.records
    assert records["c1.0"].started <= records["c1.0/c1.0"].started

    from tickloop._cli._main import main

    assert main(["trace", "later", "--store", str(tmp_path / "runs.db")]) == 0
    agent_line, child_line = capsys.readouterr().out.splitlines()[1:3]
    assert float(agent_line.split()[3].rstrip("s")) <= float(child_line.split()[3].rstrip("s"))


def test_the_timeline_draws_a_childs_model_requests_on_its_agent_calls_row(
    tmp_path: Path,
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    root = _root(_treasurer(), lambda call: True, store)
    root.run({}, run_id="drawn")
    page = tl.timeline_html(store, "drawn")
    for iteration in (1, 2):
        assert f"<title>request {iteration}: " in page  # the root's lane
        assert f"<title>sub-agent run c1.0: request {iteration}: " in page
    row = page.index('data-id="c1.0"')
    assert row < page.index('data-run="c1.0"') < page.index('data-id="c1.0/c1.0"')

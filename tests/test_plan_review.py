"""Plan review (PROTOCOL §15 "Plan review"): one approval covers the gated calls that
read the approved call's output, transitively; `PendingCall.downstream` names them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tickloop as tl
from tickloop._core._decisions import decision_from_dict, decision_to_dict


@tl.tool
def fetch(n: int) -> int:
    """Read a number."""
    return n


@tl.tool(requires_approval=True)
def charge(cents: int) -> int:
    """Charge the card."""
    return cents


@tl.tool(requires_approval=lambda p: p["cents"] > 100)
def refund(cents: int) -> int:
    """Refund the card."""
    return -cents


@tl.tool
def note(value: int) -> int:
    """Note a value."""
    return value


def _branch() -> list[dict[str, Any]]:
    """c1.0 gated root (asked once its input is fetched, so the whole plan is known); a
    branch of four gated calls reading it (one through a call that needs no approval);
    c1.6 gated but reading nothing of the branch."""
    return [
        {"_tool": "charge", "cents": "†state.x", "_outputPath": "†state.a"},
        {"_tool": "charge", "cents": "†state.a", "_outputPath": "†state.b"},
        {"_tool": "charge", "cents": "†state.b", "_outputPath": "†state.c"},
        {"_tool": "note", "value": "†state.a", "_outputPath": "†state.n"},
        {"_tool": "charge", "cents": "†state.n", "_outputPath": "†state.d"},
        {"_tool": "charge", "cents": "†state.c", "_outputPath": "†state.e"},
        {"_tool": "charge", "cents": "†state.y", "_outputPath": "†state.f"},
        {"_tool": "fetch", "n": 10, "_outputPath": "†state.x"},
        {"_tool": "fetch", "n": 3, "_outputPath": "†state.y"},
    ]


def test_one_approval_with_downstream_approves_a_branch_of_four_gated_calls() -> None:
    asked: list[tl.PendingCall] = []

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call)
        return tl.Approve(downstream=call.id == "c1.0")

    result = tl.run_calls(_branch(), tools=[fetch, charge, note], approve=hook)
    asked.sort(key=lambda call: call.id)  # in the order they became ready
    assert [call.id for call in asked] == ["c1.0", "c1.6"]  # the branch is never asked
    assert asked[0].downstream == ["c1.1", "c1.2", "c1.4", "c1.5"]
    assert asked[1].downstream == []
    assert result.state == {
        **{"a": 10, "b": 10, "c": 10, "n": 10, "d": 10, "e": 10, "f": 3},
        **{"x": 10, "y": 3},
    }
    by = {record.id: record.approved_by for record in result.records.values()}
    assert by == {
        "c1.0": None,  # asked itself
        "c1.1": "hook",
        "c1.2": "hook",
        "c1.3": None,  # needs no approval
        "c1.4": "hook",
        "c1.5": "hook",
        "c1.6": None,
        "c1.7": None,
        "c1.8": None,
    }


def test_a_plain_approval_covers_nothing_downstream() -> None:
    asked: list[str] = []

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        return tl.Approve()

    tl.run_calls(_branch(), tools=[fetch, charge, note], approve=hook)
    assert sorted(asked) == ["c1.0", "c1.1", "c1.2", "c1.4", "c1.5", "c1.6"]


def test_a_denied_call_s_dependents_settle_as_section_5_says() -> None:
    asked: list[str] = []

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        if call.id == "c1.0":
            return tl.Deny("no")
        return tl.Approve(downstream=True)

    result = tl.run_calls(_branch(), tools=[fetch, charge, note], approve=hook)
    status = {record.id: record.status for record in result.records.values()}
    assert status["c1.0"] == "denied"
    # Unresolved (§5): what they read was to be written by a denied call.
    for dependent in ("c1.1", "c1.2", "c1.3", "c1.4", "c1.5"):
        assert status[dependent] == "invalid", dependent
        assert result.records[dependent].error["type"] == "structural"
    assert status["c1.6"] == "done"
    assert sorted(asked) == ["c1.0", "c1.6"]  # a call never ready is never asked about


def test_an_advance_approval_of_a_predicate_gated_call_holds_only_if_it_still_asks() -> None:
    plan = [
        {"_tool": "charge", "cents": 500, "_outputPath": "†state.big"},
        {"_tool": "refund", "cents": "†state.big", "_outputPath": "†state.r1"},
        {"_tool": "charge", "cents": 5, "_outputPath": "†state.small"},
        {"_tool": "refund", "cents": "†state.small", "_outputPath": "†state.r2"},
    ]
    asked: list[str] = []

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        return tl.Approve(downstream=True)

    result = tl.run_calls(plan, tools=[charge, refund], approve=hook)
    assert result.state["r1"] == -500 and result.state["r2"] == -5
    # c1.1 resolved to 500: the predicate still asks, the advance approval holds. c1.3
    # resolved to 5: the predicate no longer asks, so the advance approval does not hold
    # and the call goes to the hook (docs/decisions.md).
    assert asked == ["c1.0", "c1.2", "c1.3"]
    by = {record.id: record.approved_by for record in result.records.values()}
    assert by["c1.1"] == "hook" and by["c1.3"] is None


def test_approve_downstream_is_stored_as_json() -> None:
    body = decision_to_dict(tl.Approve(downstream=True))
    assert body == {"decision": "approve", "downstream": True}
    assert decision_from_dict(body) == tl.Approve(downstream=True)
    assert decision_from_dict({"decision": "approve"}) == tl.Approve()


CHILD = r'''
"""An agent whose hook approves c1.0 and what reads it; killed while c1.1 runs."""
import json
import os
import sys

import trio

import tickloop as tl

DIR = os.environ["REVIEW_DIR"]


def log(line):
    with open(os.path.join(DIR, "asked"), "a", encoding="utf-8") as file:
        file.write(line + "\n")


@tl.tool(requires_approval=True)
async def charge(n: int) -> int:
    return n + 1


@tl.tool(idempotent=True)
async def slow(n: int) -> int:
    await trio.sleep(float(os.environ["REVIEW_SLOW"]))
    return n


PLAN = [
    {"_tool": "charge", "n": 1, "_outputPath": "†state.a"},
    {"_tool": "slow", "n": "†state.a", "_outputPath": "†state.s"},
    {"_tool": "charge", "n": "†state.s", "_outputPath": "†state.b"},
    {"_tool": "charge", "n": "†state.b", "_outputPath": "†state.c"},
]


class Model:
    async def stream_solution(self, request):
        if request.iteration == 1:
            yield tl.TextDelta(json.dumps({"calls": PLAN, "output": None}))
            return
        yield tl.TextDelta(json.dumps({"calls": [], "output": "finished"}))


def hook(call):
    log(call.id)
    return tl.Approve(downstream=True)


def review(plan):
    log("review")
    return {"c1.0": tl.Approve(downstream=True)}


def make_agent(store):
    by_review = os.environ.get("REVIEW_BY") == "plan"
    return tl.Agent(
        Model(),
        tools=[charge, slow],
        store=store,
        approve=hook,
        review_plan=review if by_review else None,
    )


if __name__ == "__main__":
    make_agent(sys.argv[1]).run({"task": "review"}, run_id="reviewed")
'''


@pytest.mark.parametrize("by", ["hook", "plan"])
def test_advance_approvals_survive_a_sigkill_and_no_call_is_asked_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    asked_first = ["review"] if by == "plan" else ["c1.0"]
    (tmp_path / "reviewchild.py").write_text(CHILD, encoding="utf-8")
    db = tmp_path / "runs.db"
    env = {**os.environ, "REVIEW_DIR": str(tmp_path), "REVIEW_SLOW": "600", "REVIEW_BY": by}
    child = subprocess.Popen(
        [sys.executable, str(tmp_path / "reviewchild.py"), str(db)],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_until_running(db, "c1.1", child)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        assert child.stderr is not None
        child.stderr.close()
    assert (tmp_path / "asked").read_text().split() == asked_first
    monkeypatch.setenv("REVIEW_DIR", str(tmp_path))
    monkeypatch.setenv("REVIEW_BY", by)
    monkeypatch.setenv("REVIEW_SLOW", "0")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("reviewchild", None)
    import reviewchild  # type: ignore[import-not-found]

    result = reviewchild.make_agent(tl.SQLiteStore(db)).resume("reviewed")
    assert result.status == "done" and result.state["c"] == 4
    assert (tmp_path / "asked").read_text().split() == asked_first  # nobody asked again
    stored = {call.id: call for call in tl.SQLiteStore(db).calls("reviewed")}
    assert stored["c1.3"].status == "done"


def _wait_until_running(
    db: Path, call_id: str, process: subprocess.Popen[bytes], done: str | None = None
) -> None:
    """Until `call_id` runs (and the call `done`, if given, is stored done)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if db.exists():
            try:
                calls = {call.id: call.status for call in tl.SQLiteStore(db).calls("reviewed")}
            except tl.ResumeError:  # not created yet
                calls = {}
            if calls.get(call_id) == "running" and (done is None or calls.get(done) == "done"):
                return
        if process.poll() is not None:
            assert process.stderr is not None
            raise AssertionError(f"the child exited early: {process.stderr.read().decode()}")
        time.sleep(0.02)
    raise AssertionError(f"{call_id} never ran")


class _Model:
    """Streams `plan` in iteration 1, then a final answer."""

    def __init__(self, plan: list[dict[str, Any]]) -> None:
        self.plan = plan

    async def stream_solution(self, request: Any) -> Any:
        if request.iteration == 1:
            yield tl.TextDelta(json.dumps({"calls": self.plan, "output": None}))
            return
        yield tl.TextDelta(json.dumps({"calls": [], "output": "finished"}))


def test_review_plan_sees_the_gated_calls_and_arrows_and_approves_a_branch_at_once() -> None:
    plans: list[tl.Plan] = []
    asked: list[str] = []

    def review(plan: tl.Plan) -> dict[str, tl.Decision]:
        plans.append(plan)
        return {"c1.0": tl.Approve(downstream=True)}

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        return tl.Approve()

    agent = tl.Agent(
        _Model(_branch()), tools=[fetch, charge, note], approve=hook, review_plan=review
    )
    result = agent.run({"task": "pay"})
    assert result.output == "finished"
    [plan] = plans
    assert [call.id for call in plan.calls] == ["c1.0", "c1.1", "c1.2", "c1.4", "c1.5", "c1.6"]
    assert plan.arrows == [("c1.0", "c1.1"), ("c1.0", "c1.4"), ("c1.1", "c1.2"), ("c1.2", "c1.5")]
    first = plan.calls[0]
    assert not first.resolved and first.params == {"cents": "†state.x"}
    assert first.downstream == ["c1.1", "c1.2", "c1.4", "c1.5"]
    assert asked == ["c1.6"]  # the one call the review left to the hook
    by = {record.id: record.approved_by for record in result.records.values()}
    assert [by[f"c1.{n}"] for n in (0, 1, 2, 4, 5, 6)] == ["review"] * 5 + [None]


def test_a_review_may_deny_before_parameters_are_known() -> None:
    asked: list[str] = []

    def review(plan: tl.Plan) -> dict[str, tl.Decision]:
        return {"c1.0": tl.Deny("not today")}

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        return tl.Approve()

    agent = tl.Agent(
        _Model(_branch()), tools=[fetch, charge, note], approve=hook, review_plan=review
    )
    result = agent.run({"task": "pay"})
    records = result.records
    assert records["c1.0"].status == "denied"
    assert records["c1.0"].error == {"type": "denied", "message": "not today"}
    assert all(records[f"c1.{n}"].status == "invalid" for n in (1, 2, 3, 4, 5))
    assert asked == ["c1.6"] and records["c1.6"].output == 3


def test_an_edit_before_parameters_are_known_is_refused_and_the_hook_is_asked() -> None:
    asked: list[str] = []

    def review(plan: tl.Plan) -> dict[str, tl.Decision]:
        return {"c1.0": tl.Approve(), "c1.1": tl.Edit(cents=1)}  # c1.1 reads c1.0's output

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        return tl.Approve()

    agent = tl.Agent(
        _Model(_branch()), tools=[fetch, charge, note], approve=hook, review_plan=review
    )
    result = agent.run({"task": "pay"})
    assert "c1.1" in asked and "c1.0" not in asked
    assert result.records["c1.1"].output == 10  # not edited


def test_a_sub_agent_s_requests_are_reviewed_by_its_own_review_plan() -> None:
    reviewed: list[list[str]] = []
    asked: list[str] = []

    def review(plan: tl.Plan) -> dict[str, tl.Decision]:
        reviewed.append([call.id for call in plan.calls])
        return {"c1.0": tl.Approve(downstream=True)}

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        return tl.Approve()

    child = tl.Agent(
        tl.ScriptedModel(
            [
                {
                    "calls": [
                        {"_tool": "charge", "cents": 5, "_outputPath": "†state.a"},
                        {"_tool": "charge", "cents": "†state.a", "_outputPath": "†state.b"},
                    ],
                    "output": None,
                },
                {"calls": [], "output": "†state.b"},
            ]
        ),
        tools=[charge],
        name="payer",
        review_plan=review,
    )
    parent = tl.Agent(
        tl.ScriptedModel(
            [
                {"calls": [{"_tool": "payer", "task": "pay", "_outputPath": "†state.paid"}]},
                {"calls": [], "output": "†state.paid"},
            ]
        ),
        tools=[child],
        approve=hook,
    )
    result = parent.run({"task": "go"})
    assert result.output == 5
    assert reviewed == [["c1.0", "c1.1"]]  # the child's own plan, by its own review
    assert asked == []  # the root's hook, which serves the tree, was not needed


def test_native_tool_calls_are_reviewed_too_with_depends_on_as_an_arrow() -> None:
    @tl.tool(requires_approval=True, output_path="†state.receipt")
    def pay(cents: int) -> int:
        """Pay."""
        return cents

    @tl.tool(requires_approval=True, depends_on=["†state.receipt"])
    def mail(to: str) -> str:
        """Mail the receipt."""
        return f"mailed {to}"

    plans: list[tl.Plan] = []
    asked: list[str] = []

    def review(plan: tl.Plan) -> dict[str, tl.Decision]:
        plans.append(plan)
        return {"c1.0": tl.Approve(downstream=True)}

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        return tl.Approve()

    calls = [
        {"name": "pay", "arguments": {"cents": 5}},
        {"name": "mail", "arguments": {"to": "ada"}},
    ]
    model = tl.ScriptedModel([{"tool_calls": calls}, "done"])
    agent = tl.Agent(model, tools=[pay, mail], protocol="tools", approve=hook, review_plan=review)
    result = agent.run("pay and mail")
    assert result.output == "done"
    [plan] = plans
    assert plan.arrows == [("c1.0", "c1.1")]
    assert asked == []
    assert result.records["c1.1"].approved_by == "review"


def test_a_replay_asks_neither_the_review_nor_the_hook(tmp_path: Path) -> None:
    asked: list[str] = []

    def review(plan: tl.Plan) -> dict[str, tl.Decision]:
        asked.append("review")
        return {"c1.0": tl.Approve(downstream=True)}

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        return tl.Approve()

    def agent() -> tl.Agent:
        return tl.Agent(
            _Model(_branch()),
            tools=[fetch, charge, note],
            approve=hook,
            review_plan=review,
            store=tmp_path / "runs.db",
        )

    first = agent().run({"task": "pay"}, run_id="paid")
    assert sorted(asked) == ["c1.6", "review"]
    asked.clear()
    again = agent().replay("paid", store=tmp_path / "runs.db", tools="live")
    assert asked == []
    assert again.state == first.state

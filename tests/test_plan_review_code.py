"""Plan review of code plans (PROTOCOL §15 "Plan review", §14): the review is asked once
the model's program is written, while the program runs; it sees the program and its
gated call sites, and a decision keyed by a site covers the calls the site makes later."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import tickloop as tl
from test_plan_review import _wait_until_running

charged: list[int] = []


@tl.tool(read_only=True)
async def fetch(n: int) -> int:
    """Read a number, slowly."""
    await trio.sleep(5)
    return n


@tl.tool(requires_approval=True)
def charge(cents: int) -> int:
    """Charge the card."""
    charged.append(cents)
    return cents


@tl.tool(requires_approval=True)
def refund(cents: int) -> int:
    """Refund the card."""
    return -cents


def fenced(program: str) -> str:
    return f"```python\n{program.strip()}\n```\n"


def programs(*texts: str) -> tl.FunctionModel:
    """The model: the i-th program for the i-th request (the last one after that)."""
    answers = [fenced(text) for text in texts]
    return tl.FunctionModel(lambda request: answers[min(request["iteration"], len(answers)) - 1])


def run_on_mock_clock(agent: tl.Agent[Any], input: Any = None, **options: Any) -> Any:
    async def main() -> Any:
        return await agent.run_async(input, **options)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def approve_everything(plan: tl.Plan) -> dict[str, tl.Decision]:
    return {key: tl.Approve() for key in [*(call.id for call in plan.calls), *plan.sites]}


LOOP = """
n = fetch(n=3)
for i in range(n):
    charge(cents=i)
final_answer("paid")
"""


def test_one_site_decision_approves_every_call_the_loop_makes_later() -> None:
    charged.clear()
    plans: list[tuple[tl.Plan, int]] = []
    asked: list[str] = []

    def review(plan: tl.Plan) -> dict[str, tl.Decision]:
        plans.append((plan, len(charged)))
        return {site: tl.Approve() for site in plan.sites}

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        return tl.Approve()

    agent = tl.Agent(
        programs(LOOP), tools=[fetch, charge], protocol="code", approve=hook, review_plan=review
    )
    result = run_on_mock_clock(agent)
    assert result.output == "paid" and charged == [0, 1, 2]
    [(plan, charged_then)] = plans
    # Asked as soon as the program was written: `fetch` still ran, no charge was made.
    assert charged_then == 0 and plan.calls == []
    assert plan.program is not None and "charge(cents=i)" in plan.program
    assert plan.sites == ["c1.1[*]"] and plan.site_tools == {"c1.1[*]": "charge"}
    assert asked == []  # the review decided them all
    by = {record.id: record.approved_by for record in result.records.values()}
    assert by == {"c1.0": None, "c1.1[0]": "review", "c1.1[1]": "review", "c1.1[2]": "review"}


def test_a_site_with_no_loop_is_decided_before_its_call_is_made() -> None:
    charged.clear()
    asked: list[str] = []

    def review(plan: tl.Plan) -> dict[str, tl.Decision]:
        assert plan.site_tools == {"c1.1": "charge", "c1.2": "refund"}
        return {"c1.1": tl.Deny("not today")}  # refund's site is left to the hook

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        return tl.Approve()

    program = """
n = fetch(n=7)
try:
    charge(cents=n)
except ToolError as error:
    final_answer([refund(cents=n), error.type])
"""
    agent = tl.Agent(
        programs(program),
        tools=[fetch, charge, refund],
        protocol="code",
        approve=hook,
        review_plan=review,
    )
    result = run_on_mock_clock(agent)
    assert result.output == [-7, "denied"] and charged == []
    assert result.records["c1.1"].status == "denied"
    assert asked == ["c1.2"]  # the site the review left


def test_calls_already_made_are_shown_with_their_sites_and_decided_at_once() -> None:
    charged.clear()
    plans: list[tl.Plan] = []

    @tl.tool(read_only=True)
    def quick(n: int) -> int:
        """Read a number at once."""
        return n

    def review(plan: tl.Plan) -> dict[str, tl.Decision]:
        plans.append(plan)
        return {"c1.1[*]": tl.Approve()}

    program = """
for i in range(quick(n=2)):
    charge(cents=i)
final_answer("paid")
"""
    agent = tl.Agent(
        programs(program),
        tools=[quick, charge],
        protocol="code",
        approve=lambda call: tl.Deny("the hook is not asked"),
        review_plan=review,
    )
    result = agent.run()
    assert result.output == "paid" and charged == [0, 1]
    [plan] = plans
    assert [call.id for call in plan.calls] == ["c1.1[0]", "c1.1[1]"][: len(plan.calls)]
    assert plan.sites == ["c1.1[*]"]


def test_without_a_gated_site_or_call_no_review_is_asked() -> None:
    reviewed: list[tl.Plan] = []
    agent = tl.Agent(
        programs("final_answer(fetch(n=1))"),
        tools=[fetch, charge],
        protocol="code",
        approve=lambda call: tl.Approve(),
        review_plan=lambda plan: reviewed.append(plan) or {},
    )
    assert run_on_mock_clock(agent).output == 1
    assert reviewed == []


GUARDED = """
try:
    charge(cents=500)
except ToolError:
    pass
final_answer(charge(cents=5))
"""


def test_a_tool_guardrail_still_screens_a_call_the_review_approved() -> None:
    """The review answers while the guardrail is still deciding about the call: the
    approval waits for the guardrail, which denies it (PROTOCOL §15's order)."""
    charged.clear()

    async def policy(call: tl.PendingCall, ctx: tl.GuardrailContext) -> Any:
        await trio.sleep(3)
        return tl.Deny("over the limit") if call.params["cents"] > 100 else tl.Pass()

    for protocol, model in (
        ("code", programs(GUARDED)),
        (
            "solution",
            tl.ScriptedModel(
                [
                    {
                        "calls": [
                            {"_tool": "charge", "cents": 500, "_outputPath": "†state.a"},
                            {"_tool": "charge", "cents": 5, "_outputPath": "†state.b"},
                        ]
                    },
                    {"calls": [], "output": "ok"},
                ]
            ),
        ),
    ):
        charged.clear()
        agent = tl.Agent(
            model,
            tools=[charge],
            protocol=protocol,
            approve=lambda call: tl.Deny("the hook is not asked"),
            review_plan=approve_everything,
            guardrails=[tl.ToolGuardrail(policy)],
        )
        result = run_on_mock_clock(agent)
        assert charged == [5], protocol  # the 500 never ran
        statuses = sorted(record.status for record in result.records.values())
        assert statuses == ["denied", "done"], protocol


def test_a_review_does_not_open_the_input_guardrail_gate() -> None:
    """The review approves every call while the input guardrail is still pending: no
    charge starts before it trips (PROTOCOL §15: the gate comes before the hook)."""

    async def slow_trip(input: Any, ctx: tl.GuardrailContext) -> Any:
        await trio.sleep(3)
        return tl.Trip("no payments today")

    plan = {"calls": [{"_tool": "charge", "cents": 5, "_outputPath": "†state.a"}]}
    for protocol, model in (
        ("code", programs("final_answer(charge(cents=5))")),
        ("solution", tl.ScriptedModel([plan, {"calls": [], "output": "ok"}])),
    ):
        charged.clear()
        agent = tl.Agent(
            model,
            tools=[charge],
            protocol=protocol,
            approve=lambda call: tl.Deny("the hook is not asked"),
            review_plan=approve_everything,
            guardrails=[tl.InputGuardrail(slow_trip)],
        )
        with pytest.raises(tl.GuardrailTripped):
            run_on_mock_clock(agent, "pay")
        assert charged == [], protocol


def test_a_replay_of_a_reviewed_code_plan_asks_neither_the_review_nor_the_hook(
    tmp_path: Path,
) -> None:
    asked: list[str] = []

    def review(plan: tl.Plan) -> dict[str, tl.Decision]:
        asked.append("review")
        return {"c1.1[*]": tl.Approve()}

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        return tl.Approve()

    def agent() -> tl.Agent[Any]:
        return tl.Agent(
            programs(LOOP),
            tools=[fetch, charge],
            protocol="code",
            approve=hook,
            review_plan=review,
            store=tmp_path / "runs.db",
        )

    first = run_on_mock_clock(agent(), run_id="paid")
    assert asked == ["review"]

    async def replay() -> Any:
        return await agent().replay_async("paid", store=tmp_path / "runs.db", tools="live")

    again = trio.run(replay, clock=trio.testing.MockClock(autojump_threshold=0))
    assert asked == ["review"]
    assert again.output == first.output == "paid"


CHILD = r'''
"""A code plan whose review approves the charges' site; killed while `slow` runs
between two charges."""
import os
import sys

import trio

import tickloop as tl

DIR = os.environ["REVIEW_DIR"]


def log(line):
    with open(os.path.join(DIR, "log"), "a", encoding="utf-8") as file:
        file.write(line + "\n")


@tl.tool(requires_approval=True)
async def charge(n: int) -> int:
    """Charge."""
    log(f"charge:{n}")
    return n


@tl.tool(idempotent=True, read_only=True)
async def slow(n: int) -> int:
    """Slow when asked to be."""
    if n == 1:
        await trio.sleep(float(os.environ["REVIEW_SLOW"]))
    return n


PROGRAM = """```python
for i in range(3):
    s = slow(n=i)
    charge(n=s)
final_answer("paid")
```
"""


def review(plan):
    log("review " + ",".join(plan.sites))
    return {"c1.1[*]": tl.Approve()}


def hook(call):
    log("hook " + call.id)
    return tl.Approve()


def make_agent(store):
    return tl.Agent(
        tl.FunctionModel(lambda request: PROGRAM),
        tools=[charge, slow],
        protocol="code",
        store=store,
        approve=hook,
        review_plan=review,
    )


if __name__ == "__main__":
    make_agent(sys.argv[1]).run({"task": "pay"}, run_id="reviewed")
'''


def test_a_site_decision_survives_a_sigkill_and_nobody_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "reviewcode.py").write_text(CHILD, encoding="utf-8")
    db = tmp_path / "runs.db"
    env = {**os.environ, "REVIEW_DIR": str(tmp_path), "REVIEW_SLOW": "600"}
    child = subprocess.Popen(
        [sys.executable, str(tmp_path / "reviewcode.py"), str(db)],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )
    try:
        # `slow(n=1)` starts beside `charge(n=0)`: wait until the charge's end is stored
        # too, or the resume rightly finds it interrupted and fails it.
        _wait_until_running(db, "c1.0[1]", child, done="c1.1[0]")
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        assert child.stderr is not None
        child.stderr.close()
    log = tmp_path / "log"
    assert log.read_text().split("\n")[:-1] == ["review c1.1[*]", "charge:0"]
    monkeypatch.setenv("REVIEW_DIR", str(tmp_path))
    monkeypatch.setenv("REVIEW_SLOW", "0")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("reviewcode", None)
    import reviewcode  # type: ignore[import-not-found]

    result = reviewcode.make_agent(tl.SQLiteStore(db)).resume("reviewed")
    assert result.status == "done" and result.output == "paid"
    # No second review, no hook, and every charge once.
    assert log.read_text().split("\n")[:-1] == [
        "review c1.1[*]",
        "charge:0",
        "charge:1",
        "charge:2",
    ]
    assert [result.records[f"c1.1[{i}]"].approved_by for i in range(3)] == ["review"] * 3


def test_a_code_sub_agent_s_program_is_reviewed_by_its_own_review_plan() -> None:
    charged.clear()
    reviewed: list[dict[str, str]] = []

    def review(plan: tl.Plan) -> dict[str, tl.Decision]:
        reviewed.append(plan.site_tools)
        return {"c1.1[*]": tl.Approve()}

    child = tl.Agent(
        programs(LOOP),
        tools=[fetch, charge],
        protocol="code",
        name="payer",
        review_plan=review,
    )
    parent = tl.Agent(
        programs('final_answer(payer(task="pay three"))'),
        tools=[child],
        protocol="code",
        approve=lambda call: tl.Deny("the root's hook is not asked"),
    )
    result = run_on_mock_clock(parent)
    assert result.output == "paid" and charged == [0, 1, 2]
    assert reviewed == [{"c1.1[*]": "charge"}]  # the child's plan, by its own review


def test_a_fork_asks_the_hook_about_the_calls_it_runs_again_not_the_review(
    tmp_path: Path,
) -> None:
    charged.clear()
    asked: list[str] = []

    def review(plan: tl.Plan) -> dict[str, tl.Decision]:
        asked.append("review")
        return {"c1.1[*]": tl.Approve()}

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        return tl.Approve()

    agent = tl.Agent(
        programs(LOOP),
        tools=[fetch, charge],
        protocol="code",
        approve=hook,
        review_plan=review,
        store=tmp_path / "runs.db",
    )

    async def main() -> Any:
        await agent.run_async(None, run_id="paid")
        assert asked == ["review"]
        asked.clear()
        return await agent.fork_async(
            "paid", "again", store=tmp_path / "runs.db", rerun_tools=["charge"]
        )

    forked = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert forked.output == "paid" and charged == [0, 1, 2, 0, 1, 2]
    assert asked == ["c1.1[0]", "c1.1[1]", "c1.1[2]"]

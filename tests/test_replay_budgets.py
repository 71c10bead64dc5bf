"""Replay and fork of budget-limited runs and trees (docs/replay.md, PROTOCOL §12).

A fork or a replay reuses every recorded outcome of what it does not run again — the
budget's refusals included — and counts what it reuses as the record counted it: a call
the budget refused is refused again (its handler never runs), a call that ran stays
`done`, whatever order the reused calls now become ready in.
"""

from __future__ import annotations

import random
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

import tickloop as tl

RAN: Counter[str] = Counter()
RAN_IDS: list[str] = []  # the full ids (PROTOCOL §11) of the calls whose handler ran


@tl.tool
async def charge(amount: int, ctx: tl.CallContext, delay: float = 0.0) -> str:
    """Charge an amount (not idempotent: each run of it is a charge)."""
    RAN["charge"] += 1
    RAN_IDS.append(ctx.id)
    await trio.sleep(delay)
    return f"charged {amount}"


@tl.tool
async def quote(ctx: tl.CallContext, delay: float = 0.0) -> int:
    """Quote an amount."""
    RAN["quote"] += 1
    RAN_IDS.append(ctx.id)
    await trio.sleep(delay)
    return 7


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RAN.clear()
    RAN_IDS.clear()


def _on_mock_clock(function: Any, *args: Any, **kwargs: Any) -> Any:
    return trio.run(partial(function, *args, **kwargs), clock=MockClock(autojump_threshold=0))


def _statuses(result: tl.RunResult[Any]) -> dict[str, tuple[str, str | None]]:
    return {
        call_id: (record.status.value, record.error and record.error.get("type"))
        for call_id, record in result.records.items()
    }


# The first call quotes; the second charges what it quotes; two more charge at once. With
# the answer streamed slowly, the quote ends before the other charges arrive, so the one
# that reads it takes room first and the last charge is refused; answered at once (a
# fork), the two plain charges are ready before the quote ends.
RACE = [
    {
        "calls": [
            {"_tool": "quote", "_outputPath": "†state.q"},
            {"_tool": "charge", "amount": "†state.q", "_outputPath": "†state.c0"},
            {"_tool": "charge", "amount": 1, "_outputPath": "†state.c1"},
            {"_tool": "charge", "amount": 2, "_outputPath": "†state.c2"},
        ],
        "output": None,
    },
    {"calls": [], "output": "done"},
]


def _race(model: Any, store: tl.SQLiteStore | None = None) -> tl.Agent:
    return tl.Agent(
        model, tools=[charge, quote], store=store, budget=tl.Budget(per_tool={"charge": 2})
    )


def test_a_fork_with_nothing_to_rerun_runs_no_handler_and_keeps_every_status(
    tmp_path: Path,
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    first = _on_mock_clock(
        _race(tl.ScriptedModel(RACE, chunk_delay=0.1), store).run_async, run_id="r1"
    )
    assert _statuses(first) == {
        "c1.0": ("done", None),
        "c1.1": ("done", None),
        "c1.2": ("done", None),
        "c1.3": ("failed", "budget"),
    }
    RAN.clear()
    forked = _race(tl.ScriptedModel([])).fork("r1", "r2", store=store)
    assert RAN == Counter()  # the refused charge did not run; the others were reused
    assert _statuses(forked) == _statuses(first)
    assert forked.records["c1.3"].error == first.records["c1.3"].error
    assert forked.output == first.output
    assert forked.usage == first.usage  # counted as the record counted it


def test_a_fork_runs_under_the_recorded_budget_not_the_forking_agents(
    tmp_path: Path,
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    first = _on_mock_clock(
        _race(tl.ScriptedModel(RACE, chunk_delay=0.1), store).run_async, run_id="r1"
    )
    RAN.clear()
    unlimited = tl.Agent(tl.ScriptedModel([]), tools=[charge, quote])
    forked = unlimited.fork("r1", "r2", store=store)
    assert RAN == Counter() and _statuses(forked) == _statuses(first)


def test_a_replay_with_recorded_tools_reproduces_a_budget_limited_run(
    tmp_path: Path,
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    first = _on_mock_clock(
        _race(tl.ScriptedModel(RACE, chunk_delay=0.1), store).run_async, run_id="r1"
    )
    RAN.clear()
    again = _race(tl.ScriptedModel([])).replay("r1", store=store)
    assert RAN == Counter()
    assert _statuses(again) == _statuses(first)
    assert again.records["c1.3"].error == first.records["c1.3"].error


def test_a_fork_rerunning_a_call_gives_it_room_the_record_left_and_reuses_the_rest(
    tmp_path: Path,
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    _on_mock_clock(_race(tl.ScriptedModel(RACE, chunk_delay=0.1), store).run_async, run_id="r1")
    RAN.clear()
    forked = _race(tl.ScriptedModel(RACE)).fork("r1", "r2", store=store, rerun=["c1.2"])
    # c1.2 ran again (it holds the room it held); c1.1 was reused; c1.3 stays refused.
    assert RAN == Counter(charge=1)
    assert _statuses(forked)["c1.1"] == ("done", None)
    assert _statuses(forked)["c1.3"] == ("failed", "budget")


# -- trees ------------------------------------------------------------------------------


def _biller(delays: list[float]) -> tl.Agent:
    """A sub-agent that charges once per delay, each charge taking that long."""
    calls = [
        {"_tool": "charge", "amount": i, "delay": delay, "_outputPath": f"†state.c{i}"}
        for i, delay in enumerate(delays)
    ]
    return tl.Agent(
        tl.ScriptedModel([{"calls": calls}, {"calls": [], "output": "billed"}], chunk_delay=0.05),
        tools=[charge],
        name="biller",
        description="Bill.",
    )


def _tree(plan: dict[str, Any], child: tl.Agent, budget: tl.Budget, store: Any = None) -> Any:
    return tl.Agent(
        tl.ScriptedModel([plan, {"calls": [], "output": "done"}], chunk_delay=0.05),
        tools=[child, charge, quote],
        budget=budget,
        store=store,
    )


TREE_PLAN = {
    "calls": [
        {"_tool": "biller", "task": "a", "_outputPath": "†state.a"},
        {"_tool": "quote", "delay": 0.5, "_outputPath": "†state.q"},
        {"_tool": "charge", "amount": "†state.q", "_outputPath": "†state.mine"},
        {"_tool": "biller", "task": "b", "_outputPath": "†state.b"},
    ]
}


def test_a_replay_and_a_fork_of_a_budget_limited_tree_reproduce_its_record(
    tmp_path: Path,
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    budget = tl.Budget(per_tool={"charge": 3})
    child = _biller([0.3, 0.1])
    first = _on_mock_clock(_tree(TREE_PLAN, child, budget, store).run_async, run_id="t1")
    statuses = _statuses(first)
    assert sum(status == ("done", None) for status in statuses.values()) >= 3
    assert ("failed", "budget") in statuses.values()
    RAN.clear()
    again = _tree(TREE_PLAN, _biller([0.3, 0.1]), budget).replay("t1", store=store)
    assert RAN == Counter() and _statuses(again) == statuses
    forked = _tree(TREE_PLAN, _biller([0.3, 0.1]), budget).fork("t1", "t2", store=store)
    assert RAN == Counter() and _statuses(forked) == statuses
    assert forked.usage == first.usage


def _random_tree(rng: random.Random) -> tuple[dict[str, Any], list[float], tl.Budget]:
    calls: list[dict[str, Any]] = []
    for i in range(rng.randint(3, 7)):
        kind = rng.choice(["charge", "charge", "quote", "biller", "reader"])
        delay = rng.choice([0.0, 0.1, 0.2, 0.5, 1.0])
        if kind == "biller":
            calls.append({"_tool": "biller", "task": str(i), "_outputPath": f"†state.s{i}"})
        elif kind == "quote":
            calls.append({"_tool": "quote", "delay": delay, "_outputPath": f"†state.s{i}"})
        elif kind == "reader" and any(call["_tool"] == "quote" for call in calls):
            source = rng.choice([call for call in calls if call["_tool"] == "quote"])
            calls.append(
                {"_tool": "charge", "amount": source["_outputPath"], "_outputPath": f"†state.s{i}"}
            )
        else:
            calls.append(
                {"_tool": "charge", "amount": i, "delay": delay, "_outputPath": f"†state.s{i}"}
            )
    child = [rng.choice([0.0, 0.1, 0.3, 0.7]) for _ in range(rng.randint(1, 4))]
    budget = rng.choice(
        [
            tl.Budget(per_tool={"charge": rng.randint(1, 5)}),
            tl.Budget(tool_calls=rng.randint(2, 8)),
            tl.Budget(tool_calls=rng.randint(2, 8), per_tool={"charge": rng.randint(1, 4)}),
        ]
    )
    return {"calls": calls}, child, budget


@pytest.mark.parametrize("seed", range(12))
def test_randomized_forks_of_budget_limited_trees_run_nothing_they_reuse(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    plan, child, budget = _random_tree(rng)
    store = tl.SQLiteStore(tmp_path / "runs.db")
    first = _on_mock_clock(_tree(plan, _biller(child), budget, store).run_async, run_id="r")
    RAN.clear()
    forked = _tree(plan, _biller(child), budget).fork("r", "f", store=store)
    assert RAN == Counter(), (seed, plan, child, budget)
    assert _statuses(forked) == _statuses(first), (seed, plan, child, budget)
    replayed = _tree(plan, _biller(child), budget).replay("r", store=store)
    assert RAN == Counter() and _statuses(replayed) == _statuses(first)
    # Re-running one call of the root runs it and what reads it, and nothing else: no
    # handler of a call it does not reach runs, refused or not in the record.
    rerun = rng.choice(sorted(call_id for call_id in first.records if "/" not in call_id))
    RAN.clear()
    RAN_IDS.clear()
    again = _tree(plan, _biller(child), budget).fork("r", "g", store=store, rerun=[rerun])
    readers = {rerun} | {
        call["_id"]
        for call in _plan_of(again)
        if any(f"†state.{path}" == call.get("amount") for path in _writes(again, rerun))
    }
    if first.records[rerun].tool == "biller":
        allowed = readers | {f"{rerun}/c1.{i}" for i in range(len(child))}  # its child's
    else:
        allowed = readers
    assert set(RAN_IDS) <= allowed, (seed, rerun, RAN_IDS)
    for call_id, status in _statuses(first).items():
        if call_id.split("/")[0] not in readers and call_id in again.records:
            assert _statuses(again)[call_id] == status, (seed, rerun, call_id)


def _plan_of(result: tl.RunResult[Any]) -> list[dict[str, Any]]:
    return [
        call
        for message in result.messages
        if message.get("type") == "plan"
        for call in message["calls"]
    ]


def _writes(result: tl.RunResult[Any], call_id: str) -> list[str]:
    return [
        call["_outputPath"].removeprefix("†state.")
        for call in _plan_of(result)
        if call["_id"] == call_id
    ]


@tl.tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish a text."""
    RAN["publish"] += 1
    return f"published {text}"


RACE_THEN_PUBLISH = [
    RACE[0],
    {"calls": [{"_tool": "publish", "text": "†state.c1", "_outputPath": "†state.p"}]},
    {"calls": [], "output": "†state.p"},
]


def test_a_fork_that_pauses_resumes_with_the_records_budget_decisions(tmp_path: Path) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    budget = tl.Budget(per_tool={"charge": 2})
    original = tl.Agent(
        tl.ScriptedModel(RACE_THEN_PUBLISH, chunk_delay=0.1),
        tools=[charge, quote, publish],
        store=store,
        budget=budget,
        approve=lambda call: True,
    )
    first = _on_mock_clock(original.run_async, run_id="r1")
    assert first.output == "published charged 1"
    RAN.clear()
    later = tl.Agent(
        tl.ScriptedModel(RACE_THEN_PUBLISH),
        tools=[charge, quote, publish],
        store=store,
        approve=lambda call: tl.Defer(),
    )
    paused = later.fork("r1", "r2", store=store, rerun=["c2.0"])
    assert paused.status == "paused" and [call.id for call in paused.pending] == ["c2.0"]
    resumed = later.resume("r2", decisions={"c2.0": tl.Approve()})
    assert RAN == Counter(publish=1)  # the refused charge never ran, in either process
    assert resumed.output == first.output
    assert _statuses(resumed) == _statuses(first)

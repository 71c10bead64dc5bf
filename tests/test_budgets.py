"""Budgets (PROTOCOL §12, docs/budgets.md): limits that hold across parallel fan-out.

Everything runs through the public API (`tl.run_calls`, `tl.execute`, `tl.Agent`) on
`trio.testing.MockClock(autojump_threshold=0)`: a call's duration is virtual time, so how
many calls run at once is exact, never a wall-clock guess.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trio.testing import MockClock

import tickloop as tl


def run(calls: list[Any], *, tools: list[tl.Tool], **options: Any) -> tl.ExecutionResult:
    return trio.run(
        partial(tl.execute, calls, tools=tools, **options), clock=MockClock(autojump_threshold=0)
    )


STARTED: Counter[str] = Counter()


@tl.tool
async def fetch(n: int = 0, seconds: float = 0) -> int:
    """Return `n` after `seconds` of trio time."""
    STARTED["fetch"] += 1
    await trio.sleep(seconds)
    return n


@tl.tool(max_concurrency=2)
async def charge(n: int = 0, seconds: float = 0) -> int:
    """Charge something (at most two at once)."""
    STARTED["charge"] += 1
    await trio.sleep(seconds)
    return n


summarize = tl.Tool(
    name="summarize",
    description="latent: the model writes its output",
    parameters={"type": "object", "properties": {}},
    output={"type": "string"},
)

TOOLS = [fetch, charge, summarize]


@pytest.fixture(autouse=True)
def _reset() -> None:
    STARTED.clear()


def budget_errors(result: tl.ExecutionResult) -> list[dict[str, Any]]:
    return [m["data"]["error"] for m in result.errors if m["data"]["error"]["type"] == "budget"]


# -- the public names -------------------------------------------------------------------------


def test_budget_fields_are_optional_and_checked() -> None:
    assert tl.Budget() == tl.Budget(
        requests=None,
        input_tokens=None,
        output_tokens=None,
        total_tokens=None,
        tool_calls=None,
        per_tool={},
        cost=None,
        wall_time=None,
    )
    for bad in ({"tool_calls": -1}, {"requests": 1.5}, {"cost": float("nan")}, {"per_tool": 3}):
        with pytest.raises(tl.ConfigurationError):
            tl.Budget(**bad)
    with pytest.raises(tl.ConfigurationError, match="per_tool"):
        tl.Budget(per_tool={"charge": -2})


def test_a_grant_adds_room_to_the_limits_there_are() -> None:
    more = tl.Budget(tool_calls=3, per_tool={"charge": 1}, cost=0.5) + tl.Budget(
        tool_calls=2, per_tool={"charge": 2, "fetch": 9}, cost=0.25, requests=4
    )
    assert more == tl.Budget(tool_calls=5, per_tool={"charge": 3}, cost=0.75)


def test_price_is_per_million_tokens() -> None:
    price = tl.Price(input=0.40, output=1.60)
    assert price.cost(1_000_000, 0) == pytest.approx(0.40)
    assert price.cost(500_000, 250_000) == pytest.approx(0.60)


def test_run_usage_adds_up() -> None:
    total = tl.RunUsage(requests=1, input_tokens=10, output_tokens=2, per_tool={"a": 1}) + (
        tl.RunUsage(requests=2, tool_calls=3, per_tool={"a": 1, "b": 2}, cost=0.5)
    )
    assert total == tl.RunUsage(3, 10, 2, 3, {"a": 2, "b": 2}, 0.5)
    assert total.total_tokens == 12


def test_budget_exceeded_is_a_run_stopped() -> None:
    assert issubclass(tl.BudgetExceeded, tl.RunStopped)
    assert issubclass(tl.MaxIterationsError, tl.RunStopped)
    assert issubclass(tl.ExecuteError, tl.RunStopped)
    assert issubclass(tl.RunStopped, tl.TickloopError)


# -- tool calls: reservation before dispatch ------------------------------------------------


def test_a_fan_out_of_50_with_tool_calls_9_runs_exactly_9_every_time() -> None:
    for seconds in (0, 1):
        STARTED.clear()
        calls = [{"_tool": "fetch", "n": i, "seconds": seconds} for i in range(50)]
        result = run(calls, tools=TOOLS, budget=tl.Budget(tool_calls=9))
        assert STARTED["fetch"] == 9
        assert result.usage.tool_calls == 9 and result.usage.per_tool == {"fetch": 9}
        done = [r.id for r in result.records.values() if r.status == "done"]
        assert done == [f"c1.{i}" for i in range(9)]  # in ready order, which is plan order
        errors = budget_errors(result)
        assert len(errors) == 41
        assert errors[0] == {
            "type": "budget",
            "message": "no room left in the budget: the tool_calls limit of 9 is reached; "
            "this call did not run",
            "limit": "tool_calls",
        }
        assert all(r.status == "failed" for r in result.records.values() if r.status != "done")


def test_per_tool_limits_name_the_tool() -> None:
    calls = [{"_tool": "charge", "n": i, "seconds": 1} for i in range(5)]
    calls += [{"_tool": "fetch", "n": i} for i in range(3)]
    result = run(calls, tools=TOOLS, budget=tl.Budget(per_tool={"charge": 2}))
    assert STARTED == {"charge": 2, "fetch": 3}
    assert {e["limit"] for e in budget_errors(result)} == {"per_tool.charge"}
    assert result.usage.per_tool == {"charge": 2, "fetch": 3}


def test_latent_calls_and_responses_are_not_counted() -> None:
    calls = [
        {"_tool": "summarize", "_output": "short"},
        {"_tool": "fetch", "n": 1},
        {"_tool": "fetch", "n": 2},
    ]
    result = run(calls, tools=TOOLS, budget=tl.Budget(tool_calls=2))
    assert [r.status for r in result.records.values()] == ["done", "done", "done"]
    assert result.usage.tool_calls == 2


def test_a_refused_call_is_not_counted_and_its_dependents_settle_naming_it() -> None:
    calls = [
        {"_tool": "fetch", "n": 1, "_outputPath": "†state.a"},
        {"_tool": "fetch", "n": 2, "_outputPath": "†state.b"},
        {"_tool": "fetch", "n": "†state.b", "_outputPath": "†state.c"},
    ]
    result = run(calls, tools=TOOLS, budget=tl.Budget(tool_calls=1))
    statuses = {r.id: r.status for r in result.records.values()}
    assert statuses == {"c1.0": "done", "c1.1": "failed", "c1.2": "invalid"}
    assert result.records["c1.1"].error["type"] == "budget"
    assert "c1.1" in result.records["c1.2"].error["message"]
    assert result.usage.tool_calls == 1


def test_a_call_denied_by_approval_takes_no_room() -> None:
    guarded = tl.tool(requires_approval=True, name="guarded")(fetch.handler)

    def approve(pending: tl.PendingCall) -> tl.Decision:
        return tl.Deny("no") if pending.params["n"] == 0 else tl.Approve()

    calls = [{"_tool": "guarded", "n": i} for i in range(3)]
    result = run(calls, tools=[guarded], approve=approve, budget=tl.Budget(tool_calls=2))
    assert [r.status for r in result.records.values()] == ["denied", "done", "done"]


def test_without_a_budget_usage_is_still_counted() -> None:
    result = run([{"_tool": "fetch"}, {"_tool": "charge"}], tools=TOOLS)
    assert result.usage == tl.RunUsage(tool_calls=2, per_tool={"fetch": 1, "charge": 1})


def test_run_calls_takes_budget_and_checks_it() -> None:
    result = tl.run_calls(
        [{"_tool": "fetch"}] * 3, tools=TOOLS, budget=tl.Budget(per_tool={"fetch": 1})
    )
    assert result.usage.tool_calls == 1
    with pytest.raises(tl.ConfigurationError, match="budget"):
        tl.run_calls([], tools=TOOLS, budget={"tool_calls": 1})  # type: ignore[arg-type]
    with pytest.raises(tl.ConfigurationError, match="on_budget"):
        tl.run_calls([], tools=TOOLS, on_budget=3)  # type: ignore[arg-type]


# -- the property: calls started never exceed any limit ---------------------------------------

_plans = st.lists(
    st.tuples(
        st.sampled_from(["fetch", "charge"]),
        st.integers(0, 3),  # seconds
        st.one_of(st.none(), st.integers(0, 30)),  # reads the output of an earlier call
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _plans,
    st.one_of(st.none(), st.integers(0, 12)),
    st.one_of(st.none(), st.integers(0, 6)),
    st.one_of(st.none(), st.integers(1, 5)),
)
def test_calls_started_never_exceed_any_limit(
    plan: list[tuple[str, int, int | None]],
    tool_calls: int | None,
    charges: int | None,
    concurrency: int | None,
) -> None:
    STARTED.clear()
    calls = []
    for index, (tool, seconds, reads) in enumerate(plan):
        call: dict[str, Any] = {
            "_tool": tool,
            "seconds": seconds,
            "_outputPath": f"†state.v{index}",
        }
        if reads is not None and reads < index:
            call["n"] = f"†state.v{reads}"
        else:
            call["n"] = index
        calls.append(call)
    per_tool = {} if charges is None else {"charge": charges}
    budget = tl.Budget(tool_calls=tool_calls, per_tool=per_tool)
    result = run(calls, tools=TOOLS, budget=budget, max_concurrency=concurrency)
    started = sum(STARTED.values())
    assert tool_calls is None or started <= tool_calls
    assert charges is None or STARTED["charge"] <= charges
    assert result.usage.tool_calls == started
    assert result.usage.per_tool == {name: count for name, count in STARTED.items() if count}
    # Nothing is refused while there is room: a refusal means the limit it names is used up.
    for error in budget_errors(result):
        if error["limit"] == "tool_calls":
            assert started == tool_calls
        else:
            assert error["limit"] == "per_tool.charge" and STARTED["charge"] == charges

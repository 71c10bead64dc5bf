"""A tree of agents under one budget (PROTOCOL §11, §12): a child draws from its root's
budget, its own can only be tighter, the root's usage covers the tree, and a cost limit
needs a price for every model of the tree before anything runs."""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

import pytest
import trio
from trio.testing import MockClock

import tickloop as tl

STARTED: Counter[str] = Counter()


@tl.tool
async def lookup(q: str) -> str:
    """Look something up."""
    STARTED[q] += 1
    await trio.sleep(1)
    return q.upper()


def _researcher(n: int, budget: tl.Budget | None = None, model: Any = None) -> tl.Agent:
    calls = [{"_tool": "lookup", "q": f"q{i}", "_outputPath": f"†state.r{i}"} for i in range(n)]
    return tl.Agent(
        model or tl.ScriptedModel([{"calls": calls}, {"calls": [], "output": "done"}]),
        tools=[lookup],
        name="researcher",
        description="Research.",
        budget=budget,
    )


def _writer(child: tl.Agent, budget: tl.Budget, **options: Any) -> tl.Agent:
    plan = {
        "calls": [
            {"_tool": "researcher", "task": "a", "_outputPath": "†state.a"},
            {"_tool": "researcher", "task": "b", "_outputPath": "†state.b"},
        ]
    }
    return tl.Agent(
        tl.ScriptedModel([plan, {"calls": [], "output": "written"}]),
        tools=[child],
        budget=budget,
        **options,
    )


def _run(agent: tl.Agent) -> tl.RunResult[Any]:
    STARTED.clear()
    return trio.run(partial(agent.run_async, {}), clock=MockClock(autojump_threshold=0))


def test_two_children_fanning_out_in_parallel_never_overshoot_the_roots_tool_calls() -> None:
    # Each child asks for 6 lookups at once; the tree may start 7 calls in all, and the
    # two agent calls are two of them: 5 lookups start, whatever order they come in.
    result = _run(_writer(_researcher(6), tl.Budget(tool_calls=7)))
    assert sum(STARTED.values()) == 5
    assert result.usage.tool_calls == 7
    assert result.usage.per_tool == {"researcher": 2, "lookup": 5}
    refused = [r for r in result.records.values() if r.status == "failed"]
    assert len(refused) == 7  # 12 lookups asked for, 5 ran


def test_a_childs_own_budget_is_only_ever_tighter_and_the_usage_covers_the_tree() -> None:
    result = _run(_writer(_researcher(6, tl.Budget(tool_calls=2)), tl.Budget(tool_calls=100)))
    assert sum(STARTED.values()) == 4  # two a child
    assert result.usage.tool_calls == 6  # 2 agent calls + 4 lookups
    # Every request of the tree: the root's two and each child's two.
    assert result.usage.requests == 6


def test_a_cost_limit_needs_a_price_for_every_model_of_the_tree_before_anything_runs() -> None:
    child = _researcher(1, model=tl.ScriptedModel([], model="cheap"))
    agent = _writer(
        child, tl.Budget(cost=1.0), pricing={"scripted": tl.Price(input=1.0, output=1.0)}
    )
    with pytest.raises(tl.ConfigurationError, match=r"sub-agent 'researcher'.*'cheap'"):
        _run(agent)
    assert sum(STARTED.values()) == 0


def test_the_roots_hook_is_asked_one_question_at_a_time_for_the_whole_tree() -> None:
    # Both children exhaust the root's tool_calls at once (two agent calls + one lookup
    # fit in 3): each asks, and a person answers one question at a time (PROTOCOL §12).
    asking = 0
    at_once: list[int] = []

    async def person(request: tl.BudgetRequest) -> tl.Budget:
        nonlocal asking
        asking += 1
        at_once.append(asking)
        await trio.sleep(10)  # a person reads and answers
        asking -= 1
        return tl.Budget(tool_calls=6)

    result = _run(_writer(_researcher(3), tl.Budget(tool_calls=3), on_budget=person))
    assert len(at_once) >= 2 and max(at_once) == 1  # asked in turn, never together
    assert result.output == "written" and sum(STARTED.values()) == 6

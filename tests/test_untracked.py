"""Waiting calls cost the cycle collector little, and nothing they keep outlives them.

A plan of many waiting calls made CPython's full collections walk every parsed path and
slot they held, over and over (issue 15, growth). What a waiting call keeps now is mostly
out of the collector's view; reference counting still frees all of it.
"""

from __future__ import annotations

import gc
import platform
import tracemalloc
from typing import Any

import pytest

import tickloop as tl


def reversed_chain(n: int) -> list[dict[str, Any]]:
    """Every call but the last to arrive waits for the one listed after it."""
    calls = [{"_tool": "step", "n": 0, "_outputPath": "†state.v0"}]
    calls += [
        {"_tool": "step", "n": f"†state.v{i - 1}", "_outputPath": f"†state.v{i}"}
        for i in range(1, n)
    ]
    calls.reverse()
    return calls


def tracked_while_waiting(n: int) -> int:
    """Objects the collector tracks while `n - 1` calls wait, beyond those before the run."""
    seen: list[int] = []

    @tl.tool
    async def step(n: int) -> int:
        if not seen:  # the first call to run: every other one is waiting
            seen.append(len(gc.get_objects()))
        return n + 1

    plan = reversed_chain(n)
    gc.collect()
    before = len(gc.get_objects())
    result = tl.run_calls(plan, tools=[step])
    assert not result.errors
    assert result.state[f"v{n - 1}"] == n  # the chain ran through, in order
    return seen[0] - before


@pytest.mark.skipif(platform.python_implementation() != "CPython", reason="CPython's collector")
def test_a_waiting_call_leaves_few_objects_for_the_collector_to_walk() -> None:
    # Each waiting call keeps its Call and CallRecord tracked; its parsed reference and
    # output path, their tuples and its slot (five more objects before) are not.
    small, large = tracked_while_waiting(200), tracked_while_waiting(2200)
    per_call = (large - small) / 2000
    assert per_call < 3, per_call


def test_what_waiting_calls_kept_is_freed_when_the_run_ends() -> None:
    # Untracked objects are freed by reference counting alone: repeated runs of a plan of
    # waiting calls hold no more memory than one run did.
    plan = reversed_chain(400)

    @tl.tool
    async def step(n: int) -> int:
        return n + 1

    def run() -> int:
        result = tl.run_calls(plan, tools=[step])
        assert result.state["v399"] == 400
        del result
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    try:
        run()
        after_one = run()
        for _ in range(3):
            after_four = run()
    finally:
        tracemalloc.stop()
    # A leak would keep about a kilobyte per waiting call, 400 KB a run.
    assert after_four - after_one < 40_000, after_four - after_one

"""Nothing a waiting call keeps outlives its run."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

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


def test_what_waiting_calls_kept_is_freed_when_the_run_ends() -> None:
    # Repeated runs of a plan of waiting calls hold no more memory than one run did.
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

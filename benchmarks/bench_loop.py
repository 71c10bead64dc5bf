"""Overhead of the outer loop around one scripted request (issue: the agent loop).

Runs an agent on the scripted model with no delays: each request answers one small call
and no output, the last one answers. Time per iteration is everything tickloop does
around the model: render the request from the log, build nothing twice, parse the
streamed solution, run the tick, append the messages. Target: <= 1 ms per iteration,
and no growth with the run's length (200 iterations <= 1.2x 10: `bench_perf.py --only loop`).

    python benchmarks/bench_loop.py
"""

from __future__ import annotations

import time

import trio

import tickloop as tl


@tl.tool
async def echo(text: str) -> str:
    """Return the text."""
    return text


def script(iterations: int) -> list[dict]:
    steps = [
        {"calls": [{"_tool": "echo", "text": f"step {i}", "_outputPath": f"†state.s{i % 8}"}],
         "output": None}
        for i in range(iterations - 1)
    ]
    return [*steps, {"calls": [], "output": "done"}]


def per_iteration(iterations: int, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        agent = tl.Agent(tl.ScriptedModel(script(iterations), chunk_chars=4096),
                         tools=[echo], max_iterations=iterations)
        started = time.perf_counter()
        result = trio.run(agent.run_async)
        elapsed = time.perf_counter() - started
        assert result.output == "done" and result.iterations == iterations
        best = min(best, elapsed / iterations)
    return best


def main() -> None:
    print(f"{'iterations':>10}  {'ms / iteration':>15}")
    for iterations in (10, 50, 100, 200):
        print(f"{iterations:>10}  {per_iteration(iterations) * 1000:>15.3f}")


if __name__ == "__main__":
    main()

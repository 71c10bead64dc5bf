"""The four ways to run a tool DAG with a model, all on tickloop's engine and the same model.

1. `sequential`: one call per request; the loop asks again after each call (the classic
   agent loop with parallel tool calls off).
2. `per_turn`: each request writes every call that can run now; they run together once
   the response has ended, then the loop asks again (what most agent SDKs do).
3. `batch`: the whole DAG in one response, run by dependency, but only once the
   response has ended (a planner whose plan is parsed when complete).
4. `tickloop`: the whole DAG in one streamed response, each call dispatched the moment
   its JSON object closes and its inputs exist (a plain `tl.Agent`).

Every strategy ends with one more request that writes the final answer. All four use the
same tools, latencies and model costs, and the same engine, so the only differences are
how many requests are made and when the calls are handed over.

`bound` computes the earliest finish any runner of the one-response plan could reach:
`F(v) = max(emitted(v), max F(deps)) + t(v)`, `T* = max(stream end, max F) + final`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing

import tickloop as tl

from .simmodel import ModelCosts, Recorder, final_text, scripts, solution_text, thought
from .workloads import Workload

__all__ = [
    "LABELS",
    "STRATEGIES",
    "Bound",
    "Outcome",
    "bound",
    "make_tools",
    "replay_bound",
    "run",
    "run_replay",
    "run_strategy",
]

STRATEGIES = ("sequential", "per_turn", "batch", "tickloop")
LABELS = {
    "sequential": "1. sequential",
    "per_turn": "2. per-turn parallel",
    "batch": "3. batch after stream",
    "tickloop": "4. tickloop (streamed, eager)",
}


@dataclass
class Outcome:
    """One run: its makespan and what happened when, relative to the run's start."""

    strategy: str
    makespan: float
    requests: list[tuple[float, float]]  # each model request's (start, end)
    calls: dict[str, tuple[float, float]]  # each call's (started, finished)
    iterations: int
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Bound:
    emitted: dict[str, float]
    finish: dict[str, float]
    stream_end: float
    final: float
    total: float  # T*


def bound(workload: Workload, costs: ModelCosts, scale: float) -> Bound:
    """T* for the one-response plan, in seconds of the clock at this scale."""
    sc = costs.scaled(scale)
    pre = thought(costs.thought_chars)
    text, closes = solution_text(workload.nodes, pre)
    emitted = {key: sc.chunk_time(sc.chunk_of(offset)) for key, offset in closes.items()}
    finish: dict[str, float] = {}
    for node in workload.nodes:
        ready = max([emitted[node.key], *(finish[d] for d in node.deps)])
        finish[node.key] = ready + node.latency * scale
    stream_end = sc.duration(text)
    final = sc.duration(final_text(pre))
    return Bound(emitted, finish, stream_end, final, max(stream_end, *finish.values()) + final)


def make_tools(workload: Workload, scale: float) -> list[tl.Tool]:
    """One async tool per tool name; a call sleeps its node's latency, then returns."""
    latency = {node.key: node.latency * scale for node in workload.nodes}

    def make(name: str) -> tl.Tool:
        async def handler(key: str, inputs: list[Any] | None = None) -> dict[str, Any]:
            await trio.sleep(latency[key])
            return {"key": key, "read": len(inputs or ())}

        handler.__doc__ = f"The {name} tool of the benchmark: waits its latency, then returns."
        return tl.tool(handler, name=name)

    return [make(name) for name in workload.tools()]


async def run_strategy(
    workload: Workload, strategy: str, costs: ModelCosts, scale: float
) -> Outcome:
    """Run one strategy on one workload inside trio; times are on trio's clock."""
    responses = scripts(workload, costs)[strategy]
    sc = costs.scaled(scale)
    model = Recorder(sc.model(responses), buffer=strategy != "tickloop")
    agent = tl.Agent(
        model,
        tools=make_tools(workload, scale),
        max_iterations=len(responses) + 1,
    )
    start = trio.current_time()
    result = await agent.run_async({"question": workload.title})
    end = trio.current_time()
    if result.errors or any(r.status != "done" for r in result.records.values()):
        raise RuntimeError(f"{strategy} on {workload.name} went wrong: {result.errors[:3]}")
    if len(result.records) != len(workload.nodes) or result.iterations != len(responses):
        raise RuntimeError(f"{strategy} on {workload.name} ran the wrong plan")
    calls = {
        record.call["_outputPath"].removeprefix("†state."): (
            record.started - start,
            record.finished - start,
        )
        for record in result.records.values()
        if record.started is not None and record.finished is not None
    }
    return Outcome(
        strategy,
        end - start,
        [(a - start, b - start) for a, b in model.spans],
        calls,
        result.iterations,
    )


def run(
    workload: Workload,
    strategy: str,
    costs: ModelCosts,
    *,
    scale: float = 1.0,
    virtual: bool = True,
) -> Outcome:
    """One run in a fresh trio run: on a MockClock (virtual time) or the real clock."""

    async def main() -> Outcome:
        return await run_strategy(workload, strategy, costs, scale)

    if virtual:
        return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return trio.run(main)


async def replay_bound(workload: Workload, costs: ModelCosts, scale: float) -> float:
    """The bound played out with bare trio tasks and no tickloop: the clock's own floor.

    Each call sleeps until its text would have arrived, waits for its dependencies, then
    sleeps its latency; then one sleep stands for the final request. On the virtual clock
    this is T* exactly; on the real clock, what it exceeds T* by is the operating system's
    timer slack, which no runner can avoid, so tickloop's own overhead is its makespan
    minus this one.
    """
    b = bound(workload, costs, scale)
    done = {node.key: trio.Event() for node in workload.nodes}
    start = trio.current_time()

    async def one(key: str, deps: tuple[str, ...], latency: float) -> None:
        await trio.sleep_until(start + b.emitted[key])
        for dep in deps:
            await done[dep].wait()
        await trio.sleep(latency)
        done[key].set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep_until, start + b.stream_end)
        for node in workload.nodes:
            nursery.start_soon(one, node.key, node.deps, node.latency * scale)
    await trio.sleep(b.final)
    return trio.current_time() - start


def run_replay(
    workload: Workload, costs: ModelCosts, *, scale: float = 1.0, virtual: bool = True
) -> float:
    async def main() -> float:
        return await replay_bound(workload, costs, scale)

    if virtual:
        return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return trio.run(main)

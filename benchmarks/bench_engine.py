"""What the engine costs on top of trio, and whether it keeps its timing promises.

Three measurements, each against a target:

(a) overhead: one tick of 10,000 ready no-op async calls, each writing its result to its own
    path, in microseconds per call; beside it, 10,000 bare trio tasks (`nursery.start_soon`
    of a no-op) as the floor no engine on trio can go below. Target: <= 100 us per call.
(b) scaling: a chain of N dependent calls (each reads the previous one's output) at N=500
    and N=2000. The scheduler re-examines only the calls a write can affect, so time per
    call must not grow with N. Target: per-call(2000) / per-call(500) <= 1.3.
(c) latency: a 60-call DAG of real `trio.sleep` calls of 10-50 ms, on the real clock. Every
    call must start the moment its last input exists, so the makespan is the critical
    path plus overhead. Target: makespan within 5% of the critical path.

Run: python benchmarks/bench_engine.py
"""

from __future__ import annotations

import gc
import platform
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import trio

import tickloop as tl

CALLS = 10_000
CHAIN = (500, 2000)
DAG_SIZE = 60
REPEAT = 5
DAG_REPEAT = 9  # real sleeps vary with the machine's load: a median of more runs


@tl.tool
async def noop(i: int) -> int:
    """Do nothing: the engine's own cost is what is measured."""
    return i


@tl.tool
async def nap(i: int, inputs: list[int], ms: int) -> int:
    """Sleep `ms` milliseconds: a call of a given duration."""
    await trio.sleep(ms / 1000)
    return i


def best_of(repeat: int, work: Callable[[], Any]) -> float:
    """The fastest of several runs: the least disturbed by the rest of the machine."""
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def bare_trio_tasks(count: int) -> None:
    async def nothing() -> None:
        return None

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(nothing)

    trio.run(main)


def independent_calls(count: int) -> list[dict[str, Any]]:
    return [{"_tool": "noop", "i": i, "_outputPath": f"†state.r{i}"} for i in range(count)]


def chain_calls(count: int) -> list[dict[str, Any]]:
    calls = [{"_tool": "noop", "i": 0, "_outputPath": "†state.r0"}]
    calls += [
        {"_tool": "noop", "i": f"†state.r{i - 1}", "_outputPath": f"†state.r{i}"}
        for i in range(1, count)
    ]
    return calls


def run(calls: list[dict[str, Any]], tools: list[tl.Tool]) -> tl.ExecutionResult:
    result = tl.run_calls(calls, tools=tools)
    if result.errors:
        raise SystemExit(f"the benchmark plan has errors: {result.errors[:3]}")
    return result


def overhead() -> dict[str, float]:
    calls = independent_calls(CALLS)
    engine = best_of(REPEAT, lambda: run(calls, [noop])) / CALLS * 1e6
    floor = best_of(REPEAT, lambda: bare_trio_tasks(CALLS)) / CALLS * 1e6
    return {"engine_us": engine, "floor_us": floor}


def scaling() -> dict[int, float]:
    per_call = {}
    for size in CHAIN:
        calls = chain_calls(size)
        repeat = REPEAT * max(CHAIN) // size  # as many calls measured at each size
        per_call[size] = best_of(repeat, lambda calls=calls: run(calls, [noop])) / size * 1e6
    return per_call


def dag(seed: int = 7) -> tuple[list[int], list[list[int]], list[int], float]:
    """A random DAG: durations (ms), dependencies, an order to list the calls in, and its
    critical path in seconds."""
    rng = random.Random(seed)
    durations = [rng.randint(10, 50) for _ in range(DAG_SIZE)]
    dependencies = [
        sorted(rng.sample(range(i), k=min(i, rng.randint(0, 3)))) for i in range(DAG_SIZE)
    ]
    finish: list[int] = []
    for i, deps in enumerate(dependencies):
        finish.append(max((finish[j] for j in deps), default=0) + durations[i])
    order = list(range(DAG_SIZE))
    rng.shuffle(order)
    return durations, dependencies, order, max(finish) / 1000


def dag_calls(durations: list[int], dependencies: list[list[int]], order: list[int]) -> list:
    return [
        {
            "_tool": "nap",
            "i": i,
            "inputs": [f"†state.n{j}" for j in dependencies[i]],
            "ms": durations[i],
            "_outputPath": f"†state.n{i}",
        }
        for i in order
    ]


async def bare_trio_dag(durations: list[int], dependencies: list[list[int]]) -> None:
    """The same DAG as bare trio tasks and events: what timers and wake-ups cost alone."""
    done = [trio.Event() for _ in durations]

    async def node(i: int) -> None:
        for j in dependencies[i]:
            await done[j].wait()
        await trio.sleep(durations[i] / 1000)
        done[i].set()

    async with trio.open_nursery() as nursery:
        for i in range(len(durations)):
            nursery.start_soon(node, i)


def latency() -> dict[str, float]:
    durations, dependencies, order, critical = dag()
    calls = dag_calls(durations, dependencies, order)

    async def engine() -> float:
        start = trio.current_time()
        result = await tl.execute(calls, tools=[nap])
        assert not result.errors, result.errors
        return trio.current_time() - start

    async def floor() -> float:
        start = trio.current_time()
        await bare_trio_dag(durations, dependencies)
        return trio.current_time() - start

    def median(function: Callable[[], Any]) -> float:  # sleeps are real time: the median
        makespans = sorted(trio.run(function) for _ in range(DAG_REPEAT))
        return makespans[len(makespans) // 2]

    return {"critical_s": critical, "makespan_s": median(engine), "floor_s": median(floor)}


def main() -> int:
    print(f"tickloop engine benchmark  (Python {platform.python_version()}, {platform.machine()})")
    print()
    a = overhead()
    b = scaling()
    c = latency()
    ratio = b[CHAIN[1]] / b[CHAIN[0]]
    excess = c["makespan_s"] / c["critical_s"] - 1
    rows = [
        (
            f"(a) {CALLS:,} no-op calls, one tick",
            f"{a['engine_us']:.1f} us/call (bare trio task: {a['floor_us']:.1f} us)",
            "<= 100 us/call",
            a["engine_us"] <= 100,
        ),
        (
            f"(b) chain of {CHAIN[0]} / {CHAIN[1]} calls",
            f"{b[CHAIN[0]]:.1f} / {b[CHAIN[1]]:.1f} us/call, ratio {ratio:.2f}",
            "ratio <= 1.3",
            ratio <= 1.3,
        ),
        (
            f"(c) {DAG_SIZE}-call DAG of 10-50 ms sleeps",
            f"makespan {c['makespan_s'] * 1000:.1f} ms, critical path "
            f"{c['critical_s'] * 1000:.0f} ms (+{excess:.1%}; bare trio: "
            f"{c['floor_s'] * 1000:.1f} ms, +{c['floor_s'] / c['critical_s'] - 1:.1%})",
            "within 5%",
            excess <= 0.05,
        ),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    header = ("measurement", "result", "target")
    widths = [max(width, len(title)) for width, title in zip(widths, header, strict=True)]
    print("  ".join(title.ljust(width) for title, width in zip(header, widths, strict=True)))
    print("  ".join("-" * width for width in widths))
    for *cells, ok in rows:
        line = "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
        print(f"{line}  {'ok' if ok else 'MISSED'}")
    return 0 if all(row[3] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Issue 15's targets: what a call costs over bare trio, and that nothing grows with size.

Every figure is a ratio of two measurements taken side by side in this one process (the
machine may be shared and busy: each side is the best of several interleaved runs), so no
figure is an absolute time and none is asserted as one.

1. overhead: one tick of N ready no-op async calls against N bare `nursery.start_soon`
   tasks, per call. Target: <= 7x.
2. growth: per-call cost at the large size over the small size (10,000 and 100,000 by
   default) for seven shapes: fan-out, a chain in list order, reversed and shuffled, a random
   DAG, a push fan-in, and pushes to one path finishing last to first. Target: <= 1.2x
   each. Peak memory at the large size, traced by tracemalloc, per call: <= 2 KB.
3. store: the `bench_store.py` plan with the SQLite store on against off. Target: <= 1.5x.
4. loop: ms per iteration of `bench_loop.py` at 200 iterations over 10. Target: <= 1.2x.
5. peers: per-call cost of one model turn of N no-op tool calls (1,000 and 4,000) in
   tickloop, Pydantic AI and LangGraph; tickloop >= 5x cheaper than the cheaper peer.
   Left out (and reported so) when the `bench` extra is not installed.

Run: python -m benchmarks.bench_perf [--tiny] [--only overhead,growth,...]
It exits 1 when a target is missed. `--tiny` runs every measurement at a toy size (for the
test that keeps this script from rotting); its ratios mean nothing and are not judged.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

import tickloop as tl

OVERHEAD_TARGET = 7.0
GROWTH_TARGET = 1.2
MEMORY_TARGET = 2048  # bytes per call at the large size
STORE_TARGET = 1.5
LOOP_TARGET = 1.2
PEER_TARGET = 5.0
SHAPES = (
    "fan_out",
    "chain",
    "chain_reversed",
    "chain_shuffled",
    "random_dag",
    "push_fan_in",
    "writes_reversed_push",
)


@dataclass
class Sizes:
    overhead: int = 10_000
    small: int = 10_000
    large: int = 100_000
    repeat: int = 5
    large_repeat: int = 2
    loop: tuple[int, int] = (10, 200)
    peers: tuple[int, ...] = (1_000, 4_000)
    store_calls: int = 1_000


TINY = Sizes(overhead=50, small=40, large=80, repeat=1, large_repeat=1, loop=(2, 4),
             peers=(20,), store_calls=20)


@dataclass
class Row:
    name: str
    figure: str
    target: str
    ok: bool | None  # None: not judged (tiny run, or a peer missing)
    data: dict[str, Any] = field(default_factory=dict)


@tl.tool
async def noop(i: Any = None) -> int:
    """Do nothing: the engine's own cost is what is measured."""
    return 0


# Issue 29, item 4: writes to one path finishing out of plan order, the last first (each is
# held until the ones before it apply): cubic before, 88 s at N=1,000. The push is in
# SHAPES; set and merge are the same shape for `probe_growth --shape`.
REVERSED_WRITES = ("writes_reversed_push", "writes_reversed_set", "writes_reversed_merge")
_turns: dict[int, trio.Event] = {}


@tl.tool
async def after_next(i: int, n: int) -> Any:
    """Returns once call `i + 1` has: calls finish last to first, at no cost of their own."""
    if i + 1 < n:
        await _turns[i + 1].wait()
    _turns[i].set()
    return {f"k{i}": i}


def best(times: list[float]) -> float:
    return min(times)


def timed(work: Callable[[], Any]) -> float:
    gc.collect()
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


class CollectorClock:
    """Wall time CPython's cyclic collector takes while it is attached (`gc.callbacks`):
    how much of a figure is the collector walking the live heap rather than the work."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0  # full (generation 2) collections
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._started
        self.full += info["generation"] == 2

    def timed(self, work: Callable[[], Any]) -> tuple[float, float, int]:
        """`timed(work)`, and the collector's share of it: (seconds, collector seconds,
        full collections)."""
        self.seconds, self.full = 0.0, 0
        # Attached inside the timed work: the collection `timed` makes first is not its.
        elapsed = timed(lambda: self.attached(work))
        return elapsed, self.seconds, self.full

    def attached(self, work: Callable[[], Any]) -> None:
        """Run `work` with the clock attached (its figures are added up, not reset)."""
        gc.callbacks.append(self)
        try:
            work()
        finally:
            gc.callbacks.remove(self)


# -- 1. overhead ------------------------------------------------------------------------------


def bare_trio_tasks(count: int) -> None:
    async def nothing() -> None:
        return None

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(nothing)

    trio.run(main)


def run_plan(calls: list[dict[str, Any]]) -> None:
    if calls and calls[0]["_tool"] == "after_next":
        _turns.clear()
        _turns.update((i, trio.Event()) for i in range(len(calls)))
    result = tl.run_calls(calls, tools=[noop, after_next])
    if result.errors:
        raise SystemExit(f"the benchmark plan has errors: {result.errors[:3]}")


def overhead(sizes: Sizes) -> Row:
    n = sizes.overhead
    calls = plan("fan_out", n)
    run_plan(calls)  # warm-up: imports, pydantic's validators
    engine, floor = [], []
    for _ in range(sizes.repeat):  # interleaved: a busy moment slows both alike
        engine.append(timed(lambda: run_plan(calls)))
        floor.append(timed(lambda: bare_trio_tasks(n)))
    ratio = best(engine) / best(floor)
    return Row(
        f"1. one tick of {n:,} no-op calls / bare trio tasks",
        f"{ratio:.2f}x ({best(engine) / n * 1e6:.1f} vs {best(floor) / n * 1e6:.1f} us/call)",
        f"<= {OVERHEAD_TARGET:g}x",
        ratio <= OVERHEAD_TARGET,
        {"ratio": ratio, "engine_us": best(engine) / n * 1e6, "floor_us": best(floor) / n * 1e6},
    )


# -- 2. growth --------------------------------------------------------------------------------


def plan(shape: str, n: int, seed: int = 7) -> list[dict[str, Any]]:
    """The calls of one shape; each reads what its inputs wrote, one path per call."""
    rng = random.Random(seed)
    if shape == "fan_out":
        return [{"_tool": "noop", "i": i, "_outputPath": f"†state.r{i}"} for i in range(n)]
    if shape.startswith("chain"):
        calls = [{"_tool": "noop", "i": 0, "_outputPath": "†state.r0"}]
        calls += [
            {"_tool": "noop", "i": f"†state.r{i - 1}", "_outputPath": f"†state.r{i}"}
            for i in range(1, n)
        ]
        if shape == "chain_reversed":
            calls.reverse()
        elif shape == "chain_shuffled":
            rng.shuffle(calls)
        return calls
    if shape == "random_dag":  # each reads up to 3 earlier calls, listed shuffled
        calls = []
        for i in range(n):
            deps = rng.sample(range(max(0, i - 50), i), k=min(i, rng.randint(0, 3)))
            calls.append({"_tool": "noop", "i": [f"†state.r{j}" for j in deps],
                          "_outputPath": f"†state.r{i}"})
        rng.shuffle(calls)
        return calls
    if shape == "push_fan_in":  # every call pushes onto one list; one reads its length
        calls = [
            {"_tool": "noop", "i": i, "_outputPath": "†state.items", "_outputMethod": "push"}
            for i in range(n - 1)
        ]
        return [*calls, {"_tool": "noop", "i": "†state.items", "_outputPath": "†state.total"}]
    if shape in REVERSED_WRITES:  # every call writes one path; the last finishes first
        method = shape.removeprefix("writes_reversed_")
        return [
            {"_tool": "after_next", "i": i, "n": n, "_outputPath": "†state.out",
             "_outputMethod": method}
            for i in range(n)
        ]
    raise ValueError(f"unknown shape {shape!r}")


def growth(sizes: Sizes, shapes: tuple[str, ...] = SHAPES) -> list[Row]:
    rows = []
    clock = CollectorClock()
    for shape in shapes:
        small, large = plan(shape, sizes.small), plan(shape, sizes.large)
        run_plan(plan(shape, 50))
        per_small, per_large = [], []
        runs = max(1, sizes.large // sizes.small)
        for _ in range(sizes.large_repeat):
            # One sample of each is the same work, interleaved: one large run, and as many
            # small runs as make its calls. (The best of more samples of one side than of
            # the other would favour that side on a busy machine.)
            per_large.append(per_call(
                clock.timed(lambda large=large: run_plan(large)), sizes.large
            ))
            per_small.append(per_call(
                clock.timed(lambda small=small, runs=runs: [run_plan(small) for _ in range(runs)]),
                sizes.small * runs,
            ))
        small_best, large_best = min(per_small), min(per_large)
        ratio = large_best[0] / small_best[0]
        rows.append(Row(
            f"2. {shape}: per call at {sizes.large:,} / at {sizes.small:,}",
            f"{ratio:.2f}x ({small_best[0] * 1e6:.1f} -> {large_best[0] * 1e6:.1f} us/call; "
            f"collector {small_best[1] * 1e6:.1f} -> {large_best[1] * 1e6:.1f})",
            f"<= {GROWTH_TARGET:g}x",
            ratio <= GROWTH_TARGET,
            {"ratio": ratio, "small_us": small_best[0] * 1e6, "large_us": large_best[0] * 1e6,
             "small_collector_us": small_best[1] * 1e6,
             "large_collector_us": large_best[1] * 1e6,
             "small_full_collections": small_best[2], "large_full_collections": large_best[2]},
        ))
    return rows


def per_call(sample: tuple[float, float, int], calls: int) -> tuple[float, float, int]:
    """A sample's seconds and collector seconds per call (its full collections as counted)."""
    seconds, collector, full = sample
    return seconds / calls, collector / calls, full


def memory(sizes: Sizes, shapes: tuple[str, ...] = SHAPES) -> list[Row]:
    """Peak traced memory of a whole run (the plan's own dicts excluded), per call."""
    rows = []
    for shape in shapes:
        calls = plan(shape, sizes.large)
        gc.collect()
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        run_plan(calls)
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        per_call = peak / sizes.large
        rows.append(Row(
            f"2. {shape}: peak memory per call at {sizes.large:,}",
            f"{per_call:,.0f} B",
            f"<= {MEMORY_TARGET:,} B",
            per_call <= MEMORY_TARGET,
            {"bytes_per_call": per_call},
        ))
    return rows


# -- 3. store ---------------------------------------------------------------------------------


def store(sizes: Sizes) -> Row:
    from . import bench_store

    off, on = bench_store.measure(
        calls=sizes.store_calls, repeat=max(bench_store.REPEAT, sizes.repeat)
    )
    ratio = on / off
    return Row(
        f"3. {sizes.store_calls:,}-call plan, store on / off",
        f"{ratio:.2f}x ({off * 1000:.1f} vs {on * 1000:.1f} ms)",
        f"<= {STORE_TARGET:g}x",
        ratio <= STORE_TARGET,
        {"ratio": ratio, "off_ms": off * 1000, "on_ms": on * 1000},
    )


# -- 4. loop ----------------------------------------------------------------------------------


def loop(sizes: Sizes) -> Row:
    from . import bench_loop

    short, long = sizes.loop
    bench_loop.per_iteration(short, repeats=1)  # warm-up
    shorts, longs = [], []
    for _ in range(max(3, sizes.repeat)):
        shorts.append(bench_loop.per_iteration(short, repeats=max(1, long // short // 2)))
        longs.append(bench_loop.per_iteration(long, repeats=1))
    ratio = best(longs) / best(shorts)
    return Row(
        f"4. agent loop, ms per iteration at {long} / at {short}",
        f"{ratio:.2f}x ({best(shorts) * 1000:.3f} -> {best(longs) * 1000:.3f} ms)",
        f"<= {LOOP_TARGET:g}x",
        ratio <= LOOP_TARGET,
        {"ratio": ratio, "short_ms": best(shorts) * 1000, "long_ms": best(longs) * 1000},
    )


# -- 5. peers ---------------------------------------------------------------------------------


def tickloop_turn(n: int) -> float:
    calls = [{"_tool": "noop", "i": i} for i in range(n)]
    model = tl.ScriptedModel([{"calls": calls, "output": None}, {"calls": [], "output": "ok"}],
                             chunk_chars=1 << 20)
    agent = tl.Agent(model, tools=[noop])

    def work() -> None:
        result = trio.run(agent.run_async)
        assert result.output == "ok" and len(result.records) == n

    return timed(work)


def pydantic_ai_turn(n: int) -> float:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    count = 0

    async def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            return ModelResponse(parts=[ToolCallPart("noop", {"i": i}, tool_call_id=f"c{i}")
                                        for i in range(n)])
        return ModelResponse(parts=[TextPart("ok")])

    async def call(i: int) -> int:
        """A no-op tool."""
        nonlocal count
        count += 1
        return 0

    agent = Agent(FunctionModel(respond), tools=[Tool(call, name="noop", takes_ctx=False)])

    def work() -> None:
        asyncio.run(agent.run("go"))
        assert count >= n

    return timed(work)


def langgraph_turn(n: int) -> float:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import StructuredTool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    class Scripted(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "tickloop-bench-noop"

        def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
            raise NotImplementedError

        async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                             **kwargs: Any) -> ChatResult:
            if not any(isinstance(m, AIMessage) for m in messages):
                calls = [{"name": "noop", "args": {"i": i}, "id": f"c{i}", "type": "tool_call"}
                         for i in range(n)]
                message = AIMessage(content="", tool_calls=calls)
            else:
                message = AIMessage(content="ok")
            return ChatResult(generations=[ChatGeneration(message=message)])

    async def call(i: int) -> int:
        return 0

    tools = [StructuredTool.from_function(coroutine=call, name="noop", description="no-op")]
    model = Scripted()

    async def agent_node(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent_node)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    app = graph.compile()

    def work() -> None:
        out = asyncio.run(app.ainvoke({"messages": [("user", "go")]}))
        assert len(out["messages"]) >= n + 3

    return timed(work)


PEER_RUNNERS = {"pydantic_ai": pydantic_ai_turn, "langgraph": langgraph_turn}


def peers(sizes: Sizes) -> list[Row]:
    present = {name: importlib.util.find_spec(name) is not None for name in PEER_RUNNERS}
    rows = []
    for n in sizes.peers:
        runners: dict[str, Callable[[int], float]] = {"tickloop": tickloop_turn}
        runners.update({name: PEER_RUNNERS[name] for name in PEER_RUNNERS if present[name]})
        for runner in runners.values():
            runner(min(n, 20))  # warm-up
        times: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(max(1, sizes.repeat)):
            for name, runner in runners.items():
                times[name].append(runner(n))
        us = {name: best(t) / n * 1e6 for name, t in times.items()}
        others = [us[name] for name in PEER_RUNNERS if name in us]
        ratio = min(others) / us["tickloop"] if others else None
        figure = ", ".join(f"{name} {value:.1f}" for name, value in us.items()) + " us/call"
        rows.append(Row(
            f"5. one model turn of {n:,} no-op tool calls, cheaper peer / tickloop",
            (f"{ratio:.1f}x cheaper ({figure})" if ratio is not None
             else f"peers not installed ({figure})"),
            f">= {PEER_TARGET:g}x",
            None if ratio is None else ratio >= PEER_TARGET,
            {"us_per_call": us, "ratio": ratio},
        ))
    return rows


# -- main -------------------------------------------------------------------------------------

PARTS: dict[str, Callable[[Sizes], Row | list[Row]]] = {
    "overhead": overhead,
    "growth": growth,
    "memory": memory,
    "store": store,
    "loop": loop,
    "peers": peers,
}


def measure(sizes: Sizes, only: list[str] | None = None) -> list[Row]:
    rows: list[Row] = []
    for name, part in PARTS.items():
        if only and name not in only:
            continue
        started = time.perf_counter()
        result = part(sizes)
        rows.extend(result if isinstance(result, list) else [result])
        print(f"  ({name}: {time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| measurement | result | target | met |", "| --- | --- | --- | --- |"]
    for row in rows:
        met = {True: "yes", False: "**no**", None: "not judged"}[row.ok]
        lines.append(f"| {row.name} | {row.figure} | {row.target} | {met} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_perf", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="toy sizes; nothing is judged")
    p.add_argument("--only", default="", help=f"comma-separated parts of {', '.join(PARTS)}")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--small", type=int, help="the growth's small size (default 10,000)")
    p.add_argument("--large", type=int, help="the growth's large size (default 100,000)")
    p.add_argument("--repeat", type=int,
                   help="runs per figure, best taken (default 5; the growth's samples: 2)")
    args = p.parse_args(argv)
    sizes = TINY if args.tiny else Sizes()
    for name in ("small", "large", "repeat"):
        if getattr(args, name) is not None:
            setattr(sizes, name, getattr(args, name))
    if args.repeat is not None:
        sizes.large_repeat = args.repeat
    rows = measure(sizes, [x for x in args.only.split(",") if x] or None)
    if args.tiny:
        for row in rows:
            row.ok = None
    print(table(rows))
    if args.json:
        with open(args.json, "w") as out:
            json.dump([row.__dict__ for row in rows], out, indent=1)
    return exit_status(rows)


def exit_status(rows: list[Row]) -> int:
    """1 when any target was missed, each named on stderr; a benchmark's exit code."""
    missed = [row.name for row in rows if row.ok is False]
    for name in missed:
        print(f"MISSED: {name}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

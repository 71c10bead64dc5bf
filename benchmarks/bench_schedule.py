"""Issue 33: the order of starts under a concurrency limit (PROTOCOL §13), on virtual time.

A pure simulation drives the real scheduler (`tickloop._core._scheduler.Scheduler`, the
one the trio engine and the Temporal workflow drive): the plan's calls arrive at t=0 in
list order, each `StartCall` finishes after its call's drawn duration, the earliest
finish is fed back as `FinishCall`, and so on to the end of the tick. No clock, no trio:
the makespan is in model seconds and the same seed gives the same figure.

1. makespan: agent-like plans (2 to 4 dependent chains of 3 to 6 steps, fetch then
   summarize, among 20 to 60 independent searches listed first, as models list them;
   searches take 0.5 to 1.5 s, steps 1 to 3 s) at limits 2, 4 and 8: the mean makespan
   of `critical_path` and of `fifo`, and their mean ratio to the lower bound
   max(critical path, work / limit) of each plan. Targets: critical_path within 1.06x of
   the bound at each limit, and at least 1.2x shorter than fifo at limits 4 and 8. Calls
   start the moment a slot is free (eager dispatch), under either order. A second,
   unjudged table shows how the figures move with the number of searches per plan.
2. cost: CPU time per call of the scheduler alone (this simulation) under a limit that
   binds, `critical_path` over `fifo`, at two plan sizes, for agent-like plans grown
   wide and for one long chain among lookups: ranks must not make the cost per call grow
   with the plan.

Run: python -m benchmarks.bench_schedule [--plans N] [--small N --large N] [--tiny]
It exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tickloop._core._log import ContextLog
from tickloop._core._scheduler import Scheduler
from tickloop._core._scheduler_io import (
    CloseStream,
    FinishCall,
    NoteTickEnded,
    OpenTick,
    ReceiveCall,
    StartCall,
)
from tickloop._core._tools import Tool, ToolSet

LIMITS = (2, 4, 8)
BOUND_TARGET = 1.06
FIFO_TARGET = 1.2
FIFO_TARGET_LIMITS = (4, 8)
COST_TARGET = 1.2  # per call at the large size over the small, critical_path's extra

# Each tool's calls take a duration drawn uniformly from this range (seconds); each
# tool declares the range's mean as its expected duration, as a measured mean would be.
DURATIONS = {"search": (0.5, 1.5), "fetch": (1.0, 3.0), "summarize": (1.0, 3.0)}


def _handler(x: Any = None) -> Any:  # never run: the simulation is the driver
    return x


TOOLS = ToolSet(
    [
        Tool(
            name,
            parameters={"type": "object"},
            handler=_handler,
            expected_duration=(low + high) / 2,
        )
        for name, (low, high) in DURATIONS.items()
    ]
)


@dataclass
class Plan:
    calls: list[dict[str, Any]]
    seconds: dict[str, float]  # each call's duration, by id
    after: dict[str, list[str]]  # each call's inputs, by id

    def critical_path(self) -> float:
        finish: dict[str, float] = {}
        for call in self.calls:  # inputs are listed before their readers
            call_id = call["_id"]
            start = max((finish[i] for i in self.after[call_id]), default=0.0)
            finish[call_id] = start + self.seconds[call_id]
        return max(finish.values())

    def bound(self, limit: int) -> float:
        return max(self.critical_path(), sum(self.seconds.values()) / limit)


def agent_like(rng: random.Random, lookups: int, chains: int, length: tuple[int, int]) -> Plan:
    """`lookups` independent searches listed first, then `chains` chains of fetch ->
    summarize -> ... steps, each reading the step before it."""
    calls: list[dict[str, Any]] = []
    seconds: dict[str, float] = {}
    after: dict[str, list[str]] = {}

    def add(call_id: str, tool: str, reads: str | None) -> None:
        calls.append(
            {
                "_tool": tool,
                "_id": call_id,
                "x": f"†state.{reads}" if reads else call_id,
                "_outputPath": f"†state.{call_id}",
            }
        )
        seconds[call_id] = rng.uniform(*DURATIONS[tool])
        after[call_id] = [reads] if reads else []

    for i in range(lookups):
        add(f"l{i}", "search", None)
    for c in range(chains):
        before = None
        for j in range(rng.randint(*length)):
            call_id = f"c{c}_{j}"
            add(call_id, "fetch" if j == 0 else "summarize", before)
            before = call_id
    return Plan(calls, seconds, after)


LOOKUPS = (20, 60)


def sample_plan(rng: random.Random, lookups: tuple[int, int] = LOOKUPS) -> Plan:
    """One agent-like plan: 20 to 60 lookups, 2 to 4 chains of 3 to 6 steps."""
    return agent_like(rng, rng.randint(*lookups), rng.randint(2, 4), (3, 6))


def simulate(plan: Plan, limit: int | None, schedule: str) -> float:
    """The plan's makespan on the real scheduler, every call taking its drawn seconds.
    Checks, as it goes, that no slot idles while a call could start (eager dispatch)."""
    scheduler = Scheduler(
        TOOLS, ContextLog([]), max_concurrency=limit, schedule=schedule, notes=False
    )
    now = 0.0
    finishing: list[tuple[float, int, str]] = []
    order = 0
    ended = False

    def carry_out(actions: list[Any]) -> None:
        nonlocal order, ended
        for action in actions:
            if type(action) is StartCall:
                order += 1
                heapq.heappush(finishing, (now + plan.seconds[action.id], order, action.id))
            elif type(action) is NoteTickEnded:
                ended = True

    carry_out(scheduler.handle(OpenTick(1)))
    for call in plan.calls:
        carry_out(scheduler.handle(ReceiveCall(call)))
    carry_out(scheduler.handle(CloseStream()))
    while finishing:
        now, _, call_id = heapq.heappop(finishing)
        carry_out(scheduler.handle(FinishCall(call_id, 0)))
        # Eager: no slot is left free while a call waits for one (no tool here has a
        # limit of its own, so a queued call waits for the run's).
        if scheduler._run_queue.queued:
            assert len(scheduler._run_queue.running) == limit, now
    assert ended, "the tick did not end"
    return now


# -- 1. makespan ---------------------------------------------------------------------------


def makespans(
    plans: int, seed: int = 33, lookups: tuple[int, int] = LOOKUPS, limits: tuple[int, ...] = LIMITS
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    sampled = [sample_plan(rng, lookups) for _ in range(plans)]
    rows = []
    for limit in limits:
        bounds = [plan.bound(limit) for plan in sampled]
        critical = [simulate(plan, limit, "critical_path") for plan in sampled]
        fifo = [simulate(plan, limit, "fifo") for plan in sampled]
        rows.append(
            {
                "limit": limit,
                "plans": plans,
                "lookups": lookups,
                "bound": statistics.fmean(bounds),
                "critical_path": statistics.fmean(critical),
                "fifo": statistics.fmean(fifo),
                "critical_over_bound": statistics.fmean(
                    c / b for c, b in zip(critical, bounds, strict=True)
                ),
                "fifo_over_bound": statistics.fmean(
                    f / b for f, b in zip(fifo, bounds, strict=True)
                ),
                "fifo_over_critical": statistics.fmean(
                    f / c for f, c in zip(fifo, critical, strict=True)
                ),
            }
        )
    return rows


def makespan_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| limit | lower bound | critical_path | fifo | critical_path / bound "
        "| fifo / bound | fifo / critical_path |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row['limit']} | {row['bound']:.2f} s | {row['critical_path']:.2f} s "
            f"| {row['fifo']:.2f} s | {row['critical_over_bound']:.3f}x "
            f"| {row['fifo_over_bound']:.3f}x | {row['fifo_over_critical']:.3f}x |"
        )
    return "\n".join(lines)


# Not judged: how the figures move with the number of lookups in a plan.
SENSITIVITY = ((8, 16), (12, 40), (20, 60), (40, 80))


def sensitivity(plans: int) -> list[dict[str, Any]]:
    rows = []
    for lookups in SENSITIVITY:
        rows += makespans(plans, seed=34, lookups=lookups, limits=(4, 8))
    return rows


def sensitivity_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| lookups per plan | limit | critical_path / bound | fifo / critical_path |",
        "| --- | --- | --- | --- |",
    ]
    for row in rows:
        low, high = row["lookups"]
        lines.append(
            f"| {low}-{high} | {row['limit']} | {row['critical_over_bound']:.3f}x "
            f"| {row['fifo_over_critical']:.3f}x |"
        )
    return "\n".join(lines)


def makespan_misses(rows: list[dict[str, Any]]) -> list[str]:
    missed = []
    for row in rows:
        if row["critical_over_bound"] > BOUND_TARGET:
            missed.append(f"limit {row['limit']}: critical_path / bound > {BOUND_TARGET}")
        if row["limit"] in FIFO_TARGET_LIMITS and row["fifo_over_critical"] < FIFO_TARGET:
            missed.append(f"limit {row['limit']}: fifo / critical_path < {FIFO_TARGET}")
    return missed


# -- 2. cost per call ----------------------------------------------------------------------


SHAPES: dict[str, Callable[[random.Random, int], Plan]] = {
    # agent-like plans grown wide: a tenth of the calls in chains of 3 to 6
    "agent_like": lambda rng, n: agent_like(rng, n - n // 10, max(1, n // 45), (3, 6)),
    # one chain as long as a quarter of the plan, listed after the lookups
    "long_chain": lambda rng, n: agent_like(rng, n - n // 4, 1, (n // 4, n // 4)),
}


def cpu_per_call(plan: Plan, schedule: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        simulate(plan, 8, schedule)
        best = min(best, time.process_time() - started)
    return best / len(plan.calls) * 1e6


def costs(small: int, large: int, repeat: int) -> list[dict[str, Any]]:
    rows = []
    for shape, make in SHAPES.items():
        row: dict[str, Any] = {"shape": shape}
        for size_name, size in (("small", small), ("large", large)):
            plan = make(random.Random(7), size)
            runs = repeat if size_name == "small" else max(1, repeat // 2)
            # interleaved, so a busy moment of a shared machine slows both alike
            fifo = cpu_per_call(plan, "fifo", runs)
            critical = cpu_per_call(plan, "critical_path", runs)
            row[size_name] = {"calls": len(plan.calls), "fifo_us": fifo, "critical_us": critical}
        row["growth"] = row["large"]["critical_us"] / row["small"]["critical_us"]
        row["fifo_growth"] = row["large"]["fifo_us"] / row["small"]["fifo_us"]
        rows.append(row)
    return rows


def cost_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| plan (limit 8) | calls | fifo | critical_path | calls | fifo | critical_path "
        "| growth, critical_path (fifo) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        small, large = row["small"], row["large"]
        lines.append(
            f"| {row['shape']} | {small['calls']:,} | {small['fifo_us']:.1f} us "
            f"| {small['critical_us']:.1f} us | {large['calls']:,} | {large['fifo_us']:.1f} us "
            f"| {large['critical_us']:.1f} us | {row['growth']:.2f}x ({row['fifo_growth']:.2f}x) |"
        )
    return "\n".join(lines)


def cost_misses(rows: list[dict[str, Any]]) -> list[str]:
    # Judged against fifo's own growth: what the ranks add, not the machine's caches.
    return [
        f"{row['shape']}: critical_path's cost per call grows {row['growth']:.2f}x"
        for row in rows
        if row["growth"] > COST_TARGET * max(1.0, row["fifo_growth"])
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_schedule",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--plans", type=int, default=400, help="agent-like plans per limit")
    p.add_argument("--small", type=int, default=2_000, help="the cost's small plan")
    p.add_argument("--large", type=int, default=20_000, help="the cost's large plan")
    p.add_argument("--repeat", type=int, default=3, help="runs per cost figure, best taken")
    p.add_argument("--tiny", action="store_true", help="toy sizes; nothing is judged")
    p.add_argument("--json", help="also write every row and the misses to this file")
    args = p.parse_args(argv)
    if args.tiny:
        args.plans, args.small, args.large, args.repeat = 5, 60, 120, 1
    rows = makespans(args.plans)
    print(f"Makespan, mean over {args.plans} agent-like plans per limit (model seconds):\n")
    print(makespan_table(rows))
    print(f"\nNot judged: by lookups per plan ({max(1, args.plans // 3)} plans each):\n")
    sensitivity_rows = sensitivity(max(1, args.plans // 3))
    print(sensitivity_table(sensitivity_rows))
    cost_rows = costs(args.small, args.large, args.repeat)
    print("\nScheduler CPU per call under a binding limit (best of runs):\n")
    print(cost_table(cost_rows))
    missed = [] if args.tiny else makespan_misses(rows) + cost_misses(cost_rows)
    for miss in missed:
        print(f"MISSED: {miss}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {
                    "makespan": rows,
                    "sensitivity": sensitivity_rows,
                    "cost": cost_rows,
                    "judged": not args.tiny,
                    "missed": missed,
                },
                out,
                indent=1,
            )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

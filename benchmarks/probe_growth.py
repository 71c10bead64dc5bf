"""Where a shape's extra cost per call at the large size goes (issue 15, target 2).

Not a target: a diagnosis of `bench_perf`'s growth figure. One large run and as many
small runs as make its calls, of one shape of `bench_perf.plan`, in this process, in CPU
time (user + system, `resource.getrusage`): the scheduler's share by the event it
handled (wrapping `Scheduler.handle`), the cyclic collector's (`gc.callbacks`) and its
full passes, the page faults, and what is left (the engine and trio). `--no-collector`
runs with the collector off, to see what grows without it.

Run: python -m benchmarks.probe_growth [--shape chain_shuffled] [--small N --large N]
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tickloop._core._scheduler import Scheduler

from .bench_perf import REVERSED_WRITES, SHAPES, CollectorClock, plan, run_plan


def _cpu() -> tuple[float, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_minflt


@contextmanager
def _handled_by_event(spent: dict[str, float]) -> Iterator[None]:
    """Add the CPU time of each `Scheduler.handle` to `spent`, by event type."""
    handle = Scheduler.handle

    def timed_handle(self: Scheduler, event: Any) -> Any:
        started = time.process_time()
        try:
            return handle(self, event)
        finally:
            name = type(event).__name__
            spent[name] = spent.get(name, 0.0) + time.process_time() - started

    Scheduler.handle = timed_handle  # type: ignore[method-assign]
    try:
        yield
    finally:
        Scheduler.handle = handle  # type: ignore[method-assign]


def split(work: Callable[[], Any], calls: int, *, collector: bool = True) -> dict[str, float]:
    """Per call, in µs: the whole, each event the scheduler handled, the collector (and its
    full passes, not per call) and page faults (per call)."""
    spent: dict[str, float] = {}
    clock = CollectorClock()
    gc.collect()
    was_enabled = gc.isenabled()
    if not collector:
        gc.disable()
    try:
        with _handled_by_event(spent):
            cpu, faults = _cpu()
            clock.attached(work)
            cpu_after, faults_after = _cpu()
    finally:
        if was_enabled:
            gc.enable()
    figures = {"total": (cpu_after - cpu) / calls * 1e6}
    figures.update({name: seconds / calls * 1e6 for name, seconds in spent.items()})
    figures["the rest"] = figures["total"] - sum(spent.values()) / calls * 1e6
    figures["collector"] = clock.seconds / calls * 1e6
    figures["full passes"] = clock.full
    figures["page faults"] = (faults_after - faults) / calls
    return figures


def measure(shape: str, small: int, large: int, *, collector: bool = True) -> list[tuple]:
    """(name, at small, at large) rows: one large run against `large // small` small ones."""
    runs = max(1, large // small)
    small_plan, large_plan = plan(shape, small), plan(shape, large)
    run_plan(plan(shape, 50))  # warm-up
    at_large = split(lambda: run_plan(large_plan), large, collector=collector)
    at_small = split(
        lambda: [run_plan(small_plan) for _ in range(runs)], small * runs, collector=collector
    )
    names = list(dict.fromkeys([*at_small, *at_large]))
    return [(name, at_small.get(name, 0.0), at_large.get(name, 0.0)) for name in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.probe_growth", description=__doc__)
    shapes = sorted(set(SHAPES + REVERSED_WRITES))
    parser.add_argument("--shape", default="chain_shuffled", choices=shapes)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--no-collector", action="store_true")
    args = parser.parse_args(argv)
    rows = measure(args.shape, args.small, args.large, collector=not args.no_collector)
    print(f"{args.shape}, per call (µs of CPU unless said), at {args.small:,} and {args.large:,}")
    print(f"| | {args.small:,} | {args.large:,} |\n| --- | --- | --- |")
    for name, at_small, at_large in rows:
        print(f"| {name} | {at_small:.2f} | {at_large:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Python function calls per tool call, under cProfile: the per-call figure of
`bench_perf --only overhead` as a count that a busy machine does not move.

The overhead benchmark's plan (`plan("fan_out", n)`, run by `run_plan`) and its floor
(`bare_trio_tasks(n)`) are each run once to warm up, then once under cProfile; every
call of a Python function or a builtin counts (cProfile's primitive calls), divided by n.
The plan's calls are handed over without the time-based yields of `tl.run_calls`
(`_YIELD_EVERY`), which would make the count depend on the machine's speed; what is
left moves by a fraction of a call (a date crossing a second formats that second).

Run: python -m benchmarks.count_calls [n]  (n = 2000 by default)
"""

from __future__ import annotations

import cProfile
import pstats
import sys
from collections.abc import Callable

from tickloop._engine import _run

from .bench_perf import bare_trio_tasks, plan, run_plan


def calls_per_item(work: Callable[[], object], n: int) -> float:
    work()  # warm-up: imports, pydantic's validators
    profile = cProfile.Profile()
    profile.runcall(work)
    return pstats.Stats(profile).prim_calls / n  # type: ignore[attr-defined,no-any-return]


def measure(n: int) -> tuple[float, float]:
    """(calls per tool call, calls per bare trio task) at size `n`."""
    calls = plan("fan_out", n)
    every, _run._YIELD_EVERY = _run._YIELD_EVERY, float("inf")
    try:
        engine = calls_per_item(lambda: run_plan(calls), n)
    finally:
        _run._YIELD_EVERY = every
    return engine, calls_per_item(lambda: bare_trio_tasks(n), n)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    engine, floor = measure(int(args[0]) if args else 2000)
    print(f"function calls per tool call: {engine:.1f}; per bare trio task: {floor:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

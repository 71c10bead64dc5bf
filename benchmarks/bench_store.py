"""What durability costs: a 1,000-call plan with the SQLite store on and off.

The same agent runs the same plan twice over, once without a store and once journaling
every event to an SQLite store (WAL, synchronous=NORMAL, no fsync per commit; events
are committed in groups, always before a call they lead to can start). The tools are
instant and the scripted model streams the whole plan at once, so the figure is pure
overhead: the scheduler and trio on one side, plus the journal on the other. Three calls
in four read another call's output (every fourth call's), so the run exercises
references and dependency tracking too. Best of 7 runs each, interleaved, in one
process (best of 3 swung from 1.27x to 1.69x within a minute on the shared 2-core
machine: a slow "off" run is as likely as a slow "on" one).

Target: store on <= 1.5x store off (issue 15; it was 3x).

Run: python benchmarks/bench_store.py
"""

from __future__ import annotations

import gc
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

import tickloop as tl

CALLS = 1_000
REPEAT = 7
TARGET = 1.5


@tl.tool
async def step(n: int) -> int:
    """One step of the plan."""
    return n + 1


def plan(count: int = CALLS) -> list[dict[str, Any]]:
    calls = []
    for i in range(count):
        source: Any = i if i % 4 == 0 else f"†state.v{i - i % 4}"
        calls.append({"_tool": "step", "n": source, "_outputPath": f"†state.v{i}"})
    return calls


def run_once(store: tl.SQLiteStore | None, run_id: str, calls: int = CALLS) -> float:
    model = tl.ScriptedModel(
        [{"calls": plan(calls), "output": None}, {"calls": [], "output": "ok"}],
        chunk_chars=4096,
    )
    agent = tl.Agent(model, tools=[step], store=store)
    gc.collect()
    started = time.perf_counter()
    result = trio.run(lambda: agent.run_async({"calls": calls}, run_id=run_id))
    elapsed = time.perf_counter() - started
    assert result.output == "ok" and len(result.records) == calls
    assert all(record.status == "done" for record in result.records.values())
    return elapsed


def measure(calls: int = CALLS, repeat: int = REPEAT) -> tuple[float, float]:
    """The best of `repeat` runs with the store off and on, interleaved, in seconds."""
    off, on, _ = _measure(calls, repeat)
    return off, on


def _measure(calls: int, repeat: int) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory() as folder:
        # One store for every run, as an application keeps one; its first run creates
        # the file, which a store usually has already.
        with tl.SQLiteStore(Path(folder) / "runs.db") as store:
            run_once(None, "warm-up", calls)
            run_once(store, "warm-up", calls)
            offs, ons = [], []
            for i in range(repeat):  # interleaved, so a busy machine slows both alike
                offs.append(run_once(None, f"off-{i}", calls))
                ons.append(run_once(store, f"on-{i}", calls))
            journal = len(store.journal("on-0"))
    return min(offs), min(ons), journal


def main() -> int:
    off, on, journal = _measure(CALLS, REPEAT)
    ratio = on / off
    print(f"tickloop durability benchmark: a {CALLS}-call plan, best of {REPEAT}")
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {platform.machine()}"
    )
    print(f"  store off: {off * 1000:8.1f} ms  ({off / CALLS * 1e6:6.1f} us per call)")
    print(f"  store on:  {on * 1000:8.1f} ms  ({on / CALLS * 1e6:6.1f} us per call)")
    print(f"  journal entries: {journal} (group commit: one per trio batch)")
    verdict = "ok" if ratio <= TARGET else "MISSED"
    print(f"  ratio on/off: {ratio:.2f}x (target <= {TARGET:g}x): {verdict}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())

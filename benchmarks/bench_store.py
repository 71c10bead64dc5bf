"""What durability costs: a 1,000-call plan with the SQLite store on and off.

The same agent runs the same plan twice over, once without a store and once journaling
every event to an SQLite store (WAL, synchronous=NORMAL, no fsync per commit; events
are committed in groups, always before a call they lead to can start). The tools are
instant and the scripted model streams the whole plan at once, so the figure is pure
overhead: the scheduler and trio on one side, plus the journal on the other. A quarter of
the calls read another call's output, so the run exercises references and dependency
tracking too. Best of 3 runs each, interleaved, in one process.

Target: store on <= 3x store off.

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
REPEAT = 3
TARGET = 3.0


@tl.tool
async def step(n: int) -> int:
    return n + 1


def plan() -> list[dict[str, Any]]:
    calls = []
    for i in range(CALLS):
        source: Any = i if i % 4 == 0 else f"†state.v{i - i % 4}"
        calls.append({"_tool": "step", "n": source, "_outputPath": f"†state.v{i}"})
    return calls


def run_once(store: tl.SQLiteStore | None, run_id: str) -> float:
    model = tl.ScriptedModel(
        [{"calls": plan(), "output": None}, {"calls": [], "output": "ok"}], chunk_chars=4096
    )
    agent = tl.Agent(model, tools=[step], store=store)
    gc.collect()
    started = time.perf_counter()
    result = trio.run(lambda: agent.run_async({"calls": CALLS}, run_id=run_id))
    elapsed = time.perf_counter() - started
    assert result.output == "ok" and len(result.records) == CALLS
    assert all(record.status == "done" for record in result.records.values())
    return elapsed


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        # One store for every run, as an application keeps one; its first run creates
        # the file, which a store usually has already.
        with tl.SQLiteStore(Path(folder) / "runs.db") as store:
            run_once(None, "warm-up")
            run_once(store, "warm-up")
            offs, ons = [], []
            for i in range(REPEAT):  # interleaved, so a busy machine slows both alike
                offs.append(run_once(None, f"off-{i}"))
                ons.append(run_once(store, f"on-{i}"))
            journal = store.journal("on-0")
        off, on = min(offs), min(ons)
    ratio = on / off
    print(f"tickloop durability benchmark: a {CALLS}-call plan, best of {REPEAT}")
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {platform.machine()}"
    )
    print(f"  store off: {off * 1000:8.1f} ms  ({off / CALLS * 1e6:6.1f} us per call)")
    print(f"  store on:  {on * 1000:8.1f} ms  ({on / CALLS * 1e6:6.1f} us per call)")
    print(f"  journal entries: {len(journal)} (group commit: one per trio batch)")
    verdict = "ok" if ratio <= TARGET else "MISSED"
    print(f"  ratio on/off: {ratio:.2f}x (target <= {TARGET:.0f}x): {verdict}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())

"""What the store's work per call costs in instructions (issue 15, target 3).

Not a target: a diagnosis that the machine's noise does not blur. The `bench_store` plan
is fed to a scheduler, call by call, with each started call finished at once (no trio
tasks, no stream), in five settings that each add one part of the durable path:

* `scheduler`: no notes, no arrows (what a run without a store asks of the scheduler);
* `notes`: the scheduler's `Note...` actions, which the journal reads;
* `arrows`: and `NoteReady.waits_on`, the calls each ready call waited on;
* `durable`: and a `DurableRun` recording every event (rows, entry texts), no SQL;
* `store`: and its commits to an SQLite store (journal and rows).

`--valgrind` runs each setting under callgrind twice (one run and six), so the
difference over five runs is one run's instructions without the start-up's, with
`PYTHONHASHSEED=0`: two counts of one tree agree to about 0.1 M. Without it, the
settings run in this process and print their best time (noisy; a smoke test).

Run: python -m benchmarks.count_store --valgrind [--calls 1000]
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from tickloop._core._log import ContextLog
from tickloop._core._scheduler import Scheduler
from tickloop._core._scheduler_io import CloseStream, FinishCall, OpenTick, ReceiveCall, StartCall
from tickloop._core._tools import ToolSet
from tickloop._durable._resume import DurableRun
from tickloop._durable._store import SQLiteStore
from tickloop._durable._writer import create_run
from tickloop._observe._events import EventSink, Redactor

from . import bench_store

SETTINGS = ("scheduler", "notes", "arrows", "durable", "store")
_DATE = "2026-01-01T00:00:00.000000Z"
_BATCH = 40  # calls per commit while the plan arrives, about a streamed chunk's


def run_once(setting: str, store: SQLiteStore, run_id: str, calls: int) -> None:
    """The plan through a scheduler (and a DurableRun) in one setting; call in trio."""
    tools = ToolSet([bench_store.step])
    notes = setting != "scheduler"
    scheduler = Scheduler(  # as a driver with a journal makes it (no `NoteMessage`)
        tools, ContextLog([]), notes=notes, messages=False, arrows=notes and setting != "notes"
    )
    durable: DurableRun | None = None
    if setting in ("durable", "store"):
        writer = create_run(store, run_id, "solution")
        redact = Redactor()
        durable = DurableRun(writer, tools, redact, EventSink(run_id, redact))
        if setting == "durable":
            writer.append = lambda *args, **options: None  # type: ignore[method-assign]

    def feed(event: Any) -> list[Any]:
        actions = scheduler.handle(event)
        if durable is not None:
            durable.record(event, actions)
        return actions

    started: list[StartCall] = []
    feed(OpenTick(1))
    for index, call in enumerate(bench_store.plan(calls)):
        started += [a for a in feed(ReceiveCall(call, _DATE)) if type(a) is StartCall]
        if durable is not None and index % _BATCH == _BATCH - 1:
            durable.commit()
    feed(CloseStream())
    while started:  # a batch's calls finish together, after their commit
        batch, started = started, []
        if durable is not None:
            durable.commit()
        for action in batch:
            event = FinishCall(action.id, action.params["n"] + 1, date=_DATE)
            started += [a for a in feed(event) if type(a) is StartCall]
    if durable is not None:
        durable.commit(rows=True)
        durable.writer.release()


def run(setting: str, runs: int, calls: int) -> float:
    """`runs` runs of one setting in this process; the best, in seconds."""

    async def main() -> float:
        best = float("inf")
        with tempfile.TemporaryDirectory() as folder, SQLiteStore(Path(folder) / "r.db") as store:
            for number in range(runs):
                gc.collect()
                began = time.perf_counter()
                run_once(setting, store, f"r{number}", calls)
                best = min(best, time.perf_counter() - began)
        return best

    return trio.run(main)


def instructions(setting: str, runs: int, calls: int) -> int:
    """Instructions callgrind counts for a process making `runs` runs of `setting`."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-m",
            "benchmarks.count_store",
            "--setting",
            setting,
            "--runs",
            str(runs),
            "--calls",
            str(calls),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind said no count: {done.stderr[-500:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.count_store",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--valgrind", action="store_true", help="count instructions (callgrind)")
    p.add_argument("--setting", choices=SETTINGS, help="run one setting (what --valgrind runs)")
    p.add_argument("--runs", type=int, default=6)
    p.add_argument("--calls", type=int, default=bench_store.CALLS)
    args = p.parse_args(argv)
    if args.setting is not None:
        run(args.setting, args.runs, args.calls)
        return 0
    print(f"the {args.calls}-call bench_store plan, per run, setting by setting")
    before = None
    for setting in SETTINGS:
        if args.valgrind:
            one = instructions(setting, 1, args.calls)
            six = instructions(setting, 6, args.calls)
            count = (six - one) / 5
            added = "" if before is None else f" (+{(count - before) / 1e6:.1f} M)"
            print(f"  {setting:9} {count / 1e6:8.1f} M instructions{added}")
            before = count
        else:
            print(f"  {setting:9} {run(setting, args.runs, args.calls) * 1000:8.2f} ms (best)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

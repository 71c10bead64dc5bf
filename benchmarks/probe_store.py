"""Where the store's cost goes (issue 15, target 3): the ratio with parts of it taken out.

Not a target: a diagnosis of `bench_store`'s figure. Each line is `bench_store.measure`
(best of `--repeat` interleaved runs with the store off and on, in this process) with
one part of the durable path patched out for the "on" runs, the median ratio of
`--samples` such measurements. The parts are nested, not additive: what a line saves
against "as it is" is what that part costs, its own work and what it does to the caches
around it. Patches are put back after each line; nothing here is a way to run.

Run: python -m benchmarks.probe_store [--calls 1000 --repeat 7 --samples 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any
from unittest import mock

from tickloop._core import _driver
from tickloop._durable import _journal, _resume, _writer

from . import bench_store


def _no_sql(writer: _writer.RunWriter, entries: Any, *rows: Any, **options: Any) -> None:
    writer.seq += len(entries)  # numbered as if stored, so the run goes on as ever


def _no_rows(original: Callable[..., None]) -> Callable[..., None]:
    def append(writer: _writer.RunWriter, entries: Any, *rows: Any, **options: Any) -> None:
        original(writer, entries, rows_current=options.get("rows_current", False))

    return append


def _no_arrows(original: Callable[..., None]) -> Callable[..., None]:
    def make(scheduler: Any, *args: Any, **options: Any) -> None:
        original(scheduler, *args, **{**options, "arrows": False})

    return make


def _track_received(run: Any, event: Any, actions: Any, at: float, mark: int, *_: Any) -> None:
    """A received call followed without its entry (which has no place to fill)."""
    run._track(event, actions, at, mark)


def _without(part: str, stack: ExitStack) -> None:
    """Patch one part of the durable path out (the parts of `PARTS`)."""
    run = _resume.DurableRun
    if part == "SQL (journal and rows)":
        stack.enter_context(mock.patch.object(_writer.RunWriter, "append", _no_sql))
    elif part == "rows' SQL":
        stack.enter_context(
            mock.patch.object(_writer.RunWriter, "append", _no_rows(_writer.RunWriter.append))
        )
    elif part == "journal entries (encoding and SQL)":
        stack.enter_context(mock.patch.object(run, "_add_text", lambda self, at, kind, text: None))
        stack.enter_context(mock.patch.object(run, "_follow_received", _track_received))
        stack.enter_context(mock.patch.object(_journal, "received_text", lambda event: ("", None)))
        stack.enter_context(mock.patch.object(_journal, "finished_text", lambda event: ""))
        stack.enter_context(mock.patch.object(_journal, "event_to_dict", lambda event: None))
    elif part == "everything recorded (entries, rows)":
        stack.enter_context(mock.patch.object(run, "record", lambda self, event, actions: None))
    elif part == "... and the scheduler's arrows":
        stack.enter_context(mock.patch.object(run, "record", lambda self, event, actions: None))
        scheduler = _driver.Scheduler
        stack.enter_context(
            mock.patch.object(scheduler, "__init__", _no_arrows(scheduler.__init__))
        )
    elif part != "as it is":
        raise ValueError(part)


PARTS = (
    "as it is",
    "SQL (journal and rows)",
    "rows' SQL",
    "journal entries (encoding and SQL)",
    "everything recorded (entries, rows)",
    "... and the scheduler's arrows",
)


def ratio_without(part: str, calls: int, repeat: int, samples: int) -> tuple[float, float]:
    """(median ratio on / off, median ms the store adds) with `part` patched out."""
    ratios, added = [], []
    with ExitStack() as stack:
        _without(part, stack)
        for _ in range(samples):
            off, on = bench_store.measure(calls, repeat)
            ratios.append(on / off)
            added.append((on - off) * 1000)
    return statistics.median(ratios), statistics.median(added)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.probe_store", description=__doc__)
    parser.add_argument("--calls", type=int, default=bench_store.CALLS)
    parser.add_argument("--repeat", type=int, default=bench_store.REPEAT)
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"store on / off, {args.calls:,}-call plan, median of {args.samples} bench_store runs")
    print("| without | on / off | ms the store adds |\n| --- | --- | --- |")
    for part in PARTS:
        ratio, added = ratio_without(part, args.calls, args.repeat, args.samples)
        print(f"| {part} | {ratio:.3f}x | {added:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

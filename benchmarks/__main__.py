"""`python -m benchmarks`: regenerate the end-to-end latency tables and charts.

Runs every strategy and peer on every workload on the virtual and the real clock, the
over-seeds table, the sensitivity grid and the engine's overhead benchmark; writes
benchmarks/results/e2e.json, the PNG charts in docs/, and its own section of
docs/benchmarks.md (other sections are left as they are). Run it from the repository root.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from .e2e import ROOT, TIMELINE_WORKLOAD, Settings, log, run_all
from .report import check_targets, render, write_section

CHART_MAKESPAN = "bench_makespan_virtual.png"
CHART_MAKESPAN_REAL = "bench_makespan_real.png"
CHART_TIMELINE = "bench_timeline.png"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--scale", type=float, default=Settings.scale,
                   help="real seconds per model second on the real clock (default %(default)s)")
    p.add_argument("--min-real-bound", type=float, default=Settings.min_real_bound,
                   help="a larger scale for workloads whose T* would last fewer real seconds")
    p.add_argument("--repeats", type=int, default=Settings.real_repeats,
                   help="real-clock runs of tickloop, median taken")
    p.add_argument("--seeds", type=int, default=Settings.seeds,
                   help="latency seeds per shape for the over-seeds table")
    p.add_argument("--grid-seeds", type=int, default=Settings.grid_seeds)
    p.add_argument("--skip-real", action="store_true", help="virtual clock only")
    p.add_argument("--skip-peers", action="store_true", help="leave Pydantic AI and LangGraph out")
    p.add_argument("--skip-engine", action="store_true", help="do not run bench_engine.py")
    p.add_argument("--skip-grid", action="store_true", help="no sensitivity grid")
    p.add_argument("--skip-perf", action="store_true",
                   help="do not run bench_perf.py (issue 15's per-call ratios)")
    p.add_argument("--skip-schedule", action="store_true",
                   help="do not run bench_schedule.py (issue 33's order of starts)")
    p.add_argument("--skip-code", action="store_true",
                   help="do not run bench_code.py (issue 40's code plans beside the peers)")
    p.add_argument("--skip-charts", action="store_true")
    p.add_argument("--no-docs", action="store_true",
                   help="print the markdown instead of writing docs/benchmarks.md")
    p.add_argument("--docs", type=Path, default=ROOT / "docs" / "benchmarks.md")
    p.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "e2e.json")
    p.add_argument("--from-json", type=Path, metavar="PATH",
                   help="run nothing: redraw the charts and the section from saved results")
    return p.parse_args(argv)


def charts(results: dict[str, Any], docs: Path) -> list[str]:
    try:
        from .charts import makespan_chart, timeline_chart
        from .peers import LABELS as PEER_LABELS
        from .report import SHORT
        from .strategies import LABELS, STRATEGIES, Outcome
    except ImportError as error:  # matplotlib is in the bench extra only
        log(f"charts skipped: {error}")
        return []
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log("charts skipped: matplotlib is not installed (pip install -e '.[bench]')")
        return []
    labels = {**LABELS, **PEER_LABELS}
    written = []
    names = list(results["workloads"])
    for clock, filename, unit, scale in (
        ("virtual", CHART_MAKESPAN, "model seconds", 1.0),
        ("real", CHART_MAKESPAN_REAL, "ms", 1000.0),
    ):
        if clock not in results:
            continue
        table = results[clock]
        order = list(next(iter(table.values()))["makespans"])
        series = {name: [table[w]["makespans"][name] * scale for w in names] for name in order}
        bounds = [table[w]["bound"] * scale for w in names]
        title = (
            "Makespan per strategy and workload, virtual clock (exact)"
            if clock == "virtual"
            else "Makespan per strategy and workload, real clock (scales in the table)"
        )
        makespan_chart(docs / filename, names, series, labels, bounds, title=title, unit=unit)
        written.append(filename)
    timeline = results["virtual"][TIMELINE_WORKLOAD]["timeline"]
    if timeline:
        order_keys = [w for w in timeline["tickloop"]["calls"]]
        order_keys.sort(key=lambda k: timeline["sequential"]["calls"][k][0])
        runs = []
        for name in STRATEGIES:  # the peers' timelines are strategy 2's, to the tick
            data = timeline[name]
            runs.append((
                SHORT.get(name, name),
                Outcome(name, data["makespan"], data["requests"], data["calls"],
                        data["iterations"]),
            ))
        timeline_chart(
            docs / CHART_TIMELINE,
            results["virtual"][TIMELINE_WORKLOAD]["title"],
            runs,
            order_keys,
            results["virtual"][TIMELINE_WORKLOAD]["bound"],
            unit="s",
        )
        written.append(CHART_TIMELINE)
    return written


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    settings = Settings(
        scale=args.scale,
        min_real_bound=args.min_real_bound,
        real_repeats=args.repeats,
        seeds=args.seeds,
        grid_seeds=args.grid_seeds,
        real=not args.skip_real,
        peers=not args.skip_peers,
        engine=not args.skip_engine,
        grid=not args.skip_grid,
        perf=not args.skip_perf,
        schedule=not args.skip_schedule,
        code=not args.skip_code,
    )
    if args.from_json:
        results = json.loads(args.from_json.read_text())
    else:
        log(f"settings: {dataclasses.asdict(settings)}")
        results = run_all(settings)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
        log(f"wrote {args.json}")
    written = [] if args.skip_charts else charts(results, args.docs.parent)
    for name in written:
        log(f"wrote {args.docs.parent / name}")
    section = render(results, written)
    if args.no_docs:
        print(section)
    else:
        args.docs.parent.mkdir(parents=True, exist_ok=True)
        write_section(args.docs, section)
        log(f"wrote its section of {args.docs}")
    missed = 0
    for what, figure, ok in check_targets(results):
        label = {True: "met", False: "MISSED", None: "BEYOND ANY RUNNER"}[ok]
        log(f"[{label}] {what}: {figure}")
        missed += ok is False
    return 1 if missed else 0  # a missed target fails the run (CI, `make bench`)


if __name__ == "__main__":
    sys.exit(main())

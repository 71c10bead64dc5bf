"""Every example runs as a user would run it, and exits 0.

Examples are documentation that executes; one that no longer runs misleads. Each runs in a
fresh interpreter (`sys.executable`) from the repository root, so an example added later
is picked up without touching this file.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_there_are_examples() -> None:
    assert EXAMPLES, "examples/ has no .py files"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_the_example_runs_and_exits_zero(example: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(example)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{example.name} exited {done.returncode}:\n{done.stderr[-3000:]}"

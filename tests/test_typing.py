"""A user's code type-checks (docs/api.md "Types"): `mypy --strict` and pyright pass on
tests/typing/user_script.py, a script using tools, agents, decisions, events and outputs,
and report a misspelled name or protocol as the errors they are."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "typing" / "user_script.py"

TYPOS = textwrap.dedent(
    """
    import tickloop as tl

    agent = tl.Agnet(tl.ScriptedModel([]))
    other = tl.Agent(tl.ScriptedModel([]), protocol="solutoin")
    """
)


def _environment() -> dict[str, str]:
    """The checkers read this worktree's package, whatever the venv has installed."""
    source = str(ROOT / "src")
    return {**os.environ, "MYPYPATH": source, "PYTHONPATH": source}


def _check(command: list[str], tmp_path: Path) -> tuple[str, str]:
    """The checker's report on the user script, then on a script with two typos."""
    typos = tmp_path / "typos.py"
    typos.write_text(TYPOS)
    reports = []
    for path in (SCRIPT, typos):
        done = subprocess.run(
            [*command, str(path)], capture_output=True, text=True, cwd=ROOT, env=_environment()
        )
        reports.append(done.stdout + done.stderr)
    return reports[0], reports[1]


def test_a_users_script_passes_mypy_strict_and_typos_are_errors(tmp_path: Path) -> None:
    clean, typos = _check(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache")],
        tmp_path,
    )
    assert "Success: no issues found" in clean, clean
    assert 'Module has no attribute "Agnet"' in typos, typos
    assert "Literal['solutoin']" in typos and "Found 2 errors" in typos, typos


def test_a_users_script_passes_pyright_and_typos_are_errors(tmp_path: Path) -> None:
    clean, typos = _check(
        [sys.executable, "-m", "pyright", "--pythonpath", sys.executable], tmp_path
    )
    assert "0 errors" in clean, clean
    assert '"Agnet" is not a known attribute of module "tickloop"' in typos, typos
    assert "Literal['solutoin']" in typos and "2 errors" in typos, typos


def test_every_way_a_run_stops_short_is_a_public_run_stopped() -> None:
    import tickloop as tl

    assert issubclass(tl.MaxIterationsError, tl.RunStopped)
    assert issubclass(tl.ExecuteError, tl.RunStopped)
    assert issubclass(tl.RunStopped, tl.TickloopError)
    model = tl.ScriptedModel([{"calls": []}] * 3)
    try:
        tl.Agent(model, max_iterations=2).run({"question": "?"})
    except tl.RunStopped as error:
        assert isinstance(error, tl.MaxIterationsError)
        assert error.messages[0]["kind"] == "input"  # the log to continue from
    else:
        raise AssertionError("the run should have stopped at its iteration limit")


def test_events_and_the_model_client_protocol_are_public_submodules() -> None:
    """`tickloop.events` and `tickloop.models` hold the same objects as the top level
    (`TurnItem`, the union a `TurnClient` yields, only in `tickloop.models`)."""
    import tickloop as tl
    import tickloop.events
    import tickloop.models

    for module in (tickloop.events, tickloop.models):
        assert module.__all__
        for name in set(module.__all__) - {"TurnItem"}:
            assert getattr(module, name) is getattr(tl, name), name
    assert "CallFinished" in tickloop.events.__all__
    assert {"ModelClient", "TurnClient", "SolutionRequest"} <= set(tickloop.models.__all__)

"""`tickloop demo`: offline, shows calls starting while the model still writes."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import trio
import trio.testing

from tickloop._cli._demo import run_demo
from tickloop._cli._main import main


def test_no_command_prints_help(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main([]) == 0
    assert "demo" in capsys.readouterr().out


def test_demo_runs_on_virtual_time_and_shows_the_graph() -> None:
    out = io.StringIO()
    result = trio.run(lambda: run_demo(out), clock=trio.testing.MockClock(autojump_threshold=0))
    text = out.getvalue()
    statuses = sorted(record.status for record in result.records.values())
    assert statuses.count("skipped") == 1 and "invalid" not in statuses
    assert result.output is not None and result.output.city == "porto"
    assert "awaiting approval" in text and "approved automatically" in text
    # Calls ran before the model finished writing its plan.
    finished_writing = float(
        re.search(r"([\d.]+)s  -- request 1: the model finished writing", text).group(1)
    )
    first_run = float(re.search(r"([\d.]+)s  \S+ +\w+ +running", text).group(1))
    assert first_run < finished_writing
    assert "Timeline" in text and "█" in text


def test_help_explains_the_commands() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "tickloop._cli._main", "--help"], capture_output=True, text=True
    )
    assert completed.returncode == 0
    assert "demo" in completed.stdout and "dependency graph" in completed.stdout


def test_the_code_demo_runs_a_program_and_books_while_showing_lines() -> None:
    from tickloop._cli._demo_code import run_code_demo

    out = io.StringIO()
    result = trio.run(
        lambda: run_code_demo(out), clock=trio.testing.MockClock(autojump_threshold=0)
    )
    text = out.getvalue()
    assert result.output is not None and result.output.city == "porto"
    assert result.output.confirmation == "OFF-POR-2027"
    assert "awaiting approval" in text and "approved automatically" in text
    assert "line 8: cheapest: porto at 2490 euros" in text
    finished_writing = float(
        re.search(r"([\d.]+)s  -- request 1: the model finished writing", text).group(1)
    )
    first_run = float(re.search(r"([\d.]+)s  \S+ +\w+ +running", text).group(1))
    assert first_run < finished_writing
    assert all(record.line is not None for record in result.records.values())
    assert main(["demo", "--code", "--virtual-time"]) == 0

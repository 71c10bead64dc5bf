"""The plain versions of what were shortcuts (docs/decisions.md, "No shortcuts"): each
test here failed with the shortcut in place."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, tzinfo
from pathlib import Path

import pytest

from tickloop._engine import _engine
from tickloop._engine._engine import utc_now

# -- utc_now: a date per engine write, right from any thread ---------------------------------


def _clock_in(second: int, told: list[int]) -> Callable[[], int]:
    """A clock (integer nanoseconds) that ticks a microsecond at a time inside `second`,
    and keeps the last time it told."""
    counter: Iterator[int] = iter(range(1_000_000))

    def clock() -> int:
        told[0] = second * 1_000_000_000 + next(counter) * 1000
        return told[0]

    return clock


class _YieldingDatetime(datetime):
    """`datetime`, whose `fromtimestamp` lets other threads run in the middle (as a
    free-threaded build, or any interpreter between two bytecodes, may)."""

    @classmethod
    def fromtimestamp(cls, t: float, tz: tzinfo | None = None) -> datetime:  # type: ignore[override]
        time.sleep(0)
        return datetime.fromtimestamp(t, tz)


def test_utc_now_is_right_from_four_threads_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four threads, each living in its own second, date their writes at the same time:
    every date is its own thread's time (a cache of "the current second" shared by the
    threads gave dates with another thread's second or microseconds)."""
    monkeypatch.setattr(_engine, "datetime", _YieldingDatetime, raising=False)
    seconds = [1_700_000_000 + 3600 * index for index in range(4)]
    wrong: list[tuple[str, str]] = []
    start = threading.Barrier(len(seconds))

    def date_writes(second: int) -> None:
        told = [0]
        clock = _clock_in(second, told)
        start.wait()
        for _ in range(2_000):
            date = utc_now(clock)
            when = datetime.fromtimestamp(told[0] // 10**9, UTC)
            when = when.replace(microsecond=told[0] // 1000 % 10**6, tzinfo=None)
            expected = when.isoformat(timespec="microseconds") + "Z"
            if date != expected:
                wrong.append((expected, date))

    threads = [threading.Thread(target=date_writes, args=(s,)) for s in seconds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


def test_utc_now_has_microseconds_and_a_z() -> None:
    assert utc_now(lambda: 1_700_000_000_000_123_000) == "2023-11-14T22:13:20.000123Z"
    assert utc_now(lambda: 1_700_000_000_999_999_999) == "2023-11-14T22:13:20.999999Z"


# -- the journal's JSON without the C encoder (pure-Python json, PyPy) -----------------------


def test_a_durable_run_works_where_json_has_no_c_encoder(tmp_path: Path) -> None:
    """With `json.encoder.c_make_encoder` absent, as in pure-Python json and on PyPy, an
    agent is made and a stored run journals and resumes (touching `tl.Agent` raised
    TypeError while the journal built its own C encoders)."""
    script = textwrap.dedent(
        f"""
        import json.encoder
        json.encoder.c_make_encoder = None  # what pure-Python json has

        import tickloop as tl

        @tl.tool
        def add(a: int, b: int) -> int:
            return a + b

        model = tl.ScriptedModel(
            [{{"calls": [{{"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.sum"}}]}},
             {{"output": "†state.sum"}}]
        )
        agent = tl.Agent(model, tools=[add], store={str(tmp_path / "runs.db")!r})
        result = agent.run({{"question": "é?"}}, run_id="r1")
        assert result.output == 3, result
        stored = tl.SQLiteStore({str(tmp_path / "runs.db")!r})
        assert [run.run_id for run in stored.runs()] == ["r1"]
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# -- no shortcut comes back ------------------------------------------------------------------

SOURCE = Path(__file__).resolve().parent.parent / "src" / "tickloop"


@pytest.mark.parametrize(
    "shortcut",
    [
        "ctypes",  # a private CPython API through the C ABI
        "exec(",  # code built from text
        "c_make_encoder",  # json's private C encoder
        "operator.is_",  # values told apart by identity
        "PyObject_GC_UnTrack",
    ],
)
def test_no_shortcut_is_in_the_source(shortcut: str) -> None:
    found = [
        f"{path.relative_to(SOURCE)}:{number}"
        for path in sorted(SOURCE.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if shortcut in line
    ]
    assert found == []

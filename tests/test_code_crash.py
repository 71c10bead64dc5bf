"""A code plan's run SIGKILLed mid-program, then resumed (PROTOCOL §10, §14).

The child runs a code-plan agent with a store; its tools count their side effects in a
file. It is killed while one call with side effects and one idempotent call run, with
the program's stream closed or still open. The resume must re-run no finished call,
report the interrupted one as a failure at its line, re-run only the idempotent one, and
never ask the model again for the iteration whose stream had closed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import tickloop as tl

CHILD = r'''
import os
import sys

import trio

import tickloop as tl

DIR = os.environ["CRASH_DIR"]


def count(name):
    fd = os.open(os.path.join(DIR, "counts"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (name + "\n").encode())
    os.close(fd)


def slow():
    return float(os.environ.get("CRASH_SLOW", "0"))


@tl.tool(read_only=True)
async def fast(n: int) -> int:
    """Fast."""
    count(f"fast:{n}")
    return n


@tl.tool(read_only=True)
async def double(n: int) -> int:
    """Double."""
    count(f"double:{n}")
    return n * 2


@tl.tool
async def charge(n: int) -> int:
    """Not idempotent: charging twice is what a crash must never cause."""
    count(f"charge:{n}")
    await trio.sleep(slow())
    return n * 100


@tl.tool(idempotent=True, read_only=True)
async def lookup(n: int) -> int:
    """Idempotent."""
    count(f"lookup:{n}")
    await trio.sleep(slow())
    return n * 10


PROGRAM = """```python
a = fast(n=1)
b = fast(n=2)
c = charge(n=3)
d = lookup(n=4)
e = double(n=a)
final_answer([a, b, c, d, e])
```
"""


class CrashModel:
    """Iteration 1 streams PROGRAM; with hang=True it stops before the closing fence
    (its last statement is not complete yet) and waits forever, as a model still
    writing would."""

    def __init__(self, hang):
        self.hang = hang
        self.iterations = []

    async def stream_solution(self, request):
        self.iterations.append(request.iteration)
        if request.iteration == 1:
            if self.hang:
                # Statement 5 is complete once the next line has come whole.
                yield tl.TextDelta(PROGRAM[: PROGRAM.index("```\n", 10)])
                await trio.sleep_forever()
            yield tl.TextDelta(PROGRAM)
            return
        yield tl.TextDelta('final_answer("finished")')


def make_agent(store, hang=False):
    return tl.Agent(
        CrashModel(hang), tools=[fast, double, charge, lookup], store=store, protocol="code"
    )


if __name__ == "__main__":
    make_agent(sys.argv[1], hang=sys.argv[2] == "hang").run({"task": "crash"}, run_id="crashy")
'''


def _stored_state(db: Path) -> tuple[dict[str, str], bool]:
    if not db.exists():
        return {}, False
    store = tl.SQLiteStore(db)
    try:
        calls = {call.id: call.status for call in store.calls("crashy")}
        journal = store.journal("crashy")
    except tl.ResumeError:
        return {}, False
    closed = any(
        kind == "message" and isinstance(body, dict) and body.get("type") == "solution"
        for _, _, kind, body in journal
    )
    return calls, closed


def _crash(tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "codecrash.py").write_text(CHILD, encoding="utf-8")
    db = tmp_path / "runs.db"
    env = {**os.environ, "CRASH_DIR": str(tmp_path), "CRASH_SLOW": "600"}
    child = subprocess.Popen(
        [sys.executable, str(tmp_path / "codecrash.py"), str(db), mode],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )
    wanted = {"c1.0": "done", "c1.1": "done", "c1.4": "done", "c1.2": "running", "c1.3": "running"}
    try:
        deadline = time.monotonic() + 60
        while True:
            calls, closed = _stored_state(db)
            if all(calls.get(k) == v for k, v in wanted.items()) and closed == (mode == "closed"):
                break
            if child.poll() is not None:
                assert child.stderr is not None
                raise AssertionError(f"the child exited early: {child.stderr.read().decode()}")
            assert time.monotonic() < deadline, f"never mid-program: {_stored_state(db)}"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        assert child.stderr is not None
        child.stderr.close()
    monkeypatch.setenv("CRASH_DIR", str(tmp_path))
    monkeypatch.setenv("CRASH_SLOW", "0")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("codecrash", None)
    import codecrash  # type: ignore[import-not-found]

    return codecrash, db


@pytest.mark.parametrize("mode", ["closed", "hang"])
def test_a_program_killed_mid_run_resumes_without_repeating_finished_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    codecrash, db = _crash(tmp_path, mode, monkeypatch)
    counts = lambda: Counter((tmp_path / "counts").read_text().split())  # noqa: E731
    before = counts()
    assert before == Counter(
        {"fast:1": 1, "fast:2": 1, "double:1": 1, "charge:3": 1, "lookup:4": 1}
    )
    store = tl.SQLiteStore(db)
    agent = codecrash.make_agent(store)
    result = agent.resume("crashy")
    assert result.status == "done" and result.output == "finished"
    # No finished call ran again; the charge was not re-run; the idempotent lookup was.
    assert counts() == Counter(
        {"fast:1": 1, "fast:2": 1, "double:1": 1, "charge:3": 1, "lookup:4": 2}
    )
    records = result.records
    assert records["c1.2"].status == "failed"
    assert records["c1.2"].error["message"].startswith("interrupted:")
    # The interrupted charge raised at its line and ended the program; the variables
    # are those of the statements before it.
    assert result.state == {"a": 1, "b": 2}
    messages = " ".join(error["data"]["error"]["message"] for error in result.errors)
    assert "line 3" in messages
    assert ("cut off by a crash" in messages) == (mode == "hang")
    # The model was asked only for the next iteration.
    assert agent.model.iterations == [2]
    assert store.run("crashy").status == "done"

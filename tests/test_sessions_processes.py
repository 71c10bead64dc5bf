"""Sessions across processes (PROTOCOL §16 "Busy"): two processes on one session take
turns, never writing one history at once; a SIGKILLed run blocks the session, naming
it, until it is resumed, and the next run sees it. Runs waiting in several processes
join in the order they started, and a waiter SIGKILLed while it waits holds no one up.

The processes meet at files (a marker each run's tool writes, a gate file the test
makes), never at a clock.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tickloop as tl

CHILD = r'''
import json
import os
import sys
import time

import tickloop as tl

DIR = os.environ["SESSION_DIR"]


@tl.tool(idempotent=True)
def step(run: str) -> str:
    """Mark the run as started, then wait at the gate (or hang, to be killed)."""
    with open(os.path.join(DIR, "started-" + run), "w") as marker:
        marker.write("1")
    if os.environ.get("HANG") == run:
        while True:
            time.sleep(1)
    while not os.path.exists(os.path.join(DIR, "go")):
        time.sleep(0.01)
    return run


def answer(request):
    text = "\n".join(str(m["content"]) for m in request["messages"])
    said = json.loads(text.split("## input")[1].split("\n", 2)[2].split("\n\n")[0])["say"]
    if '"done"' in text.split("## input")[1]:
        return {"calls": [], "output": "did " + said}
    call = {"_tool": "step", "_id": "s", "_outputPath": "†state.done", "run": said}
    return {"calls": [call], "output": None}


def make_agent(store):
    return tl.Agent(tl.FunctionModel(answer), tools=[step], store=store)


if __name__ == "__main__":
    db, session, say, busy, timeout = sys.argv[1:6]
    try:
        result = make_agent(db).run(
            {"say": say},
            session=session,
            run_id=say,
            session_busy=busy,
            session_timeout=float(timeout),
        )
    except tl.SessionBusy as error:
        print(json.dumps({"busy": error.run_id, "reason": error.reason}))
    else:
        history = [m["data"] for m in result.messages if m.get("kind") == "history"]
        print(json.dumps({"output": result.output, "history": history}))
'''


def _start(
    tmp_path: Path, say: str, busy: str = "wait", timeout: float = 120, **env: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(tmp_path / "sessionchild.py"),
            str(tmp_path / "runs.db"),
            "s",
            say,
            busy,
            str(timeout),
        ],
        env={**os.environ, "SESSION_DIR": str(tmp_path), **env},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(child: subprocess.Popen[str]) -> Any:
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def _wait_for(path: Path, child: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        if child.poll() is not None:
            raise AssertionError(f"the child exited early: {child.communicate()}")
        assert time.monotonic() < deadline, f"the child never made {path.name}"
        time.sleep(0.02)


def _wait_for_waiters(tmp_path: Path, count: int, child: subprocess.Popen[str]) -> None:
    """Until the session's queue holds `count` tickets: the child waits in it now (read
    from the store file, only to know when to go on)."""
    deadline = time.monotonic() + 60
    while True:
        if child.poll() is not None:
            raise AssertionError(f"the child exited early: {child.communicate()}")
        connection = sqlite3.connect(tmp_path / "runs.db")
        try:
            (found,) = connection.execute("SELECT count(*) FROM session_waiters").fetchone()
        finally:
            connection.close()
        if found == count:
            return
        assert time.monotonic() < deadline, f"the queue never held {count} runs"
        time.sleep(0.02)


@pytest.fixture
def child_script(tmp_path: Path) -> Path:
    (tmp_path / "sessionchild.py").write_text(CHILD, encoding="utf-8")
    return tmp_path


def test_two_processes_on_one_session_take_turns(child_script: Path) -> None:
    tmp_path = child_script
    first = _start(tmp_path, "a")
    try:
        _wait_for(tmp_path / "started-a", first)  # "a" holds the session, at its gate
        refused = _start(tmp_path, "x", busy="raise")
        assert _result(refused) == {"busy": "a", "reason": "running"}
        second = _start(tmp_path, "b")
        (tmp_path / "go").write_text("1")
        a, b = _result(first), _result(second)
    finally:
        first.kill()
    assert a == {"output": "did a", "history": []}
    # "b" ran after "a" ended, from its whole exchange: nothing lost, nothing interleaved.
    assert b["output"] == "did b"
    assert b["history"] == [[{"run_id": "a", "input": {"say": "a"}, "output": "did a"}]]
    session = tl.SQLiteStore(tmp_path / "runs.db").session("s")
    assert [run.run_id for run in session.runs] == ["a", "b"]  # the refused run never joined
    assert [entry["output"] for entry in session.history] == ["did a", "did b"]


def test_a_killed_run_blocks_its_session_until_resumed(
    child_script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path = child_script
    child = _start(tmp_path, "k", HANG="k")
    try:
        _wait_for(tmp_path / "started-k", child)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.communicate()

    monkeypatch.setenv("SESSION_DIR", str(tmp_path))
    monkeypatch.delenv("HANG", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("sessionchild", None)
    import sessionchild  # type: ignore[import-not-found]

    (tmp_path / "go").write_text("1")
    store = tl.SQLiteStore(tmp_path / "runs.db")
    agent = sessionchild.make_agent(store)
    assert store.session("s").status == "crashed"
    with pytest.raises(tl.SessionBusy, match=r"agent\.resume") as busy:
        agent.run({"say": "n"}, session="s")  # waiting would not help: it is refused
    assert (busy.value.run_id, busy.value.reason) == ("k", "crashed")

    resumed = agent.resume("k")
    assert (resumed.status, resumed.output) == ("done", "did k")
    after = agent.run({"say": "n"}, session="s", run_id="n")
    assert after.output == "did n"
    history = [m["data"] for m in after.messages if m.get("kind") == "history"]
    assert history == [[{"run_id": "k", "input": {"say": "k"}, "output": "did k"}]]
    assert [run.run_id for run in store.session("s").runs] == ["k", "n"]


def test_runs_waiting_in_two_processes_join_in_the_order_they_started(
    child_script: Path,
) -> None:
    tmp_path = child_script
    first = _start(tmp_path, "a")
    waiters: list[subprocess.Popen[str]] = []
    try:
        _wait_for(tmp_path / "started-a", first)
        for count, name in enumerate("bc", start=1):
            waiters.append(_start(tmp_path, name))
            _wait_for_waiters(tmp_path, count, waiters[-1])  # it waits in the queue
        (tmp_path / "go").write_text("1")
        a, b, c = _result(first), *(_result(child) for child in waiters)
    finally:
        for child in (first, *waiters):
            child.kill()
    assert (a["output"], b["output"], c["output"]) == ("did a", "did b", "did c")
    assert [[entry["run_id"] for entry in b["history"][0]]] == [["a"]]
    assert [[entry["run_id"] for entry in c["history"][0]]] == [["a", "b"]]
    runs = tl.SQLiteStore(tmp_path / "runs.db").session("s").runs
    assert [run.run_id for run in runs] == ["a", "b", "c"]


def test_a_waiter_killed_while_it_waits_holds_no_one_up(child_script: Path) -> None:
    """On its host a waiter whose process is gone is out of the queue at once: once the
    session's run ends, a run in another process that will not wait at all (timeout 0)
    gets in, where the dead waiter's place would have refused it."""
    tmp_path = child_script
    first = _start(tmp_path, "a")
    killed: subprocess.Popen[str] | None = None
    try:
        _wait_for(tmp_path / "started-a", first)
        killed = _start(tmp_path, "k")
        _wait_for_waiters(tmp_path, 1, killed)  # "k" waits in the queue, first
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=60)
        (tmp_path / "go").write_text("1")
        assert _result(first)["output"] == "did a"
        later = _result(_start(tmp_path, "n", timeout=0))
    finally:
        first.kill()
        if killed is not None:
            killed.kill()
    assert later == {
        "output": "did n",
        "history": [[{"run_id": "a", "input": {"say": "a"}, "output": "did a"}]],
    }
    session = tl.SQLiteStore(tmp_path / "runs.db").session("s")
    assert [run.run_id for run in session.runs] == ["a", "n"]  # "k" never joined

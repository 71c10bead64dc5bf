"""A real crash: a child process runs an agent with a store and is SIGKILLed mid-tick.

The parent then resumes the run from the store and checks what PROTOCOL §10 promises:
finished calls never run again (side effects are counted in a file), a non-idempotent
call that was running is reported as interrupted and not re-run, an idempotent one is
re-run, and a request whose stream had closed is not sent to the model again.
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
import trio

import tickloop as tl

CHILD = r'''
"""The crashing agent: its tools count their side effects in DIR/counts."""
import json
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


@tl.tool
async def fast(n: int) -> int:
    count(f"fast:{n}")
    return n


@tl.tool
async def double(n: int) -> int:
    count(f"double:{n}")
    return n * 2


@tl.tool
async def charge(n: int) -> int:
    """Not idempotent: charging twice is what a crash must never cause."""
    count(f"charge:{n}")
    await trio.sleep(slow())
    return n * 100


@tl.tool(idempotent=True)
async def lookup(n: int) -> int:
    count(f"lookup:{n}")
    await trio.sleep(slow())
    return n * 10


PLAN = [
    {"_tool": "fast", "n": 1, "_outputPath": "†state.a"},
    {"_tool": "fast", "n": 2, "_outputPath": "†state.b"},
    {"_tool": "charge", "n": 3, "_outputPath": "†state.c"},
    {"_tool": "lookup", "n": 4, "_outputPath": "†state.d"},
    {"_tool": "double", "n": "†state.a", "_outputPath": "†state.e"},
    {"_tool": "double", "n": "†state.c", "_outputPath": "†state.f"},
    {"_tool": "double", "n": "†state.d", "_outputPath": "†state.g"},
]
FINAL = {"calls": [], "output": "finished"}


class CrashModel:
    """Iteration 1 streams PLAN; with hang=True it stops before closing the calls array
    and waits forever, as a model still writing would."""

    def __init__(self, hang):
        self.hang = hang
        self.iterations = []

    async def stream_solution(self, request):
        self.iterations.append(request.iteration)
        if request.iteration == 1:
            text = json.dumps({"calls": PLAN, "output": None}, ensure_ascii=False)
            if self.hang:
                yield tl.TextDelta(text[: text.rindex("]")])
                await trio.sleep_forever()
            yield tl.TextDelta(text)
            return
        yield tl.TextDelta(json.dumps(FINAL))


def make_agent(store, hang=False):
    return tl.Agent(CrashModel(hang), tools=[fast, double, charge, lookup], store=store)


if __name__ == "__main__":
    make_agent(sys.argv[1], hang=sys.argv[2] == "hang").run({"task": "crash"}, run_id="crashy")
'''


def _stored_state(db: Path) -> tuple[dict[str, str], bool]:
    """What the store says so far: each call's status, and whether the stream closed."""
    if not db.exists():
        return {}, False
    store = tl.SQLiteStore(db)
    try:
        calls = {call.id: call.status for call in store.calls("crashy")}
    except tl.ResumeError:  # the run is not created yet
        return {}, False
    closed = any(
        kind == "event" and body["type"] == "StreamClosed"
        for _, _, kind, body in store.journal("crashy")
    )
    return calls, closed


def _wait_until_stored(db: Path, mode: str, process: subprocess.Popen[bytes]) -> None:
    """Poll the store (the record a resume works from) until the child is mid-tick:
    three calls done, the two slow ones running, the stream closed or not."""
    wanted = {"c1.0": "done", "c1.1": "done", "c1.4": "done", "c1.2": "running", "c1.3": "running"}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        calls, closed = _stored_state(db)
        if all(calls.get(call_id) == status for call_id, status in wanted.items()):
            if closed == (mode == "closed"):
                return
        if process.poll() is not None:
            assert process.stderr is not None
            raise AssertionError(f"the child exited early: {process.stderr.read().decode()}")
        time.sleep(0.02)
    raise AssertionError(f"the child never got mid-tick; the store says {_stored_state(db)}")


def _crash_and_load(tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "crashchild.py").write_text(CHILD, encoding="utf-8")
    db = tmp_path / "runs.db"
    env = {**os.environ, "CRASH_DIR": str(tmp_path), "CRASH_SLOW": "600"}
    child = subprocess.Popen(
        [sys.executable, str(tmp_path / "crashchild.py"), str(db), mode],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_until_stored(db, mode, child)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        assert child.stderr is not None
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    monkeypatch.setenv("CRASH_DIR", str(tmp_path))
    monkeypatch.setenv("CRASH_SLOW", "0")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("crashchild", None)
    import crashchild  # type: ignore[import-not-found]

    return crashchild, db


def _counts(tmp_path: Path) -> Counter[str]:
    return Counter((tmp_path / "counts").read_text().split())


@pytest.mark.parametrize("mode", ["closed", "hang"])
def test_a_run_killed_mid_tick_resumes_without_repeating_finished_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    crashchild, db = _crash_and_load(tmp_path, mode, monkeypatch)
    store = tl.SQLiteStore(db)
    [info] = store.runs()
    assert (info.run_id, info.status) == ("crashy", "interrupted")
    before = _counts(tmp_path)
    assert before == Counter(
        {"fast:1": 1, "fast:2": 1, "double:1": 1, "charge:3": 1, "lookup:4": 1}
    )

    agent = crashchild.make_agent(store)
    result = agent.resume("crashy")

    assert result.status == "done" and result.output == "finished"
    # Finished calls ran once; the non-idempotent call was not re-run; the idempotent
    # one was, and what waited on it ran after it.
    assert _counts(tmp_path) == Counter(
        {
            "fast:1": 1,
            "fast:2": 1,
            "double:1": 1,
            "charge:3": 1,
            "lookup:4": 2,
            "double:40": 1,
        }
    )
    assert result.state == {"a": 1, "b": 2, "d": 40, "e": 2, "g": 80}
    statuses = {call_id: record.status for call_id, record in result.records.items()}
    assert statuses == {
        "c1.0": "done",
        "c1.1": "done",
        "c1.2": "failed",
        "c1.3": "done",
        "c1.4": "done",
        "c1.5": "invalid",
        "c1.6": "done",
    }
    interrupted = result.records["c1.2"].error
    assert interrupted is not None and interrupted["type"] == "runtime"
    assert interrupted["message"].startswith("interrupted:")
    # The model was told (an Error Message in the log) and was asked only for iteration 2.
    messages = [error["data"]["error"]["message"] for error in result.errors]
    assert any(message.startswith("interrupted:") for message in messages)
    assert agent.model.iterations == [2]
    solutions = [m["iteration"] for m in result.messages if m["type"] == "solution"]
    assert solutions == [1, 2]
    cut_off = [message for message in messages if "cut off by a crash" in message]
    assert len(cut_off) == (1 if mode == "hang" else 0)
    # The store agrees (its rows, which the kill may have left behind the journal, were
    # rewritten by the resume), and the finished run cannot be resumed or run again.
    assert store.run("crashy").status == "done"
    assert {call.id: call.status for call in store.calls("crashy")} == statuses
    assert store.rows_behind("crashy") is None
    with pytest.raises(tl.ResumeError, match="finished"):
        agent.resume("crashy")
    with pytest.raises(tl.ResumeError, match="finished"):
        agent.run({"task": "again"}, run_id="crashy")
    assert _counts(tmp_path)["lookup:4"] == 2
    page = tl.timeline_html(db, "crashy")
    assert page.count('class="resume"') == 1
    assert ('class="seg stream cut"' in page) == (mode == "hang")


HOOK_CHILD = r'''
"""An agent whose approval hook is still waiting for a person when the process dies."""
import os
import sys

import trio

import tickloop as tl


def count(name):
    fd = os.open(os.path.join(os.environ["CRASH_DIR"], "counts"),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (name + "\n").encode())
    os.close(fd)


@tl.tool
async def fetch(n: int) -> int:
    count(f"fetch:{n}")
    return n


@tl.tool(requires_approval=True)
async def pay(cents: int) -> str:
    count(f"pay:{cents}")
    return "paid"


PLAN = [
    {"_tool": "fetch", "n": 5, "_outputPath": "†state.n"},
    {"_tool": "pay", "cents": "†state.n", "_outputPath": "†state.p"},
]
asked = []


async def hook(call):
    asked.append(call.id)
    if os.environ.get("HOOK") == "wait":
        await trio.sleep_forever()
    return tl.Approve()


def make_agent(store):
    model = tl.ScriptedModel([{"calls": PLAN, "output": None}, {"calls": [], "output": "ok"}])
    return tl.Agent(model, tools=[fetch, pay], approve=hook, store=store)


if __name__ == "__main__":
    make_agent(sys.argv[1]).run({}, run_id="hooked")
'''


def test_a_question_left_unanswered_by_a_crash_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "hookchild.py").write_text(HOOK_CHILD, encoding="utf-8")
    db = tmp_path / "runs.db"
    env = {**os.environ, "CRASH_DIR": str(tmp_path), "HOOK": "wait"}
    child = subprocess.Popen(
        [sys.executable, str(tmp_path / "hookchild.py"), str(db)], env=env, cwd=tmp_path
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if db.exists():
                try:
                    statuses = {c.id: c.status for c in tl.SQLiteStore(db).calls("hooked")}
                except tl.ResumeError:
                    statuses = {}
                if statuses == {"c1.0": "done", "c1.1": "approving"}:
                    break
            assert child.poll() is None, "the child exited early"
            time.sleep(0.02)
        else:
            raise AssertionError("the child never asked for approval")
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    monkeypatch.setenv("CRASH_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("hookchild", None)
    import hookchild  # type: ignore[import-not-found]

    result = hookchild.make_agent(tl.SQLiteStore(db)).resume("hooked")
    assert result.status == "done" and result.state == {"n": 5, "p": "paid"}
    assert hookchild.asked == ["c1.1"]
    assert _counts(tmp_path) == Counter({"fetch:5": 1, "pay:5": 1})


def test_the_entry_that_starts_or_asks_about_a_call_is_committed_before_it_may_act(
    tmp_path: Path,
) -> None:
    """Write-ahead, at the seam the engine uses: `commit(call_id)` before a handler runs
    or the hook is asked commits the event that started (or asked about) that call,
    even when the entries before it are committed already; and a call started by an
    entry already committed adds no commit of its own (calls that start together share
    one)."""
    from tickloop._core._log import ContextLog
    from tickloop._core._scheduler import Scheduler
    from tickloop._core._scheduler_io import (
        AskApproval,
        CloseStream,
        Event,
        FinishCall,
        OpenTick,
        ReceiveCall,
        StartCall,
    )
    from tickloop._core._tools import ToolSet
    from tickloop._durable._resume import DurableRun
    from tickloop._durable._writer import create_run
    from tickloop._observe._events import EventSink, Redactor

    @tl.tool
    def step(n: int) -> int:
        return n

    @tl.tool(requires_approval=True)
    def pay(n: int) -> int:
        return n

    store = tl.SQLiteStore(tmp_path / "runs.db")
    tools = ToolSet([step, pay])
    commits: list[int] = []

    async def main() -> None:
        writer = create_run(store, "r", "solution")
        append = writer.append
        writer.append = lambda entries, *rest, **options: (  # type: ignore[method-assign]
            commits.append(len(entries)),
            append(entries, *rest, **options),
        )[1]
        redact = Redactor()
        durable = DurableRun(writer, tools, redact, EventSink("r", redact))
        scheduler = Scheduler(tools, ContextLog([]), arrows=True)

        def feed(event: Event) -> list[Any]:
            actions = scheduler.handle(event)
            durable.record(event, actions)
            return actions

        def last_event() -> str:
            events = [body["type"] for _, _, kind, body in store.journal("r") if kind == "event"]
            return events[-1]

        feed(OpenTick(1))
        durable.commit()
        actions = feed(ReceiveCall({"_tool": "step", "n": 1, "_outputPath": "†state.a"}))
        [start] = [a for a in actions if isinstance(a, StartCall)]
        durable.commit(start.id)
        assert last_event() == "CallReceived"
        for n in (2, 3):  # two readers of a: both start when c1.0 finishes
            feed(ReceiveCall({"_tool": "step", "n": "†state.a", "_outputPath": f"†state.r{n}"}))
        durable.commit()
        actions = feed(FinishCall(start.id, value=1))
        starts = [a.id for a in actions if isinstance(a, StartCall)]
        assert starts == ["c1.1", "c1.2"]
        before = len(commits)
        durable.commit(starts[0])
        assert last_event() == "CallFinished" and len(commits) == before + 1
        durable.commit(starts[1])
        assert len(commits) == before + 1
        actions = feed(ReceiveCall({"_tool": "pay", "n": 5, "_outputPath": "†state.p"}))
        [ask] = [a for a in actions if isinstance(a, AskApproval)]
        durable.commit(ask.pending.id)
        assert last_event() == "CallReceived"
        feed(CloseStream())
        durable.commit(rows=True)

    trio.run(main)
    store.close()


def test_a_result_is_journaled_as_it_was_returned_though_the_rows_follow_later(
    tmp_path: Path,
) -> None:
    """`record` makes an event's entry at once and follows what it changes in the rows
    at the next commit: a result its tool changes after returning it (an object the tool
    keeps) is journaled as it was returned, so a replay writes the same log; the row
    then says what the journal says."""
    from tickloop._core._log import ContextLog
    from tickloop._core._scheduler import Scheduler
    from tickloop._core._scheduler_io import FinishCall, OpenTick, ReceiveCall, StartCall
    from tickloop._core._tools import ToolSet
    from tickloop._durable._resume import DurableRun
    from tickloop._durable._writer import create_run
    from tickloop._observe._events import EventSink, Redactor

    @tl.tool
    def fetch(n: int) -> dict[str, Any]:
        return {"n": n}

    store = tl.SQLiteStore(tmp_path / "runs.db")
    tools = ToolSet([fetch])

    async def main() -> None:
        redact = Redactor()
        durable = DurableRun(
            create_run(store, "r", "solution"), tools, redact, EventSink("r", redact)
        )
        scheduler = Scheduler(tools, ContextLog([]), messages=False, arrows=True)

        def feed(event: Any) -> list[Any]:
            actions = scheduler.handle(event)
            durable.record(event, actions)
            return actions

        feed(OpenTick(1))
        actions = feed(ReceiveCall({"_tool": "fetch", "n": 1, "_outputPath": "†state.a"}))
        [start] = [a for a in actions if isinstance(a, StartCall)]
        durable.commit(start.id)
        kept = {"n": 1}
        feed(FinishCall(start.id, value=kept))
        kept["n"] = 2  # the tool changes what it returned, before the next commit
        kept["extra"] = True
        durable.commit(rows=True)
        durable.writer.release()

    trio.run(main)
    finished = [
        body for _, _, kind, body in store.journal("r") if body.get("type") == "CallFinished"
    ]
    assert [body["value"] for body in finished] == [{"n": 1}]
    [row] = store.calls("r")
    assert row.status == "done" and row.params == {"n": 1}
    store.close()

"""Sub-agents in durable runs (PROTOCOL §11, §10 at every depth): a SIGKILL inside a child,
a deferred call inside a child decided from the command line."""

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
from tickloop._cli._main import main

CHILD = r'''
"""A tree whose child is SIGKILLed mid-tick: side effects and model requests are counted
in DIR/counts."""
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


@tl.tool
async def fast(n: int) -> int:
    count(f"fast:{n}")
    return n


@tl.tool(idempotent=True)
async def slow(n: int) -> int:
    count(f"slow:{n}")
    await trio.sleep(float(os.environ.get("CRASH_SLOW", "0")))
    return n * 10


class CountingModel:
    """Answers iteration k with responses[k - 1], counting every request it gets."""

    def __init__(self, name, responses):
        self.name = name
        self.responses = responses

    async def stream_solution(self, request):
        count(f"model:{self.name}:{request.iteration}")
        yield tl.TextDelta(json.dumps(self.responses[request.iteration - 1]))


def make_agent(store):
    worker = tl.Agent(
        CountingModel("worker", [
            {"calls": [{"_tool": "fast", "n": 1, "_outputPath": "†state.a"},
                       {"_tool": "slow", "n": 2, "_outputPath": "†state.b"}],
             "output": None},
            {"calls": [], "output": {"a": "†state.a", "b": "†state.b"}},
        ]),
        tools=[fast, slow],
        name="worker",
    )
    return tl.Agent(
        CountingModel("root", [
            {"calls": [{"_tool": "worker", "task": "go", "_outputPath": "†state.w"},
                       {"_tool": "fast", "n": 100, "_outputPath": "†state.r"}],
             "output": None},
            {"calls": [], "output": {"w": "†state.w", "r": "†state.r"}},
        ]),
        tools=[worker, fast],
        store=store,
    )


if __name__ == "__main__":
    make_agent(sys.argv[1]).run({"task": "crash"}, run_id="tree")
'''


def _stored(db: Path) -> dict[str, str]:
    if not db.exists():
        return {}
    try:
        return {call.id: call.status for call in tl.SQLiteStore(db).calls("tree")}
    except tl.ResumeError:  # not created yet
        return {}


def _crash_inside_the_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "treechild.py").write_text(CHILD, encoding="utf-8")
    db = tmp_path / "runs.db"
    env = {**os.environ, "CRASH_DIR": str(tmp_path), "CRASH_SLOW": "600"}
    process = subprocess.Popen(
        [sys.executable, str(tmp_path / "treechild.py"), str(db)],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )
    wanted = {"c1.0": "running", "c1.0/c1.0": "done", "c1.0/c1.1": "running", "c1.1": "done"}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            calls = _stored(db)
            if all(calls.get(call_id) == status for call_id, status in wanted.items()):
                break
            if process.poll() is not None:
                assert process.stderr is not None
                raise AssertionError(f"the child exited early: {process.stderr.read().decode()}")
            time.sleep(0.02)
        else:
            raise AssertionError(f"never got inside the child; the store says {_stored(db)}")
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
        assert process.stderr is not None
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    monkeypatch.setenv("CRASH_DIR", str(tmp_path))
    monkeypatch.setenv("CRASH_SLOW", "0")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("treechild", None)
    import treechild  # type: ignore[import-not-found]

    return treechild, db


def test_a_crash_inside_a_child_resumes_inside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    treechild, db = _crash_inside_the_child(tmp_path, monkeypatch)
    counts = Counter((tmp_path / "counts").read_text().split())
    assert counts == Counter(
        {"model:root:1": 1, "model:worker:1": 1, "fast:1": 1, "slow:2": 1, "fast:100": 1}
    )

    store = tl.SQLiteStore(db)
    result = treechild.make_agent(store).resume("tree")

    assert result.status == "done"
    assert result.output == {"w": {"a": 1, "b": 20}, "r": 100}
    counts = Counter((tmp_path / "counts").read_text().split())
    # No finished call of the child (nor of the root) ran again; the idempotent one that
    # was running did; neither model was asked again for an iteration whose stream closed.
    assert counts == Counter(
        {
            "model:root:1": 1,
            "model:worker:1": 1,
            "model:worker:2": 1,
            "model:root:2": 1,
            "fast:1": 1,
            "slow:2": 2,
            "fast:100": 1,
        }
    )
    statuses = {call_id: record.status for call_id, record in result.records.items()}
    assert statuses == {
        "c1.0": "done",
        "c1.0/c1.0": "done",
        "c1.0/c1.1": "done",
        "c1.1": "done",
    }
    # The agent call was never "interrupted": it resumed as its child did.
    assert result.errors == []
    assert {call.id: call.status for call in store.calls("tree")} == statuses
    assert store.run("tree").status == "done"


# -- a deferred call inside a child ------------------------------------------------------------


@tl.tool(requires_approval=True)
def publish(text: str) -> str:
    return f"published {text}"


ran: list[str] = []


@tl.tool
def other(n: int) -> int:
    ran.append(f"other:{n}")
    return n


def _deferring_tree(store: tl.SQLiteStore | None) -> tl.Agent:
    publisher = tl.Agent(
        tl.ScriptedModel(
            [
                {
                    "calls": [
                        {"_tool": "publish", "text": "†input.task", "_outputPath": "†state.p"}
                    ],
                    "output": None,
                },
                {"calls": [], "output": "†state.p || †input.task"},
            ]
        ),
        tools=[publish],
        name="publisher",
    )
    return tl.Agent(
        tl.ScriptedModel(
            [
                {
                    "calls": [
                        {"_tool": "publisher", "task": "post", "_outputPath": "†state.p"},
                        {"_tool": "other", "n": 1, "_outputPath": "†state.o"},
                    ],
                    "output": None,
                },
                {"calls": [], "output": {"p": "†state.p", "o": "†state.o"}},
            ]
        ),
        tools=[publisher, other],
        approve=lambda call: tl.Defer(),
        store=store,
    )


def test_a_deferred_child_call_is_listed_by_path_and_decided_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran.clear()
    db = str(tmp_path / "runs.db")
    store = tl.SQLiteStore(db)
    first = _deferring_tree(store).run({}, run_id="post-7")
    assert first.status == "paused"
    assert [p.id for p in first.pending] == ["c1.0/c1.0"]
    assert ran == ["other:1"]  # the unrelated call finished before the tree paused

    capsys.readouterr()
    assert main(["pending", "post-7", "--store", db]) == 0
    listed = capsys.readouterr().out
    assert "c1.0/c1.0" in listed and "publish" in listed
    assert main(["approve", "post-7", "c1.0/c1.0", "--store", db]) == 0

    result = _deferring_tree(store).resume("post-7")
    assert result.status == "done"
    assert result.output == {"p": "published post", "o": 1}
    assert ran == ["other:1"]  # not run again
    assert result.records["c1.0/c1.0"].status == "done"


def test_resume_takes_a_decision_by_path(tmp_path: Path) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    assert _deferring_tree(store).run({}, run_id="post-8").status == "paused"
    with pytest.raises(tl.ResumeError):
        _deferring_tree(store).resume("post-8", decisions={"c1.0/c9.9": tl.Approve()})
    result = _deferring_tree(store).resume("post-8", decisions={"c1.0/c1.0": tl.Deny("not today")})
    assert result.status == "done"
    assert result.records["c1.0/c1.0"].status == "denied"
    assert result.output == {"p": "post", "o": 1}  # the child fell back to its input


def test_trace_and_timeline_nest_a_childs_calls_under_the_call_that_started_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "runs.db")
    store = tl.SQLiteStore(db)
    _deferring_tree(store).run({}, run_id="post-9")
    _deferring_tree(store).resume("post-9", decisions={"c1.0/c1.0": tl.Approve()})
    capsys.readouterr()
    assert main(["trace", "post-9", "--store", db]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [line.split()[0] for line in lines] == ["c1.0", "c1.0/c1.0", "c1.1"]
    assert lines[1].startswith("  c1.0/c1.0")  # indented under its agent call
    page = tl.timeline_html(db, "post-9")
    assert page.index("c1.0/c1.0") < page.index("c1.1")


def test_a_resumed_tree_reports_the_calls_of_children_that_ended_before(
    tmp_path: Path,
) -> None:
    ran.clear()
    store = tl.SQLiteStore(tmp_path / "runs.db")

    def tree() -> tl.Agent:
        helper = tl.Agent(
            tl.ScriptedModel(
                [
                    {"calls": [{"_tool": "other", "n": 5, "_outputPath": "†state.n"}]},
                    {"calls": [], "output": "†state.n"},
                ]
            ),
            tools=[other],
            name="helper",
        )
        publisher = _deferring_tree(store).tools["publisher"]
        return tl.Agent(
            tl.ScriptedModel(
                [
                    {
                        "calls": [
                            {"_tool": "helper", "task": "count", "_outputPath": "†state.h"},
                            {"_tool": "publisher", "task": "post", "_outputPath": "†state.p"},
                        ]
                    },
                    {"calls": [], "output": {"h": "†state.h", "p": "†state.p"}},
                ]
            ),
            tools=[helper, publisher],
            approve=lambda call: tl.Defer(),
            store=store,
        )

    assert tree().run({}, run_id="post-10").status == "paused"
    result = tree().resume("post-10", decisions={"c1.1/c1.0": tl.Approve()})
    assert result.output == {"h": 5, "p": "published post"}
    assert ran == ["other:5"]  # the helper's call ran once, in the first process
    assert list(result.records) == ["c1.0", "c1.0/c1.0", "c1.1", "c1.1/c1.0"]
    assert result.records["c1.0/c1.0"].output == 5


def test_the_inbox_decides_a_child_call_by_path_and_resumes_the_tree(tmp_path: Path) -> None:
    import io

    import trio

    from tickloop._human._inbox import StoreInbox

    ran.clear()
    store = tl.SQLiteStore(tmp_path / "runs.db")
    agent = _deferring_tree(store)
    assert agent.run({}, run_id="post-11").status == "paused"
    inbox = StoreInbox(store, agent, log=io.StringIO())

    async def main() -> None:
        with trio.fail_after(30):  # a safety net only
            async with trio.open_nursery() as nursery:
                inbox._nursery = nursery
                await inbox.decide("post-11", "c1.0/c1.0", "approve", "", "")
                while inbox._resuming:
                    await trio.sleep(0.01)

    trio.run(main)
    assert store.run("post-11").status == "done"
    assert store.run("post-11").output == {"p": "published post", "o": 1}


def test_the_browser_page_takes_a_child_call_by_its_path() -> None:
    import io
    import threading

    import httpx

    box: dict[str, Any] = {}
    with tl.BrowserApproval(output=io.StringIO()) as hook:
        publisher = _deferring_tree(None).tools["publisher"]
        agent = tl.Agent(
            tl.ScriptedModel(
                [
                    {"calls": [{"_tool": "publisher", "task": "post", "_outputPath": "†state.p"}]},
                    {"calls": [], "output": "†state.p"},
                ]
            ),
            tools=[publisher],
            approve=hook,
        )
        thread = threading.Thread(target=lambda: box.update(result=agent.run({})), daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not hook.snapshot()[1]:
            assert time.monotonic() < deadline, "the child's call never reached the page"
            time.sleep(0.01)
        [waiting] = hook.snapshot()[1]
        assert waiting.id == "c1.0/c1.0" and waiting.tool == "publish"
        base, token = hook.url.split("/?token=")
        page = httpx.get(f"{base}/?token={token}").text
        assert "c1.0/c1.0" in page
        form = {
            "token": token,
            "run": waiting.run_id or "",
            "call": "c1.0/c1.0",
            "action": "approve",
        }
        answer = httpx.post(base + "/decide", data=form, headers={"Origin": base})
        assert answer.status_code == 303, answer.text
        thread.join(10)
    assert box["result"].output == "published post"
    assert box["result"].records["c1.0/c1.0"].status == "done"


def test_a_grandchild_deferral_pauses_the_tree_and_resumes_by_its_full_path(
    tmp_path: Path,
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")

    def tree() -> tl.Agent:
        publisher = _deferring_tree(None).tools["publisher"]
        editor = tl.Agent(
            tl.ScriptedModel(
                [
                    {
                        "calls": [
                            {"_tool": "publisher", "task": "†input.task", "_outputPath": "†state.p"}
                        ]
                    },
                    {"calls": [], "output": "†state.p"},
                ]
            ),
            tools=[publisher],
            name="editor",
        )
        return tl.Agent(
            tl.ScriptedModel(
                [
                    {"calls": [{"_tool": "editor", "task": "post", "_outputPath": "†state.e"}]},
                    {"calls": [], "output": "†state.e"},
                ]
            ),
            tools=[editor],
            approve=lambda call: tl.Defer(),
            store=store,
        )

    first = tree().run({}, run_id="deep")
    assert first.status == "paused"
    [pending] = first.pending
    assert (pending.id, pending.path, pending.agent) == (
        "c1.0/c1.0/c1.0",
        ("c1.0", "c1.0"),
        "publisher",
    )
    assert [call.id for call in store.pending("deep")] == ["c1.0/c1.0/c1.0"]
    result = tree().resume("deep", decisions={"c1.0/c1.0/c1.0": tl.Approve()})
    assert result.status == "done" and result.output == "published post"
    assert list(result.records) == ["c1.0", "c1.0/c1.0", "c1.0/c1.0/c1.0"]


def test_what_reads_a_parked_agent_call_waits_and_runs_after_the_resume(tmp_path: Path) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    shouted: list[str] = []

    @tl.tool
    def shout(text: str) -> str:
        shouted.append(text)
        return text.upper()

    def tree() -> tl.Agent:
        return tl.Agent(
            tl.ScriptedModel(
                [
                    {
                        "calls": [
                            {"_tool": "publisher", "task": "post", "_outputPath": "†state.p"},
                            {"_tool": "shout", "text": "†state.p", "_outputPath": "†state.s"},
                        ]
                    },
                    {"calls": [], "output": "†state.s"},
                ]
            ),
            tools=[_deferring_tree(None).tools["publisher"], shout],
            approve=lambda call: tl.Defer(),
            store=store,
        )

    first = tree().run({}, run_id="reads")
    assert first.status == "paused" and shouted == []
    assert first.records["c1.1"].status == "waiting"  # held back, not settled
    result = tree().resume("reads", decisions={"c1.0/c1.0": tl.Approve()})
    assert result.output == "PUBLISHED POST"
    assert shouted == ["published post"]

"""Durable runs of the native tool-calling loop (`protocol="tools"`, PROTOCOL §9 and §10).

A real SIGKILL of a child process mid-turn, then a resume in this process; deferred
approval paused in one process and decided and resumed in others; the refusals; and a
resume from every prefix of a journal, the model for "a process killed at any moment".
Side effects are counted in a file or a list; time is trio's virtual clock in-process,
and the crash tests wait on what the store says (never on how long anything took).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import tickloop as tl
from tickloop._cli._main import main

INTERRUPTED = "interrupted: the process running this call stopped before it finished"


def _load(tmp_path: Path, name: str, source: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The child's module, imported in this process too (its agent resumes the run)."""
    (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    return __import__(name)


def _counts(tmp_path: Path) -> Counter[str]:
    path = tmp_path / "counts"
    return Counter(path.read_text().split()) if path.exists() else Counter()


def _journal(db: Path, run_id: str) -> list[tuple[int, float, str, Any]]:
    return tl.SQLiteStore(db).journal(run_id)


def _turns(journal: Sequence[tuple[int, float, str, Any]]) -> list[tuple[str, int]]:
    """(role, iteration) of every turn message the journal holds, in order."""
    return [
        (body["data"]["role"], body["data"]["iteration"])
        for _, _, kind, body in journal
        if kind == "message" and body.get("kind") == "turn"
    ]


def _runs_line(db: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["runs", "--store", str(db)]) == 0
    return capsys.readouterr().out.split()


# ------------------------------------------------------------------------------------------
# A real crash


CRASH_CHILD = r'''
"""A tools-protocol agent whose tools count their side effects in DIR/counts."""
import os
import sys

import trio

import tickloop as tl


def count(name):
    fd = os.open(os.path.join(os.environ["CRASH_DIR"], "counts"),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (name + "\n").encode())
    os.close(fd)


def slow():
    return float(os.environ.get("CRASH_SLOW", "0"))


@tl.tool
async def fast(n: int) -> int:
    count(f"fast:{n}")
    return n


@tl.tool
async def charge(n: int) -> int:
    """Not idempotent: charging twice is what a crash must never cause."""
    count(f"charge:{n}")
    await trio.sleep(slow())
    return n * 100


@tl.tool(idempotent=True, output_path="†state.d")
async def lookup(n: int) -> int:
    count(f"lookup:{n}")
    await trio.sleep(slow())
    return n * 10


@tl.tool(depends_on=["†state.d"])
async def report(ctx: tl.CallContext) -> str:
    count(f"report:{ctx.state['d']}")
    return f"d={ctx.state['d']}"


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


TURNS = [
    {"tool_calls": [call("fast", n=1), call("fast", n=2), call("charge", n=3),
                    call("lookup", n=4), call("report")],
     "reasoning": "Five calls."},
    "finished",
]


class CrashModel:
    """The script; with hang=True, iteration 2 starts to answer and never finishes, as a
    model still writing would."""

    turn_format = "scripted"

    def __init__(self, hang):
        self.script = tl.ScriptedModel(TURNS)
        self.hang = hang
        self.iterations = []

    async def stream_turn(self, request):
        self.iterations.append(request.iteration)
        if self.hang and request.iteration == 2:
            yield tl.TextDelta("Fini")
            await trio.sleep_forever()
        async for item in self.script.stream_turn(request):
            yield item

    def tool_result_messages(self, response, results):
        return self.script.tool_result_messages(response, results)


def make_agent(store, hang=False):
    return tl.Agent(CrashModel(hang), tools=[fast, charge, lookup, report], protocol="tools",
                    store=store)


if __name__ == "__main__":
    make_agent(sys.argv[1], hang=sys.argv[2] == "streaming").run("Go.", run_id="crashy")
'''


def _stored(db: Path) -> tuple[dict[str, str], list[tuple[str, int]], set[int]]:
    """What the store says so far: call statuses, turn messages, iterations opened."""
    if not db.exists():
        return {}, [], set()
    store = tl.SQLiteStore(db)
    try:
        calls = {call.id: call.status for call in store.calls("crashy")}
        journal = store.journal("crashy")
    except tl.ResumeError:  # not created yet
        return {}, [], set()
    opened = {
        body["iteration"]
        for _, _, kind, body in journal
        if kind == "event" and body["type"] == "TickOpened"
    }
    return calls, _turns(journal), opened


def _crash(tmp_path: Path, mode: str) -> Path:
    """Run the child until the store shows it at the moment wanted, then SIGKILL it."""
    db = tmp_path / "runs.db"
    env = {**os.environ, "CRASH_DIR": str(tmp_path), "CRASH_SLOW": "600"}
    if mode == "streaming":
        env["CRASH_SLOW"] = "0"
    child = subprocess.Popen(
        [sys.executable, str(tmp_path / "crashchild.py"), str(db), mode],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )

    def there(calls: dict[str, str], turns: list[tuple[str, int]], opened: set[int]) -> bool:
        if mode == "running":  # the turn is recorded; two calls done, two running, one waits
            wanted = {
                "c1.0": "done",
                "c1.1": "done",
                "c1.2": "running",
                "c1.3": "running",
                "c1.4": "waiting",
            }
            return calls == wanted and turns == [("assistant", 1)]
        # streaming: turn 1 and its results are recorded, the model answers iteration 2
        return opened == {1, 2} and turns == [("assistant", 1), ("tool", 1)]

    try:
        deadline = time.monotonic() + 60  # a bound on a broken child, not a measurement
        while not there(*_stored(db)):
            if child.poll() is not None:
                assert child.stderr is not None
                raise AssertionError(f"the child exited early: {child.stderr.read().decode()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the child never got there; the store says {_stored(db)}")
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        assert child.stderr is not None
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    return db


@pytest.mark.parametrize("mode", ["running", "streaming"])
def test_a_tools_run_killed_mid_turn_resumes_without_repeating_finished_work(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    mode: str,
) -> None:
    crashchild = _load(tmp_path, "crashchild", CRASH_CHILD, monkeypatch)
    db = _crash(tmp_path, mode)
    monkeypatch.setenv("CRASH_DIR", str(tmp_path))
    monkeypatch.setenv("CRASH_SLOW", "0")
    store = tl.SQLiteStore(db)
    assert [(run.run_id, run.status) for run in store.runs()] == [("crashy", "interrupted")]
    first = Counter({"fast:1": 1, "fast:2": 1, "charge:3": 1, "lookup:4": 1})
    if mode == "streaming":
        first["report:40"] = 1
    assert _counts(tmp_path) == first

    agent = crashchild.make_agent(store)
    events: list[tl.RunEvent] = []
    result = agent.resume("crashy", on_event=events.append)

    assert (result.status, result.output, result.iterations) == ("done", "finished", 2)
    # The completed turn 1 was never asked for again; iteration 2 was asked once here
    # (in "streaming" its first answer never completed, so asking again is allowed).
    assert agent.model.iterations == [2]
    assert _turns(_journal(db, "crashy")) == [("assistant", 1), ("tool", 1), ("assistant", 2)]
    sent = [m["content"] for m in agent.model.script.requests[0]["messages"] if m["role"] == "tool"]
    statuses = {call_id: record.status for call_id, record in result.records.items()}
    if mode == "running":
        # Finished calls did not run again; the interrupted charge was not re-run and the
        # model was told; the idempotent lookup ran again, and what waited on it ran after.
        assert _counts(tmp_path) == first + Counter({"lookup:4": 1, "report:40": 1})
        assert statuses == {
            "c1.0": "done",
            "c1.1": "done",
            "c1.2": "failed",
            "c1.3": "done",
            "c1.4": "done",
        }
        assert sent == ["1", "2", f"Error: Tool 'charge' failed: {INTERRUPTED}", "40", "d=40"]
        restarted = [e for e in events if isinstance(e, tl.CallStarted) and e.restarted]
        assert [e.call_id for e in restarted] == ["c1.3"]
        assert any(
            e["data"]["error"]["message"] == INTERRUPTED and e["data"]["call"]["_id"] == "c1.2"
            for e in result.errors
        )
    else:
        assert _counts(tmp_path) == first  # every call had finished: none ran again
        assert set(statuses.values()) == {"done"}
        assert sent == ["1", "2", "300", "40", "d=40"]
        assert not any(isinstance(e, tl.CallStarted) for e in events)
    started, ended = events[0], events[-1]
    assert isinstance(started, tl.RunStarted) and started.resumed
    assert isinstance(ended, tl.RunEnded)
    assert (ended.status, ended.iterations) == ("done", 2)

    # The store agrees: done, its output, five calls; and a finished run stays finished.
    assert (store.run("crashy").status, store.run("crashy").output) == ("done", "finished")
    line = _runs_line(db, capsys)
    assert line[:2] == ["crashy", "done"] and line[-2:] == ["5", "calls"]
    with pytest.raises(tl.ResumeError, match="finished"):
        agent.resume("crashy")
    assert agent.model.iterations == [2]
    assert tl.timeline_html(db, "crashy").count('class="resume"') == 1


# ------------------------------------------------------------------------------------------
# Deferred approval across processes


APPROVAL_CHILD = r'''
"""A billing agent on native tool calling whose hook defers payments to a person."""
import json
import os
import sys

import tickloop as tl


def count(name):
    fd = os.open(os.path.join(os.environ["APPROVAL_DIR"], "counts"),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (name + "\n").encode())
    os.close(fd)


@tl.tool
async def fetch(n: int) -> int:
    count(f"fetch:{n}")
    return n


@tl.tool(requires_approval=True)
async def pay(cents: int, card_token: str) -> str:
    count(f"pay:{cents}:{card_token}")
    return f"receipt-{cents}"


@tl.tool(depends_on=["pay"])
async def email(to: str) -> str:
    count(f"email:{to}")
    return "sent"


@tl.tool(requires_approval=True)
async def refund(cents: int) -> str:
    count(f"refund:{cents}")
    return "refunded"


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


TURNS = [
    {"tool_calls": [call("fetch", n=1), call("pay", cents=250, card_token="tok-9"),
                    call("email", to="ada"), call("refund", cents=7), call("fetch", n=3)]},
    "All settled.",
]


def ask_a_person(call):
    return tl.Defer()


def make_agent(store=None):
    return tl.Agent(tl.ScriptedModel(TURNS), tools=[fetch, pay, email, refund],
                    approve=ask_a_person, protocol="tools", store=store)


if __name__ == "__main__":
    result = make_agent(sys.argv[1]).run("Settle ada's bill.", run_id=sys.argv[2])
    print(json.dumps({"status": result.status, "pending": [p.id for p in result.pending],
                      "records": {i: r.status for i, r in result.records.items()},
                      "iterations": result.iterations}))
'''


@pytest.fixture
def billing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("APPROVAL_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return _load(tmp_path, "toolsbilling", APPROVAL_CHILD, monkeypatch)


def _pause_in_another_process(tmp_path: Path, run_id: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(tmp_path / "toolsbilling.py"), str(tmp_path / "runs.db"), run_id],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def test_a_deferred_tools_run_pauses_then_is_decided_and_resumed_by_other_processes(
    tmp_path: Path, billing: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    paused = _pause_in_another_process(tmp_path, "bill-1")
    assert paused["status"] == "paused" and paused["iterations"] == 1
    assert paused["pending"] == ["c1.1", "c1.3"]
    # Everything that does not depend on a deferred call finished before the pause; the
    # email waits for the payment (depends_on), and no result went back to the model.
    assert paused["records"] == {
        "c1.0": "done",
        "c1.1": "deferred",
        "c1.2": "waiting",
        "c1.3": "deferred",
        "c1.4": "done",
    }
    assert _counts(tmp_path) == Counter({"fetch:1": 1, "fetch:3": 1})
    assert _turns(_journal(db, "bill-1")) == [("assistant", 1)]
    store = tl.SQLiteStore(db)
    # Secrets are redacted in the store, as for the solution protocol.
    assert [(p.id, p.tool, p.params) for p in store.pending("bill-1")] == [
        ("c1.1", "pay", {"cents": 250, "card_token": "[redacted]"}),
        ("c1.3", "refund", {"cents": 7}),
    ]
    line = _runs_line(db, capsys)
    assert line[:2] == ["bill-1", "paused"] and line[-2:] == ["5", "calls"]

    # This process: decide one of the two; the run does what it can, then pauses again.
    agent = billing.make_agent(store)
    events: list[tl.RunEvent] = []
    again = agent.resume("bill-1", decisions={"c1.1": tl.Approve()}, on_event=events.append)
    assert again.status == "paused" and [p.id for p in again.pending] == ["c1.3"]
    assert again.output is None and again.iterations == 1
    assert agent.model.requests == []  # the model waits for every result of its turn
    assert _counts(tmp_path) == Counter(
        {"fetch:1": 1, "fetch:3": 1, "pay:250:tok-9": 1, "email:ada": 1}
    )
    [pay_started] = [e for e in events if isinstance(e, tl.CallStarted) and e.call_id == "c1.1"]
    assert pay_started.params == {"cents": 250, "card_token": "[redacted]"}
    ended = events[-1]
    assert isinstance(ended, tl.RunEnded) and (ended.status, ended.iterations) == ("paused", 1)

    # The command line decides the other; a third process resumes with the agent.
    assert (
        main(["deny", "bill-1", "c1.3", "--reason", "refunds need a ticket", "--store", str(db)])
        == 0
    )
    capsys.readouterr()
    tickloop = Path(sys.executable).parent / "tickloop"
    command = [str(tickloop)] if tickloop.exists() else [sys.executable, "-m", "tickloop._cli"]
    resumed = subprocess.run(
        [*command, "resume", "bill-1", "--agent", "toolsbilling:make_agent", "--store", str(db)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines() == ["run bill-1: done after 2 iterations", '"All settled."']
    journal = _journal(db, "bill-1")
    assert _turns(journal) == [("assistant", 1), ("tool", 1), ("assistant", 2)]
    [results] = [
        body["data"]["results"]
        for _, _, kind, body in journal
        if kind == "message" and body.get("kind") == "turn" and body["data"]["role"] == "tool"
    ]
    assert [r["content"] for r in results] == [
        "1",
        "receipt-250",
        "sent",
        "Error: Tool 'refund' was denied: refunds need a ticket",
        "3",
    ]
    assert _counts(tmp_path) == Counter(
        {"fetch:1": 1, "fetch:3": 1, "pay:250:tok-9": 1, "email:ada": 1}
    )
    line = _runs_line(db, capsys)
    assert line[:2] == ["bill-1", "done"] and line[-2:] == ["5", "calls"]
    assert store.run("bill-1").output == "All settled."


def test_bad_resumes_of_a_tools_run_are_refused_before_anything_runs(
    tmp_path: Path, billing: Any
) -> None:
    _pause_in_another_process(tmp_path, "bill-3")
    db = tmp_path / "runs.db"
    agent = billing.make_agent(tl.SQLiteStore(db))
    before = (_counts(tmp_path), len(_journal(db, "bill-3")))

    refusals = [
        (
            {"c9.9": tl.Approve()},
            "has no call 'c9.9'; the calls waiting for a decision are c1.1, c1.3",
        ),
        ({"c1.0": tl.Approve()}, "not waiting for a decision \\(it is done\\)"),
        ({"c1.2": tl.Approve()}, "not waiting for a decision \\(it is waiting\\)"),
        ({"c1.1": tl.Approve(), "c1.0": tl.Deny()}, "it is done"),  # one bad refuses all
        ({"c1.1": "yes"}, "is not a decision"),
        ({"c1.1": tl.Defer()}, "cannot be Defer"),
    ]
    for decisions, message in refusals:
        with pytest.raises(tl.ResumeError, match=message):
            agent.resume("bill-3", decisions=decisions)
    solution = tl.Agent(tl.ScriptedModel([]), store=tl.SQLiteStore(db))
    with pytest.raises(tl.ResumeError, match="made with protocol='tools'"):
        solution.resume("bill-3", decisions={"c1.1": tl.Approve()})
    with pytest.raises(tl.ResumeError, match="no run 'nope'"):
        agent.resume("nope")
    with pytest.raises(tl.ResumeError, match="has no store"):
        billing.make_agent().resume("bill-3")
    with pytest.raises(tl.ResumeError, match=r"already exists \(paused\)"):
        agent.run("again", run_id="bill-3")
    assert (_counts(tmp_path), len(_journal(db, "bill-3"))) == before
    assert [p.decision for p in tl.SQLiteStore(db).pending("bill-3")] == [None, None]

    # A decision recorded first cannot be contradicted; the next resume applies it.
    tl.SQLiteStore(db).decide("bill-3", "c1.1", tl.Approve())
    with pytest.raises(tl.ResumeError, match="already has a decision \\(approve\\)"):
        agent.resume("bill-3", decisions={"c1.1": tl.Deny()})
    result = agent.resume("bill-3", decisions={"c1.3": True})
    assert (result.status, result.output) == ("done", "All settled.")
    assert _counts(tmp_path)["pay:250:tok-9"] == 1 and _counts(tmp_path)["refund:7"] == 1
    with pytest.raises(tl.ResumeError, match="finished"):
        agent.resume("bill-3")


def test_without_a_store_a_deferred_tools_run_pauses_and_names_its_pending_calls(
    billing: Any,
) -> None:
    agent = billing.make_agent()
    result = agent.run("Settle bo's bill.")
    assert result.status == "paused" and result.run_id and result.output is None
    assert [(p.id, p.tool, p.params) for p in result.pending] == [
        ("c1.1", "pay", {"cents": 250, "card_token": "tok-9"}),
        ("c1.3", "refund", {"cents": 7}),
    ]
    assert len(agent.model.requests) == 1
    with pytest.raises(tl.ResumeError, match="has no store"):
        agent.resume(result.run_id)


# ------------------------------------------------------------------------------------------
# A resume from every prefix of a journal


def _virtual(function: Callable[[], Any]) -> Any:
    return trio.run(function, clock=trio.testing.MockClock(autojump_threshold=0))


ANSWER = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def _call(name: str, arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


SCRIPT: list[dict[str, Any] | str] = [
    {
        "tool_calls": [
            _call("step", {"n": 1}),
            _call("step", {"n": 2}),
            _call("peek", {"n": 3}),
            _call("step", '["not", "an", "object"]'),
            _call("teleport", {}),
        ]
    },
    {"tool_calls": [_call("step", {"n": 4}), _call("guarded", {"n": 5, "api_key": "sk-1"})]},
    '{"n": "three"}',  # not accepted: the model is told, and answers again
    '{"n": 3}',
]
STARTS_AT_ONCE = {"step", "peek"}  # no dependencies, no approval: they start on arrival


class Recorder:
    """The script, recording which iterations were asked for."""

    turn_format = "scripted"

    def __init__(self) -> None:
        self.script = tl.ScriptedModel(SCRIPT)
        self.iterations: list[int] = []

    async def stream_turn(self, request: Any) -> AsyncIterator[Any]:
        self.iterations.append(request.iteration)
        async for item in self.script.stream_turn(request):
            yield item

    def tool_result_messages(self, response: Any, results: Any) -> list[dict[str, Any]]:
        return self.script.tool_result_messages(response, results)


def _prefix_agent(store: Any, ran: list[str], asked: list[str]) -> tl.Agent:
    @tl.tool
    async def step(n: int, ctx: tl.CallContext) -> int:
        ran.append(ctx.id)
        await trio.sleep(n)
        return n

    @tl.tool(idempotent=True)
    async def peek(n: int, ctx: tl.CallContext) -> int:
        ran.append(ctx.id)
        await trio.sleep(n)
        return n * 10

    @tl.tool(requires_approval=True)
    async def guarded(n: int, api_key: str, ctx: tl.CallContext) -> str:
        ran.append(ctx.id)
        assert api_key == "sk-1"  # the tool gets the real value; the store does not
        return f"ok-{n}"

    async def approve(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        await trio.sleep(1)
        return tl.Approve()

    return tl.Agent(
        Recorder(),
        tools=[step, peek, guarded],
        approve=approve,
        output=ANSWER,
        protocol="tools",
        store=store,
    )


def _cut(source: Path, target: Path, keep: int) -> None:
    """A copy of the store whose run lost every journal entry after `keep`: a process
    killed that moment earlier (the calls rows, unused by a resume, are left as they were).

    The prefix is written one row per entry, as a store made before journal rows held a
    commit's entries (`batch`): any entry may end it, and that format must resume too."""
    journal = _journal(source, "p")
    original, copy = sqlite3.connect(source), sqlite3.connect(target)
    try:
        original.backup(copy)
        with copy:  # one transaction
            copy.execute("DELETE FROM journal WHERE run_id = 'p'")
            copy.executemany(
                "INSERT INTO journal (run_id, seq, at, kind, body) VALUES ('p', ?, ?, ?, ?)",
                [(seq, at, kind, json.dumps(body)) for seq, at, kind, body in journal[:keep]],
            )
            copy.execute("UPDATE runs SET status = 'failed', owner = NULL WHERE run_id = 'p'")
    finally:
        original.close()
        copy.close()


def _what_the_prefix_says(
    journal: Sequence[tuple[int, float, str, Any]],
) -> tuple[set[str], set[str], set[str], set[int]]:
    """(calls finished, calls started, decisions made, iterations answered)."""
    finished: set[str] = set()
    started: set[str] = set()
    decided: set[str] = set()
    answered: set[int] = set()
    for _, _, kind, body in journal:
        if kind == "message" and body.get("kind") == "turn" and body["data"]["role"] == "assistant":
            answered.add(body["data"]["iteration"])
        if kind != "event":
            continue
        if body["type"] == "CallFinished":
            finished.add(body["call_id"])
        elif body["type"] == "CallReceived" and body["call"]["_tool"] in STARTS_AT_ONCE:
            started.add(body["call"]["_id"])
        elif body["type"] == "DecisionMade":
            decided.add(body["call_id"])
            started.add(body["call_id"])  # approved, so it started
    return finished, started, decided, answered


def test_a_tools_run_resumes_from_every_prefix_of_its_journal(tmp_path: Path) -> None:
    full = tmp_path / "full.db"
    ran: list[str] = []
    asked: list[str] = []
    done = _virtual(lambda: _prefix_agent(full, ran, asked).run_async("Go.", run_id="p"))
    assert (done.status, done.output, done.iterations) == ("done", {"n": 3}, 4)
    journal = _journal(full, "p")
    assert 30 < len(journal) < 100
    idempotent = {"c1.2"}
    expected_results = {
        1: ["1", "2", "30", "Error: Tool 'step' got arguments", "Error: Tool 'teleport' does"],
        2: ["4", "ok-5"],
    }

    for keep in range(1, len(journal) + 1):
        copy = tmp_path / f"cut-{keep}.db"
        _cut(full, copy, keep)
        finished, started, decided, answered = _what_the_prefix_says(journal[:keep])
        ran, asked = [], []
        agent = _prefix_agent(tl.SQLiteStore(copy), ran, asked)
        result = _virtual(lambda agent=agent: agent.resume_async("p"))
        where = f"cut after entry {keep} ({journal[keep - 1][3]})"

        assert (result.status, result.output, result.iterations) == ("done", {"n": 3}, 4), where
        # A finished call never runs again, nor does a non-idempotent one that had started;
        # an idempotent one that had started runs again; nothing runs twice.
        assert not finished & set(ran), where
        interrupted = started - finished - idempotent
        assert not interrupted & set(ran), where
        assert (started - finished) & idempotent <= set(ran), where
        assert max(Counter(ran).values(), default=1) == 1, where
        for call_id in interrupted:
            record = result.records[call_id]
            assert (record.status, record.error["message"]) == ("failed", INTERRUPTED), where
        # A decision made is never asked again; the model is never asked again for an
        # iteration it had answered, and is asked once for each other one.
        assert not decided & set(asked), where
        assert agent.model.iterations == [k for k in (1, 2, 3, 4) if k not in answered], where
        # The log holds each turn once, its results once, and one feedback.
        turns = [(e["role"], e["iteration"]) for e in result.view("turn")]
        assert turns == [
            ("assistant", 1),
            ("tool", 1),
            ("assistant", 2),
            ("tool", 2),
            ("assistant", 3),
            ("assistant", 4),
        ], where
        feedback = [m for m in result.messages if m["type"] == "text" and m["role"] == "user"]
        assert len(feedback) == 2 and "not accepted" in feedback[1]["text"], where
        for entry in result.view("turn"):
            if entry["role"] == "tool":
                contents = [r["content"] for r in entry["results"]]
                wanted = expected_results[entry["iteration"]]
                assert len(contents) == len(wanted), where
                for content, start in zip(contents, wanted, strict=True):
                    assert content.startswith(start) or re.fullmatch(
                        r"Error: Tool '(step|guarded)' failed: " + re.escape(INTERRUPTED), content
                    ), where
        assert tl.SQLiteStore(copy).run("p").output == {"n": 3}, where
        # Secrets stay out of the calls rows whatever the moment of the crash, and the
        # resume rewrote them from the journal (the copy's were the whole run's).
        rows = {call.id: call for call in tl.SQLiteStore(copy).calls("p")}
        assert {i: c.status for i, c in rows.items()} == {
            i: r.status for i, r in result.records.items()
        }, where
        assert rows["c2.1"].params == {"n": 5, "api_key": "[redacted]"}, where


def test_a_failed_tools_run_is_recorded_and_resumes_where_it_stopped(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    ran: list[int] = []

    @tl.tool
    def tally(n: int) -> int:
        ran.append(n)
        return n

    def agent(turns: list[Any]) -> tl.Agent:
        return tl.Agent(tl.ScriptedModel(turns), tools=[tally], protocol="tools", store=db)

    turn = {"tool_calls": [_call("tally", {"n": 7})]}
    events: list[tl.RunEvent] = []
    with pytest.raises(tl.ExecuteError):  # the script has no turn for iteration 2
        agent([turn]).run("Tally.", run_id="flaky", on_event=events.append)
    ended = events[-1]
    assert isinstance(ended, tl.RunEnded)
    assert (ended.status, ended.iterations) == ("failed", 1)
    info = tl.SQLiteStore(db).run("flaky")
    assert info.status == "failed" and (info.error or "").startswith("ExecuteError")

    fixed = agent([turn, "Seven."])
    result = fixed.resume("flaky")
    assert (result.status, result.output, result.iterations) == ("done", "Seven.", 2)
    assert ran == [7]  # the finished call did not run again
    assert len(fixed.model.requests) == 1  # only iteration 2 was asked
    assert fixed.model.requests[0]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1_0",
        "content": "7",
    }


def test_a_streamed_tools_run_is_journaled_too(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"

    @tl.tool
    def double(n: int) -> int:
        return n * 2

    model = tl.ScriptedModel([{"tool_calls": [_call("double", {"n": 21})]}, "It is 42."])
    agent = tl.Agent(model, tools=[double], protocol="tools", store=db)

    async def read() -> tuple[str, tl.RunResult]:
        async with agent.stream("Double 21.", run_id="streamed") as stream:
            text = "".join([chunk async for chunk in stream.text()])
        return text, stream.result

    text, result = _virtual(read)
    assert text == result.output == "It is 42." and result.run_id == "streamed"
    store = tl.SQLiteStore(db)
    assert (store.run("streamed").status, store.run("streamed").output) == ("done", "It is 42.")
    assert _turns(_journal(db, "streamed")) == [("assistant", 1), ("tool", 1), ("assistant", 2)]

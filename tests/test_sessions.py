"""Sessions (PROTOCOL §16, docs/sessions.md): runs that share one history.

Through the public API only: the history reaches the next run's request, the state lives
on with keep_state, one writer at a time (wait, raise, paused, crashed), abandon, fork,
delete, and the command line.
"""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import tickloop as tl
from tickloop._cli._main import main as cli_main


def _text_of(request: dict[str, Any]) -> str:
    return "\n".join(
        m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
        for m in request["messages"]
    )


class Recorder:
    """A solution-protocol model answering each request with the input's `say`, and
    keeping every request's text."""

    def __init__(self) -> None:
        self.requests: list[str] = []

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        text = _text_of(request)
        self.requests.append(text)
        said = re.findall(r'"say": ?"([^"]*)"', text)
        return {"calls": [], "output": f"answer to {said[-1] if said else '?'}"}


def test_the_second_run_of_a_session_is_given_the_first_as_history(tmp_path: Path) -> None:
    recorder = Recorder()
    agent = tl.Agent(tl.FunctionModel(recorder), store=tmp_path / "runs.db")
    first = agent.run({"say": "oslo"}, session="user-42", run_id="r1")
    assert first.output == "answer to oslo"
    second = agent.run({"say": "window seat"}, session="user-42", run_id="r2")
    assert second.output == "answer to window seat"

    before, after = recorder.requests
    assert "## history" not in before
    # The second request holds the first exchange, as its own section before the input.
    assert "## history" in after and "answer to oslo" in after
    assert after.index("## history") < after.index("## input")
    # ... never merged into the input: the input is the second run's alone.
    history = [m for m in second.messages if m.get("kind") == "history"]
    assert history == [
        {
            "type": "data",
            "kind": "history",
            "data": [{"run_id": "r1", "input": {"say": "oslo"}, "output": "answer to oslo"}],
        }
    ]
    inputs = [m["data"] for m in second.messages if m.get("kind") == "input"]
    assert inputs == [{"say": "window seat"}]

    session = tl.SQLiteStore(tmp_path / "runs.db").session("user-42")
    assert [run.run_id for run in session.runs] == ["r1", "r2"]
    assert [entry["output"] for entry in session.history] == [
        "answer to oslo",
        "answer to window seat",
    ]
    # Each run is still a run: its own trace, replayable.
    again = agent.replay("r2", store=tmp_path / "runs.db")
    assert again.output == "answer to window seat"


def test_a_run_without_a_session_is_given_no_history(tmp_path: Path) -> None:
    recorder = Recorder()
    agent = tl.Agent(tl.FunctionModel(recorder), store=tmp_path / "runs.db")
    agent.run({"say": "a"}, session="s")
    agent.run({"say": "b"})
    agent.run({"say": "c"}, session="other")
    assert all("## history" not in text for text in recorder.requests)


def test_session_without_a_store_is_refused_before_anything_runs() -> None:
    asked: list[Any] = []

    def model(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request)
        return {"calls": [], "output": 1}

    agent = tl.Agent(tl.FunctionModel(model))
    with pytest.raises(tl.ConfigurationError, match="needs a store"):
        agent.run({"say": "x"}, session="user-42")
    with pytest.raises(tl.ConfigurationError, match="session_busy"):
        agent.run({"say": "x"}, session_busy="later")  # type: ignore[arg-type]
    assert asked == []


def _code_agent(store: Path, **options: Any) -> tl.Agent[Any]:
    def model(request: dict[str, Any]) -> str:
        text = _text_of(request)
        if "counter" in text:  # a variable the last run left
            return "```python\ncounter = counter + 1\nfinal_answer(counter)\n```"
        return "```python\ncounter = 1\nfinal_answer(counter)\n```"

    return tl.Agent(tl.FunctionModel(model), protocol="code", store=store, **options)


def test_code_plans_keep_their_state_across_a_session_by_default(tmp_path: Path) -> None:
    agent = _code_agent(tmp_path / "runs.db")
    outputs = [agent.run({"task": "count"}, session="s").output for _ in range(3)]
    assert outputs == [1, 2, 3]
    assert tl.SQLiteStore(tmp_path / "runs.db").session("s").state == {"counter": 3}


def test_a_session_run_reads_its_history_and_state_in_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NOTE4: a run's start read the session's runs twice, once for its history and
    once for its state (SQLite's trace of the store's connections counts the reads)."""
    import sqlite3

    agent = _code_agent(tmp_path / "runs.db")
    assert agent.run({"task": "count"}, session="s").output == 1
    reads: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection = connect(*args, **kwargs)
        connection.set_trace_callback(reads.append)
        return connection

    monkeypatch.setattr(sqlite3, "connect", traced)
    second = agent.run({"task": "count"}, session="s")
    monkeypatch.undo()
    assert second.output == 2  # it was given the state
    history = [m["data"] for m in second.messages if m.get("kind") == "history"]
    assert [entry["output"] for entry in history[0]] == [1]  # and the history
    of_the_session = [text for text in reads if "FROM session_runs sr LEFT JOIN" in text]
    assert len(of_the_session) == 1, of_the_session


def test_a_session_whose_run_is_starting_is_busy_with_that_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between taking the lease and being made, a run holds the session with no run id
    yet: `delete` is refused saying a run is starting, as a run that would join is (its
    own copy of the check said "run None runs in it now"). The delete is tried from
    SQLite's trace of the run's read of its history, which comes after the lease."""
    import sqlite3

    db = tmp_path / "runs.db"
    agent = _code_agent(db)
    assert agent.run({"task": "count"}, session="s").output == 1
    refused: list[tl.SessionBusy] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection = connect(*args, **kwargs)

        def trace(statement: str) -> None:
            if "FROM session_runs sr LEFT JOIN" in statement and not refused:
                with pytest.raises(tl.SessionBusy) as caught:
                    tl.SQLiteStore(db).session("s").delete()
                refused.append(caught.value)

        connection.set_trace_callback(trace)
        return connection

    monkeypatch.setattr(sqlite3, "connect", traced)
    assert agent.run({"task": "count"}, session="s").output == 2
    monkeypatch.undo()
    (busy,) = refused
    assert (busy.reason, busy.run_id) == ("running", None)
    assert str(busy) == "session 's' is busy: a run is starting in it"
    assert len(tl.SQLiteStore(db).session("s").runs) == 2


def test_keep_state_false_starts_each_run_of_the_session_afresh(tmp_path: Path) -> None:
    agent = _code_agent(tmp_path / "runs.db")
    outputs = [agent.run({"task": "count"}, session="s", keep_state=False).output for _ in "ab"]
    assert outputs == [1, 1]
    off = _code_agent(tmp_path / "other.db", keep_state=False)
    assert [off.run({"task": "count"}, session="s").output for _ in "ab"] == [1, 1]
    # ... and the run's own value wins over the agent's.
    assert off.run({"task": "count"}, session="s", keep_state=True).output == 2


@tl.tool(idempotent=True)
async def slow(gate: str) -> str:
    """Wait for the gate."""
    await GATES[gate].wait()
    return gate


GATES: dict[str, trio.Event] = {}


def _gated_agent(store: Path) -> tl.Agent[Any]:
    def model(request: dict[str, Any]) -> dict[str, Any]:
        text = _text_of(request)
        if '"done"' in text:
            said = re.findall(r'"say": ?"([^"]*)"', text)
            return {"calls": [], "output": f"did {said[-1]}"}
        gate = re.findall(r'"gate": ?"([^"]*)"', text)[-1]
        call = {"_tool": "slow", "_id": "w", "_outputPath": "†state.done", "gate": gate}
        return {"calls": [call], "output": None}

    return tl.Agent(tl.FunctionModel(model), tools=[slow], store=store)


def test_a_second_run_waits_for_the_running_one_and_sees_it(tmp_path: Path) -> None:
    agent = _gated_agent(tmp_path / "runs.db")
    GATES.update(a=trio.Event(), b=trio.Event())
    results: dict[str, Any] = {}

    async def main() -> None:
        async def run(name: str) -> None:
            results[name] = await agent.run_async(
                {"say": name, "gate": name}, session="s", run_id=name
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "a")
            await trio.sleep(1)  # "a" holds the session and waits at its gate
            with pytest.raises(tl.SessionBusy) as busy:
                await agent.run_async({"say": "x", "gate": "x"}, session="s", session_busy="raise")
            assert (busy.value.run_id, busy.value.reason) == ("a", "running")
            nursery.start_soon(run, "b")
            await trio.sleep(5)  # "b" waits for the session
            assert "b" not in results
            GATES["b"].set()  # "b" may not even have started: it must not finish first
            await trio.sleep(5)
            assert "b" not in results
            GATES["a"].set()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert results["a"].output == "did a" and results["b"].output == "did b"
    session = tl.SQLiteStore(tmp_path / "runs.db").session("s")
    assert [run.run_id for run in session.runs] == ["a", "b"]
    history = [m for m in results["b"].messages if m.get("kind") == "history"]
    assert history[0]["data"] == [
        {"run_id": "a", "input": {"say": "a", "gate": "a"}, "output": "did a"}
    ]


def test_waiting_ends_in_session_busy_after_the_timeout(tmp_path: Path) -> None:
    agent = _gated_agent(tmp_path / "runs.db")
    GATES.update(a=trio.Event())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(agent.run_async, {"say": "a", "gate": "a"}, session="s", run_id="a")
            )
            await trio.sleep(1)
            start = trio.current_time()
            with pytest.raises(tl.SessionBusy, match="session_timeout") as busy:
                await agent.run_async({"say": "b", "gate": "b"}, session="s", session_timeout=30)
            assert trio.current_time() - start == pytest.approx(30, abs=0.2)  # mock clock
            assert busy.value.run_id == "a"
            GATES["a"].set()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@tl.tool(requires_approval=True)
def pay(amount: int) -> int:
    """Pay."""
    return amount


def _paying_agent(store: Path) -> tl.Agent[Any]:
    def model(request: dict[str, Any]) -> dict[str, Any]:
        text = _text_of(request)
        if '"paid"' in text:
            return {"calls": [], "output": "paid"}
        return {
            "calls": [{"_tool": "pay", "_id": "p", "_outputPath": "†state.paid", "amount": 3}],
            "output": None,
        }

    return tl.Agent(
        tl.FunctionModel(model), tools=[pay], approve=lambda call: tl.Defer(), store=store
    )


def test_a_paused_run_makes_the_next_raise_until_it_is_resumed(tmp_path: Path) -> None:
    agent = _paying_agent(tmp_path / "runs.db")
    assert agent.run({"say": "pay"}, session="s", run_id="p1").status == "paused"
    for busy_mode in ("wait", "raise"):
        with pytest.raises(tl.SessionBusy, match="p1") as busy:
            agent.run({"say": "next"}, session="s", session_busy=busy_mode)
        assert (busy.value.run_id, busy.value.reason) == ("p1", "paused")
    assert agent.resume("p1", decisions={"p": tl.Approve()}).output == "paid"
    after = agent.run({"say": "next"}, session="s", run_id="n")
    assert after.output == "paid"
    session = tl.SQLiteStore(tmp_path / "runs.db").session("s")
    assert session.history[0] == {"run_id": "p1", "input": {"say": "pay"}, "output": "paid"}


def test_abandon_frees_the_session_and_shows_no_answer(tmp_path: Path) -> None:
    agent = _paying_agent(tmp_path / "runs.db")
    agent.run({"say": "pay"}, session="s", run_id="p1")
    session = tl.SQLiteStore(tmp_path / "runs.db").session("s")
    assert session.status == "paused"
    with pytest.raises(tl.ResumeError, match="not in session"):
        session.abandon("nope")
    session.abandon("p1")
    assert session.status == "idle"
    assert session.history == [
        {"run_id": "p1", "input": {"say": "pay"}, "output": "no answer: abandoned"}
    ]
    with pytest.raises(tl.ResumeError):
        agent.resume("p1")
    assert agent.run({"say": "again"}, session="s").status == "paused"


def test_fork_at_a_run_keeps_the_runs_up_to_it(tmp_path: Path) -> None:
    recorder = Recorder()
    agent = tl.Agent(tl.FunctionModel(recorder), store=tmp_path / "runs.db")
    for name in ("a", "b", "c"):
        agent.run({"say": name}, session="s", run_id=name)
    store = tl.SQLiteStore(tmp_path / "runs.db")
    forked = store.session("s").fork("t", at_run="a")
    assert isinstance(forked, tl.Session)
    assert [run.run_id for run in forked.runs] == ["a"]
    agent.run({"say": "d"}, session="t", run_id="d")
    last = recorder.requests[-1]
    assert "answer to a" in last and "answer to b" not in last
    assert [run.run_id for run in store.session("s").runs] == ["a", "b", "c"]
    assert [run.run_id for run in store.session("t").runs] == ["a", "d"]
    with pytest.raises(tl.ConfigurationError, match="exists already"):
        store.session("s").fork("t")
    with pytest.raises(tl.ResumeError, match="not in session"):
        store.session("s").fork("u", at_run="d")


def test_delete_removes_the_session_and_the_runs_only_it_holds(tmp_path: Path) -> None:
    recorder = Recorder()
    agent = tl.Agent(tl.FunctionModel(recorder), store=tmp_path / "runs.db")
    for name in ("a", "b"):
        agent.run({"say": name}, session="s", run_id=name)
    store = tl.SQLiteStore(tmp_path / "runs.db")
    store.session("s").fork("t", at_run="a")
    store.session("s").delete()
    assert store.session("s").runs == []
    assert [run.run_id for run in store.runs()] == ["a"]  # "t" still holds it
    assert [s.id for s in store.sessions()] == ["t"]
    agent.run({"say": "c"}, session="s")
    assert "answer to b" not in recorder.requests[-1]


def test_the_command_line_lists_and_shows_sessions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    agent = tl.Agent(tl.FunctionModel(Recorder()), store=db)
    agent.run({"say": "a"}, session="user-42", run_id="r1")
    agent.run({"say": "b"}, session="user-42", run_id="r2")
    _paying_agent(db).run({"say": "pay"}, session="other", run_id="p1")
    assert cli_main(["sessions", "--store", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["user-42", "2", "idle"]
    assert lines[1].split()[:3] == ["other", "1", "paused"]
    assert cli_main(["sessions", "user-42", "--store", str(db)]) == 0
    shown = capsys.readouterr().out
    assert "r1" in shown and "answer to a" in shown and "r2" in shown
    assert cli_main(["sessions", "nobody", "--store", str(db)]) == 2
    assert "no session 'nobody'" in capsys.readouterr().err


def test_native_tool_calling_shows_the_history_as_earlier_turns_and_streams(
    tmp_path: Path,
) -> None:
    seen: list[list[dict[str, Any]]] = []

    def model(request: dict[str, Any]) -> str:
        seen.append(request["messages"])
        return f"reply {len(seen)}"

    agent = tl.Agent(tl.FunctionModel(model), protocol="tools", store=tmp_path / "runs.db")
    assert agent.run("Find me a flight to Oslo", session="s").output == "reply 1"

    async def streamed() -> tuple[str, Any]:
        async with agent.stream("Make it a window seat", session="s") as stream:
            text = "".join([chunk async for chunk in stream.text()])
        return text, stream.result

    text, result = trio.run(streamed)
    assert text == "reply 2" and result.output == "reply 2"
    turns = [(m["role"], m["content"]) for m in seen[1]]
    assert turns == [
        ("user", "Find me a flight to Oslo"),
        ("assistant", "reply 1"),
        ("user", "Make it a window seat"),
    ]


def test_a_run_cancelled_in_this_process_blocks_the_session_until_resumed(
    tmp_path: Path,
) -> None:
    """A run interrupted in a process that lives on is not running: the next run of the
    session is refused at once (it does not wait for it), naming it."""
    agent = _gated_agent(tmp_path / "runs.db")
    GATES.update(c=trio.Event())

    async def main() -> None:
        with trio.move_on_after(5):  # the caller gives up on the run
            await agent.run_async({"say": "c", "gate": "c"}, session="s", run_id="c")
        with pytest.raises(tl.SessionBusy) as busy:
            await agent.run_async({"say": "d", "gate": "d"}, session="s")
        assert (busy.value.run_id, busy.value.reason) == ("c", "crashed")
        GATES["c"].set()
        resumed = await agent.resume_async("c")
        assert resumed.output == "did c"

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert tl.SQLiteStore(tmp_path / "runs.db").session("s").status == "idle"

"""The `calls` table is a view of the journal that trails it by at most ROW_LAG.

The journal is committed before anything acts on it; a call's row is written later
(docs/durability.md): at the next checkpoint a reader depends on (a decision or deferral,
a tick's end, the run's end, a resume), or once its oldest unwritten change is ROW_LAG
old. Whatever the path, a row that is written says exactly what the journal says, every
checkpoint leaves all rows exact, and a resume rewrites rows a crash left behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import tickloop as tl
from tickloop._cli._main import main
from tickloop._durable._codec import dumps_entry
from tickloop._durable._resume import DurableRun
from tickloop._durable._rows import ROW_LAG
from tickloop._durable._schema import CALL_COLUMNS
from tickloop._durable._writer import RunWriter


@tl.tool
async def slow(n: int, api_key: str = "") -> int:
    # Two checkpoints: the call ends in a later trio batch, so a later commit than its
    # start, and its row's last write is its end alone.
    await trio.sleep(0)
    await trio.sleep(0)
    return n + 1


@tl.tool
async def boom(n: int) -> int:
    raise RuntimeError(f"boom {n}")


@tl.tool(requires_approval=True)
async def pay(cents: int) -> int:
    return cents


PLAN = [
    {"_tool": "slow", "n": 1, "_outputPath": "†state.a"},
    {"_tool": "slow", "n": "†state.a", "_outputPath": "†state.b"},
    {"_tool": "boom", "n": 2, "_outputPath": "†state.c"},
    {"_tool": "slow", "n": "†state.c", "_outputPath": "†state.d"},  # invalid: c failed
    {"_tool": "pay", "cents": 500, "_outputPath": "†state.p1"},  # denied
    {"_tool": "pay", "cents": 7, "_outputPath": "†state.p2"},  # edited to 8
    {"_tool": "pay", "cents": 50, "_outputPath": "†state.p3"},  # deferred: the run pauses
    {"_tool": "slow", "n": "†state.p3", "_outputPath": "†state.e"},  # waits on p3
    {"_tool": "slow", "n": 3, "api_key": "s3cret", "_outputPath": "†state.f"},
]


def _hook(call: tl.PendingCall) -> tl.Decision:
    cents = call.params["cents"]
    if cents == 500:
        return tl.Deny("too much")
    if cents == 7:
        return tl.Edit(cents=8)
    if cents == 50:
        return tl.Defer()
    return tl.Approve()


def _agent(store: tl.SQLiteStore) -> tl.Agent:
    model = tl.ScriptedModel(
        [{"calls": PLAN, "output": None}, {"calls": [], "output": "ok"}], chunk_chars=40
    )
    return tl.Agent(model, tools=[slow, boom, pay], approve=_hook, store=store)


def _stored(store: tl.SQLiteStore, run_id: str) -> dict[str, tuple[Any, ...]]:
    return {
        info.id: tuple(getattr(info, "id" if name == "call_id" else name) for name in CALL_COLUMNS)
        for info in store.calls(run_id)
    }


def _in_memory(durable: DurableRun) -> dict[str, tuple[Any, ...]]:
    """The rows the journal's events made, read back as the store's reader reads them."""
    rows = {}
    for call_id, row in durable.rows.items():
        values = dict(zip(CALL_COLUMNS, row.values("")[1:], strict=True))
        for name in ("call", "params", "deps", "decision", "error"):
            text = values[name]
            values[name] = None if text is None else json.loads(text)
        values["deps"] = values["deps"] or []
        rows[call_id] = tuple(values[name] for name in CALL_COLUMNS)
    return rows


def test_rows_are_exact_at_every_checkpoint_and_never_say_what_the_journal_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    checkpoints: list[int] = []
    commit = DurableRun.commit

    def checked_commit(self: DurableRun, call_id: str | None = None, *, rows: bool = False) -> None:
        self._follow_recorded()  # the events recorded since, as the commit follows them first
        checkpoint = rows or self.changes.checkpoint
        commit(self, call_id, rows=rows)
        if self._pending:
            return  # nothing committed (its entry was, earlier)
        stored, journal = _stored(store, self.writer.run_id), _in_memory(self)
        waiting = self.changes.dirty.keys() | self.changes.settled.keys()
        # A row not waiting to be written is exactly the journal's, waiting or not.
        assert {k: v for k, v in stored.items() if k not in waiting} == {
            k: v for k, v in journal.items() if k not in waiting
        }
        if checkpoint:
            assert stored == journal
            assert store.rows_behind(self.writer.run_id) is None
            checkpoints.append(len(self.rows))

    monkeypatch.setattr(DurableRun, "commit", checked_commit)

    paused = _agent(store).run({"go": 1}, run_id="r")
    assert paused.status == "paused"
    (deferred,) = paused.pending
    # The pause: rows exact, the deferred call visible to `pending` and `decide`.
    assert [p.id for p in store.pending("r")] == [deferred.id]
    assert store.rows_behind("r") is None
    first = len(checkpoints)
    done = _agent(store).resume("r", decisions={deferred.id: tl.Approve()})
    assert done.status == "done"
    # Decisions, deferral, tick ends and the end on both sides; the resume's first.
    assert first >= 4 and len(checkpoints) - first >= 3
    assert store.rows_behind("r") is None

    final = {info.id: info for info in store.calls("r")}
    statuses = {info.call["_outputPath"]: info.status for info in final.values()}
    assert statuses == {
        "†state.a": "done",
        "†state.b": "done",
        "†state.c": "failed",
        "†state.d": "invalid",
        "†state.p1": "denied",
        "†state.p2": "done",
        "†state.p3": "done",
        "†state.e": "done",
        "†state.f": "done",
    }
    rows = {info.call["_outputPath"]: info for info in final.values()}
    assert rows["†state.d"].deps == [rows["†state.c"].id]  # drawn although never ready
    assert rows["†state.e"].deps == [rows["†state.p3"].id]
    assert rows["†state.p2"].params == {"cents": 8}  # the edit, not the call as sent
    assert rows["†state.f"].params["api_key"] == "[redacted]"
    assert all(info.finished is not None for info in final.values())


@tl.tool
async def step(n: int) -> int:
    return n + 1


def test_a_calls_arrival_start_and_end_are_one_row_write_between_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A chain of instant calls: each arrives, starts and ends in its own commits (a start
    # is committed before its handler runs), with no checkpoint until the tick ends.
    plan = [{"_tool": "step", "n": 0, "_outputPath": "†state.s0"}] + [
        {"_tool": "step", "n": f"†state.s{i - 1}", "_outputPath": f"†state.s{i}"}
        for i in range(1, 20)
    ]
    written: list[int] = []
    commits: list[int] = []
    append = RunWriter.append

    def counting(self: RunWriter, entries: Any, calls: Any = (), *rest: Any, **kw: Any) -> None:
        commits.append(len(entries))
        written.append(len(calls) + sum(len(part) for part in rest))
        append(self, entries, calls, *rest, **kw)

    monkeypatch.setattr(RunWriter, "append", counting)
    model = tl.ScriptedModel([{"calls": plan, "output": None}, {"calls": [], "output": "ok"}])
    agent = tl.Agent(model, tools=[step], store=tl.SQLiteStore(tmp_path / "runs.db"))

    async def main() -> tl.RunResult:
        return await agent.run_async({}, run_id="chain")

    result = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert result.status == "done" and result.state["s19"] == 20
    assert len(commits) > 20  # the journal was committed call by call
    assert sum(written) == 20  # each row once, at the tick's end (2-3 each before)
    statuses = {info.id: info.status for info in agent.store.calls("chain")}  # type: ignore[union-attr]
    assert list(statuses.values()) == ["done"] * 20


@tl.tool
async def long_call(n: int) -> int:
    await trio.sleep(60)
    return n


def test_a_long_calls_row_is_written_within_the_bound_while_the_run_goes_on(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    # It writes, so the tick (a checkpoint) ends only when it does, at t=60.
    call = {"_tool": "long_call", "n": 1, "_outputPath": "†state.n"}
    model = tl.ScriptedModel([{"calls": [call], "output": "ok"}])
    agent = tl.Agent(model, tools=[long_call], store=tl.SQLiteStore(db))
    seen: dict[str, Any] = {}

    def look(reader: tl.SQLiteStore) -> bool:
        if not _exists(reader, "long") or not reader.calls("long"):
            return False
        seen["at"] = trio.current_time()
        seen["status"] = {c.id: c.status for c in reader.calls("long")}
        seen["behind"] = reader.rows_behind("long")
        return True

    assert _run_watched(agent, db, "long", look).output == "ok"
    # The call's row appeared while it ran, within the bound of its start (t=0), not at
    # its end (t=60), and the rows then reflected the whole journal.
    assert seen["status"] == {"c1.0": "running"}
    assert 0 < seen["at"] <= ROW_LAG + 0.02
    assert seen["behind"] is None


def test_a_deferred_call_is_visible_and_decidable_at_once_while_the_run_goes_on(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    plan = [
        {"_tool": "long_call", "n": 1, "_outputPath": "†state.slow"},
        {"_tool": "pay", "cents": 50, "_outputPath": "†state.paid"},
    ]
    model = tl.ScriptedModel([{"calls": plan, "output": None}, {"calls": [], "output": "ok"}])
    agent = tl.Agent(model, tools=[long_call, pay], approve=_hook, store=tl.SQLiteStore(db))
    seen: dict[str, Any] = {}

    def look(reader: tl.SQLiteStore) -> bool:
        if not _exists(reader, "defer") or not reader.pending("defer"):
            return False
        seen["at"] = trio.current_time()
        seen["pending"] = [p.id for p in reader.pending("defer")]
        reader.decide("defer", "c1.1", tl.Approve())  # recorded while the run goes on
        return True

    paused = _run_watched(agent, db, "defer", look)
    assert seen["pending"] == ["c1.1"]
    assert seen["at"] < ROW_LAG  # the deferral is a checkpoint: no wait for the bound
    assert paused.status == "paused" and [p.id for p in paused.pending] == ["c1.1"]
    store = tl.SQLiteStore(db)
    with pytest.raises(tl.ResumeError, match="already has a decision"):
        store.decide("defer", "c1.1", tl.Deny())
    done = agent.resume("defer")
    assert done.status == "done" and done.state == {"slow": 1, "paid": 50}


def _run_watched(
    agent: tl.Agent, db: Path, run_id: str, look: Callable[[tl.SQLiteStore], bool]
) -> tl.RunResult:
    """Run the agent on a MockClock while another connection (as the command line's)
    polls the store every 1 ms of trio time until `look` has seen what it waits for."""

    async def main() -> tl.RunResult:
        reader = tl.SQLiteStore(db)
        result: dict[str, tl.RunResult] = {}

        async def run() -> None:
            result["r"] = await agent.run_async({}, run_id=run_id)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            while not look(reader):
                await trio.sleep(0.001)
        return result["r"]

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _exists(store: tl.SQLiteStore, run_id: str) -> bool:
    try:
        store.run(run_id)
    except tl.ResumeError:
        return False
    return True


def test_a_resume_rewrites_rows_a_crash_left_behind_and_trace_says_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    store = tl.SQLiteStore(db)
    paused = _agent(store).run({"go": 1}, run_id="r")
    (deferred,) = paused.pending
    exact = _stored(store, "r")
    # What a crash within the bound leaves: rows missing or stale, the rows' seq behind.
    connection = store.acquire()
    last = store.journal("r")[-1][0]
    # (Never the deferred call's: a deferral is a checkpoint.)
    connection.execute("DELETE FROM calls WHERE seq > 5 AND status != 'deferred'")
    connection.execute("UPDATE calls SET status = 'running', finished = NULL WHERE seq = 0")
    connection.execute("UPDATE runs SET status = 'running', owner = NULL, rows_seq = 7")
    # and a row the journal does not have (a store copied over, a tool gone astray)
    connection.execute(
        "INSERT INTO calls (run_id, call_id, seq, iteration, status) "
        "VALUES ('r', 'ghost', 99, 1, 'running')"
    )
    store.release(connection)
    assert store.rows_behind("r") == (7, last)
    assert main(["trace", "r", "--store", str(db)]) == 0
    note = capsys.readouterr().out.splitlines()[0]
    assert note.startswith("note: run r is interrupted: these rows were written at journal")
    assert f"entry 7 of {last}" in note and "resuming it rewrites them" in note

    checked: list[bool] = []
    commit = DurableRun.commit

    def first_commit(self: DurableRun, call_id: str | None = None, *, rows: bool = False) -> None:
        commit(self, call_id, rows=rows)
        if not checked and not self._pending:  # the resume's first commit
            checked.append(_stored(store, "r") == _in_memory(self))

    monkeypatch.setattr(DurableRun, "commit", first_commit)
    done = _agent(store).resume("r", decisions={deferred.id: tl.Approve()})
    assert done.status == "done" and checked == [True]
    assert store.rows_behind("r") is None
    final = _stored(store, "r")
    assert final.keys() == exact.keys()
    assert all(row[CALL_COLUMNS.index("status")] != "running" for row in final.values())


def test_a_value_that_is_not_json_data_is_a_store_error() -> None:
    loop: list[Any] = []
    loop.append(loop)  # a cycle: no JSON text for it
    with pytest.raises(tl.StoreError, match="cannot be stored as JSON"):
        dumps_entry({"value": loop})
    with pytest.raises(tl.StoreError, match="cannot be stored as JSON"):
        dumps_entry({"value": object()})
    # A lone surrogate is kept as its escape (SQLite has no UTF-8 for it); other text as is.
    assert dumps_entry({"n": "\ud800†"}) == '{"n":"\\ud800\\u2020"}'
    assert dumps_entry({"n": "†"}) == '{"n":"†"}'


@tl.tool(depends_on=["pay"])
async def receipt(n: int) -> int:
    return n


def test_a_call_that_never_became_ready_draws_what_it_read_and_its_tools_earlier_calls(
    tmp_path: Path,
) -> None:
    """A call that never became ready (the call writing what it reads failed) still has
    its arrows, worked out when it settles: the writer, and the earlier calls of the
    tool it depends on in its request; a later call of that tool is not among them."""
    plan = [
        {"_tool": "pay", "cents": 500, "_outputPath": "†state.p1"},  # denied
        {"_tool": "pay", "cents": 7, "_outputPath": "†state.p2"},
        {"_tool": "boom", "n": 2, "_outputPath": "†state.c"},
        {"_tool": "receipt", "n": "†state.c", "_outputPath": "†state.r"},
        {"_tool": "pay", "cents": 3, "_outputPath": "†state.p4"},
    ]
    model = tl.ScriptedModel([{"calls": plan, "output": None}, {"calls": [], "output": "ok"}])
    with tl.SQLiteStore(tmp_path / "runs.db") as store:
        agent = tl.Agent(model, tools=[pay, boom, receipt], approve=_hook, store=store)
        result = agent.run({"go": 1}, run_id="r")
        rows = {info.call["_outputPath"]: info for info in store.calls("r")}
    assert result.records[rows["†state.r"].id].status == "invalid"
    assert rows["†state.r"].ready is None
    assert rows["†state.r"].deps == [
        rows[path].id for path in ("†state.p1", "†state.p2", "†state.c")
    ]

"""The SQLite store: one owner-only file, refused when damaged, shared by processes."""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import tickloop as tl
from tickloop._cli._main import main
from tickloop._durable._schema import SCHEMA_VERSION


@tl.tool
async def add(a: int, b: int) -> int:
    return a + b


def _agent(store: tl.SQLiteStore | str | Path, counter: list[int] | None = None) -> tl.Agent:
    @tl.tool
    def tally(n: int) -> int:
        if counter is not None:
            counter.append(n)
        return n

    plan = [
        {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.x"},
        {"_tool": "tally", "n": "†state.x", "_outputPath": "†state.t"},
    ]
    model = tl.ScriptedModel([{"calls": plan, "output": None}, {"calls": [], "output": 1}])
    return tl.Agent(model, tools=[add, tally], store=store)


def _make_store_with_a_run(path: Path) -> None:
    with tl.SQLiteStore(path) as store:
        result = _agent(store).run({"q": 1}, run_id="first")
    assert result.status == "done"


def test_a_new_store_is_owner_only_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _make_store_with_a_run(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("SELECT version FROM tickloop_schema").fetchall() == [
            (SCHEMA_VERSION,)
        ]
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        connection.close()
    [run] = tl.SQLiteStore(path).runs()
    assert (run.run_id, run.status, run.calls, run.output) == ("first", "done", 2, 1)


def test_an_empty_file_taken_as_a_new_store_becomes_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    path.touch(mode=0o644)
    path.chmod(0o644)  # whatever the umask made of it
    _make_store_with_a_run(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_making_a_store_object_creates_no_file(tmp_path: Path) -> None:
    tl.Agent(tl.ScriptedModel([]), store=tmp_path / "later.db")
    assert not (tmp_path / "later.db").exists()


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is not a database, it is a shopping list\n" * 40)


def _truncated(path: Path) -> None:
    _make_store_with_a_run(path)
    data = path.read_bytes()
    assert not (path.parent / "runs.db-wal").exists()  # everything is in the main file
    path.write_bytes(data[: len(data) // 2])


def _truncated_at_a_page(path: Path) -> None:
    _make_store_with_a_run(path)
    page_size = int.from_bytes(path.read_bytes()[16:18], "big")
    path.write_bytes(path.read_bytes()[: 2 * page_size])


def _foreign(path: Path) -> None:
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    connection.commit()
    connection.close()


def _newer(path: Path) -> None:
    _make_store_with_a_run(path)
    connection = sqlite3.connect(path)
    connection.execute("UPDATE tickloop_schema SET version = ?", (SCHEMA_VERSION + 1,))
    connection.commit()
    connection.close()


def _damage_table(path: Path, table: str, *, layout: Path | None = None) -> None:
    """Overwrite a table's root page, as a bad disk or a stray write would.

    The page is looked up in `layout` (by default the file itself) with SQLite, whose
    closing connection folds any -wal file into the store first.
    """
    connection = sqlite3.connect(layout or path)
    try:
        [(root,)] = connection.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchall()
        [(page_size,)] = connection.execute("PRAGMA page_size").fetchall()
    finally:
        connection.close()
    with path.open("r+b") as file:
        file.seek((root - 1) * page_size)
        file.write(b"\xff" * page_size)


def _damaged(table: str) -> Callable[[Path], None]:
    """A real store whose header, tables and version are fine, but one table's page is not."""

    def damage(path: Path) -> None:
        _make_store_with_a_run(path)
        _damage_table(path, table)

    damage.__name__ = f"_damaged_{table}"  # the test's id
    return damage


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_garbage, "is not a tickloop store \\(not an SQLite database\\)"),
        (_truncated, "may be truncated"),
        (_truncated_at_a_page, "may be truncated"),
        (_foreign, "is an SQLite database but not a tickloop store"),
        (_newer, "was written by a newer tickloop"),
        (_damaged("runs"), "the store is damaged: "),
        (_damaged("journal"), "the store is damaged: "),
        (_damaged("calls"), "the store is damaged: "),
        (_damaged("decisions"), "the store is damaged: "),
    ],
)
def test_a_file_that_is_not_a_usable_store_is_refused_and_left_alone(
    tmp_path: Path, damage: object, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.db"
    damage(path)  # type: ignore[operator]
    before = path.read_bytes()
    siblings = sorted(p.name for p in tmp_path.iterdir())
    ran: list[int] = []

    with pytest.raises(tl.StoreError, match=message) as caught:
        _agent(path, ran).run({"q": 1})
    assert str(path) in str(caught.value)
    with pytest.raises(tl.StoreError, match=message):
        tl.SQLiteStore(path)
    assert main(["runs", "--store", str(path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"tickloop runs: {path}") and error.count("\n") == 1  # one line

    assert ran == []  # nothing ran: the error came before the run
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == siblings  # no -wal or -shm left


def test_a_damaged_store_with_a_crashed_runs_wal_is_refused_and_its_wal_kept(
    tmp_path: Path,
) -> None:
    """A killed process leaves committed runs in the -wal file; the check must not fold
    them into a damaged file (a read-write connection would, when it closes)."""
    path = tmp_path / "live" / "runs.db"
    path.parent.mkdir()
    _make_store_with_a_run(path)
    store = tl.SQLiteStore(path)  # kept open: its second run stays in the -wal file
    assert _agent(store).run({"q": 2}, run_id="second").status == "done"
    copies = {}
    for name in ("intact", "damaged"):  # what a kill -9 now would leave
        copy = tmp_path / name
        copy.mkdir()
        for suffix in ("", "-wal", "-shm"):
            shutil.copy(f"{path}{suffix}", copy / f"runs.db{suffix}")
        copies[name] = copy / "runs.db"
    store.close()
    assert Path(f"{copies['damaged']}-wal").stat().st_size > 0
    _damage_table(copies["damaged"], "decisions", layout=path)  # not a page in the -wal
    damaged = copies["damaged"]
    before = {p.name: p.read_bytes() for p in damaged.parent.iterdir()}

    with pytest.raises(tl.StoreError, match="the store is damaged: ") as caught:
        tl.SQLiteStore(damaged)
    assert str(damaged) in str(caught.value)
    after = {p.name: p.read_bytes() for p in damaged.parent.iterdir()}
    assert sorted(after) == sorted(before)
    assert after["runs.db"] == before["runs.db"]
    assert after["runs.db-wal"] == before["runs.db-wal"]  # (-shm is SQLite's scratch index)

    runs = tl.SQLiteStore(copies["intact"]).runs()  # the same check passes the intact copy
    assert [run.run_id for run in runs] == ["first", "second"]


def test_damage_found_after_the_store_was_checked_is_a_store_error_naming_the_path(
    tmp_path: Path,
) -> None:
    """The pages are checked once per store object; damage that appears later still
    surfaces as a `StoreError` naming the path, from every way of using the store."""
    path = tmp_path / "runs.db"
    _make_store_with_a_run(path)
    store = tl.SQLiteStore(path)
    store.close()  # the next use opens a new connection, which reads the damaged pages
    _damage_table(path, "runs")
    ran: list[int] = []

    reads: list[Callable[[], object]] = [
        store.runs,
        lambda: store.run("first"),
        lambda: store.calls("first"),
        lambda: store.pending("first"),
        lambda: store.decide("first", "c1.0", True),
        lambda: _agent(store, ran).run({"q": 1}, run_id="second"),
        lambda: _agent(store, ran).resume("first"),
    ]
    for use in reads:
        with pytest.raises(tl.StoreError, match=r"cannot (read|write to) the store: ") as caught:
            use()
        assert str(path) in str(caught.value)
    assert ran == []

    _make_store_with_a_run(tmp_path / "other.db")
    store = tl.SQLiteStore(tmp_path / "other.db")
    store.close()
    _damage_table(tmp_path / "other.db", "journal")
    with pytest.raises(tl.StoreError, match="cannot read the store: "):
        store.journal("first")


def test_reading_commands_do_not_create_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.db"
    assert main(["runs", "--store", str(missing)]) == 2
    assert "no store at" in capsys.readouterr().err
    assert not missing.exists()


WORKER = r"""
import json, sys, time, os
import trio
import tickloop as tl

who = int(sys.argv[2])

@tl.tool
async def greet(name: str, n: int) -> str:
    await trio.sleep(0.001 * (n % 3))
    return f"{name}-{n}"

plan = [{"_tool": "greet", "name": "†input.name", "n": n, "_outputPath": f"†state.g{n}"}
        for n in range(20)]
model = tl.ScriptedModel([{"calls": plan, "output": None}, {"calls": [], "output": who}],
                         chunk_chars=7)
agent = tl.Agent(model, tools=[greet], store=sys.argv[1])
while not os.path.exists(sys.argv[3]):   # start together, to write at the same time
    time.sleep(0.005)
result = agent.run({"name": f"p{who}"}, run_id=f"proc-{who}")
print(json.dumps(result.state))
"""


def test_runs_from_several_processes_share_one_store_and_keep_their_logs_apart(
    tmp_path: Path,
) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    db, go = tmp_path / "runs.db", tmp_path / "go"
    workers = [
        subprocess.Popen(
            [sys.executable, str(script), str(db), str(who), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in range(4)
    ]
    go.touch()
    states = []
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        states.append(json.loads(out))
    for who, state in enumerate(states):
        assert state == {f"g{n}": f"p{who}-{n}" for n in range(20)}

    store = tl.SQLiteStore(db)
    assert sorted((run.run_id, run.status, run.calls) for run in store.runs()) == [
        (f"proc-{who}", "done", 20) for who in range(4)
    ]
    for who in range(4):
        run_id = f"proc-{who}"
        journal = store.journal(run_id)
        assert [seq for seq, *_ in journal] == list(range(1, len(journal) + 1))
        inputs = [
            body
            for _, _, kind, body in journal
            if kind == "message" and body.get("kind") == "input"
        ]
        assert inputs == [{"type": "data", "kind": "input", "data": {"name": f"p{who}"}}]
        finished = [
            body["value"]
            for _, _, kind, body in journal
            if kind == "event" and body["type"] == "CallFinished"
        ]
        assert sorted(finished) == sorted(f"p{who}-{n}" for n in range(20))
        assert {call.params["name"] for call in store.calls(run_id)} == {f"p{who}"}


def test_one_run_cannot_be_driven_by_two_processes_at_once(tmp_path: Path) -> None:
    """A resume while the run's own process is alive is refused; so is a second writer."""
    db = tmp_path / "runs.db"
    started = trio.Event()
    release = trio.Event()

    @tl.tool
    async def hold() -> int:
        started.set()
        await release.wait()
        return 1

    model = tl.ScriptedModel(
        [
            {"calls": [{"_tool": "hold", "_outputPath": "†state.h"}], "output": None},
            {"calls": [], "output": "ok"},
        ]
    )
    agent = tl.Agent(model, tools=[hold], store=db)

    async def main_task() -> None:
        async with trio.open_nursery() as nursery:
            results: list[tl.RunResult] = []

            async def run() -> None:
                results.append(await agent.run_async({}, run_id="solo"))

            nursery.start_soon(run)
            await started.wait()
            with pytest.raises(tl.ResumeError, match=r"running now.*wait for it"):
                await agent.run_async({}, run_id="solo")
            with pytest.raises(tl.ResumeError, match="'solo' is running in another process"):
                await agent.resume_async("solo")
            assert tl.SQLiteStore(db).run("solo").status == "running"
            release.set()
        assert results[0].status == "done"

    trio.run(main_task)


def test_both_protocols_are_durable_and_a_run_resumes_only_with_its_own(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    tools_agent = tl.Agent(tl.ScriptedModel(["hi"]), protocol="tools", store=db)
    assert tools_agent.run("go", run_id="chat").status == "done"
    solution = _agent(db)
    with pytest.raises(tl.ResumeError, match="finished"):
        solution.resume("chat")
    # A run of one protocol is refused to an agent of the other, before anything changes.
    with tl.SQLiteStore(db) as store, store.connect() as connection:
        connection.execute("UPDATE runs SET status = 'failed' WHERE run_id = 'chat'")
    before = tl.SQLiteStore(db).journal("chat")
    with pytest.raises(tl.ResumeError, match="protocol='tools'; resume it with an agent"):
        solution.resume("chat")
    assert tl.SQLiteStore(db).journal("chat") == before
    assert tl.SQLiteStore(db).run("chat").status == "failed"


def test_a_failed_run_is_recorded_and_can_be_resumed(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    ran: list[int] = []
    plan = [{"_tool": "tally", "n": 7, "_outputPath": "†state.t"}]

    def agent(responses: list[Any]) -> tl.Agent:
        @tl.tool
        def tally(n: int) -> int:
            ran.append(n)
            return n

        return tl.Agent(tl.ScriptedModel(responses), tools=[tally], store=db)

    with pytest.raises(tl.ExecuteError):  # the script has no answer for iteration 2
        agent([{"calls": plan, "output": None}]).run({}, run_id="flaky")
    info = tl.SQLiteStore(db).run("flaky")
    assert info.status == "failed" and info.error is not None
    assert info.error.startswith("ExecuteError: the model request failed")

    fixed = agent([{"calls": plan, "output": None}, {"calls": [], "output": 7}])
    result = fixed.resume("flaky")
    assert (result.status, result.output, result.state) == ("done", 7, {"t": 7})
    assert ran == [7]  # the finished call did not run again
    assert len(fixed.model.requests) == 1  # only iteration 2 was asked


def _paused(db: Path) -> tl.Agent:
    @tl.tool(requires_approval=True)
    def pay(cents: int) -> int:
        return cents

    plan = [
        {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.c"},
        {"_tool": "pay", "cents": "†state.c", "_id": "p", "_outputPath": "†state.p"},
    ]
    model = tl.ScriptedModel([{"calls": plan, "output": None}, {"calls": [], "output": "†state.p"}])
    return tl.Agent(model, tools=[add, pay], store=db, approve=lambda call: tl.Defer())


def test_a_commits_entries_share_one_journal_row_and_read_back_numbered(tmp_path: Path) -> None:
    """A row per commit, not per entry (most of the journal's SQL): `journal` gives every
    entry back with its own number, in order, and `rows_behind` counts entries."""
    db = tmp_path / "runs.db"
    assert _paused(db).run({}, run_id="r").status == "paused"
    with tl.SQLiteStore(db) as store:
        journal = store.journal("r")
        assert store.rows_behind("r") is None
    assert [seq for seq, *_ in journal] == list(range(1, len(journal) + 1))
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT seq, kind FROM journal ORDER BY seq").fetchall()
    assert len(rows) < len(journal) and rows[-1][0] == len(journal)
    assert any(kind == "batch" for _, kind in rows)


def test_a_journal_written_one_row_per_entry_still_reads_and_resumes(tmp_path: Path) -> None:
    """A store written before a commit's entries shared a row: one row per entry, each
    body its own JSON. It reads the same, shows in `tickloop trace`, and resumes, the new
    entries numbered after the old ones."""
    db = tmp_path / "runs.db"
    agent = _paused(db)
    assert agent.run({}, run_id="r").status == "paused"
    with tl.SQLiteStore(db) as store:
        journal = store.journal("r")
    with sqlite3.connect(db) as connection:  # the old writer's form
        connection.execute("DELETE FROM journal")
        connection.executemany(
            "INSERT INTO journal (run_id, seq, at, kind, body) VALUES ('r', ?, ?, ?, ?)",
            [(seq, at, kind, json.dumps(body)) for seq, at, kind, body in journal],
        )
    with tl.SQLiteStore(db) as store:
        assert store.journal("r") == journal
        assert [call.status for call in store.calls("r")] == ["done", "deferred"]
    assert main(["trace", "r", "--store", str(db)]) == 0
    result = agent.resume("r", decisions={"p": tl.Approve()})
    assert (result.status, result.output) == ("done", 3)
    with tl.SQLiteStore(db) as store:
        after = store.journal("r")
    assert after[: len(journal)] == journal
    assert [seq for seq, *_ in after] == list(range(1, len(after) + 1))


def test_a_new_stores_journal_keeps_its_large_rows_in_a_rowid_table(tmp_path: Path) -> None:
    """A commit's entries are one row of several KB: in a rowid table that row goes in
    its own pages, while the key (run, number) stays in a small index; a `WITHOUT
    ROWID` table (stores made before) keeps the whole row in its key's b-tree."""
    db = tmp_path / "runs.db"
    assert _paused(db).run({}, run_id="r").status == "paused"
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT count(rowid) FROM journal").fetchone()[0] > 0
        (sql,) = connection.execute("SELECT sql FROM sqlite_master WHERE name = 'journal'")
    assert "WITHOUT ROWID" not in sql[0]


def test_a_store_whose_journal_is_without_rowid_runs_and_resumes_as_before(
    tmp_path: Path,
) -> None:
    """A store made before the journal became a rowid table: the same columns and key,
    so the same statements read and write it."""
    from tickloop._durable._schema import (
        _SCHEMA,
        _SESSION_SCHEMA,
        _WAITERS_SCHEMA,
        SCHEMA_VERSION,
    )

    db = tmp_path / "runs.db"
    old = _SCHEMA.replace(
        "PRIMARY KEY (run_id, seq)\n);", "PRIMARY KEY (run_id, seq)\n) WITHOUT ROWID;"
    )
    assert old != _SCHEMA
    with sqlite3.connect(db) as connection:
        connection.executescript(old + _SESSION_SCHEMA + _WAITERS_SCHEMA)
        connection.execute("INSERT INTO tickloop_schema (version) VALUES (?)", (SCHEMA_VERSION,))
    agent = _paused(db)
    assert agent.run({}, run_id="r").status == "paused"
    result = agent.resume("r", decisions={"p": tl.Approve()})
    assert (result.status, result.output) == ("done", 3)
    with sqlite3.connect(db) as connection:
        (sql,) = connection.execute("SELECT sql FROM sqlite_master WHERE name = 'journal'")
    assert "WITHOUT ROWID" in sql[0]


def test_a_second_writer_of_a_run_is_refused_even_where_rows_hold_several_entries(
    tmp_path: Path,
) -> None:
    """Two writers continuing one journal (never allowed; this is the last guard): the
    second fails on its first commit, whether its entries start where the first's row
    does or inside it, and writes nothing."""
    from tickloop._durable._writer import RunWriter

    db = tmp_path / "runs.db"
    assert _paused(db).run({}, run_id="r").status == "paused"
    store = tl.SQLiteStore(db)
    end = len(store.journal("r"))
    entry = (1.0, "note", '{"note":"x"}')
    first = RunWriter(store, store.acquire(), "r")
    first.seq = end
    first.append([entry, entry, entry])  # one row, numbered end+1..end+3, keyed end+3
    for start in (end, end + 1):
        second = RunWriter(store, store.acquire(), "r")
        second.seq = start
        with pytest.raises(tl.StoreError, match="only one process may run a run"):
            second.append([entry])
        assert second.seq == start
    assert len(store.journal("r")) == end + 3
    store.close()


def test_a_store_given_as_a_path_uses_the_file_there_at_each_run(tmp_path: Path) -> None:
    """`Agent(store="runs.db")` opens the store when a run needs it: a file rotated away
    or deleted between runs is not written on, and its run ids are not taken."""
    path = tmp_path / "runs.db"
    _garbage(path)
    agent = _agent(path)  # nothing is opened yet: a bad file is refused by the run
    with pytest.raises(tl.StoreError, match="not a tickloop store"):
        agent.run({"q": 0}, run_id="order-1")
    path.unlink()

    assert agent.run({"q": 1}, run_id="order-1").status == "done"
    rotated = tmp_path / "runs.db.1"
    path.rename(rotated)  # as logrotate does, between runs
    assert agent.run({"q": 2}, run_id="order-1").status == "done"  # a new store, a free id
    with tl.SQLiteStore(rotated) as old, tl.SQLiteStore(path) as new:
        assert [run.run_id for run in old.runs()] == ["order-1"]
        assert [run.run_id for run in new.runs()] == ["order-1"]
        assert old.journal("order-1")[0] != new.journal("order-1")[0]  # inputs {q: 1}, {q: 2}

    for suffix in ("", "-wal", "-shm"):  # deleted outright
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    assert agent.run({"q": 3}, run_id="order-1").status == "done"
    replacement = tmp_path / "other.db"
    _make_store_with_a_run(replacement)  # holds a run "first"
    replacement.replace(path)  # replaced by another store
    assert agent.run({"q": 4}, run_id="order-2").status == "done"
    with tl.SQLiteStore(path) as now:
        assert [run.run_id for run in now.runs()] == ["first", "order-2"]
        assert _integrity_ok(path)


def _integrity_ok(path: Path) -> bool:
    connection = sqlite3.connect(path)
    try:
        return connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        connection.close()


def test_a_store_object_whose_file_was_deleted_makes_a_new_one(tmp_path: Path) -> None:
    """A `SQLiteStore` keeps connections between uses; when its file is deleted, the next
    run writes a new file at the path rather than the deleted one nobody can read."""
    path = tmp_path / "runs.db"
    store = tl.SQLiteStore(path)
    assert _agent(store).run({"q": 1}, run_id="order-1").status == "done"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    assert _agent(store).run({"q": 2}, run_id="order-1").status == "done"
    store.close()
    with tl.SQLiteStore(path) as now:
        assert [(run.run_id, run.status) for run in now.runs()] == [("order-1", "done")]


# Another process in the middle of making a store: it holds the file's write lock while
# it is still in SQLite's rollback mode, as a process does while it switches a new store
# to WAL. A connection that then switches too cannot wait on SQLite's busy timeout: it
# holds a read lock and wants the write lock, so SQLite refuses it at once ("database is
# locked") rather than let the two wait for each other.
CREATOR = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
print("holding", flush=True)
sys.stdin.readline()
connection.execute("ROLLBACK")
print("let go", flush=True)
"""


def _hold_the_new_store(path: Path) -> subprocess.Popen[str]:
    path.touch(mode=0o600)  # as `tl.SQLiteStore` makes it: empty, the owner's
    creator = subprocess.Popen(
        [sys.executable, "-c", CREATOR, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert creator.stdout is not None and creator.stdout.readline() == "holding\n"
    return creator


def test_opening_a_store_another_process_is_making_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NOTE4: the open raised `StoreError` ("database is locked") at once. The creator
    lets go only once the open has met its lock and gone on waiting (SQLite's trace of
    the open's connection says so), so the wait is met on every run of the test."""
    import threading

    db = tmp_path / "runs.db"
    creator = _hold_the_new_store(db)
    waiting = threading.Event()  # the open met the lock, and goes on
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection = connect(*args, **kwargs)
        tried: list[str] = []

        def trace(statement: str) -> None:
            if tried:
                waiting.set()
            if "journal_mode=WAL" in statement:
                tried.append(statement)

        connection.set_trace_callback(trace)
        return connection

    monkeypatch.setattr(sqlite3, "connect", traced)
    outcome: list[Any] = []

    def open_it() -> None:
        try:
            outcome.append(tl.SQLiteStore(db).runs())
        except Exception as error:
            outcome.append(error)
        finally:
            waiting.set()

    opener = threading.Thread(target=open_it)
    opener.start()
    try:
        assert waiting.wait(60)
    finally:
        assert creator.stdin is not None
        creator.stdin.write("\n")
        creator.stdin.close()
        opener.join(60)
        creator.wait(60)
    monkeypatch.undo()
    assert outcome == [[]]
    assert creator.stdout is not None and creator.stdout.read() == "let go\n"
    _agent(db).run({"q": 1}, run_id="after")  # the store the open made works
    assert [run.run_id for run in tl.SQLiteStore(db).runs()] == ["after"]


def test_a_store_whose_maker_never_lets_go_is_refused_naming_it_after_the_timeout(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    creator = _hold_the_new_store(db)
    try:
        with pytest.raises(tl.StoreError) as caught:
            tl.SQLiteStore(db, timeout=0.2).runs()
    finally:
        assert creator.stdin is not None
        creator.stdin.close()
        creator.wait(60)
    message = str(caught.value)
    assert message.startswith(f"{db}: cannot open the store")
    assert "another connection" in message and "0.2 s" in message

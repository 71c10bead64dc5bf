"""The journal's version (issue 35): checked on open, older stores brought up, newer refused.

A store names its format in `tickloop_schema.version`. One written by a newer tickloop
is refused before anything is written to it; a version 1 store (0.x, unreleased) is
brought up to version 2 in one transaction, or refused, left as it was, when a journal in
it cannot be replayed by this version; version 3 adds the tables of sessions, version 4
the queue of runs waiting for a session.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import tickloop as tl
from tickloop._durable._schema import BATCH, SCHEMA_VERSION


@tl.tool(requires_approval=True)
def pay(amount: int) -> int:
    """Pay an amount."""
    return amount


@tl.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


PLAN = [
    {"_tool": "add", "_id": "a", "_outputPath": "†state.sum", "a": 1, "b": 2},
    {"_tool": "pay", "_id": "p", "_outputPath": "†state.paid", "amount": "†state.sum"},
]


def _agent(store: tl.SQLiteStore) -> tl.Agent[Any]:
    model = tl.ScriptedModel([{"calls": PLAN, "output": None}, {"calls": [], "output": "ok"}])
    return tl.Agent(model, tools=[add, pay], approve=lambda call: tl.Defer(), store=store)


def _paused_store(path: Path) -> None:
    with tl.SQLiteStore(path) as store:
        assert _agent(store).run({}, run_id="r").status == "paused"


def _rewrite_entries(path: Path, change: Any) -> None:
    """Apply `change(kind, entry)` to every journal entry (in place), as stored."""
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT rowid, kind, body FROM journal").fetchall()
        for rowid, kind, body in rows:
            data = json.loads(body)
            entries = data if kind == BATCH else [[None, kind, data]]
            for entry in entries:
                change(entry)
            text = json.dumps(data if kind == BATCH else entries[0][2])
            connection.execute("UPDATE journal SET body = ? WHERE rowid = ?", (text, rowid))
    connection.close()


def _set_version(path: Path, version: int) -> None:
    connection = sqlite3.connect(path)
    connection.execute("UPDATE tickloop_schema SET version = ?", (version,))
    connection.commit()
    connection.close()


def _version(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        return int(connection.execute("SELECT version FROM tickloop_schema").fetchone()[0])
    finally:
        connection.close()


def test_the_journal_is_at_version_4() -> None:
    assert SCHEMA_VERSION == 4


def _tables(path: Path) -> set[str]:
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        return {row[0] for row in rows}
    finally:
        connection.close()


def _columns(path: Path, table: str) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        return [row[1] for row in connection.execute(f"PRAGMA table_info({table})")]
    finally:
        connection.close()


def _drop_tables(path: Path, *names: str) -> None:
    connection = sqlite3.connect(path)
    for name in names:
        connection.execute(f"DROP TABLE {name}")
    connection.commit()
    connection.close()


def _chat(store: tl.SQLiteStore, answer: str) -> tl.RunResult[Any]:
    model = tl.ScriptedModel([{"calls": [], "output": answer}])
    return tl.Agent(model, store=store).run({"say": answer}, session="s", run_id=answer)


def test_a_version_3_store_gains_the_queue_of_waiting_runs_and_its_session_goes_on(
    tmp_path: Path,
) -> None:
    """Version 4 adds `session_waiters` (runs join a session in the order they started,
    PROTOCOL §16) and drops the two columns of `session_runs` version 3 never read; a
    version 3 store's sessions and runs are left as they were."""
    path = tmp_path / "runs.db"
    _paused_store(path)
    with tl.SQLiteStore(path) as store:
        assert _chat(store, "first").output == "first"
    v4_columns = _columns(path, "session_runs")
    assert v4_columns == ["session_id", "position", "run_id", "input", "state"]
    _drop_tables(path, "session_waiters")
    with sqlite3.connect(path) as connection:  # version 3's session_runs
        connection.execute("ALTER TABLE session_runs ADD COLUMN ended INTEGER NOT NULL DEFAULT 0")
        connection.execute("ALTER TABLE session_runs ADD COLUMN output TEXT")
        connection.execute("UPDATE session_runs SET ended = 1, output = NULL")
    connection.close()
    _set_version(path, 3)

    store = tl.SQLiteStore(path)
    assert _version(path) == SCHEMA_VERSION
    assert "session_waiters" in _tables(path)
    assert _columns(path, "session_runs") == v4_columns
    assert store.session("s").state is None and len(store.session("s").history) == 1
    second = _chat(store, "second")
    history = [m["data"] for m in second.messages if m.get("kind") == "history"]
    assert history == [[{"run_id": "first", "input": {"say": "first"}, "output": "first"}]]
    assert [run.run_id for run in store.session("s").runs] == ["first", "second"]
    (pending,) = store.pending("r")
    store.decide("r", pending.id, tl.Approve())
    assert _agent(store).resume("r").output == "ok"
    store.close()


def test_a_version_2_store_gains_sessions_and_its_run_resumes(tmp_path: Path) -> None:
    """Version 3 adds the tables of sessions (PROTOCOL §16); a version 2 store's runs
    are left as they were and resume."""
    path = tmp_path / "runs.db"
    _paused_store(path)
    _drop_tables(path, "session_waiters", "session_runs", "sessions")
    _set_version(path, 2)

    store = tl.SQLiteStore(path)
    assert _version(path) == SCHEMA_VERSION
    assert {"sessions", "session_runs", "session_waiters"} <= _tables(path)
    assert store.session("s").runs == []
    (pending,) = store.pending("r")
    store.decide("r", pending.id, tl.Approve())
    result = _agent(store).resume("r")
    assert (result.status, result.output) == ("done", "ok")


def test_a_store_of_a_newer_tickloop_is_refused_naming_both_versions_and_left_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    _paused_store(path)
    _set_version(path, SCHEMA_VERSION + 1)
    before = path.read_bytes()
    siblings = sorted(p.name for p in tmp_path.iterdir())

    with pytest.raises(tl.StoreError) as caught:
        tl.SQLiteStore(path)
    message = str(caught.value)
    assert "newer tickloop" in message and str(path) in message
    assert f"version {SCHEMA_VERSION + 1}" in message
    assert f"reads version {SCHEMA_VERSION}" in message
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == siblings


def test_a_version_1_store_is_brought_up_to_version_2_and_its_run_resumes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    _paused_store(path)
    # The store as version 1 left it: no rows_seq column, numbers for a batch's times,
    # no sessions.
    _drop_tables(path, "session_waiters", "session_runs", "sessions")
    connection = sqlite3.connect(path)
    connection.execute("ALTER TABLE runs DROP COLUMN rows_seq")
    connection.commit()
    connection.close()
    as_numbers: list[float] = []

    def numbers(entry: list[Any]) -> None:
        if type(entry[0]) is str:
            entry[0] = float.fromhex(entry[0])
            as_numbers.append(entry[0])

    _rewrite_entries(path, numbers)
    assert as_numbers  # the run's journal has batches
    _set_version(path, 1)

    store = tl.SQLiteStore(path)
    assert _version(path) == SCHEMA_VERSION
    times = [at for _, at, _, _ in store.journal("r")]
    assert all(at in times for at in as_numbers)  # each time read back exactly
    (pending,) = store.pending("r")
    store.decide("r", pending.id, tl.Approve())
    result = _agent(store).resume("r")
    assert (result.status, result.output, result.state["paid"]) == ("done", "ok", 3)
    check = sqlite3.connect(path)
    (rows_seq,) = check.execute("SELECT rows_seq FROM runs").fetchone()
    (last,) = check.execute("SELECT max(seq) FROM journal").fetchone()
    check.close()
    assert rows_seq == last
    store.close()


def test_a_version_1_journal_from_before_plan_order_is_refused_and_left_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    _paused_store(path)

    def before_plan_order(entry: list[Any]) -> None:
        body = entry[2]
        if entry[1] == "event" and body.get("type") == "TickOpened":
            body.pop("plan_order", None)

    _rewrite_entries(path, before_plan_order)
    _set_version(path, 1)
    before = path.read_bytes()

    with pytest.raises(tl.StoreError, match="journaled before plan order") as caught:
        tl.SQLiteStore(path)
    assert "run 'r'" in str(caught.value) and f"version {SCHEMA_VERSION}" in str(caught.value)
    assert _version(path) == 1
    assert path.read_bytes() == before


def test_a_batch_whose_time_is_not_the_hex_form_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _paused_store(path)

    def numbers(entry: list[Any]) -> None:
        if type(entry[0]) is str:
            entry[0] = float.fromhex(entry[0])

    _rewrite_entries(path, numbers)  # at version 2: not a form this version writes
    with pytest.raises(tl.StoreError, match="is not a list of entries"):
        tl.SQLiteStore(path).journal("r")

"""Opening a store: its schema made when new, its version checked, older ones brought up.

`SCHEMA_VERSION` names the format of everything in the file: tables, columns, and the
journal's entries. A store written by a newer tickloop is refused before anything is
written to it (its entries may mean what this version cannot replay). An older one is
brought up by `MIGRATIONS`, one step a version, all in one write transaction with the
version row, so a crash or a refused step leaves the store as it was.

Version 1 (0.x, unreleased) changed format four times without a new version: a journal
row holding a commit's entries (`batch`, its times first written as numbers, now always
the hex form of the float), `runs.rows_seq`, plan and solution messages stored by
reference (`shared`), and ticks keeping plan order (`TickOpened.plan_order`). Version 2
is the last of those; `_from_1` converts what can be converted and refuses what cannot.
Version 3 adds the tables of sessions (`_from_2`). Version 4 adds the queue of runs
waiting for a busy session, `session_waiters`, and drops two unused columns of
`session_runs` (`_from_3`).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from .._errors import StoreError
from ._file import failure
from ._schema import (
    _ROWS_SEQ,
    _SCHEMA,
    _SESSION_SCHEMA,
    _TABLES,
    _WAITERS_SCHEMA,
    BATCH,
    SCHEMA_VERSION,
    SESSION_TABLES,
    WAITER_TABLES,
)

# A write transaction on a connection (`SQLiteStore._write`).
Write = Callable[[sqlite3.Connection], AbstractContextManager[Any]]

__all__ = ["MIGRATIONS", "prepare"]


def prepare(connection: sqlite3.Connection, path: Path, write: Write, timeout: float) -> None:
    """Check the schema (read only), then switch to WAL and create tables if new;
    another process making the store meanwhile is waited for, up to `timeout` seconds."""
    try:
        names = {
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        if names and "tickloop_schema" not in names:
            raise StoreError(
                f"{path} is an SQLite database but not a tickloop store "
                f"(it has tables {', '.join(sorted(names)[:5])})"
            )
        if names:
            version = _check_version(path, connection, names)
            if version < SCHEMA_VERSION:
                _migrate(connection, path, write)
        if connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            _switch_to_wal(connection, path, timeout)
        connection.execute("PRAGMA synchronous=NORMAL")
        if not names:
            with write(connection):
                exists = connection.execute(
                    "SELECT 1 FROM sqlite_master WHERE name='tickloop_schema'"
                ).fetchone()
                if not exists:  # another process may have made it meanwhile
                    _execute_script(connection, _SCHEMA + _SESSION_SCHEMA + _WAITERS_SCHEMA)
                    connection.execute(
                        "INSERT INTO tickloop_schema (version) VALUES (?)", (SCHEMA_VERSION,)
                    )
    except sqlite3.OperationalError as error:  # read-only, locked: not damage
        raise failure(path, "cannot open the store", error) from error
    except sqlite3.DatabaseError as error:
        raise StoreError(f"{path}: the store is damaged or not a store: {error}") from error


def _switch_to_wal(connection: sqlite3.Connection, path: Path, timeout: float) -> None:
    """Switch a new store to WAL, waiting for another connection that holds it.

    Another process making the same store switches it too, and holds its write lock as
    it does. A switch needs that lock while it already holds a read lock, so SQLite
    refuses it at once ("database is locked") rather than call the busy timeout (the
    two would wait for each other). So the switch, once refused, waits for the write
    lock from no lock at all (`BEGIN EXCLUSIVE`, on the busy timeout), lets it go and
    tries again; by then the other one has made the store WAL (the switch is then a
    no-op) or given up. Past `timeout` (each wait for the lock is bounded by it too), a
    `StoreError` names the file and says so.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if not _locked(error):
                raise
            if time.monotonic() >= deadline:
                raise _held(path, timeout, error) from error
        try:
            connection.execute("BEGIN EXCLUSIVE")  # waits on the busy timeout
        except sqlite3.OperationalError as error:
            if not _locked(error):
                raise
            raise _held(path, timeout, error) from error
        connection.execute("ROLLBACK")


def _locked(error: sqlite3.Error) -> bool:
    return str(getattr(error, "sqlite_errorname", "")).startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))


def _held(path: Path, timeout: float, error: sqlite3.Error) -> StoreError:
    return StoreError(
        f"{path}: cannot open the store: another connection held it locked while it was "
        f"being made, for more than {timeout:g} s (the store's timeout) ({error})"
    )


def _check_version(path: Path, connection: sqlite3.Connection, names: set[str]) -> int:
    """The store's version; a `StoreError` for one this tickloop cannot read."""
    row = connection.execute("SELECT version FROM tickloop_schema").fetchone()
    if row is None or not isinstance(row[0], int):
        raise StoreError(f"{path}: the store has no schema version")
    if row[0] > SCHEMA_VERSION:
        raise StoreError(
            f"{path} was written by a newer tickloop (store schema version {row[0]}; this "
            f"tickloop reads version {SCHEMA_VERSION} and older): upgrade tickloop to open it"
        )
    if row[0] < 1:
        raise StoreError(f"{path}: the store's schema version {row[0]} is not one tickloop made")
    missing = _tables_at(row[0]) - names
    if missing:
        raise StoreError(f"{path}: the store lacks tables {', '.join(sorted(missing))}")
    return int(row[0])


def _tables_at(version: int) -> frozenset[str]:
    """The tables a store of that version has."""
    tables = _TABLES
    if version >= 3:
        tables |= SESSION_TABLES
    if version >= 4:
        tables |= WAITER_TABLES
    return tables


def _migrate(connection: sqlite3.Connection, path: Path, write: Write) -> None:
    """Bring the store up to SCHEMA_VERSION, every step and the version row in one
    transaction (another process may have done it meanwhile: the version is read again)."""
    with write(connection):
        (version,) = connection.execute("SELECT version FROM tickloop_schema").fetchone()
        while version < SCHEMA_VERSION:
            MIGRATIONS[version](connection, path)
            version += 1
        connection.execute("UPDATE tickloop_schema SET version = ?", (version,))


def _from_1(connection: sqlite3.Connection, path: Path) -> None:
    """Version 1 to 2: the `runs.rows_seq` column where it is missing; every batch's
    times in the hex form; refused when a journal holds a tick opened before plan order
    (its replay needs the rule it ran with, which this version no longer has)."""
    columns = connection.execute("PRAGMA table_info(runs)").fetchall()
    if all(column[1] != _ROWS_SEQ for column in columns):
        connection.execute(f"ALTER TABLE runs ADD COLUMN {_ROWS_SEQ} INTEGER")
    rows = connection.execute(
        "SELECT rowid, run_id, seq, kind, body FROM journal "
        "WHERE kind = ? OR body LIKE '%\"TickOpened\"%'",
        (BATCH,),
    ).fetchall()
    for rowid, run_id, seq, kind, body in rows:
        data = json.loads(body)
        entries = data if kind == BATCH else [[0.0, kind, data]]
        for _at, entry_kind, entry in entries:
            if (
                entry_kind == "event"
                and type(entry) is dict
                and entry.get("type") == "TickOpened"
                and not entry.get("plan_order")
            ):
                raise StoreError(
                    f"{path}: run {run_id!r} (journal entry {seq}) was journaled before plan "
                    f"order, by a pre-release tickloop; this tickloop (store schema version "
                    f"{SCHEMA_VERSION}) cannot replay it. Open the store with the tickloop that "
                    "wrote it, or start a new store"
                )
        if kind == BATCH and any(type(entry[0]) is not str for entry in entries):
            for entry in entries:
                entry[0] = float.hex(float(entry[0]))
            text = json.dumps(entries, ensure_ascii=False, separators=(",", ":"))
            connection.execute("UPDATE journal SET body = ? WHERE rowid = ?", (text, rowid))


def _from_2(connection: sqlite3.Connection, path: Path) -> None:
    """Version 2 to 3: the tables of sessions (PROTOCOL §16); no run changes."""
    _execute_script(connection, _SESSION_SCHEMA)


def _from_3(connection: sqlite3.Connection, path: Path) -> None:
    """Version 3 to 4: the queue of runs waiting for a busy session (PROTOCOL §16), empty;
    and `session_runs` without two columns version 3 had and never read (`ended`,
    which the run's status says; `output`, never written: the run's row holds it). No
    run or session changes. The table is made anew and its rows copied (SQLite before
    3.35 cannot drop a column); a version 2 store's, made by `_from_2` in the same
    transaction, has the new shape already."""
    _execute_script(connection, _WAITERS_SCHEMA)
    columns = {row[1] for row in connection.execute("PRAGMA table_info(session_runs)")}
    if columns & {"ended", "output"}:
        connection.execute("DROP INDEX session_runs_by_run")
        connection.execute("ALTER TABLE session_runs RENAME TO session_runs_3")
        _execute_script(connection, _SESSION_SCHEMA)  # `sessions` is kept as it is
        connection.execute(
            "INSERT INTO session_runs (session_id, position, run_id, input, state) "
            "SELECT session_id, position, run_id, input, state FROM session_runs_3"
        )
        connection.execute("DROP TABLE session_runs_3")


def _execute_script(connection: sqlite3.Connection, script: str) -> None:
    """Each statement of `script` on `connection`, inside the caller's transaction
    (`executescript` would commit it first)."""
    for statement in script.split(";"):
        if statement.strip():
            connection.execute(statement)


# The step from each version to the next.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection, Path], None]] = {
    1: _from_1,
    2: _from_2,
    3: _from_3,
}

"""The durable store: one SQLite file holding every run's journal, calls and decisions.

Durability is event sourcing (PROTOCOL §10). For each run the store keeps, in one
sequence, every scheduler event fed to the engine and every message the outer loop
appended by itself (the input, solutions, plans). Replaying that journal into a fresh
scheduler rebuilds the log and every call's state exactly, because the scheduler is a
pure function of its events. Each entry is committed before the engine acts on it.

Beside the journal, the store keeps what a reader without the agent's tools needs (the
command line, the timeline): a `calls` row per call with its status and the time of each
transition, and a `decisions` table for decisions made outside a running process. The
rows are a view of the journal that may trail it by `ROW_LAG` (`_resume.py`), coalesced
per call; they are exact at the checkpoints a reader depends on (a decision or deferral,
a tick's end, the run's end, a resume), and `runs.rows_seq` says which journal entry
they reflect, so a reader of a crashed run can tell how far behind they may be.

The file is opened with the standard library's `sqlite3` in WAL mode with
`synchronous=NORMAL`: a committed transaction survives the process being killed (not a
power cut, which would need `FULL` and an fsync per event). Several processes may share
one file; writes take the lock up front (`BEGIN IMMEDIATE`) and wait on a busy timeout.
SQLite's locks are POSIX locks, which closing any descriptor of a process on the file
drops: so no descriptor is opened on the file but SQLite's own (`SQLiteStore.open`).
"""

from __future__ import annotations

import functools
import json
import operator
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._core._budget import Budget
from .._core._decisions import (
    Approve,
    Decision,
    Defer,
    Deny,
    Edit,
    Replace,
    Respond,
    decision_from_dict,
    decision_to_dict,
)
from .._core._status import CallStatus
from .._errors import ResumeError, StoreError
from .._observe._records import CallInfo, RunInfo
from ._file import check_file, check_pages, create_file, failure

__all__ = ["CallInfo", "PendingDecision", "RunInfo", "SQLiteStore", "as_store"]

SCHEMA_VERSION = 1
_ACTIVE: set[tuple[Path, str]] = set()  # (store, run id) of the runs this process runs

_SCHEMA = """
CREATE TABLE tickloop_schema (
    version INTEGER NOT NULL
);
CREATE TABLE runs (
    run_id   TEXT PRIMARY KEY,
    status   TEXT NOT NULL,         -- running, paused, done, failed
    created  REAL NOT NULL,         -- seconds since the epoch
    updated  REAL NOT NULL,
    protocol TEXT NOT NULL,
    owner    TEXT,                  -- host:pid of the process running it, while it runs
    output   TEXT,                  -- the final output (JSON) of a done run
    error    TEXT,                  -- why a failed run stopped
    rows_seq INTEGER                -- the journal entry its calls rows reflect (NULL: all)
);
CREATE TABLE journal (           -- a rowid table: its rows (a commit's entries) are large
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL,        -- one sequence per run: replay order
    at     REAL NOT NULL,           -- run clock, seconds since the epoch
    kind   TEXT NOT NULL,           -- event, message, note or batch
    body   TEXT NOT NULL,           -- JSON
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE calls (
    run_id    TEXT NOT NULL,
    call_id   TEXT NOT NULL,
    seq       INTEGER NOT NULL,     -- arrival order in the run
    iteration INTEGER NOT NULL,
    tool      TEXT,
    status    TEXT NOT NULL,
    call      TEXT,                 -- the wire call (JSON), secrets redacted
    params    TEXT,                 -- resolved parameters (JSON), secrets redacted
    deps      TEXT,                 -- ids of the calls it waited on (JSON list)
    decision  TEXT,                 -- the decision applied to it (JSON)
    error     TEXT,                 -- its error (JSON)
    received  REAL, ready REAL, asked REAL, decided REAL, started REAL, finished REAL,
    PRIMARY KEY (run_id, call_id)
);
CREATE TABLE decisions (
    run_id   TEXT NOT NULL,
    call_id  TEXT NOT NULL,
    decision TEXT NOT NULL,         -- JSON, as decision_to_dict
    recorded REAL NOT NULL,
    PRIMARY KEY (run_id, call_id)
);
"""

# A journal row holding several entries, one commit's (`RunWriter.insert`). A store
# written before it has one row per entry, which is read as it always was.
BATCH = "batch"
_KINDS = {"event": ',"event",', "message": ',"message",', "note": ',"note",'}
# The type of a message entry that stands for a plan or solution message, its calls
# stored as references to their CallReceived entries (`_resume.shared_text`); read back
# as that message (`expand_shared`). No message a log holds has it (`MESSAGE_TYPES`), so
# an older tickloop replaying such an entry refuses it as damage instead of losing it.
SHARED = "shared"
_INSERT_ENTRIES = (
    "INSERT INTO journal (run_id, seq, at, kind, body) SELECT ?1, ?2, ?3, ?4, ?5 "
    "WHERE NOT EXISTS (SELECT 1 FROM journal WHERE run_id = ?1 AND seq >= ?6)"
)

_TABLES = frozenset({"tickloop_schema", "runs", "journal", "calls", "decisions"})
# Added to `runs` after schema 1 was released, without a new version: an older tickloop
# names its columns, so it reads and writes a store that has it (leaving it NULL, which
# means its rows were written with every entry), and this one adds it to a store made
# before it (ALTER TABLE ... ADD COLUMN only rewrites the table's definition).
_ROWS_SEQ = "rows_seq"

CALL_COLUMNS = (
    "call_id",
    "seq",
    "iteration",
    "tool",
    "status",
    "call",
    "params",
    "deps",
    "decision",
    "error",
    "received",
    "ready",
    "asked",
    "decided",
    "started",
    "finished",
)
# A whole row is inserted by `_insert_calls` (a statement per set of NULL columns).
# The columns NULL in the row of a call that was never asked about, decided or failed,
# most rows: such a row may be given without them (the run id, then LEAN_COLUMNS).
USUALLY_NULL = ("decision", "error", "asked", "decided")
LEAN_COLUMNS = tuple(name for name in CALL_COLUMNS if name not in USUALLY_NULL)
# The columns a call's transitions change (its id, arrival order and iteration never do):
# an UPDATE of a row this process wrote rewrites the row in place, where a REPLACE deletes
# and reinserts it and its index entry (about a third of the store's time per call).
CHANGING_COLUMNS = CALL_COLUMNS[3:]
_UPDATE_CALL = (
    f"UPDATE calls SET {', '.join(f'{name} = ?' for name in CHANGING_COLUMNS)} "
    "WHERE run_id = ? AND call_id = ?"
)
SETTLED_COLUMNS = ("status", "error", "deps", "finished")  # what a call's end changes
_SETTLE_CALL = (
    f"UPDATE calls SET {', '.join(f'{name} = ?' for name in SETTLED_COLUMNS)} "
    "WHERE run_id = ? AND call_id = ?"
)


@dataclass(frozen=True, slots=True)
class PendingDecision:
    """A deferred call of a paused run, and the decision recorded for it, if any."""

    id: str
    tool: str | None
    params: Any
    decision: dict[str, Any] | None


def as_store(store: SQLiteStore | str | os.PathLike[str] | None) -> SQLiteStore | None:
    """Accept a path where a store is expected, as `Agent(store="runs.db")` does."""
    if store is None or isinstance(store, SQLiteStore):
        return store
    if isinstance(store, str | os.PathLike):
        return SQLiteStore._at_path(store)
    raise TypeError(f"store must be a path or a SQLiteStore, not {store!r}")


def owner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_alive(owner: str | None) -> bool:
    """Whether the process that claimed a run still runs (only knowable on this host)."""
    if not owner:
        return False
    host, _, pid_text = owner.rpartition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SQLiteStore:
    """A store of durable runs in one SQLite file (created with mode 0600).

    An existing file is checked when the store is made: a file that is not a tickloop
    store, or one whose pages are damaged (`PRAGMA quick_check`, once per file), raises
    `StoreError` naming the path, and is left exactly as it was. Any later error from
    SQLite is raised as a `StoreError` naming the path too. The store is the file at its
    path at each use: when that file is deleted, rotated or replaced, the next use opens
    (or makes) what is there then.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 10.0) -> None:
        self._setup(path, timeout)
        if os.path.lexists(self.path) and self._check_file()[0] > 0:
            with self.connect():
                pass  # checks the file; raises StoreError for one that is not a store

    @classmethod
    def _at_path(cls, path: str | os.PathLike[str]) -> SQLiteStore:
        """The store at `path` for `Agent(store="runs.db")`: opened when a run needs it,
        and closed when nothing uses it, so that between runs no connection holds the
        file (a file moved while SQLite has it open keeps its newest transactions in a
        WAL left under the old name: rotating it then would lose them)."""
        store = cls.__new__(cls)
        store._setup(path, 10.0)
        store._reuse = False
        return store

    def _setup(self, path: str | os.PathLike[str], timeout: float) -> None:
        self.path = Path(path)
        self.timeout = timeout
        # Connections are kept for reuse: opening checks the file, and closing the last
        # one checkpoints the WAL into the main file, neither of which a run should pay.
        # Each is kept with the file it was opened on (st_dev, st_ino): one whose file is
        # no longer at the path (deleted, rotated, replaced) is closed instead of reused,
        # so the next run uses the file there now.
        self._reuse = True  # keep released connections for the next use
        self._idle: list[sqlite3.Connection] = []
        self._files: dict[sqlite3.Connection, tuple[int, int]] = {}
        self._lock = threading.Lock()
        # The file that passed `PRAGMA quick_check`: once per file, before its first use
        # (a check per connection would cost a scan of the file each time one opens).
        self._checked: tuple[int, int] | None = None

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # -- connections -------------------------------------------------------------------

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """A checked connection for the block; the file is made (0600) when missing.

        An SQLite error in the block (a damaged page, say) is raised as `StoreError`.
        """
        connection = self.acquire()
        try:
            yield connection
        except sqlite3.Error as error:
            raise self._failure("cannot read the store", error) from error
        finally:
            self.release(connection)

    def acquire(self) -> sqlite3.Connection:
        """A connection of this store's own (a running run keeps one); `release` it."""
        current = _file_at(self.path)
        with self._lock:
            stale = [c for c in self._idle if self._files.get(c) != current]
            if stale:
                self._idle = [c for c in self._idle if self._files.get(c) == current]
            reused = self._idle.pop() if self._idle else None
        # Closed before a new file is opened: the last connection of a moved file folds
        # its WAL into it and removes the WAL by name, which a new file's must not meet.
        for connection in stale:
            self._close(connection)
        return reused if reused is not None else self.open()

    def release(self, connection: sqlite3.Connection) -> None:
        # After an error, never reuse a half transaction.
        if connection.in_transaction or not self._reuse:
            self._close(connection)
            return
        with self._lock:
            self._idle.append(connection)

    def close(self) -> None:
        """Close the connections kept for reuse (the WAL is then checkpointed)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            self._close(connection)

    def _close(self, connection: sqlite3.Connection) -> None:
        with self._lock:
            self._files.pop(connection, None)
        connection.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def open(self) -> sqlite3.Connection:
        """A new checked connection, which the caller closes.

        No descriptor is ever opened on the file but SQLite's own: SQLite's locks are
        POSIX locks, held per process, and closing *any* descriptor of this process on
        the file drops them all, SQLite's included. Another connection of this process
        (another store object, a reader beside a run) would then write unlocked, and a
        process closing its last connection would fold and delete the WAL it still writes
        to, losing committed transactions. So the file is checked by path (`os.lstat`,
        `os.chmod`), made under another name and linked into place, and read through
        SQLite alone (which catches a file that is not a database or is cut short).
        """
        create_file(self.path)
        size, file = check_file(self.path)
        if self._checked != file:
            if size:  # a new (empty) file has nothing to check
                check_pages(self.path, size, self.timeout)
            self._checked = file
        try:
            connection = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as error:
            raise self._open_error(error) from error
        try:
            self._prepare(connection)
        except BaseException:
            connection.close()
            raise
        with self._lock:
            self._files[connection] = file
        return connection

    def _open_error(self, error: sqlite3.Error) -> StoreError:
        return self._failure("cannot open the store", error)

    def _failure(self, doing: str, error: sqlite3.Error) -> StoreError:
        return failure(self.path, doing, error)

    def _check_file(self) -> tuple[int, tuple[int, int]]:
        return check_file(self.path)

    def _prepare(self, connection: sqlite3.Connection) -> None:
        """Check the schema (read only), then switch to WAL and create tables if new."""
        try:
            names = {
                row[0]
                for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if names and "tickloop_schema" not in names:
                raise StoreError(
                    f"{self.path} is an SQLite database but not a tickloop store "
                    f"(it has tables {', '.join(sorted(names)[:5])})"
                )
            if names:
                self._check_version(connection, names)
                self._add_rows_seq(connection)
            if connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            if not names:
                with self._write(connection):
                    exists = connection.execute(
                        "SELECT 1 FROM sqlite_master WHERE name='tickloop_schema'"
                    ).fetchone()
                    if not exists:  # another process may have made it meanwhile
                        for statement in _SCHEMA.split(";"):
                            if statement.strip():
                                connection.execute(statement)
                        connection.execute(
                            "INSERT INTO tickloop_schema (version) VALUES (?)", (SCHEMA_VERSION,)
                        )
        except sqlite3.OperationalError as error:  # read-only, locked: not damage
            raise self._failure("cannot open the store", error) from error
        except sqlite3.DatabaseError as error:
            raise StoreError(
                f"{self.path}: the store is damaged or not a store: {error}"
            ) from error

    def _check_version(self, connection: sqlite3.Connection, names: set[str]) -> None:
        row = connection.execute("SELECT version FROM tickloop_schema").fetchone()
        if row is None or not isinstance(row[0], int):
            raise StoreError(f"{self.path}: the store has no schema version")
        if row[0] > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer tickloop (store schema {row[0]}, this "
                f"version reads {SCHEMA_VERSION}); upgrade tickloop"
            )
        missing = _TABLES - names
        if missing:
            raise StoreError(f"{self.path}: the store lacks tables {', '.join(sorted(missing))}")

    def _add_rows_seq(self, connection: sqlite3.Connection) -> None:
        """Give a store made before `runs.rows_seq` that column (see `_ROWS_SEQ`)."""

        def missing() -> bool:
            columns = connection.execute("PRAGMA table_info(runs)").fetchall()
            return all(column[1] != _ROWS_SEQ for column in columns)

        if missing():
            with self._write(connection):
                if missing():  # another process may have added it meanwhile
                    connection.execute(f"ALTER TABLE runs ADD COLUMN {_ROWS_SEQ} INTEGER")

    @contextmanager
    def _write(
        self, connection: sqlite3.Connection, *, conflict: str | None = None
    ) -> Iterator[sqlite3.Connection]:
        """One write transaction, taking the write lock at once (no upgrade deadlocks).

        An SQLite error in the block rolls it back and is raised as `StoreError`; with
        `conflict`, a constraint violation is raised with that message instead.
        """
        try:
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:
            raise self._failure("cannot write to the store", error) from error
        try:
            yield connection
        except BaseException as error:
            _rollback(connection)
            if conflict is not None and isinstance(error, sqlite3.IntegrityError):
                raise StoreError(conflict) from error
            if isinstance(error, sqlite3.Error):
                raise self._failure("cannot write to the store", error) from error
            if isinstance(error, UnicodeError):  # a lone surrogate that slipped through
                raise StoreError(
                    f"{self.path}: cannot write to the store: a value is not Unicode text "
                    f"({error.__class__.__name__})"
                ) from None
            raise
        try:
            connection.execute("COMMIT")
        except sqlite3.Error as error:
            raise StoreError(f"{self.path}: cannot commit to the store: {error}") from error

    # -- reading -----------------------------------------------------------------------

    def runs(self) -> list[RunInfo]:
        """Every run, oldest first."""
        with self.connect() as connection:
            rows = connection.execute(
                "SELECT r.run_id, r.status, r.created, r.updated, r.owner, r.output, r.error, "
                "(SELECT count(*) FROM calls c WHERE c.run_id = r.run_id) "
                "FROM runs r ORDER BY r.created, r.run_id"
            ).fetchall()
        return [_run_info(row, self.path) for row in rows]

    def run(self, run_id: str) -> RunInfo:
        """One run; `ResumeError` when the store has no run of that id."""
        with self.connect() as connection:
            return self._run(connection, run_id)

    def _run(self, connection: sqlite3.Connection, run_id: str) -> RunInfo:
        row = connection.execute(
            "SELECT r.run_id, r.status, r.created, r.updated, r.owner, r.output, r.error, "
            "(SELECT count(*) FROM calls c WHERE c.run_id = r.run_id) "
            "FROM runs r WHERE r.run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            raise ResumeError(f"no run {run_id!r} in {self.path}")
        return _run_info(row, self.path)

    def protocol(self, run_id: str) -> str:
        """The protocol the run was made with; `ResumeError` when the store has no such run."""
        with self.connect() as connection:
            row = connection.execute(
                "SELECT protocol FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
        if row is None:
            raise ResumeError(f"no run {run_id!r} in {self.path}")
        return str(row[0])

    def calls(self, run_id: str) -> list[CallInfo]:
        """The run's calls in arrival order."""
        with self.connect() as connection:
            self._run(connection, run_id)
            rows = connection.execute(
                f"SELECT {', '.join(CALL_COLUMNS)} FROM calls WHERE run_id = ? ORDER BY seq",
                (run_id,),
            ).fetchall()
        return [_call_info(row, self.path) for row in rows]

    def journal(self, run_id: str) -> list[tuple[int, float, str, Any]]:
        """The run's journal: (seq, at, kind, body) in order."""
        with self.connect() as connection:
            return self._journal(connection, run_id)

    def _journal(
        self, connection: sqlite3.Connection, run_id: str
    ) -> list[tuple[int, float, str, Any]]:
        rows = connection.execute(
            "SELECT seq, at, kind, body FROM journal WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
        journal: list[tuple[int, float, str, Any]] = []
        for seq, at, kind, body in rows:
            if kind != BATCH:
                journal.append((seq, at, kind, _loads(body, self.path)))
                continue
            entries = _loads(body, self.path)
            try:
                start = seq - len(entries) + 1
                for number, (entry_at, entry_kind, entry) in enumerate(entries, start):
                    if not isinstance(entry_kind, str) or entry_kind == BATCH:
                        raise TypeError(f"an entry of kind {entry_kind!r}")
                    # A float's hex form; a number in a batch an earlier tickloop wrote.
                    at = float.fromhex(entry_at) if type(entry_at) is str else float(entry_at)
                    journal.append((number, at, entry_kind, entry))
            except (TypeError, ValueError) as error:
                raise damaged_entry(
                    self.path, run_id, seq, f"is not a list of entries ({error})"
                ) from None
        self._expand_shared(journal, run_id)
        return journal

    def _expand_shared(self, journal: list[tuple[int, float, str, Any]], run_id: str) -> None:
        """Read each SHARED message back as the message it stands for, in place."""
        received: dict[int, Any] = {}  # entry number -> the call it received
        for index, (number, at, kind, body) in enumerate(journal):
            if type(body) is not dict:
                continue
            if kind == "event":
                if body.get("type") == "CallReceived":
                    received[number] = body.get("call")
            elif kind == "message" and body.get("type") == SHARED:
                try:
                    journal[index] = (number, at, kind, expand_shared(body, received))
                except (TypeError, KeyError, ValueError, IndexError) as error:
                    raise damaged_entry(
                        self.path,
                        run_id,
                        number,
                        f"refers to calls it cannot have ({type(error).__name__}: {error})",
                    ) from None

    def rows_behind(self, run_id: str) -> tuple[int, int] | None:
        """(the journal entry the run's `calls` rows reflect, the journal's last entry)
        when entries follow that one, else None (the rows are exact).

        A run's rows are brought level with its journal at every checkpoint (a decision,
        a tick's end, the run's end, a resume); a run whose process died, or one running
        now, may have its rows up to `ROW_LAG` seconds behind its journal. Entries that
        changed no row count too, so this says the rows *may* be behind.
        """
        with self.connect() as connection:
            self._run(connection, run_id)
            row = connection.execute(
                f"SELECT r.{_ROWS_SEQ}, (SELECT max(seq) FROM journal j WHERE j.run_id = "
                "r.run_id) FROM runs r WHERE r.run_id = ?",
                (run_id,),
            ).fetchone()
        rows_seq, last = row
        if rows_seq is None or last is None or rows_seq >= last:
            return None  # NULL: written by a tickloop that wrote rows with every entry
        return rows_seq, last

    def pending(self, run_id: str) -> list[PendingDecision]:
        """The calls a paused run waits on, with any decision already recorded for them."""
        with self.connect() as connection:
            self._run(connection, run_id)
            rows = connection.execute(
                "SELECT c.call_id, c.tool, c.params, d.decision FROM calls c "
                "LEFT JOIN decisions d ON d.run_id = c.run_id AND d.call_id = c.call_id "
                "WHERE c.run_id = ? AND c.status = 'deferred' ORDER BY c.seq",
                (run_id,),
            ).fetchall()
        return [
            PendingDecision(call_id, tool, _loads(params, self.path), _loads(decision, self.path))
            for call_id, tool, params, decision in rows
        ]

    def take_over(self, run_id: str) -> str | None:
        """Free a `running` run whose owner looks alive, so a resume may claim it.

        For `tickloop resume --force`: the owner is a host and a process id, and a process
        id can be reused by an unrelated process after the run's own died, which would
        keep the run refused forever. Returns the owner it freed (None when the run had
        none). Only for a person who knows that process is not running this run.
        """
        with self.connect() as connection, self._write(connection):
            run = self._run(connection, run_id)
            if (self.path.resolve(), run_id) in _ACTIVE:
                raise ResumeError(f"run {run_id!r} is running in this process")
            if run.status == "done":
                raise ResumeError(f"run {run_id!r} is finished; there is nothing to resume")
            row = connection.execute(
                "SELECT owner FROM runs WHERE run_id = ? AND status = 'running'", (run_id,)
            ).fetchone()
            owner = row[0] if row is not None else None
            connection.execute("UPDATE runs SET owner = NULL WHERE run_id = ?", (run_id,))
        return owner

    # -- decisions ---------------------------------------------------------------------

    def decide(self, run_id: str, call_id: str, decision: Decision | bool) -> None:
        """Record a decision for a deferred call of a run; the next resume applies it.

        Refused with `ResumeError` (nothing recorded) for an unknown or finished run, a
        call that is not waiting for a decision, or a call already decided.
        """
        self.record_decisions(run_id, {call_id: decision})

    def record_decisions(self, run_id: str, decisions: dict[str, Any]) -> None:
        """Check and record several decisions atomically: all are recorded, or none."""
        checked = {
            call_id: _checked_decision(call_id, value) for call_id, value in decisions.items()
        }
        with self.connect() as connection, self._write(connection):
            run = self._run(connection, run_id)
            if run.status == "done":
                raise ResumeError(f"run {run_id!r} is finished; it takes no more decisions")
            self._insert_decisions(connection, run_id, checked)

    def _insert_decisions(
        self, connection: sqlite3.Connection, run_id: str, decisions: dict[str, Decision]
    ) -> None:
        now = time.time()
        for call_id, decision in decisions.items():
            row = connection.execute(
                "SELECT status FROM calls WHERE run_id = ? AND call_id = ?", (run_id, call_id)
            ).fetchone()
            if row is None:
                waiting = self._waiting_ids(connection, run_id)
                raise ResumeError(
                    f"run {run_id!r} has no call {call_id!r}"
                    + (f"; the calls waiting for a decision are {waiting}" if waiting else "")
                )
            if row[0] != CallStatus.DEFERRED:
                raise ResumeError(
                    f"call {call_id!r} of run {run_id!r} is not waiting for a decision "
                    f"(it is {row[0]})"
                )
            earlier = connection.execute(
                "SELECT decision FROM decisions WHERE run_id = ? AND call_id = ?",
                (run_id, call_id),
            ).fetchone()
            if earlier is not None:
                name = _decision_name(_loads(earlier[0], self.path))
                raise ResumeError(
                    f"call {call_id!r} of run {run_id!r} already has a decision ({name}); "
                    "a call is decided once"
                )
            connection.execute(
                "INSERT INTO decisions (run_id, call_id, decision, recorded) VALUES (?, ?, ?, ?)",
                (run_id, call_id, json.dumps(decision_to_dict(decision)), now),
            )

    def add_budget(self, run_id: str, budget: Budget) -> None:
        """Give a stopped or paused run more room (PROTOCOL §12), added to what it has
        left when it is next resumed: a journal entry, replayed like the hook's grants.

        Refused with `ResumeError` for an unknown or finished run, or one running now.
        """
        body = {"type": "BudgetAnswered", "limit": "", "grant": budget.to_dict(), "date": ""}
        with self.connect() as connection, self._write(connection):
            run = self._run(connection, run_id)
            if run.status == "done":
                raise ResumeError(f"run {run_id!r} is finished; it takes no more budget")
            if run.status == "running":  # its process is alive (else: "interrupted")
                raise ResumeError(f"run {run_id!r} is running; its budget hook answers for it")
            (last,) = connection.execute(
                "SELECT coalesce(max(seq), 0) FROM journal WHERE run_id = ?", (run_id,)
            ).fetchone()
            connection.execute(
                "INSERT INTO journal (run_id, seq, at, kind, body) VALUES (?, ?, ?, ?, ?)",
                (run_id, last + 1, time.time(), "event", json.dumps(body)),
            )

    @staticmethod
    def _waiting_ids(connection: sqlite3.Connection, run_id: str) -> str:
        rows = connection.execute(
            "SELECT call_id FROM calls WHERE run_id = ? AND status = 'deferred' ORDER BY seq",
            (run_id,),
        ).fetchall()
        return ", ".join(row[0] for row in rows)


def _checked_decision(call_id: str, value: Any) -> Decision:
    if value is True:
        return Approve()
    if value is False:
        return Deny()
    if isinstance(value, Defer):
        raise ResumeError(f"the decision for {call_id!r} cannot be Defer: it is deferred already")
    if not isinstance(value, Approve | Deny | Edit | Replace | Respond):
        raise ResumeError(f"the decision for {call_id!r} is not a decision: {value!r}")
    try:
        json.dumps(decision_to_dict(value))
    except (TypeError, ValueError) as error:
        raise ResumeError(f"the decision for {call_id!r} cannot be stored: {error}") from error
    return value


class RunWriter:
    """Appends one run's journal; one instance per process that runs the run.

    `seq` numbers the run's entries; a commit whose numbers the journal already holds is
    refused (`insert`), so a second process writing the same run at the same time fails
    on its first commit instead of interleaving.
    """

    def __init__(self, store: SQLiteStore, connection: sqlite3.Connection, run_id: str) -> None:
        self.store = store
        self.connection = connection
        self.run_id = run_id
        self.seq = 0

    def append(
        self,
        entries: Sequence[tuple[float, str, str]],
        calls: Sequence[Sequence[Any]] = (),
        changed: Sequence[Sequence[Any]] = (),
        settled: Sequence[Sequence[Any]] = (),
        *,
        rows_current: bool = False,
        rewrite: bool = False,
    ) -> None:
        """Commit journal entries (at, kind, JSON body) and call rows together.

        `calls` are whole rows, one per call (the run id, then CALL_COLUMNS, or
        LEAN_COLUMNS for a row whose USUALLY_NULL columns are NULL), inserted or
        replacing a row of the same call; `changed` are rows this writer stored before,
        updated in place (CHANGING_COLUMNS, then the run and call ids); `settled` the
        same with SETTLED_COLUMNS only, for rows whose only change is the call's end.
        `rows_current`: with these, the rows reflect the journal's last entry
        (`runs.rows_seq`). `rewrite`: `calls` are all the run's rows (a resume's, rebuilt
        from its journal); any other row of the run is deleted.
        """
        connection = self.connection
        seq = self.seq
        try:
            with self.store._write(connection, conflict=self._conflict):
                self.insert(entries)
                if rewrite:  # the root's rows: a sub-agent's ("c1.2/c1.0") are its child's
                    connection.execute(
                        "DELETE FROM calls WHERE run_id = ? AND instr(call_id, '/') = 0",
                        (self.run_id,),
                    )
                if calls:
                    _insert_calls(connection, calls)
                if changed:
                    connection.executemany(_UPDATE_CALL, changed)
                if settled:
                    connection.executemany(_SETTLE_CALL, settled)
                if rows_current:
                    connection.execute(
                        f"UPDATE runs SET {_ROWS_SEQ} = ? WHERE run_id = ?",
                        (self.seq, self.run_id),
                    )
        except BaseException:  # nothing was written: the next append reuses these numbers
            self.seq = seq
            raise

    @property
    def _conflict(self) -> str:
        return (
            f"{self.store.path}: run {self.run_id!r} was written by another process at the "
            "same time; only one process may run a run"
        )

    def insert(self, entries: Sequence[tuple[float, str, str]]) -> None:
        """Insert journal entries inside the caller's transaction.

        Several entries go in one row of kind `batch` (a JSON array of `[at, kind,
        body]`, `at` as the hex form of its float: `float.hex`), keyed by the last entry's
        number: a row per commit instead of per entry
        (most of the journal's SQL). `_journal` numbers them back. A row is refused when
        the journal already has an entry this one numbers (another process writes the
        run), as a row per entry was by its key.
        """
        count = len(entries)
        if not count:
            return
        first, self.seq = self.seq + 1, self.seq + count
        if count == 1:
            ((at, kind, body),) = entries
        else:
            at, kind = entries[-1][0], BATCH
            # One join of the pieces: a body of a thousand entries is copied once, not
            # once per entry and again for the whole. An entry's time is its float's hex
            # form (exact, and a third of `repr`'s cost for a 17-digit time).
            parts = ["["]
            for entry_at, entry_kind, text in entries:
                kind_text = _KINDS.get(entry_kind) or f",{json.dumps(entry_kind)},"  # a child's
                parts += ('["', float.hex(entry_at), '"', kind_text, text, "],")
            parts[-1] = "]]"
            body = "".join(parts)
        # Refused, in the same statement, when an entry this row numbers exists already.
        inserted = self.connection.execute(
            _INSERT_ENTRIES, (self.run_id, self.seq, at, kind, body, first)
        )
        if inserted.rowcount != 1:
            raise sqlite3.IntegrityError(f"journal entry {first} exists already")

    def release(self) -> None:
        """The run is over in this process: give back the connection."""
        _ACTIVE.discard((self.store.path.resolve(), self.run_id))
        self.store.release(self.connection)

    def set_status(
        self, status: str, *, output: Any = None, error: str | None = None, release: bool = True
    ) -> None:
        with self.store._write(self.connection):
            self.connection.execute(
                "UPDATE runs SET status = ?, updated = ?, output = ?, error = ?, "
                "owner = CASE WHEN ? THEN NULL ELSE owner END WHERE run_id = ?",
                (
                    status,
                    time.time(),
                    None if output is None else json.dumps(output, ensure_ascii=False),
                    error,
                    release,
                    self.run_id,
                ),
            )


def _insert_calls(connection: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> None:
    """Insert (or replace) whole `calls` rows, their NULLs written in the statement.

    Python's sqlite3 binds a None through its adapter protocol (two failed attribute
    lookups, about as much as the rest of the value's binding), and a row of a call that
    was never asked about, decided or failed holds four: rows of the same NULL columns go
    in one `executemany` of a statement that names only the others (a lean row, without
    the USUALLY_NULL columns, is such a row already). The rows stored are the same as
    binding every value would store (tests/test_durable_fast_paths.py). One row per call:
    the rows are not inserted in their given order.
    """
    lean = [row for row in rows if len(row) == len(LEAN_COLUMNS) + 1]
    if lean:
        connection.executemany(_insert_statement(_LEAN_SHAPE)[0], lean)
        if len(lean) == len(rows):
            return
        rows = [row for row in rows if len(row) != len(LEAN_COLUMNS) + 1]
    groups: dict[tuple[bool, ...], list[Sequence[Any]]] = {}
    for row in rows:
        shape = tuple(value is None for value in row)
        group = groups.get(shape)
        if group is None:
            groups[shape] = [row]
        else:
            group.append(row)
    for shape, group in groups.items():
        statement, pick = _insert_statement(shape)
        connection.executemany(statement, map(pick, group))


@functools.cache
def _insert_statement(shape: tuple[bool, ...]) -> tuple[str, Callable[[Any], tuple[Any, ...]]]:
    """The INSERT OR REPLACE of whole rows whose NULL columns are those `shape` marks,
    and the function picking the other values out of such a row (always a tuple)."""
    names = ("run_id", *CALL_COLUMNS)
    kept = [i for i, null in enumerate(shape) if not null]
    values = ", ".join("NULL" if null else "?" for null in shape)
    statement = f"INSERT OR REPLACE INTO calls ({', '.join(names)}) VALUES ({values})"
    if len(kept) == 1:
        (only,) = kept
        return statement, lambda row: (row[only],)
    return statement, operator.itemgetter(*kept)


# The NULL columns of a lean row (`_insert_statement`'s shape for it).
_LEAN_SHAPE = tuple(name in USUALLY_NULL for name in ("run_id", *CALL_COLUMNS))


def damaged_entry(path: Path, run_id: str, number: int, what: str) -> StoreError:
    """The error for journal entry `number` of a run, which `what` says is damaged."""
    return StoreError(
        f"{path}: the store is damaged: journal entry {number} of run {run_id!r} {what}"
    )


def expand_shared(body: Any, received: Mapping[int, Any]) -> dict[str, Any]:
    """The message a SHARED message stands for (`_resume.shared_text`), its calls taken
    from `received` (entry number -> the call of that CallReceived entry).

    A call referred to is the received object itself, as the message held it when it
    was journaled; a wire (`[n, id]`) is a copy of it with its `_id`, as the scheduler
    made it on arrival. Damage raises TypeError, KeyError, ValueError or IndexError.
    """
    message, path, refs = body["message"], body["path"], body["calls"]
    if type(message) is not dict or type(path) is not list or not path or type(refs) is not list:
        raise TypeError("not a shared message")
    calls: list[Any] = []
    for ref in refs:
        if type(ref) is int:
            calls.append(received[ref])
        elif type(ref) is list and len(ref) == 1:
            calls.append(ref[0])
        elif type(ref) is list and len(ref) == 2 and type(ref[0]) is int:
            wire = dict(received[ref[0]])
            wire["_id"] = ref[1]
            calls.append(wire)
        else:
            raise ValueError(f"{ref!r} is not a reference to a call")
    holder = message
    for key in path[:-1]:
        holder = holder[key]
    if type(holder) is not dict or holder.get(path[-1], 0) is not None:
        raise ValueError("the calls' place is not held")
    holder[path[-1]] = calls
    return message


def create_run(
    store: SQLiteStore,
    run_id: str,
    protocol: str,
    entries: Sequence[tuple[float, str, str]] = (),
) -> RunWriter:
    """Claim a new run id with its first journal entries (the input), in one transaction.

    `ResumeError` if the store has the id already. Atomic, so a run whose input cannot be
    stored leaves no `running` row behind (which a resume would run without its input).
    """
    connection = store.acquire()
    writer = RunWriter(store, connection, run_id)
    try:
        with store._write(connection):
            row = connection.execute(
                "SELECT status, owner FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is not None:
                if row[0] == "running" and (
                    (store.path.resolve(), run_id) in _ACTIVE or _owner_alive(row[1])
                ):
                    raise ResumeError(
                        f"run {run_id!r} is running now (process {row[1]}); wait for it to "
                        "finish or pause: it cannot be resumed while it runs"
                    )
                if row[0] == "done":
                    raise ResumeError(
                        f"run {run_id!r} is finished; a finished run is not run again "
                        "(choose another run_id)"
                    )
                raise ResumeError(
                    f"run {run_id!r} already exists ({row[0]}); continue it with "
                    f"agent.resume({run_id!r})"
                )
            now = time.time()
            connection.execute(
                f"INSERT INTO runs (run_id, status, created, updated, protocol, owner, "
                f"{_ROWS_SEQ}) VALUES (?, 'running', ?, ?, ?, ?, ?)",
                (run_id, now, now, protocol, owner_label(), len(entries)),
            )
            writer.insert(entries)
    except BaseException:
        writer.seq = 0
        store.release(connection)
        raise
    _ACTIVE.add((store.path.resolve(), run_id))
    return writer


@dataclass(slots=True)
class ClaimedRun:
    """What a resume needs: the writer, the journal to replay, and the decisions."""

    writer: RunWriter
    journal: list[tuple[int, float, str, Any]]
    decisions: dict[str, Decision]


def claim_run(
    store: SQLiteStore, run_id: str, decisions: dict[str, Any], *, protocol: str | None = None
) -> ClaimedRun:
    """Check a resume and take the run over, atomically; `ResumeError` before any change.

    The new decisions are checked and recorded in the same transaction that claims the
    run, so two processes deciding the same call cannot both win. With `protocol`, a run
    made with another protocol is refused: its journal is another loop's.
    """
    checked = {call_id: _checked_decision(call_id, value) for call_id, value in decisions.items()}
    connection = store.acquire()
    try:
        with store._write(connection):
            row = connection.execute(
                "SELECT status, owner, protocol FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None:
                raise ResumeError(f"no run {run_id!r} in {store.path}")
            status, owner, made_with = row
            if status == "done":
                raise ResumeError(f"run {run_id!r} is finished; there is nothing to resume")
            if protocol is not None and made_with != protocol:
                raise ResumeError(
                    f"run {run_id!r} was made with protocol={made_with!r}; resume it with an "
                    f"agent of that protocol, not protocol={protocol!r}"
                )
            if (store.path.resolve(), run_id) in _ACTIVE or (
                status == "running" and owner != owner_label() and _owner_alive(owner)
            ):
                raise ResumeError(
                    f"run {run_id!r} is running in process {owner}; wait for it to finish "
                    "or pause, then resume it if it paused"
                )
            store._insert_decisions(connection, run_id, checked)
            connection.execute(
                "UPDATE runs SET status = 'running', owner = ?, updated = ? WHERE run_id = ?",
                (owner_label(), time.time(), run_id),
            )
            journal = store._journal(connection, run_id)
            stored = connection.execute(
                "SELECT call_id, decision FROM decisions WHERE run_id = ? "
                "ORDER BY recorded, call_id",
                (run_id,),
            ).fetchall()
    except BaseException:
        store.release(connection)
        raise
    try:
        recorded = {
            call_id: decision_from_dict(_loads(body, store.path)) for call_id, body in stored
        }
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        store.release(connection)
        raise StoreError(
            f"{store.path}: the store is damaged: a recorded decision of run {run_id!r} "
            f"cannot be read ({type(error).__name__}: {error})"
        ) from None
    except BaseException:
        store.release(connection)
        raise
    writer = RunWriter(store, connection, run_id)
    writer.seq = journal[-1][0] if journal else 0
    _ACTIVE.add((store.path.resolve(), run_id))
    return ClaimedRun(writer, journal, recorded)


def _file_at(path: Path) -> tuple[int, int] | None:
    """The identity (st_dev, st_ino) of the file at `path` now; None when there is none."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _rollback(connection: sqlite3.Connection) -> None:
    """End a failed transaction; SQLite may have rolled it back already (or cannot)."""
    if connection.in_transaction:
        try:
            connection.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # still in a transaction: `release` closes the connection


def _loads(text: str | None, path: Path) -> Any:
    """A stored JSON value; damage `quick_check` cannot see (a row whose text is not JSON)
    is a `StoreError` naming the path, as any other damage."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError) as error:
        raise StoreError(
            f"{path}: the store is damaged: a stored value is not JSON ({error})"
        ) from None


def _decision_name(data: Any) -> Any:
    return data.get("decision") if isinstance(data, dict) else data


def _run_info(row: Sequence[Any], path: Path) -> RunInfo:
    run_id, status, created, updated, owner, output, error, calls = row
    if status == "running" and not _owner_alive(owner):
        status = "interrupted"  # its process died: `agent.resume` continues it
    return RunInfo(run_id, status, created, updated, calls, _loads(output, path), error)


def _call_info(row: Sequence[Any], path: Path) -> CallInfo:
    (call_id, seq, iteration, tool, status, call, params, deps, decision, error, *times) = row
    return CallInfo(
        call_id,
        seq,
        iteration,
        tool,
        status,
        _loads(call, path),
        _loads(params, path),
        _loads(deps, path) or [],
        _loads(decision, path),
        _loads(error, path),
        *times,
    )

"""The durable store: one SQLite file holding every run's journal, calls and decisions.

Durability is event sourcing (PROTOCOL §10). For each run the store keeps, in one
sequence, every scheduler event fed to the engine and every message the outer loop
appended by itself (the input, solutions, plans). Replaying that journal into a fresh
scheduler rebuilds the log and every call's state exactly, because the scheduler is a
pure function of its events. Each entry is committed before the engine acts on it.

Beside the journal, the store keeps what a reader without the agent's tools needs (the
command line, the timeline): a `calls` row per call with its status and the time of each
transition, and a `decisions` table for decisions made outside a running process. The
rows are a view of the journal that may trail it by `ROW_LAG` (`_journal.py`), coalesced
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

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
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
)
from .._core._paths import RunPath, untag_kind
from .._core._questions import Question, Verdict, is_verdict, stored_to_dict
from .._core._status import CallStatus
from .._errors import ResumeError, StoreError
from .._observe._records import CallInfo, RunInfo
from ._codec import damaged_entry, expand_shared, loads_stored
from ._file import check_file, check_pages, create_file, failure
from ._migrations import prepare
from ._owners import _ACTIVE, _owner_alive, owner_label
from ._schema import _ROWS_SEQ, BATCH, CALL_COLUMNS, SHARED
from ._sessions import Session, session_ids

__all__ = [
    "_ACTIVE",
    "CallInfo",
    "PendingDecision",
    "RunInfo",
    "SQLiteStore",
    "_owner_alive",
    "as_store",
    "owner_label",
]


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
        prepare(connection, self.path, self._write, self.timeout)

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

    def _end_run(self, connection: sqlite3.Connection, run_id: str, error: str) -> None:
        """End a run `failed` with `error` (a session's abandoned run), in the caller's
        write transaction."""
        connection.execute(
            "UPDATE runs SET status = 'failed', error = ?, owner = NULL, updated = ? "
            "WHERE run_id = ?",
            (error, time.time(), run_id),
        )

    def _delete_run(self, connection: sqlite3.Connection, run_id: str) -> None:
        """Delete a run and all the store keeps of it (a deleted session's), in the
        caller's write transaction."""
        for table in ("journal", "calls", "decisions", "runs"):
            connection.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))

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
                journal.append((seq, at, kind, loads_stored(body, self.path)))
                continue
            entries = loads_stored(body, self.path)
            try:
                start = seq - len(entries) + 1
                for number, (entry_at, entry_kind, entry) in enumerate(entries, start):
                    if not isinstance(entry_kind, str) or entry_kind == BATCH:
                        raise TypeError(f"an entry of kind {entry_kind!r}")
                    at = float.fromhex(entry_at)  # a float's hex form (`RunWriter.insert`)
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
            PendingDecision(
                call_id, tool, loads_stored(params, self.path), loads_stored(decision, self.path)
            )
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

    # -- sessions (PROTOCOL §16) ------------------------------------------------------------

    def session(self, session_id: str) -> Session:
        """The session of that id (`tl.Session`); one with no runs yet reads as empty."""
        return Session(self, session_id)

    def sessions(self) -> list[Session]:
        """Every session of the store, oldest first."""
        return [Session(self, session_id) for session_id in session_ids(self)]

    # -- decisions ---------------------------------------------------------------------

    def decide(self, run_id: str, call_id: str, decision: Decision | Verdict | bool) -> None:
        """Record a decision for a deferred call of a run; the next resume applies it.

        A call parked on an MCP server's question takes a verdict (`tl.Accept(data)`,
        `tl.Decline()`, `tl.Cancel()`): on resume it runs again, and the server's same
        question is answered with it, the hook not asked.

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
        self, connection: sqlite3.Connection, run_id: str, decisions: dict[str, Any]
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
            if is_verdict(decision) and self._question_of(connection, run_id, call_id) is None:
                raise ResumeError(
                    f"call {call_id!r} of run {run_id!r} waits on no MCP server's question; "
                    "a verdict (tl.Accept, tl.Decline, tl.Cancel) answers only such a call: "
                    "give it a decision (tl.Approve(), tl.Deny(reason), ...)"
                )
            earlier = connection.execute(
                "SELECT decision FROM decisions WHERE run_id = ? AND call_id = ?",
                (run_id, call_id),
            ).fetchone()
            if earlier is not None:
                name = _decision_name(loads_stored(earlier[0], self.path))
                raise ResumeError(
                    f"call {call_id!r} of run {run_id!r} already has a decision ({name}); "
                    "a call is decided once"
                )
            connection.execute(
                "INSERT INTO decisions (run_id, call_id, decision, recorded) VALUES (?, ?, ?, ?)",
                (run_id, call_id, json.dumps(stored_to_dict(decision)), now),
            )

    def question(self, run_id: str, call_id: str) -> Question | None:
        """The MCP server's question a paused run's call was parked on (`tl.Defer()`):
        decide it with a verdict (`tl.Accept(data)`, `tl.Decline()`, `tl.Cancel()`).
        None when the call waits on no question."""
        with self.connect() as connection:
            self._run(connection, run_id)
            return self._question_of(connection, run_id, call_id)

    def _question_of(
        self, connection: sqlite3.Connection, run_id: str, call_id: str
    ) -> Question | None:
        found: Question | None = None
        for _, _, kind, body in self._journal(connection, run_id):
            if untag_kind(kind)[0] != "note" or not isinstance(body, dict):
                continue
            if body.get("note") == "question" and body.get("call_id") == call_id:
                found = None
                if body.get("deferred"):
                    schema = body.get("schema")
                    found = Question(
                        str(body.get("message", "")),
                        schema if isinstance(schema, dict) else None,
                        str(body.get("server", "")),
                        call_id,
                        run_id,
                    )
        return found

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

    # -- media (images and audio a run's tools returned) ----------------------------------

    def put_media(self, media_id: str, mime: str, data: bytes) -> None:
        """Keep the bytes a `$media` reference names, once (their id is their hash).

        The table is made on first use, so a store of this schema version without it is
        still read and written by every tickloop of that version (docs/decisions.md)."""
        with self.connect() as connection, self._write(connection):
            connection.execute(_MEDIA_TABLE)
            connection.execute(
                "INSERT OR IGNORE INTO media (media_id, mime, data) VALUES (?, ?, ?)",
                (media_id, mime, data),
            )

    def get_media(self, media_id: str) -> tuple[str, bytes] | None:
        """The MIME type and bytes of a `$media` reference, or None."""
        with self.connect() as connection:
            exists = connection.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='media'"
            ).fetchone()
            if not exists:
                return None
            row = connection.execute(
                "SELECT mime, data FROM media WHERE media_id = ?", (media_id,)
            ).fetchone()
        return None if row is None else (str(row[0]), bytes(row[1]))

    @staticmethod
    def _waiting_ids(connection: sqlite3.Connection, run_id: str) -> str:
        rows = connection.execute(
            "SELECT call_id FROM calls WHERE run_id = ? AND status = 'deferred' ORDER BY seq",
            (run_id,),
        ).fetchall()
        return ", ".join(row[0] for row in rows)


_MEDIA_TABLE = (
    "CREATE TABLE IF NOT EXISTS media ("
    "media_id TEXT PRIMARY KEY, "  # "m-" and the bytes' SHA-256, cut (`_core._media`)
    "mime TEXT NOT NULL, "
    "data BLOB NOT NULL)"
)


def _checked_decision(call_id: str, value: Any) -> Any:
    try:  # one grammar of call ids for the CLI, the inbox and `resume(decisions=)`
        RunPath.parse(call_id)
    except ValueError as error:
        raise ResumeError(f"a decision names no call: {error}") from None
    if value is True:
        return Approve()
    if value is False:
        return Deny()
    if isinstance(value, Defer):
        raise ResumeError(f"the decision for {call_id!r} cannot be Defer: it is deferred already")
    # A verdict (tl.Accept, tl.Decline, tl.Cancel) answers the MCP server's question a
    # parked call waits on; the call runs again on resume and is given it.
    if not isinstance(value, Approve | Deny | Edit | Replace | Respond) and not is_verdict(value):
        raise ResumeError(f"the decision for {call_id!r} is not a decision: {value!r}")
    try:
        json.dumps(stored_to_dict(value))
    except (TypeError, ValueError) as error:
        raise ResumeError(f"the decision for {call_id!r} cannot be stored: {error}") from error
    return value


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


def _decision_name(data: Any) -> Any:
    return data.get("decision") if isinstance(data, dict) else data


def _run_info(row: Sequence[Any], path: Path) -> RunInfo:
    run_id, status, created, updated, owner, output, error, calls = row
    if status == "running" and not _owner_alive(owner):
        status = "interrupted"  # its process died: `agent.resume` continues it
    return RunInfo(run_id, status, created, updated, calls, loads_stored(output, path), error)


def _call_info(row: Sequence[Any], path: Path) -> CallInfo:
    (call_id, seq, iteration, tool, status, call, params, deps, decision, error, *times) = row
    return CallInfo(
        call_id,
        seq,
        iteration,
        tool,
        status,
        loads_stored(call, path),
        loads_stored(params, path),
        loads_stored(deps, path) or [],
        loads_stored(decision, path),
        loads_stored(error, path),
        *times,
    )

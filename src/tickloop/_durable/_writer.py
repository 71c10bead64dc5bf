"""Writing a run: its journal and rows (`RunWriter`), made (`create_run`) or claimed
for a resume (`claim_run`) atomically."""

from __future__ import annotations

import functools
import json
import operator
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._core._decisions import Decision
from .._core._paths import SEPARATOR
from .._core._questions import stored_from_dict
from .._errors import ResumeError, StoreError
from ._codec import loads_stored
from ._owners import run_alive
from ._schema import (
    _INSERT_ENTRIES,
    _KINDS,
    _ROWS_SEQ,
    _SETTLE_CALL,
    _UPDATE_CALL,
    BATCH,
    CALL_COLUMNS,
    LEAN_COLUMNS,
    USUALLY_NULL,
)
from ._sessions import ABANDONED, end_session_run, join_session
from ._store import _ACTIVE, SQLiteStore, _checked_decision, _owner_alive, owner_label


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
                        "DELETE FROM calls WHERE run_id = ? AND instr(call_id, ?) = 0",
                        (self.run_id, SEPARATOR),
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
        self,
        status: str,
        *,
        output: Any = None,
        error: str | None = None,
        release: bool = True,
        session_state: tuple[Any] | None = None,
    ) -> None:
        """The run's status; `session_state`, `(state,)`: a session's run is over, and
        ends with this state in the same transaction (PROTOCOL §16)."""
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
            if session_state is not None:
                end_session_run(self.connection, self.run_id, session_state[0])


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


def create_run(
    store: SQLiteStore,
    run_id: str,
    protocol: str,
    entries: Sequence[tuple[float, str, str]] = (),
    *,
    session: tuple[str, str | None] | None = None,
) -> RunWriter:
    """Claim a new run id with its first journal entries (the input), in one transaction.

    `session` is (the session id, the run's input as JSON text) for a run of a session
    whose lease the caller holds: the run joins it in the same transaction.

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
                        f"run {run_id!r} is running now, in another process; wait for it to "
                        "finish or pause: it cannot be resumed while it runs",
                        process=row[1],
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
            if session is not None:
                join_session(connection, session[0], run_id, session[1])
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


def empty_journal(run_id: str, doing: str) -> str:
    """Why a run whose journal holds nothing cannot be resumed, replayed or forked."""
    return (
        f"run {run_id!r} has an empty journal, not even its input (the store was changed "
        f"outside tickloop): there is nothing to {doing}"
    )


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
                "SELECT status, owner, protocol, error FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None:
                raise ResumeError(f"no run {run_id!r} in {store.path}")
            status, owner, made_with, error = row
            if status == "failed" and error == ABANDONED:  # PROTOCOL §16: it is over
                raise ResumeError(f"run {run_id!r} was abandoned; it is not run again")
            if status == "done":
                raise ResumeError(f"run {run_id!r} is finished; there is nothing to resume")
            if status == "tripped":  # PROTOCOL §15: fork it, or replay it, never resume it
                raise ResumeError(
                    f"run {run_id!r} stopped on a guardrail's trip; it cannot be resumed "
                    "(fork it to go on from before the trip)"
                )
            if protocol is not None and made_with != protocol:
                raise ResumeError(
                    f"run {run_id!r} was made with protocol={made_with!r}; resume it with an "
                    f"agent of that protocol, not protocol={protocol!r}"
                )
            if (store.path.resolve(), run_id) in _ACTIVE or (
                status == "running" and run_alive(store.path, run_id, owner)
            ):
                raise ResumeError(
                    f"run {run_id!r} is running in another process; wait for it to finish "
                    "or pause, then resume it if it paused",
                    process=owner,
                )
            store._insert_decisions(connection, run_id, checked)
            connection.execute(
                "UPDATE runs SET status = 'running', owner = ?, updated = ? WHERE run_id = ?",
                (owner_label(), time.time(), run_id),
            )
            journal = store._journal(connection, run_id)
            if not journal:  # a run's first commit holds its input: this one was emptied
                raise ResumeError(empty_journal(run_id, "resume"))
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
            call_id: stored_from_dict(loads_stored(body, store.path)) for call_id, body in stored
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

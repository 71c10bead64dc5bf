"""Sessions (PROTOCOL §16): ordered lists of runs sharing one history, in the store.

This module owns the three session tables. `session_runs` says which runs a session
holds, in the order they started, with what each gives the history once it is over (its
input, and the state it ended with; its output and error are the run's own row).
`sessions` holds each session's lease: the one writer of its history. `session_waiters`
is the queue of runs waiting for the lease: a ticket each, in the order they started
waiting.

The runs themselves are the store's: an abandoned run is ended, and a deleted session's
runs deleted, through the store (`SessionStore._end_run`, `_delete_run`).

Invariants:

- Never two writers on one history. A run joins its session only while it holds the
  lease (`take_lease`, then `join_session` in the transaction that makes the run), and
  a run that is not over (running, paused, crashed) keeps every later run out: a running
  one makes them wait or refuses them, a paused or crashed one refuses them, naming it,
  until it is resumed to its end or abandoned.
- Never a session locked by a dead process. A lease names its process (host:pid) and
  expires `LEASE_SECONDS` after its last renewal (`renew_lease`, every `RENEW_SECONDS`
  while the run runs): a lease of a process that died is dead at once on its host
  (the pid is gone) and after its expiry anywhere else. Its run, still `running` in the
  runs table, is then *crashed*.
- Runs join in the order they started. A run refused because a run of the session is
  running, and willing to wait, takes a ticket in the transaction that refused it, and
  keeps it alive at each look (`take_lease(..., queue=True)`); the lease goes only to the
  run holding the oldest live ticket, so a run arriving while others wait queues behind
  them. A ticket lives while its process does: it is dead at once on its host when the
  pid is gone, and elsewhere `WAIT_SECONDS` after its last look; dead tickets are dropped
  by whoever looks next. A run's ticket goes when it takes the lease, and when it stops
  waiting (`leave_queue`: it gave up or was cancelled). A resume of the run that keeps
  the session is not queued: it is the run the others wait for.
- A run stays a run: the session only points at it, so trace, replay, fork and timeline
  read it as any other. A forked session points at the same runs as its origin up to
  the run it was forked at; deleting a session deletes only the runs no other session
  points at.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from .._errors import ConfigurationError, ResumeError, SessionBusy
from .._observe._records import RunInfo
from ._codec import loads_stored
from ._owners import _owner_alive, owner_label, run_alive

__all__ = [
    "ABANDONED",
    "LEASE_SECONDS",
    "RENEW_SECONDS",
    "WAIT_SECONDS",
    "Session",
    "check_session_id",
    "end_session_run",
    "given_to_next_run",
    "join_session",
    "leave_queue",
    "new_lease_token",
    "release_lease",
    "renew_lease",
    "session_of",
    "take_lease",
]

LEASE_SECONDS = 30.0  # a lease lapses this long after its last renewal (PROTOCOL §16)
RENEW_SECONDS = 10.0  # how often a running run renews its lease
# A waiting run's ticket lapses this long after its last look (it looks every 0.1 s): a
# waiter on another host that died stops holding the queue up by then.
WAIT_SECONDS = 10.0
_OVER = ("done", "failed", "tripped")
ABANDONED = "abandoned"  # the error of a run `Session.abandon` ended


class SessionStore(Protocol):
    """What a session needs of its store (`SQLiteStore` is one)."""

    path: Path

    def connect(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def _write(
        self, connection: sqlite3.Connection, *, conflict: str | None = None
    ) -> AbstractContextManager[sqlite3.Connection]: ...

    def run(self, run_id: str) -> RunInfo: ...

    def _end_run(self, connection: sqlite3.Connection, run_id: str, error: str) -> None:
        """End a run `failed` with `error`, in the caller's transaction."""

    def _delete_run(self, connection: sqlite3.Connection, run_id: str) -> None:
        """Delete a run and all the store keeps of it, in the caller's transaction."""


def check_session_id(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise ConfigurationError(
            f"session must be a non-empty string of at most 200 characters, not {value!r}"
        )
    return value


def new_lease_token() -> str:
    """Which run of a process holds a lease (one process may run several)."""
    return secrets.token_hex(8)


# -- the lease ------------------------------------------------------------------------


def _lease_alive(owner: str | None, expires: float | None, now: float) -> bool:
    """Whether a lease, or a waiter's ticket, still counts: not expired, its process
    not known dead."""
    return owner is not None and expires is not None and expires > now and _run_owner_alive(owner)


def _run_owner_alive(owner: str) -> bool:
    """Alive unless known dead: on this host by its pid; elsewhere the expiry decides."""
    host = owner.rpartition(":")[0]
    return _owner_alive(owner) or host != owner_label().rpartition(":")[0]


def take_lease(
    store: SessionStore,
    session_id: str,
    token: str,
    *,
    resuming: str | None = None,
    queue: bool = False,
) -> None:
    """Take the session's lease for a run of this process, atomically, or raise
    `SessionBusy` naming the run that keeps the session (PROTOCOL §16 "Busy").

    `resuming` is a run of the session being resumed: it is the one that may go on,
    ahead of any queue. With `queue`, a run refused because a run is running (reason
    "running") takes its place in the session's queue, or keeps the place it has, in
    the same transaction; it goes first once it holds the oldest live ticket."""
    now = time.time()
    with store.connect() as connection, store._write(connection):
        refusal = _refusal(connection, store.path, session_id, now, token=token, resuming=resuming)
        if refusal is None:
            _hand_over(connection, session_id, token, resuming, now)
        elif queue and refusal.reason == "running":
            _keep_ticket(connection, session_id, token, now)
    if refusal is not None:
        raise refusal  # after the commit: a ticket taken with it stays


def _refusal(
    connection: sqlite3.Connection,
    path: Path,
    session_id: str,
    now: float,
    *,
    token: str | None = None,
    resuming: str | None = None,
) -> SessionBusy | None:
    """Why a run cannot join the session now, or None: it may (PROTOCOL §16 "Busy").

    `token` is the run asking, in its write transaction: its own lease and its place in
    the queue do not count against it, and dead tickets are dropped on the way. Without
    one, nothing is written: whether the session is free for any run
    (`Session.check_free`)."""
    row = connection.execute(
        "SELECT lease_owner, lease_token, lease_run, lease_expires FROM sessions "
        "WHERE session_id = ?",
        (session_id,),
    ).fetchone()
    if row is not None:
        owner, held_by, lease_run, expires = row
        if (token is None or held_by != token) and _lease_alive(owner, expires, now):
            return SessionBusy(
                f"session {session_id!r} is busy: run {lease_run!r} runs in it now"
                if lease_run
                else f"session {session_id!r} is busy: a run is starting in it",
                session_id=session_id,
                run_id=lease_run,
                reason="running",
            )
    try:
        _refuse_unfinished(connection, path, session_id, resuming)
    except SessionBusy as busy:
        return busy
    ahead = 0 if resuming is not None else _waiters_ahead(connection, session_id, token, now)
    if ahead:
        waiting = f"{ahead} run{'s' if ahead > 1 else ''} waiting to join it"
        return SessionBusy(
            f"session {session_id!r} is busy: {waiting}"
            + (" came first" if token is not None else ""),
            session_id=session_id,
            run_id=None,
            reason="running",
        )
    return None


def _hand_over(
    connection: sqlite3.Connection,
    session_id: str,
    token: str,
    resuming: str | None,
    now: float,
) -> None:
    """The lease to the run, its ticket (if it waited) given back."""
    values = (owner_label(), token, resuming, now + LEASE_SECONDS, session_id)
    cursor = connection.execute(
        "UPDATE sessions SET lease_owner = ?, lease_token = ?, lease_run = ?, "
        "lease_expires = ? WHERE session_id = ?",
        values,
    )
    if cursor.rowcount == 0:
        connection.execute(
            "INSERT INTO sessions (lease_owner, lease_token, lease_run, lease_expires, "
            "session_id, created) VALUES (?, ?, ?, ?, ?, ?)",
            (*values, now),
        )
    connection.execute("DELETE FROM session_waiters WHERE token = ?", (token,))


def _waiters_ahead(
    connection: sqlite3.Connection, session_id: str, token: str | None, now: float
) -> int:
    """How many live tickets of the session come before the run's (all of them, when it
    has none); with a run (`token`), dead tickets are dropped on the way."""
    rows = connection.execute(
        "SELECT ticket, token, owner, expires FROM session_waiters WHERE session_id = ? "
        "ORDER BY ticket",
        (session_id,),
    ).fetchall()
    live: list[str] = []
    for ticket, waiter, owner, expires in rows:
        if _lease_alive(owner, expires, now):
            live.append(waiter)
        elif token is not None:
            connection.execute("DELETE FROM session_waiters WHERE ticket = ?", (ticket,))
    return live.index(token) if token in live else len(live)


def _keep_ticket(connection: sqlite3.Connection, session_id: str, token: str, now: float) -> None:
    """Renew the run's ticket, or give it one at the end of the queue."""
    expires = now + WAIT_SECONDS
    cursor = connection.execute(
        "UPDATE session_waiters SET expires = ? WHERE token = ?", (expires, token)
    )
    if cursor.rowcount == 0:
        connection.execute(
            "INSERT INTO session_waiters (session_id, token, owner, expires) VALUES (?, ?, ?, ?)",
            (session_id, token, owner_label(), expires),
        )


def leave_queue(store: SessionStore, session_id: str, token: str) -> None:
    """The run stopped waiting without the lease (it gave up, or was cancelled)."""
    with store.connect() as connection, store._write(connection):
        connection.execute(
            "DELETE FROM session_waiters WHERE session_id = ? AND token = ?",
            (session_id, token),
        )


def _refuse_unfinished(
    connection: sqlite3.Connection, path: Path, session_id: str, resuming: str | None
) -> None:
    """`SessionBusy` for the session's first run that is not over (but `resuming`)."""
    rows = connection.execute(
        "SELECT sr.run_id, r.status, r.owner FROM session_runs sr "
        "JOIN runs r ON r.run_id = sr.run_id "
        "WHERE sr.session_id = ? AND r.status IN ('running', 'paused') ORDER BY sr.position",
        (session_id,),
    ).fetchall()
    for run_id, status, owner in rows:
        if run_id == resuming:
            continue
        if status == "paused":
            reason, how = "paused", "it waits for decisions"
        elif run_alive(path, run_id, owner):
            reason, how = "running", "it runs now"
        else:
            reason, how = "crashed", "it was interrupted or its process died"
        raise SessionBusy(
            f"session {session_id!r} is busy: run {run_id!r} is {reason} ({how}); "
            + (
                "wait for it to end"
                if reason == "running"
                else f"resume it with agent.resume({run_id!r}) or free the session with "
                f"store.session({session_id!r}).abandon({run_id!r})"
            ),
            session_id=session_id,
            run_id=run_id,
            reason=reason,
        )


def renew_lease(store: SessionStore, session_id: str, token: str) -> bool:
    """Push the lease's expiry on; False when this run no longer holds it."""
    with store.connect() as connection, store._write(connection):
        cursor = connection.execute(
            "UPDATE sessions SET lease_expires = ? WHERE session_id = ? AND lease_token = ?",
            (time.time() + LEASE_SECONDS, session_id, token),
        )
        return cursor.rowcount == 1


def release_lease(store: SessionStore, session_id: str, token: str) -> None:
    with store.connect() as connection, store._write(connection):
        connection.execute(
            "UPDATE sessions SET lease_owner = NULL, lease_token = NULL, lease_run = NULL, "
            "lease_expires = NULL WHERE session_id = ? AND lease_token = ?",
            (session_id, token),
        )


# -- a run in its session ---------------------------------------------------------------


def join_session(
    connection: sqlite3.Connection, session_id: str, run_id: str, input_text: str | None
) -> None:
    """Add a new run at the end of its session, inside the transaction that makes it."""
    (last,) = connection.execute(
        "SELECT coalesce(max(position), 0) FROM session_runs WHERE session_id = ?",
        (session_id,),
    ).fetchone()
    connection.execute(
        "INSERT INTO session_runs (session_id, position, run_id, input) VALUES (?, ?, ?, ?)",
        (session_id, last + 1, run_id, input_text),
    )
    connection.execute(
        "UPDATE sessions SET lease_run = ? WHERE session_id = ?", (run_id, session_id)
    )


def session_of(store: SessionStore, run_id: str) -> str | None:
    """The session a run is the last of, or None (a run outside any session)."""
    with store.connect() as connection:
        row = connection.execute(
            "SELECT session_id FROM session_runs WHERE run_id = ? ORDER BY position DESC",
            (run_id,),
        ).fetchone()
    return None if row is None else str(row[0])


def end_session_run(connection: sqlite3.Connection, run_id: str, state: Any) -> None:
    """The run is over: the state it ended with, for the session's next run, inside the
    transaction that stores its end (a crash between the two would leave the next run
    an older run's state)."""
    text = None if state is None else json.dumps(state, ensure_ascii=False)
    connection.execute("UPDATE session_runs SET state = ? WHERE run_id = ?", (text, run_id))


def _history_rows(connection: sqlite3.Connection, session_id: str) -> list[tuple[Any, ...]]:
    return connection.execute(
        "SELECT sr.position, sr.run_id, sr.input, sr.state, r.status, r.output, r.error "
        "FROM session_runs sr LEFT JOIN runs r ON r.run_id = sr.run_id "
        "WHERE sr.session_id = ? ORDER BY sr.position",
        (session_id,),
    ).fetchall()


class Session:
    """A session of a store (PROTOCOL §16): `store.session("user-42")`.

    Reading it never changes it; a session with no runs yet reads as empty. `runs` are
    its runs in order (each a stored run: trace, replay, fork it as any other);
    `history` what its next run is given; `state` the state its last run ended with.
    """

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self.store = store
        self.id = check_session_id(session_id)

    def __repr__(self) -> str:
        return f"Session({self.id!r})"

    @property
    def run_ids(self) -> list[str]:
        with self.store.connect() as connection:
            return [str(row[1]) for row in _history_rows(connection, self.id)]

    @property
    def runs(self) -> list[RunInfo]:
        return [self.store.run(run_id) for run_id in self.run_ids]

    @property
    def history(self) -> list[dict[str, Any]]:
        """Each run that is over, in order: `{"run_id", "input", "output"}`, the output
        of one that ended without an answer being "no answer: <reason>"."""
        return _history_of(self._rows(), self.store.path)

    @property
    def state(self) -> dict[str, Any] | None:
        """The state the session's last run that is over ended with (None: none yet)."""
        return _state_of(self._rows(), self.store.path)

    def _rows(self) -> list[tuple[Any, ...]]:
        with self.store.connect() as connection:
            return _history_rows(connection, self.id)

    @property
    def status(self) -> str:
        """ "idle", or how its unfinished run stands: "running", "paused", "crashed"
        ("running" too while runs wait to join it, about to run)."""
        try:
            self.check_free()
        except SessionBusy as busy:
            return busy.reason
        return "idle"

    def check_free(self) -> None:
        """`SessionBusy` when a run of the session is not over (PROTOCOL §16 "Busy")."""
        with self.store.connect() as connection:
            self._check_free(connection)

    def _check_free(self, connection: sqlite3.Connection) -> None:
        busy = _refusal(connection, self.store.path, self.id, time.time())
        if busy is not None:
            raise busy

    def fork(self, new_id: str, *, at_run: str | None = None) -> Session:
        """A new session `new_id` holding this one's runs up to and including `at_run`
        (default: its last), which must be over; its later runs go on from there."""
        new_id = check_session_id(new_id)
        with self.store.connect() as connection, self.store._write(connection):
            if connection.execute(
                "SELECT 1 FROM session_runs WHERE session_id = ? UNION "
                "SELECT 1 FROM sessions WHERE session_id = ?",
                (new_id, new_id),
            ).fetchone():
                raise ConfigurationError(f"session {new_id!r} exists already in {self.store.path}")
            rows = _history_rows(connection, self.id)
            ids = [row[1] for row in rows]
            if not rows:
                raise ResumeError(f"session {self.id!r} has no runs to fork")
            if at_run is None:
                at_run = ids[-1]
            if at_run not in ids:
                raise ResumeError(
                    f"run {at_run!r} is not in session {self.id!r}; its runs are "
                    + ", ".join(map(repr, ids))
                )
            kept = rows[: ids.index(at_run) + 1]
            for _, run_id, _, _, status, _, _ in kept:
                if status not in _OVER:
                    raise SessionBusy(
                        f"run {run_id!r} of session {self.id!r} is not over ({status}); "
                        "a session is forked at runs that are over",
                        session_id=self.id,
                        run_id=run_id,
                        reason=str(status),
                    )
            connection.execute(
                "INSERT INTO sessions (session_id, created) VALUES (?, ?)", (new_id, time.time())
            )
            connection.execute(
                "INSERT INTO session_runs (session_id, position, run_id, input, state) "
                "SELECT ?, position, run_id, input, state "
                "FROM session_runs WHERE session_id = ? AND position <= ?",
                (new_id, self.id, kept[-1][0]),
            )
        return Session(self.store, new_id)

    def abandon(self, run_id: str) -> None:
        """End a paused or crashed run of the session `failed` ("abandoned"), freeing
        the session; its next run's history shows it without an answer."""
        with self.store.connect() as connection, self.store._write(connection):
            row = connection.execute(
                "SELECT r.status, r.owner FROM session_runs sr JOIN runs r "
                "ON r.run_id = sr.run_id WHERE sr.session_id = ? AND sr.run_id = ?",
                (self.id, run_id),
            ).fetchone()
            if row is None:
                raise ResumeError(f"run {run_id!r} is not in session {self.id!r}")
            status, owner = row
            if status in _OVER:
                raise ResumeError(f"run {run_id!r} is over ({status}); there is nothing to abandon")
            if status == "running" and run_alive(self.store.path, run_id, owner):
                raise SessionBusy(
                    f"run {run_id!r} of session {self.id!r} is running; it cannot be abandoned",
                    session_id=self.id,
                    run_id=run_id,
                    reason="running",
                )
            self.store._end_run(connection, run_id, ABANDONED)
            connection.execute(
                "UPDATE sessions SET lease_owner = NULL, lease_token = NULL, lease_run = NULL, "
                "lease_expires = NULL WHERE session_id = ? AND lease_run = ?",
                (self.id, run_id),
            )

    def delete(self) -> None:
        """Delete the session and its runs (but those a fork of it shares); refused with
        `SessionBusy` while one of its runs runs (or waits to), checked in the
        transaction that deletes, so no run can join it in between."""
        with self.store.connect() as connection, self.store._write(connection):
            try:
                self._check_free(connection)
            except SessionBusy as busy:
                if busy.reason == "running":
                    raise
            ids = [row[1] for row in _history_rows(connection, self.id)]
            for run_id in ids:
                shared = connection.execute(
                    "SELECT 1 FROM session_runs WHERE run_id = ? AND session_id != ?",
                    (run_id, self.id),
                ).fetchone()
                if not shared:
                    self.store._delete_run(connection, run_id)
            connection.execute("DELETE FROM session_runs WHERE session_id = ?", (self.id,))
            connection.execute("DELETE FROM sessions WHERE session_id = ?", (self.id,))


def given_to_next_run(session: Session) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """What the session's next run is given, from one read: its `history` and its
    `state` (a run's start reads both)."""
    rows = session._rows()
    return _history_of(rows, session.store.path), _state_of(rows, session.store.path)


def _history_of(rows: list[tuple[Any, ...]], path: Path) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    for _, run_id, input_text, _, status, output, error in rows:
        if status in _OVER:
            answer = loads_stored(output, path) if status == "done" else f"no answer: {error}"
            history.append(
                {"run_id": run_id, "input": loads_stored(input_text, path), "output": answer}
            )
    return history


def _state_of(rows: list[tuple[Any, ...]], path: Path) -> dict[str, Any] | None:
    for _, _, _, state, status, _, _ in reversed(rows):
        if status in _OVER and state is not None:
            value = loads_stored(state, path)
            return value if isinstance(value, dict) else None
    return None


def session_ids(store: SessionStore) -> Iterator[str]:
    """Every session of the store, oldest first."""
    with store.connect() as connection:
        rows = connection.execute(
            "SELECT session_id FROM sessions UNION SELECT session_id FROM session_runs"
        ).fetchall()
        created = dict(connection.execute("SELECT session_id, created FROM sessions").fetchall())
    yield from sorted((str(row[0]) for row in rows), key=lambda s: (created.get(s, 0.0), s))


def history_ids(history: Sequence[dict[str, Any]]) -> list[str]:
    return [str(entry["run_id"]) for entry in history if "run_id" in entry]

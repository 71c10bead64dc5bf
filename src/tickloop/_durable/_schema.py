"""The store's schema: its tables, their version, and the statements on them."""

from __future__ import annotations

# The format of the file and its journal; a change to either is a new version and a step
# in `_migrations.MIGRATIONS`.
SCHEMA_VERSION = 4

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

# Sessions (PROTOCOL §16), added by version 3 (`_migrations._from_2`).
_SESSION_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id    TEXT PRIMARY KEY,
    created       REAL NOT NULL,
    lease_owner   TEXT,             -- host:pid of the process whose run holds the session
    lease_token   TEXT,             -- which of that process's runs holds it
    lease_run     TEXT,             -- the run holding it (NULL while it waits to be made)
    lease_expires REAL              -- seconds since the epoch, renewed while the run runs
);
CREATE TABLE IF NOT EXISTS session_runs (
    session_id TEXT NOT NULL,
    position   INTEGER NOT NULL,    -- order of the runs in the session, from 1
    run_id     TEXT NOT NULL,
    input      TEXT,                -- the run's input (JSON)
    state      TEXT,                -- the state it ended with (JSON)
                                    -- (whether it is over, and its output: the run's row)
    PRIMARY KEY (session_id, position)
);
CREATE INDEX IF NOT EXISTS session_runs_by_run ON session_runs (run_id);
"""

# The runs waiting for a busy session, in the order they started waiting (PROTOCOL §16
# "Runs join in the order they started"), added by version 4 (`_migrations._from_3`).
# A rowid is one more than the largest in the table, so a new ticket is after every
# ticket still waiting (what order needs; no AUTOINCREMENT).
_WAITERS_SCHEMA = """
CREATE TABLE IF NOT EXISTS session_waiters (
    session_id TEXT NOT NULL,
    ticket     INTEGER PRIMARY KEY,  -- its place: the oldest live ticket goes first
    token      TEXT NOT NULL UNIQUE, -- the waiting run's lease token (one ticket a run)
    owner      TEXT NOT NULL,        -- host:pid of the process the run waits in
    expires    REAL NOT NULL         -- seconds since the epoch, renewed as it waits
);
CREATE INDEX IF NOT EXISTS session_waiters_by_session ON session_waiters (session_id, ticket);
"""

# A journal row holding several entries, one commit's (`RunWriter.insert`), each
# `[at, kind, body]` with `at` the hex form of its float; a commit of one entry is a row
# of that entry's kind.
BATCH = "batch"
_KINDS = {"event": ',"event",', "message": ',"message",', "note": ',"note",'}
# The type of a message entry that stands for a plan or solution message, its calls
# stored as references to their CallReceived entries (`_resume.shared_text`); read back
# as that message (`expand_shared`). No message a log holds has it (`MESSAGE_TYPES`).
SHARED = "shared"
_INSERT_ENTRIES = (
    "INSERT INTO journal (run_id, seq, at, kind, body) SELECT ?1, ?2, ?3, ?4, ?5 "
    "WHERE NOT EXISTS (SELECT 1 FROM journal WHERE run_id = ?1 AND seq >= ?6)"
)

_TABLES = frozenset({"tickloop_schema", "runs", "journal", "calls", "decisions"})
SESSION_TABLES = frozenset({"sessions", "session_runs"})  # from version 3
WAITER_TABLES = frozenset({"session_waiters"})  # from version 4
# The journal entry a run's `calls` rows reflect (NULL: every entry, as in a run made by
# a version 1 store before the column, which `_migrations._from_1` adds).
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

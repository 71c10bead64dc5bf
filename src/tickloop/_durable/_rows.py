"""The `calls` rows of a run as kept in memory, and which of them wait to be written.

A row is a view of the journal (see `_journal.JournalWriter.commit`): `Row` holds one
call's columns and gives them in the orders the store's statements take.
"""

from __future__ import annotations

import operator
from typing import Any

import trio

from .._core._status import CallStatus
from ._schema import CALL_COLUMNS, LEAN_COLUMNS

# --------------------------------------------------------------------------------------
# One call's row


class Row:
    """The `calls` row of one call, kept in memory and rewritten whenever it changes."""

    __slots__ = (*CALL_COLUMNS, "stored")

    def __init__(self, call_id: str, seq: int, iteration: int, tool: str | None, at: float) -> None:
        # Whether this process has committed the row: then a change updates it in place.
        # False after a replay too, so a resume's first write of a row replaces it whole.
        self.stored = False
        self.call_id = call_id
        self.seq = seq
        self.iteration = iteration
        self.tool = tool
        self.status: str = CallStatus.WAITING
        self.call: str | None = None
        self.params: str | None = None
        self.deps: str | None = None
        self.decision: str | None = None
        self.error: str | None = None
        self.received: float | None = at
        self.ready: float | None = None
        self.asked: float | None = None
        self.decided: float | None = None
        self.started: float | None = None
        self.finished: float | None = None

    def values(self, run_id: str) -> tuple[Any, ...]:
        """The run id, then the row in CALL_COLUMNS order (spelled out: this runs once per
        changed row)."""
        return (
            run_id,
            self.call_id,
            self.seq,
            self.iteration,
            self.tool,
            _text(self.status),
            self.call,
            self.params,
            self.deps,
            self.decision,
            self.error,
            self.received,
            self.ready,
            self.asked,
            self.decided,
            self.started,
            self.finished,
        )

    def lean_values(self, run_id: str) -> tuple[Any, ...]:
        """`values`, without the USUALLY_NULL columns when they are NULL (most rows)."""
        values = self.values(run_id)
        if self.decision is None and self.error is None and self.asked is None:
            if self.decided is None:
                lean: tuple[Any, ...] = _LEAN(values)
                return lean
        return values

    def changes(self, run_id: str) -> tuple[Any, ...]:
        """The row in CHANGING_COLUMNS order, then the run and call ids (an UPDATE's)."""
        return (*self.values(run_id)[4:], run_id, self.call_id)

    def settled(self, run_id: str) -> tuple[Any, ...]:
        """What settling changes (SETTLED_COLUMNS), then the run and call ids."""
        return (_text(self.status), self.error, self.deps, self.finished, run_id, self.call_id)


# The run id and LEAN_COLUMNS out of a row's `values`.
_LEAN = operator.itemgetter(0, *(1 + CALL_COLUMNS.index(name) for name in LEAN_COLUMNS))

# A status as the plain string it equals: sqlite3 binds a `str` subclass (a `CallStatus`)
# through its adapter protocol, several times the cost of binding the string.
_text = str.__str__


# --------------------------------------------------------------------------------------
# The rows waiting to be written

# How long (seconds of trio time) a change to a call's row may wait before it is written
# when no checkpoint comes first. The journal is the record and is never late; the rows
# are what `tickloop runs|trace` and the timeline show of a live or crashed run, so they
# may be this much behind it, and are exact at every checkpoint (JournalWriter.commit).
ROW_LAG = 0.25


class RowChanges:
    """The call rows changed since they were last written, and when they are due.

    Owned by one `JournalWriter`; only these methods change the fields below, whether a
    live run changes a row or a resume makes every row its own (`rewrite_all`).
    """

    __slots__ = ("_clock", "checkpoint", "dirty", "rewrite", "settled", "since")

    def __init__(self, clock: trio.abc.Clock) -> None:
        self._clock = clock
        # Rows changed since they were last written, one entry per call however often it
        # changed: most calls arrive, start and end between two row writes.
        self.dirty: dict[str, Row] = {}
        # Stored rows whose only change since their last write is settling, which then
        # rewrites four columns instead of all of them. Never a key of `dirty` as well.
        self.settled: dict[str, Row] = {}
        # Trio time of the oldest change not written yet: None exactly while `dirty` and
        # `settled` are empty.
        self.since: float | None = None
        # Whether a change a reader of rows depends on waits (a decision or deferral, a
        # tick's end, a resume): the next commit writes the rows whatever `since` says.
        self.checkpoint = False
        self.rewrite = False  # the next row write replaces all the run's rows (a resume's)

    def changed(self, row: Row, settling: bool) -> None:
        """`row` changed; `settling`: the change is its call's settling."""
        call_id = row.call_id
        if settling and row.stored and call_id not in self.dirty:
            self.settled[call_id] = row
        else:
            self.dirty[call_id] = row
            if self.settled:
                self.settled.pop(call_id, None)
        if self.since is None:
            self.since = self._clock.current_time()

    def at_checkpoint(self) -> None:
        """A reader of rows depends on what was just recorded: the next commit writes."""
        self.checkpoint = True

    def due(self, force: bool) -> bool:
        """Whether the rows go with the next commit: a change waits, and the run ends
        (`force`), a checkpoint waits, or the oldest change is `ROW_LAG` old."""
        since = self.since
        return since is not None and (
            force or self.checkpoint or self._clock.current_time() >= since + ROW_LAG
        )

    def take(self) -> tuple[dict[str, Row], dict[str, Row]]:
        """The changed and the settled rows, for one write; `written` or `put_back` next."""
        taken = self.dirty, self.settled
        self.dirty, self.settled = {}, {}
        return taken

    def put_back(self, dirty: dict[str, Row], settled: dict[str, Row]) -> None:
        """A write that failed: its rows wait again, under any change made since."""
        self.dirty = {**dirty, **self.dirty}
        self.settled = {**settled, **self.settled}

    def written(self) -> None:
        """The rows taken are stored, and nothing changed since: none is due."""
        self.since = None
        self.checkpoint = self.rewrite = False

    def forget(self) -> None:
        """A replay that failed: its rows, a journal prefix's, must never be written."""
        self.dirty, self.settled = {}, {}
        self.since, self.checkpoint = None, False

    def rewrite_all(self, rows: dict[str, Row], *, whole: bool) -> None:
        """A resume: every row is the replay's, written at the next commit; `whole`
        replaces all the run's stored rows (a root's), else each row one by one."""
        self.dirty = dict(rows)
        self.settled = {}
        self.since = self._clock.current_time()
        self.checkpoint = True
        self.rewrite = whole

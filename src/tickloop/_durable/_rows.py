"""The `calls` rows of a run as kept in memory.

A row is a view of the journal (see `_journal.JournalWriter.commit`): `Row` holds one
call's columns and gives them in the orders the store's statements take.
"""

from __future__ import annotations

import operator
from typing import Any

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

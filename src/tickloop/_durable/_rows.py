"""The `calls` rows of a run as kept in memory, and the arrows of calls never ready.

A row is a view of the journal (see `_journal.JournalWriter.commit`): `Row` holds one
call's columns and gives them in the orders the store's statements take.
"""

from __future__ import annotations

import operator
from typing import Any

from .._core._expressions import (
    Term,
    find_references,
    is_reference,
    parse_expression,
)
from .._core._path_index import PathIndex as _PathIndex
from .._core._status import CallStatus
from .._core._tools import ToolSet
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


class UnreadyArrows:
    """What a call that settles without ever being ready (its writer was denied, failed...)
    waited on, which the timeline still draws: the calls that said they would write what
    it reads (those that wrote it, and those that ended without writing; every write is at
    a path its call declared, so no index of writes is kept), and, for a tool's
    `depends_on`, the earlier calls of that tool. A ready call's arrows come from the
    scheduler (`NoteReady.waits_on`), so the indexes here are built only for such a call,
    from the calls accepted since the last one."""

    def __init__(self, tools: ToolSet) -> None:
        self.tools = tools
        # Every call's wire as accepted (a replacement's, once decided), in event order:
        # as it was at the event the arrows are drawn at, which the scheduler's records,
        # followed later (`JournalWriter.record`), may no longer say.
        self.wires: dict[str, Any] = {}
        self.declared = _PathIndex()
        # The calls accepted, in order, and how many `declared` and `by_tool` have filed.
        self.accepted: list[str] = []
        self.declared_upto = self.by_tool_upto = 0
        self.by_tool: dict[tuple[int, str], list[str]] = {}

    def accept(self, call_id: str, wire: Any) -> None:
        self.wires[call_id] = wire
        self.accepted.append(call_id)  # filed only if `_declared` or `_by_tool` is asked

    def replace(self, call_id: str, wire: Any) -> None:
        self.wires[call_id] = wire  # a reviewer's replacement, from its decision on

    def _declared(self) -> _PathIndex:
        """Which call said it would write which path, every call accepted so far (as its
        wire is now: a replacement's path, not the one it replaced)."""
        accepted, wires = self.accepted, self.wires
        for call_id in accepted[self.declared_upto :]:
            call = wires.get(call_id)
            path = call.get("_outputPath") if isinstance(call, dict) else None
            if not isinstance(path, str):
                continue
            try:
                for term in parse_expression(path).terms:
                    self.declared.add(term, call_id)
            except ValueError:
                pass
        self.declared_upto = len(accepted)
        return self.declared

    def _by_tool(self, rows: dict[str, Row]) -> dict[tuple[int, str], list[str]]:
        """The calls accepted so far by (iteration, tool), in arrival order."""
        accepted = self.accepted
        for call_id in accepted[self.by_tool_upto :]:
            row = rows[call_id]
            if row.tool is not None:
                self.by_tool.setdefault((row.iteration, row.tool), []).append(call_id)
        self.by_tool_upto = len(accepted)
        return self.by_tool

    def waited_on(self, call_id: str, row: Row, accepted: bool, rows: dict[str, Row]) -> list[str]:
        """The arrows of `call_id`, settled now without being ready, in arrival order. A
        call refused on arrival (not `accepted`) waited on nothing."""
        found: set[str] = set()
        wire = self.wires.get(call_id) if accepted else None
        terms: list[Term] = []
        if isinstance(wire, dict):
            try:
                for key, value in wire.items():  # its parameters: the keys without "_"
                    if key.startswith("_"):
                        continue
                    if isinstance(value, str):  # most are flat: no walk of their own
                        if is_reference(value):
                            terms.extend(parse_expression(value).terms)
                    elif isinstance(value, dict | list):
                        for ref in find_references(value):
                            terms.extend(ref.expression.terms)
            except ValueError:
                terms = []  # a broken reference: the call failed its checks
        tool = self.tools.get(row.tool) if row.tool is not None else None
        if tool is not None:
            terms += [
                term for expression in tool.dependency_references for term in expression.terms
            ]
            by_tool = self._by_tool(rows) if tool.dependency_tools else {}
            for name in tool.dependency_tools:
                for earlier in by_tool.get((row.iteration, name), ()):
                    if rows[earlier].seq < row.seq:
                        found.add(earlier)
        if terms:
            declared = self._declared()
            for term in terms:
                found.update(declared.ids_overlapping(term))
        found.discard(call_id)
        if len(found) < 2:
            return list(found)
        return sorted(found, key=lambda other: rows[other].seq if other in rows else 0)

"""Reading one expression of a waiting call in plan order (PROTOCOL §3): its value, or
that it must wait, or that it is dead (nothing wrote it, and nothing will)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._call import Call
from ._expressions import Expression, Term
from ._plan_order import Slot

__all__ = ["read"]

Lookup = Callable[[Term], tuple[bool, Any]]
CouldBeWritten = Callable[[Term, Call], bool]


def read(
    expression: Expression,
    slots: list[Slot],
    lookup: Lookup,
    call: Call,
    could_be_written: CouldBeWritten,
) -> tuple[str, Any]:
    """("value", v) | ("wait", None) | ("dead", [dead terms]) for one expression."""
    if expression.op == "&&":
        value = None
        waiting = False
        for slot in slots:
            outcome, value = _look(slot, lookup, call, could_be_written)
            if outcome == "dead":
                return "dead", [slot.term]
            if outcome == "wait":
                waiting = True
        return ("wait", None) if waiting else ("value", value)
    dead: list[Term] = []
    for slot in slots:  # a single term, or `||` in order
        outcome, value = _look(slot, lookup, call, could_be_written)
        if outcome != "dead":
            return outcome, value
        dead.append(slot.term)
    return "dead", dead


def _look(
    slot: Slot, lookup: Lookup, call: Call, could_be_written: CouldBeWritten
) -> tuple[str, Any]:
    """One term in plan order: wait while an earlier writer has not ended; then the value
    the calls before it left (kept if a later write came since); a forward reference waits
    while any call could still write it."""
    if slot.pending:
        return "wait", None
    if slot.captured:
        present, value = slot.present, slot.value
    else:
        present, value = lookup(slot.term)
    if present:
        return "value", value
    if slot.forward and could_be_written(slot.term, call):
        return "wait", None
    return "dead", None

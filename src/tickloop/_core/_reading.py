"""Reading one expression of a waiting call in plan order (PROTOCOL §3): its value, or
that it must wait, or that it is dead (nothing wrote it, and nothing will); and, once
every one has a value, the parameters they resolve to."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from ._call import Call, schema_message, structural
from ._expressions import REF, SCALARS, Expression, Term, substitute
from ._log import copy_json
from ._plan_order import Slot

__all__ = ["read", "resolve"]

Lookup = Callable[[Term], tuple[bool, Any]]
_NO_VALUES: Mapping[tuple[str | int, ...], Any] = MappingProxyType({})
CouldBeWritten = Callable[[Term, Call], bool]


def read(
    expression: Expression,
    slots: list[Slot],
    lookup: Lookup,
    call: Call,
    could_be_written: CouldBeWritten,
) -> tuple[str, Any]:
    """("value", v) | ("wait", None) | ("dead", [the slots of its dead terms])."""
    if expression.op == "&&":
        value = None
        for slot in slots:
            outcome, value = _look(slot, lookup, call, could_be_written)
            if outcome != "value":
                # A term that waits decides before any later one: a one-by-one run would
                # find it dead (or not) first, so the dead term named never depends on
                # when the writers end (PROTOCOL §5).
                return outcome, [slot] if outcome == "dead" else None
        return "value", value
    dead: list[Slot] = []
    for slot in slots:  # a single term, or `||` in order
        outcome, value = _look(slot, lookup, call, could_be_written)
        if outcome != "dead":
            return outcome, value
        dead.append(slot)
    return "dead", dead


def _look(
    slot: Slot, lookup: Lookup, call: Call, could_be_written: CouldBeWritten
) -> tuple[str, Any]:
    """One term in plan order: wait while an earlier writer has not ended; then the value
    the calls before it left (kept if a later write came since); a forward reference waits
    while any call could still write it."""
    if slot.pending:
        return "wait", None
    kept = slot.kept
    if kept is not None:
        present, value = kept
    else:
        present, value = lookup(slot.term)
    if present:
        return "value", value
    if slot.forward and could_be_written(slot.term, call):
        return "wait", None
    return "dead", None


def resolve(
    call: Call, values: dict[tuple[str | int, ...], Any], lookup: Lookup
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A ready call's resolved parameters, and the structural error when they fail its
    schema (None when they pass). They become the call's record either way."""
    if not values and not call.tool.bind and (call.plain or _plain(call.params)):
        # Nothing to resolve, unescape or bind, and nothing nested to share: the checked
        # parameters (already the record's) are the resolved ones, and were validated.
        return call.params, None
    # Otherwise a fresh copy, even without references: `††x` literals must be unescaped,
    # and nothing nested in it may be shared with the call as written.
    params = substitute(
        call.params,
        {key: copy_json(value) for key, value in values.items()} if values else _NO_VALUES,
    )
    assert isinstance(params, dict)
    for parameter, input_name in call.tool.bind.items():
        # Bound values come from the run's input only; without one, the parameter is
        # left out and the schema decides (its default, or a "required" error).
        present, value = lookup(Term("input", (input_name,)))
        if present:
            params[parameter] = copy_json(value)
    call.record.params = params
    # Validation is the dearest step per call; the check on arrival already covered a
    # call that had nothing to resolve (no reference, no binding, no `††` unescaped).
    if call.references or call.tool.bind or params != call.params:
        errors = list(call.tool.parameter_validator.iter_errors(params))
        if errors:
            message = schema_message(call.tool, errors, "resolved parameters")
            return params, structural(message)
    return params, None


def _plain(params: dict[str, Any]) -> bool:
    """Whether every parameter is a number, a boolean, null or a string without a dagger
    (no reference, no escaped literal), so that resolving it changes nothing."""
    for value in params.values():
        kind = type(value)
        if kind in SCALARS or (kind is str and value[:1] != REF):
            continue
        return False
    return True

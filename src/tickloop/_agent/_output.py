"""Output references (PROTOCOL §8): `"output": "†state.report"` names what tools wrote.

A final answer should not have to copy back what the calls already put in the state: the
model may write references in `output` (the whole output, or strings inside it). They
are resolved after the tick, against the state it left, and the resolved value is what
is checked against the output schema and returned.
"""

from __future__ import annotations

from typing import Any

from .._core._expressions import find_references, format_location, substitute
from .._core._log import ContextLog, copy_json
from .._errors import ReferenceSyntaxError

__all__ = ["has_references", "resolve_output"]


def has_references(output: Any) -> bool:
    """Whether `output` must wait for the tick: it holds a reference (or a bad one)."""
    try:
        return bool(find_references(output))
    except ReferenceSyntaxError:
        return True  # reported, with its place, once the tick is over


def resolve_output(output: Any, log: ContextLog) -> tuple[Any, str | None]:
    """The output with every reference replaced by what it reads, or a fault to feed back.

    `||` takes the first present term and `&&` needs every term, as in a call (§3); a
    reference that reads nothing is a structural fault naming it and where it sits.
    """
    try:
        references = find_references(output)
    except ReferenceSyntaxError as error:
        where = _where(getattr(error, "location", ()))
        return None, f"bad reference in the output{where}: {error}"
    values: dict[tuple[str | int, ...], Any] = {}
    for reference in references:
        expression = reference.expression
        found = False
        value: Any = None
        for term in expression.terms:
            present, current = log.lookup(term)
            if expression.op == "&&":
                if not present:
                    found = False
                    break
                found, value = True, current
            elif present:
                found, value = True, current
                break
        if not found:
            where = _where(reference.location)
            return None, (
                f"unresolved reference {reference.source} in the output{where}: the state this "
                "plan left has nothing there; write it with a call first, or answer with a value"
            )
        values[reference.location] = copy_json(value)
    return substitute(output, values), None


def _where(location: tuple[str | int, ...]) -> str:
    return f" at {format_location(location)}" if location else ""

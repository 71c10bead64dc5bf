"""Checking a call's result before it is written: its output schema, and the branch (or
fan-out) it is written to. A result that fails is the call's runtime error, not the run's.
"""

from __future__ import annotations

from typing import Any

from .._errors import ReferenceSyntaxError
from ._call import Call, OutputMismatch, Structural, schema_message, syntax
from ._expressions import Term, parse_term
from ._log import ContextLog, describe_key, is_flat, private_copy, short_repr
from ._tools import Tool

__all__ = ["check_output", "targets", "write_result"]


def check_output(tool: Tool, value: Any, *, structural: bool) -> None:
    """Raise `Structural` (a latent `_output`, checked on arrival) or `OutputMismatch` (a
    returned or responded value) when `value` fails the tool's output schema."""
    if tool.output_validator is None or tool.output_validator.certainly_valid(value):
        return
    fault = Structural if structural else OutputMismatch
    try:
        errors = list(tool.output_validator.iter_errors(value))
    except RecursionError:  # a result hundreds deep against a recursive schema
        raise fault(
            f"output of {tool.name!r} nests too deeply to check against its schema"
        ) from None
    if errors:
        raise fault(schema_message(tool, errors, "output"))


def write_result(
    log: ContextLog, call: Call, written: tuple[Term, ...], value: Any, date: str | None
) -> list[dict[str, Any]]:
    """Write a call's result at `written`: its data messages, one per term.

    Their `_call` is the call's own wire call, the very dict its record shows, rather than
    a copy per message kept for the whole run: a flat one as it is (its leaves cannot
    change), a nested one first made private (the caller's lists and dicts are not
    shared). One that holds a tuple is copied per message, as `copy_json` shows it.
    """
    wire = call.wire
    if not call.plain and not is_flat(wire):
        private = private_copy(wire)
        if private is None:
            return log.write_many(written, call.method, value, call=wire, date=date)
        call.wire = call.record.call = wire = private
    return log.write_many(written, call.method, value, call=wire, date=date, share_call=True)


def targets(call: Call, branch: str | None) -> tuple[tuple[Term, ...], tuple[Term, ...]]:
    """The terms the result is written to, and the untaken branches (whose readers skip)."""
    output = call.output
    if output is None:
        return (), ()
    terms = output.terms
    if branch is None:
        if output.op == "||":
            return terms[:1], terms[1:]
        return terms, ()
    if output.op != "||":
        raise OutputMismatch(
            f"the activity chose branch {branch!r}, but the output path {str(output)!r} "
            "has no branches ('||')"
        )
    choices = ", ".join(str(term) for term in terms)
    if not isinstance(branch, str):
        raise OutputMismatch(
            f"the activity chose branch {describe_key(branch)}, which is not a term: "
            f"return Branch(term, value) with term one of {choices}, as a string"
        )
    try:
        chosen = parse_term(branch)
    except ValueError as error:  # ReferenceSyntaxError is one
        reason = syntax(error) if isinstance(error, ReferenceSyntaxError) else str(error)
        raise OutputMismatch(
            f"the activity chose a malformed branch: {reason}; the branches are {choices}"
        ) from error
    if chosen not in terms:
        raise OutputMismatch(
            f"the activity chose branch {short_repr(branch)}, which is not one of {choices}"
        )
    return (chosen,), tuple(term for term in terms if term != chosen)

"""One call as the scheduler holds it: the record a caller sees, the working state, and
the two faults a call can have on its way (structural, or a result that cannot be written).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import ReferenceSyntaxError
from ._expressions import format_location
from ._log import short_repr
from ._status import CallStatus

if TYPE_CHECKING:
    from ._expressions import Expression, Reference, Term
    from ._tools import Tool

__all__ = [
    "Call",
    "CallRecord",
    "OutputMismatch",
    "Structural",
    "error_message",
    "json_type",
    "parameters_of",
    "schema_message",
    "structural",
    "syntax",
]


@dataclass(slots=True, eq=False)
class CallRecord:
    """What happened to one call; `started`/`finished` are set by the driver's clock."""

    id: str
    tool: str | None
    status: str
    params: Any
    call: Any
    iteration: int
    output: Any = None
    error: dict[str, Any] | None = None
    started: float | None = None
    finished: float | None = None
    worker: str | None = None  # where it ran, when a driver runs calls on many (Temporal)
    line: int | None = None  # a code plan's call: the program line it was made on (§14)
    read_only: bool = False  # its tool's `read_only` (PROTOCOL §14 "Readiness")
    # Who approved it in advance (PROTOCOL §15 "Plan review"): "hook" for an approval given
    # with `downstream=True` on a call it reads from; None when asked itself or never gated.
    approved_by: str | None = None
    # Every guardrail verdict on this call, in the order given (PROTOCOL §15):
    # {"guardrail", "kind", "verdict", "reason"?}; a replacement's value is not kept here.
    guardrails: list[dict[str, Any]] = field(default_factory=list)


class Call:
    """The scheduler's working state for one accepted call."""

    __slots__ = (
        "approved_in_advance",
        "fire_and_forget",
        "held",
        "id",
        "iteration",
        "latent_output",
        "method",
        "output",
        "params",
        "plain",
        "preapproved",
        "ready_at",
        "record",
        "references",
        "seq",
        "status",
        "tool",
        "tool_waits",
        "watching",
        "wire",
        "writes",
    )

    # Its parsed form, set by `check_call` (`_arrival`) before the call is accepted; a call
    # that fails it is recorded invalid and never read again.
    tool: Tool
    params: dict[str, Any]
    references: tuple[Reference, ...]
    # Its wire is flat: ASCII keys, scalar values, no reference (`_arrival._read_keys`,
    # found by `check_call` with the wire it checks). Then its parameters resolve to
    # themselves and its data messages may share the wire as it is.
    plain: bool
    output: Expression | None
    writes: tuple[Term, ...]
    method: str
    fire_and_forget: bool

    def __init__(
        self, id: str, seq: int, iteration: int, record: CallRecord, wire: dict[str, Any]
    ) -> None:
        self.id = id
        self.seq = seq
        self.iteration = iteration
        self.record = record
        self.status = CallStatus.WAITING
        # The call as the model wrote it, with the `_id` it got (`record.call`, or an echo
        # of it that can be shown when it is not a sound object).
        self.wire = wire
        self.latent_output: Any = None  # set by `check_call` for a latent tool's call only
        self.preapproved = False
        # Who approved it before it was ready (PROTOCOL §15 "Plan review"); None if nobody.
        self.approved_in_advance: str | None = None
        # Its number among the calls queued to start (`RunQueue.pushed`): ties of rank
        # under a limit go to the earlier (PROTOCOL §13).
        self.ready_at = 0
        # Earlier calls of a `depends_on` tool it waits for; None until there is one.
        self.tool_waits: set[str] | None = None
        self.watching: tuple[Term, ...] = ()
        # value, targets, untaken
        self.held: tuple[Any, tuple[Term, ...], tuple[Term, ...]] | None = None

    def watched_terms(self) -> tuple[Term, ...]:
        """Every term the call reads, in order. A call of one reference (the common case)
        reads its expression's own tuple of terms: no tuple of its own while it waits."""
        if len(self.references) == 1 and not self.tool.dependency_references:
            return self.references[0].expression.terms
        return tuple(term for _, expression in self.expressions() for term in expression.terms)

    def expressions(self) -> Iterator[tuple[Reference | None, Expression]]:
        """Every expression the call waits on: its parameters', then its tool's depends_on."""
        for reference in self.references:
            yield reference, reference.expression
        for expression in self.tool.dependency_references:
            yield None, expression


class Structural(Exception):
    """A structural fault found while checking a call; becomes an Error Message."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


class OutputMismatch(Exception):
    """A value that cannot be written as the call's result (a runtime error of the call)."""


def structural(message: str, **details: Any) -> dict[str, Any]:
    return {"type": "structural", "message": message, **details}


def error_message(call: Any, error: dict[str, Any]) -> dict[str, Any]:
    return {"type": "data", "kind": "error", "data": {"call": call, "error": error}}


def parameters_of(wire: dict[str, Any]) -> dict[str, Any]:
    # Called before the call is checked: a key that is not a string (a Python caller's
    # `{1: 2}`) must not break the record of the call it makes invalid.
    return {
        key: value
        for key, value in wire.items()
        if not (isinstance(key, str) and key.startswith("_"))
    }


# --------------------------------------------------------------------------------------
# Describing faults (shared by the arrival checks and the result checks)

_MAX_LISTED_SCHEMA_ERRORS = 5


def syntax(error: ReferenceSyntaxError) -> str:
    """The error's text, quoting at most 200 characters of the expression: an expression of
    thousands of characters is a fault to point at, not to repeat."""
    return f"{error.reason} at position {error.position} in {short_repr(error.text, 200)}"


def json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"


def schema_message(tool: Tool, errors: list[Any], what: str) -> str:
    """Name every failing parameter and what was expected, most specific first."""
    ordered = sorted(errors, key=lambda error: (list(map(str, error.absolute_path)), error.message))
    whole = "(output)" if what == "output" else "(params)"  # what an empty path points at
    parts = []
    for error in ordered[:_MAX_LISTED_SCHEMA_ERRORS]:
        path = tuple(error.absolute_path)
        where = format_location(path) if path else whole
        parts.append(f"{where}: {error.message}")
    more = len(ordered) - _MAX_LISTED_SCHEMA_ERRORS
    if more > 0:
        parts.append(f"and {more} more")
    verb = "does" if what == "output" else "do"
    return f"{what} of {tool.name!r} {verb} not match its schema: " + "; ".join(parts)

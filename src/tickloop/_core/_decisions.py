"""Human approval: what a hook is shown, and the decisions it can return.

Decisions are plain, serialisable values so that a durable run can store them and a
scheduler without trio (a workflow engine) can replay them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .._errors import describe_value

__all__ = [
    "HOOK_REFUSED",
    "Approve",
    "ApproveHook",
    "Decision",
    "Defer",
    "Deny",
    "Edit",
    "PendingCall",
    "Plan",
    "Replace",
    "Respond",
    "ReviewHook",
    "decision_from_dict",
    "decision_to_dict",
    "normalize_decision",
]


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A ready call waiting for a decision: `params` are resolved, exactly what would run.

    `waits_on` and `dependents` let a person see where the values came from and what is
    held back by the answer. `schema` and `output_schema` (the tool's parameter and output
    JSON Schemas) let a ready-made hook check an edit or a response before it is sent.
    """

    id: str
    tool: str
    params: dict[str, Any]
    call: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    waits_on: list[str] = field(default_factory=list)
    dependents: list[str] = field(default_factory=list)
    schema: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    output_schema: Any = field(default=None, repr=False, compare=False)
    # A sub-agent's call (PROTOCOL §11): the ids of the agent calls above it (`id` is then
    # the full path, "c1.2/c1.0") and the name of the agent that made it; () at the root.
    path: tuple[str, ...] = ()
    agent: str | None = None
    # A code plan's call (PROTOCOL §14): the line of the program it was made on.
    line: int | None = None
    # PROTOCOL §15 "Plan review": the known calls that need approval and read this call's
    # output, transitively, in arrival order; `Approve(downstream=True)` approves them too.
    downstream: list[str] = field(default_factory=list)
    # False for a call a plan review sees before its inputs exist: `params` are then the
    # ones written, references unresolved, and only approve, deny and defer may be given.
    resolved: bool = True


@dataclass(frozen=True, slots=True)
class Approve:
    """Run the call as it is; with `downstream=True`, also approve in advance the gated
    calls known now that read its output, transitively (`PendingCall.downstream`)."""

    downstream: bool = False


_DENIED = "denied by the approval hook"

HOOK_REFUSED = "a reviewer refused this call"
"""What the model is told when the hook itself failed (raised, or answered with no
decision): the fault is the developer's, who reads it on the `tickloop` logger."""

_log = logging.getLogger("tickloop")


@dataclass(frozen=True, slots=True)
class Deny:
    """Do not run the call; the model is told `reason` in a `denied` Error Message.

    The reason is always text: `None` or `""` give the default reason, and anything else
    that is not a string (a number, an object from a hook) is written as its `str()`.
    """

    reason: str = _DENIED

    def __post_init__(self) -> None:
        if type(self.reason) is not str or not self.reason:
            object.__setattr__(self, "reason", _reason_text(self.reason))


def _reason_text(reason: Any) -> str:
    if reason is None or (isinstance(reason, str) and not reason):
        return _DENIED
    try:
        return str(reason)
    except Exception as problem:
        return (
            f"{_DENIED} (its reason could not be rendered: __str__ raised {type(problem).__name__})"
        )


class Edit:
    """Run the call with other parameters (checked against the schema again).

    `Edit(params)` replaces all the parameters; `Edit(cents=25_000)` changes just the
    named ones and keeps the rest, which is what a person usually means, and keeps values
    they were never shown (redacted secrets) intact. `params` is None for a partial edit
    and `changes` is None for a whole one.
    """

    __slots__ = ("changes", "params")
    params: Any
    changes: dict[str, Any] | None

    def __init__(self, params: Any = None, /, **changes: Any) -> None:
        if params is not None and changes:
            raise TypeError(
                "Edit takes either a dict of all the parameters or keywords of the ones to "
                "change, not both"
            )
        if params is None and not changes:
            raise TypeError("Edit needs the new parameters: Edit({...}) or Edit(name=value)")
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "changes", dict(changes) if changes else None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Edit is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Edit):
            return NotImplemented
        return (self.params, self.changes) == (other.params, other.changes)

    __hash__ = None  # type: ignore[assignment]  # holds dicts

    def __reduce__(self) -> tuple[Any, ...]:
        # Copies and pickles rebuild through __init__ (attributes cannot be set).
        if self.changes is None:
            return (Edit, (self.params,))
        return (_partial_edit, (self.changes,))

    def __repr__(self) -> str:
        if self.changes is None:
            return f"Edit({self.params!r})"
        return "Edit(" + ", ".join(f"{k}={v!r}" for k, v in self.changes.items()) + ")"

    def apply_to(self, params: dict[str, Any]) -> Any:
        """The parameters the call runs with, given the ones it was asked about."""
        if self.changes is None:
            return self.params
        return {**params, **self.changes}


def _partial_edit(changes: dict[str, Any]) -> Edit:
    return Edit(**changes)


@dataclass(frozen=True, slots=True)
class Replace:
    """Drop the call and queue this wire call under the same id, checked as a new call."""

    call: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Respond:
    """Do not run the call; write `value` as its result, as if the tool had returned it."""

    value: Any


@dataclass(frozen=True, slots=True)
class Defer:
    """Park the call until a decision arrives later (durable runs)."""


Decision = Approve | Deny | Edit | Replace | Respond | Defer
ApproveHook = Callable[[PendingCall], "Decision | bool | Awaitable[Decision | bool]"]


@dataclass(frozen=True, slots=True)
class Plan:
    """What a plan review sees when a request's text is complete (PROTOCOL §15).

    `calls`: every call known then whose tool may require approval, in arrival order;
    `arrows`: (writer, reader) pairs between them, a reader reading what the writer
    writes directly or through calls that need no approval. A code plan's also has its
    `program` and its `sites` (`c2.4[*]`, a `[*]` for each loop index; in source order):
    those of tools that may require approval, made a call yet or not, with the tool of
    each in `site_tools`. A decision keyed by a site covers every call the site makes,
    now or later in the request; one keyed by a site with no loop (`c2.1`), its call.
    """

    calls: list[PendingCall]
    arrows: list[tuple[str, str]]
    iteration: int
    run_id: str | None = None
    program: str | None = None
    sites: list[str] = field(default_factory=list)
    site_tools: dict[str, str] = field(default_factory=dict)


ReviewHook = Callable[[Plan], "dict[str, Decision] | Awaitable[dict[str, Decision]]"]

_DECISION_TYPES = {
    "approve": Approve,
    "deny": Deny,
    "edit": Edit,
    "replace": Replace,
    "respond": Respond,
    "defer": Defer,
}


def normalize_decision(answer: Any) -> Decision:
    """`True`/`False` are approve/deny; anything that is not a decision denies (fail closed)."""
    if answer is True:
        return Approve()
    if answer is False:
        return Deny()
    if isinstance(answer, Approve | Deny | Edit | Replace | Respond | Defer):
        return answer
    _log.warning(
        "approval hook bug: it returned %s, which is not a decision (return tl.Approve(), "
        "tl.Deny(reason), ... or True/False); the call is refused",
        describe_value(answer),
    )
    return Deny(HOOK_REFUSED)


def decision_to_dict(decision: Decision) -> dict[str, Any]:
    """The JSON form stored by durable runs and shown in events."""
    name = next(key for key, value in _DECISION_TYPES.items() if isinstance(decision, value))
    body: dict[str, Any] = {"decision": name}
    if isinstance(decision, Edit):
        if decision.changes is None:
            body["params"] = decision.params
        else:
            body["changes"] = decision.changes
        return body
    if isinstance(decision, Approve):  # a plain approval is stored as it always was
        if decision.downstream:
            body["downstream"] = True
        return body
    for attribute in getattr(type(decision), "__slots__", ()):
        body[attribute] = getattr(decision, attribute)
    return body


def decision_from_dict(data: dict[str, Any]) -> Decision:
    kind = _DECISION_TYPES[data["decision"]]
    if kind is Edit:
        changes = data.get("changes")
        return Edit(**changes) if isinstance(changes, dict) and changes else Edit(data["params"])
    arguments = {key: value for key, value in data.items() if key != "decision"}
    decision: Decision = kind(**arguments)
    return decision

"""What every human approval UI shares: how a call is described to a person, and how their
answer (typed text, a form) becomes a checked decision.

A person only ever sees redacted parameters, so an edit they send back may hold the
placeholder where a secret was; the real value is put back here, never taken from them.
Every edit and response is checked against the tool's schema before it is returned, so
nothing a person typed reaches the engine unchecked (the engine checks edits again).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .._core._decisions import Approve, Decision, Deny, Edit, PendingCall, Respond
from .._core._questions import Question
from .._core._validation import full_validator
from .._observe._events import DEFAULT_REDACT, REDACTED, Redactor

__all__ = [
    "VERBS",
    "CallView",
    "Refused",
    "check_against",
    "decision_from_answer",
    "describe_links",
    "pretty",
    "restore_secrets",
    "view_of",
]

# What the page and the inbox say was done with a waiting call or question, by the
# action a person took on it.
VERBS = {
    "approve": "approved",
    "approve_all": "approved with the calls that read it",
    "deny": "denied",
    "edit": "edited",
    "respond": "answered",
    "accept": "answered",
    "decline": "declined",
    "cancel": "cancelled",
}

DENIED_BY_A_PERSON = "denied by a person"


class Refused(Exception):
    """An answer that cannot be used as it is: the message says why, for the person."""


@dataclass(slots=True)
class CallView:
    """One call waiting for a person, as shown: parameters redacted.

    `known_tool` is False when the tool's schemas are not known (an inbox started
    without `--agent`): then a person may approve or deny, not edit or respond.
    """

    run_id: str | None
    id: str
    tool: str | None
    params: Any
    waits_on: list[str] = field(default_factory=list)
    dependents: list[str] = field(default_factory=list)
    schema: dict[str, Any] | None = None
    output_schema: Any = None
    known_tool: bool = True
    decided: str | None = None  # a stored decision a resume has not applied yet
    # A call without a run id (`run_calls`): its number on the page, which tells it apart
    # from a call of the same id of another `run_calls` waiting at the same time.
    slot: int | None = None
    # Not a call: a stored run's budget question deferred on this limit (PROTOCOL §12),
    # answered with more room (`_budget.py`).
    budget: str | None = None
    # A call parked on an MCP server's question (`tl.Defer()`): answered with a verdict
    # from a form built from the question's schema, not approved or denied.
    question: Question | None = None
    # Plan review (PROTOCOL §15): the gated calls that read its output, transitively,
    # which "approve all of these" (`Approve(downstream=True)`) approves with it; and the
    # arrows (writer, reader) of the plan from this call on, drawn as its graph.
    downstream: list[str] = field(default_factory=list)
    arrows: list[tuple[str, str]] = field(default_factory=list)

    @property
    def key(self) -> str:
        if self.run_id is None and self.slot is not None:
            return f"#{self.slot}/{self.id}"
        return f"{self.run_id or ''}/{self.id}"


def view_of(call: PendingCall, redactor: Redactor) -> CallView:
    return CallView(
        run_id=call.run_id,
        id=call.id,
        tool=call.tool,
        params=redactor(call.params),
        waits_on=list(call.waits_on),
        dependents=list(call.dependents),
        schema=call.schema,
        output_schema=call.output_schema,
        downstream=list(call.downstream),
        # A live call knows its direct readers and what its approval would cover.
        arrows=[(call.id, reader) for reader in call.dependents]
        + [(call.id, other) for other in call.downstream if other not in call.dependents],
    )


def make_redactor(redact: Any) -> Redactor:
    if isinstance(redact, Redactor):
        return redact
    return Redactor(DEFAULT_REDACT if redact is None else redact)


def pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False, default=str)


def describe_links(view: CallView) -> list[str]:
    lines = []
    if view.waits_on:
        lines.append("values from: " + ", ".join(view.waits_on))
    if view.dependents:
        lines.append("waiting on it: " + ", ".join(view.dependents))
    return lines


def restore_secrets(edited: Any, original: Any, redactor: Redactor) -> Any:
    """`edited` with every redaction placeholder put back to the value it hides."""
    if isinstance(edited, dict) and isinstance(original, dict):
        restored = {}
        for key, value in edited.items():
            if (
                value == REDACTED
                and isinstance(key, str)
                and redactor.is_secret(key)
                and key in original
            ):
                restored[key] = original[key]
            else:
                restored[key] = restore_secrets(value, original.get(key), redactor)
        return restored
    if isinstance(edited, list) and isinstance(original, list):
        return [
            restore_secrets(item, original[i] if i < len(original) else None, redactor)
            for i, item in enumerate(edited)
        ]
    return edited


def _holds_placeholder(value: Any, redactor: Redactor) -> bool:
    if isinstance(value, dict):
        return any(
            (item == REDACTED and isinstance(key, str) and redactor.is_secret(key))
            or _holds_placeholder(item, redactor)
            for key, item in value.items()
        )
    if isinstance(value, list):
        return any(_holds_placeholder(item, redactor) for item in value)
    return False


def check_against(schema: Any, value: Any, what: str, *, ignore: Any = None) -> None:
    """Refused with the schema's complaints (at most three) when `value` does not match.

    `ignore(path)` drops complaints about places a person could not see (redacted).
    """
    if schema is None:
        return
    try:
        validator = full_validator(schema)  # fetches nothing, runs patterns in bounded time
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    except Exception as problem:  # a schema jsonschema cannot use: say so, do not guess
        raise Refused(f"the {what} cannot be checked: {problem}") from problem
    if ignore is not None:
        errors = [error for error in errors if not ignore(list(error.absolute_path))]
    if not errors:
        return
    parts = []
    for error in errors[:3]:
        where = "/".join(str(step) for step in error.absolute_path)
        parts.append(f"at {where}: {error.message}" if where else error.message)
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    raise Refused(f"the {what} do not match the tool's schema: " + "; ".join(parts) + more)


def parse_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as problem:
        raise Refused(f"the {what} are not JSON: {problem}") from problem


def decision_from_answer(
    view: CallView,
    action: str,
    *,
    reason: str = "",
    text: str = "",
    real_params: Any = None,
    redactor: Redactor,
) -> Decision:
    """A person's answer as a checked decision; `Refused` says what is wrong with it.

    `real_params` are the call's real parameters when this process has them (a live
    run): an edit is then whole, with secrets restored. Without them (a stored run) an
    edit changes only the parameters that differ from what was shown (`Edit(**changes)`),
    so the secrets the person never saw stay as they are.
    """
    if action == "approve":
        return Approve()
    if action == "approve_all":  # the call and the gated calls reading it (PROTOCOL §15)
        return Approve(downstream=True)
    if action == "deny":
        return Deny(reason.strip() or DENIED_BY_A_PERSON)
    if action not in ("edit", "respond"):
        raise Refused(f"unknown action {action!r}: approve, approve_all, deny, edit or respond")
    if not view.known_tool:
        raise Refused(
            f"the schema of tool {view.tool!r} is not known here, so an {action} cannot be "
            "checked; approve or deny, or start `tickloop serve` with --agent"
        )
    if action == "respond":
        value = parse_json(text, "response")
        check_against(view.output_schema, value, "response")
        return Respond(value)
    edited = parse_json(text, "parameters")
    if not isinstance(edited, dict):
        raise Refused("the parameters must be a JSON object")
    if real_params is not None:
        full = restore_secrets(edited, real_params, redactor)
        check_against(view.schema, full, "parameters")
        return Edit(full)
    shown = view.params if isinstance(view.params, dict) else {}
    removed = [key for key in shown if key not in edited]
    if removed:
        raise Refused(
            "a stored call's parameters can be changed here, not removed "
            f"({', '.join(removed)}); deny it instead"
        )
    changes = {key: value for key, value in edited.items() if shown.get(key, object()) != value}
    if not changes:
        raise Refused("nothing was changed; approve the call instead")
    if _holds_placeholder(changes, redactor):
        raise Refused(
            f"a changed value holds {REDACTED!r} where a secret was: that value cannot be "
            "edited here, only the parameters around it"
        )

    def hidden(path: list[Any]) -> bool:
        return any(isinstance(step, str) and redactor.is_secret(step) for step in path)

    check_against(view.schema, {**shown, **changes}, "parameters", ignore=hidden)
    return Edit(**changes)

"""Questions an MCP server asks a person, and the verdicts that answer them.

An MCP server may ask, in the middle of one of its tool calls, for something only a person
can give (`elicitation/create`): a message and a JSON Schema of the answer it wants. That
is a `Question` for the run's `questions=` hook, and the hook answers with a verdict:

    Accept(data)   the answer, checked against the question's schema
    Decline()      the person will not answer
    Cancel()       the person dismissed the question (neither yes nor no)
    Defer()        ask later: the call waits, parked, for a verdict recorded elsewhere

A server's request to the model (`sampling/createMessage`) is a `Sampling`; with
`approve_sampling=True` it reaches the same hook as a `Question` whose `sampling` holds
it (Accept() lets it through, anything else refuses it).

Verdicts are plain, serialisable values, like approval decisions: a durable run journals
every answer, and a store records a verdict for a parked call as it records a decision.
Nothing here does I/O; asking is `_engine._questions`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .._errors import describe_value
from ._decisions import Defer, decision_from_dict, decision_to_dict

__all__ = [
    "Accept",
    "Cancel",
    "Decline",
    "Question",
    "QuestionHook",
    "Sampling",
    "Verdict",
    "check_answer",
    "normalize_verdict",
    "verdict_from_dict",
    "verdict_to_dict",
]


@dataclass(frozen=True, slots=True)
class Sampling:
    """A server's request to the model (`sampling/createMessage`), in plain values.

    `messages` are chat messages `{"role": "user"|"assistant", "content": str}` (a part
    that is not text is shown as a placeholder); `system` the server's system prompt;
    `max_tokens` the most the answer may write."""

    messages: list[dict[str, Any]]
    system: str | None = None
    max_tokens: int | None = None
    server: str = ""
    call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"messages": self.messages, "system": self.system, "max_tokens": self.max_tokens}


@dataclass(frozen=True, slots=True)
class Question:
    """What an MCP server asks a person, shown to the `questions=` hook.

    `message` is the server's words; `schema` the JSON Schema the answer must match (an
    object of flat properties, as MCP allows); `server` names the server; `call_id` is the
    call (its full path in a tree of runs) the server asked during, None when it cannot be
    told (several calls of that server were in flight at once). `problem` says what was
    wrong with the hook's last answer to this same question, when it is asked again.
    `sampling` is set instead of a schema when the question is whether to let a server's
    request to the model through (`approve_sampling=True`): Accept() lets it through.
    """

    message: str
    schema: dict[str, Any] | None = None
    server: str = ""
    call_id: str | None = None
    run_id: str | None = None
    problem: str | None = None
    sampling: Sampling | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The question as JSON (for a page, AG-UI, the journal)."""
        body: dict[str, Any] = {
            "message": self.message,
            "schema": self.schema,
            "server": self.server,
            "call_id": self.call_id,
        }
        if self.sampling is not None:
            body["sampling"] = self.sampling.to_dict()
        return body


@dataclass(frozen=True, slots=True)
class Accept:
    """Answer the question with `data` (checked against its schema)."""

    data: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Decline:
    """Refuse to answer (the server is told the person declined)."""


@dataclass(frozen=True, slots=True)
class Cancel:
    """Dismiss the question without an answer (the server is told it was cancelled)."""


Verdict = Accept | Decline | Cancel | Defer
QuestionHook = Callable[[Question], "Verdict | Awaitable[Verdict]"]

_VERDICT_NAMES: dict[type, str] = {Accept: "accept", Decline: "decline", Cancel: "cancel"}


def normalize_verdict(answer: Any) -> Verdict | None:
    """The hook's answer as a verdict; None for something that is not one (the caller
    says so and declines). The classes themselves count as their instances
    (`return tl.Decline`)."""
    if isinstance(answer, type) and answer in (Decline, Cancel, Defer):
        return answer()
    if isinstance(answer, Accept | Decline | Cancel | Defer):
        return answer
    return None


def not_a_verdict(answer: Any) -> str:
    return (
        f"it returned {describe_value(answer)}, which is not a verdict (return "
        "tl.Accept(data), tl.Decline(), tl.Cancel() or tl.Defer())"
    )


def check_answer(question: Question, data: Any) -> str | None:
    """What is wrong with `data` as the answer to `question`; None when nothing is."""
    if question.schema is None:
        return None
    if not isinstance(data, dict):
        return f"the answer must be an object of the asked fields, not {describe_value(data)}"
    try:
        json.dumps(data)
    except (TypeError, ValueError) as error:
        return f"the answer is not JSON: {error}"
    from ._validation import SchemaValidator

    errors = list(SchemaValidator(question.schema).iter_errors(data))
    if not errors:
        return None
    first = errors[0]
    where = ".".join(str(part) for part in first.absolute_path)
    return f"{where + ': ' if where else ''}{first.message}"


def verdict_to_dict(verdict: Accept | Decline | Cancel) -> dict[str, Any]:
    """The JSON form a journal and a store keep."""
    body: dict[str, Any] = {"decision": _VERDICT_NAMES[type(verdict)]}
    if isinstance(verdict, Accept):
        body["data"] = verdict.data
    return body


def verdict_from_dict(data: dict[str, Any]) -> Accept | Decline | Cancel | None:
    """A verdict from its JSON form; None for a dict that holds another decision."""
    kind = data.get("decision")
    if kind == "accept":
        return Accept(data.get("data"))
    if kind == "decline":
        return Decline()
    if kind == "cancel":
        return Cancel()
    return None


def is_verdict(value: Any) -> bool:
    return isinstance(value, Accept | Decline | Cancel)


def stored_to_dict(value: Any) -> dict[str, Any]:
    """A decision or a verdict as a store keeps it (`SQLiteStore.decide` takes both: a
    verdict answers the question a parked call waits on)."""
    if is_verdict(value):
        return verdict_to_dict(value)
    return decision_to_dict(value)


def stored_from_dict(data: dict[str, Any]) -> Any:
    """A decision or a verdict from a store's JSON."""
    verdict = verdict_from_dict(data)
    return verdict if verdict is not None else decision_from_dict(data)

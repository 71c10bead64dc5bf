"""What the outer loop needs from a model: a streamed answer to one request.

Two request shapes, one per protocol:

* `SolutionRequest` (protocol "solution", PROTOCOL §8): the loop renders the log into
  chat messages and a solution schema; the client streams back the solution's JSON text.
* `TurnRequest` (protocol "tools", PROTOCOL §9): the client drives the provider's own
  function calling.

A client reports failures as `ModelError`s, classified once here, so the loop's retry
policy (408, 409, 429, 5xx and transport errors are retried; other 4xx are not) lives in
one place and every provider follows it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ModelClient",
    "ModelError",
    "SolutionRequest",
    "TextDelta",
    "Usage",
    "is_retryable_status",
]

RETRYABLE_STATUSES = frozenset({408, 409, 429})


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or 500 <= status <= 599


class ModelError(Exception):
    """A failed model request.

    `status` is the HTTP status (None for a transport error: connection refused, reset,
    a stream that broke off before the answer began); `retry_after` is the server's
    Retry-After in seconds, when it sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.body = body

    @property
    def retryable(self) -> bool:
        return self.status is None or is_retryable_status(self.status)


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the answer's text, in order."""

    text: str


@dataclass(slots=True)
class Usage:
    """Token counts of one request (summed over a run by the loop)."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(slots=True)
class SolutionRequest:
    """One request of the solution protocol.

    `messages` are chat messages `{"role": "system"|"user"|"assistant", "content": str}`;
    `schema` is the solution's JSON Schema (strict-mode compatible); `iteration` counts
    requests of the run from 1 (a scripted model answers by it).
    """

    messages: list[dict[str, Any]]
    schema: dict[str, Any]
    iteration: int
    schema_name: str = "solution"
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"messages": self.messages, "schema": self.schema}


@runtime_checkable
class ModelClient(Protocol):
    """Anything that can stream a solution: the scripted model, OpenAIChat, Anthropic."""

    def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        """Yield the solution's text as it arrives, and a `Usage` when the server says.

        Raise `ModelError` for a failed request. Raising after some text was yielded
        means the stream broke off: the loop keeps the calls that had closed and reports
        the rest as a structural error, it does not retry.
        """
        ...

"""A model that plays back a script: examples, tests and the demo run with no network.

It streams like a real server (text in chunks, spaced in trio time), so what a user
tests with it, calls starting while the answer is still arriving, is what happens with
a hosted model; and on a `trio.testing.MockClock` the timing is exact and instant.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Sequence
from typing import Any

import trio

from .._errors import ConfigurationError
from ._base import (
    ModelError,
    SolutionRequest,
    TextDelta,
    ToolCallStarted,
    ToolResult,
    TurnItem,
    TurnRequest,
    TurnResponse,
    TurnToolCall,
    Usage,
    chat_assistant_message,
    chat_tool_messages,
    wire_conversation,
)

__all__ = ["ScriptedModel", "turn_record"]


def _estimate_tokens(text: str) -> int:
    """About four characters a token: the usual rule of thumb for English and JSON."""
    return math.ceil(len(text) / 4)


class ScriptedModel:
    """Answers iteration k of a run with `responses[k-1]`.

    A response is a solution dict, sent as `json.dumps(response, ensure_ascii=False)`, or
    a string sent verbatim (to test what the loop does with malformed output). The text
    is streamed in chunks of `chunk_chars` characters; chunk i is sent at
    `first_token_delay + i * chunk_delay` seconds of trio time after the request, each
    time measured from the request so that delays do not drift.

    After the text comes one `Usage`, estimated as a token per four characters of the
    request (as JSON) and of the answer, so runs on a script report plausible totals;
    `usage=False` leaves it out. `model` names it for `pricing` (budgets, PROTOCOL §12),
    so a scripted run is metered and priced like a hosted one.

    `.requests` records every request received, each the JSON-serialisable snapshot
    `{"messages": [...], "schema": {...}}` taken when it arrived.

    With `protocol="tools"` (native tool calling) a response is one turn of the model: a
    string is a final text answer, and a dict is shaped like an OpenAI assistant message,
    `{"content": "...", "tool_calls": [{"name": ..., "arguments": {...} or "raw text",
    "id": optional}], "reasoning": optional}`. Arguments given as a string are sent
    verbatim (to test malformed ones). The content streams in chunks as above, then each
    call. A request is then recorded as `{"system": ..., "messages": [...], "tools":
    [...]}`, the messages in OpenAI chat shape (tool results as `tool` messages).
    """

    def __init__(
        self,
        responses: Sequence[dict[str, Any] | str],
        *,
        chunk_chars: int = 16,
        chunk_delay: float = 0.0,
        first_token_delay: float = 0.0,
        usage: bool = True,
        model: str = "scripted",
    ) -> None:
        if isinstance(responses, str | dict):
            raise ConfigurationError("ScriptedModel takes a list of responses, not one response")
        responses = list(responses)
        if chunk_chars < 1:
            raise ConfigurationError(f"chunk_chars must be at least 1, not {chunk_chars}")
        if chunk_delay < 0 or first_token_delay < 0:
            raise ConfigurationError("chunk_delay and first_token_delay cannot be negative")
        texts: list[str] = []
        for index, response in enumerate(responses):
            if isinstance(response, str):
                texts.append(response)
            elif isinstance(response, dict):
                try:
                    texts.append(json.dumps(response, ensure_ascii=False))
                except (TypeError, ValueError) as exc:
                    raise ConfigurationError(
                        f"response {index} of the script is not JSON-serialisable: {exc}"
                    ) from exc
            else:
                raise ConfigurationError(
                    f"response {index} of the script must be a dict or a str, "
                    f"not {type(response).__name__}"
                )
        # Serialised once, now: a bad response fails at construction, not mid-run, and a
        # dict the caller mutates later does not change the script.
        self._texts = texts
        self._turns: list[dict[str, Any] | str] = [
            json.loads(text) if isinstance(response, dict) else text
            for response, text in zip(responses, texts, strict=True)
        ]
        self.chunk_chars = chunk_chars
        self.chunk_delay = chunk_delay
        self.first_token_delay = first_token_delay
        self.usage = usage
        self.model = model  # the name `pricing` knows it by (PROTOCOL §12)
        # Each request as the JSON text taken when it arrived (which detaches it from the
        # loop's own lists), decoded only when `requests` is read: a run that never reads
        # them (a benchmark, the demo) does not pay for a second walk of every request.
        self._snapshots: list[str] = []
        self._requests: list[dict[str, Any]] = []

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request received so far, oldest first (the same list each time)."""
        decoded, snapshots = self._requests, self._snapshots
        while len(decoded) < len(snapshots):
            decoded.append(json.loads(snapshots[len(decoded)]))
        return decoded

    def __repr__(self) -> str:
        return f"ScriptedModel(<{len(self._texts)} responses>, chunk_chars={self.chunk_chars})"

    def _check_iteration(self, k: int) -> None:
        """Fail request `k` when the script holds no response for it.

        Status 400: a script that ran out is the test's mistake; retrying cannot fix it.
        """
        if not 1 <= k <= len(self._texts):
            raise ModelError(
                f"ScriptedModel has no response for iteration {k}: the script has "
                f"{len(self._texts)} response(s) (status 400, not retried)",
                status=400,
            )

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        start = trio.current_time()
        # A JSON snapshot: proves the record serialisable and detaches it from the loop's
        # own lists, which keep changing after the request (decoded when read: `requests`).
        snapshot = json.dumps(request.to_dict(), ensure_ascii=False)
        self._snapshots.append(snapshot)
        k = request.iteration
        self._check_iteration(k)
        text = self._texts[k - 1]
        for i, offset in enumerate(range(0, len(text), self.chunk_chars)):
            await trio.sleep_until(start + self.first_token_delay + i * self.chunk_delay)
            yield TextDelta(text[offset : offset + self.chunk_chars])
        if self.usage:
            yield Usage(_estimate_tokens(snapshot), _estimate_tokens(text))

    # -- native tool calling (protocol "tools", PROTOCOL §9) --------------------------------

    turn_format = "scripted"

    async def stream_turn(self, request: TurnRequest) -> AsyncIterator[TurnItem]:
        start = trio.current_time()
        snapshot = json.dumps(turn_record(request, self.turn_format), ensure_ascii=False)
        self._snapshots.append(snapshot)
        k = request.iteration
        self._check_iteration(k)
        turn = _read_turn(self._turns[k - 1], k)
        text = turn.text
        chunks = [text[i : i + self.chunk_chars] for i in range(0, len(text), self.chunk_chars)]
        for i, piece in enumerate(chunks):
            await trio.sleep_until(start + self.first_token_delay + i * self.chunk_delay)
            yield TextDelta(piece)
        for index, call in enumerate(turn.tool_calls):
            await trio.sleep_until(
                start + self.first_token_delay + (len(chunks) + index) * self.chunk_delay
            )
            yield ToolCallStarted(index, call.name)
        if self.usage:
            answer = json.dumps(turn.messages, ensure_ascii=False)
            yield Usage(_estimate_tokens(snapshot), _estimate_tokens(answer))
        yield turn

    def tool_result_messages(
        self, response: TurnResponse, results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        return chat_tool_messages(response, results)


def turn_record(request: TurnRequest, turn_format: str) -> dict[str, Any]:
    """A tools-protocol request as a scripted model records it: the system text, the
    conversation as OpenAI chat messages (tool results as `tool` messages), the tools."""
    return {
        "system": request.system,
        "messages": wire_conversation(
            request.conversation,
            turn_format,
            text_message=lambda role, text: {"role": role, "content": text},
            strip_reasoning=_strip_reasoning,
        ),
        "tools": request.to_dict()["tools"],
    }


def _strip_reasoning(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value for key, value in m.items() if key != "reasoning"} for m in messages]


def _read_turn(response: dict[str, Any] | str, k: int) -> TurnResponse:
    """A scripted turn as the model's response; a script that is not one fails (400)."""
    if isinstance(response, str):
        return TurnResponse(
            text=response, tool_calls=[], messages=[{"role": "assistant", "content": response}]
        )
    if not ({"content", "tool_calls"} & response.keys()):
        raise ModelError(
            f"response {k} of the script is not a turn: with protocol='tools' a response is "
            'a string or {"content": ..., "tool_calls": [...]} (status 400, not retried)',
            status=400,
        )
    text = response.get("content") or ""
    calls: list[TurnToolCall] = []
    for index, call in enumerate(response.get("tool_calls") or []):
        function = call.get("function", call) if isinstance(call, dict) else {}
        arguments = function.get("arguments", {})
        calls.append(
            TurnToolCall(
                str(call.get("id") or f"call_{k}_{index}"),
                str(function.get("name", "")),
                arguments if isinstance(arguments, str) else json.dumps(arguments),
            )
        )
    message = chat_assistant_message(str(text), calls)
    reasoning = response.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        message["reasoning"] = reasoning
    return TurnResponse(
        text=str(text),
        tool_calls=calls,
        messages=[message],
        reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
    )

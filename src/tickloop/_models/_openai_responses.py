"""The OpenAI Responses API (`/v1/responses`), streamed.

The Responses API speaks in typed items instead of chat messages: a turn's output is a
list of `reasoning`, `message` and `function_call` items, and the next request's `input`
must hold those items again, followed by one `function_call_output` per call. The items
are sent back exactly as they came (ids, encrypted reasoning and all), since the API
checks them against what it produced.

No server-side state is relied on (`previous_response_id` is never sent): each request
carries the whole conversation, as in every other client, so a run resumes from its log.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import Any

import httpx

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
    output_limit,
    responses_tool_messages,
    solution_messages,
    wire_conversation,
)
from ._http import (
    DEFAULT_TIMEOUT,
    bearer_headers,
    clean_key,
    open_stream,
    redact,
    typed_events,
    warn_if_keyless,
)

__all__ = ["OpenAIResponses"]

_DEFAULT_BASE_URL = "https://api.openai.com/v1"

# Error codes a failed stream reports, read as the HTTP status the same error would have
# had as a response; any other code is the server's fault, and so retryable.
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "invalid_prompt": 400,
    "context_length_exceeded": 400,
    "invalid_api_key": 401,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
}


class OpenAIResponses:
    """A model client for `{base_url}/responses`, streamed over server-sent events.

    `base_url` includes the `/v1`; it and `api_key` default to `OPENAI_BASE_URL` and
    `OPENAI_API_KEY`, as for `OpenAIChat`.

    With `protocol="tools"` the agent's tools are offered as functions; with the
    solution protocol the solution schema is asked for as a strict `json_schema` text
    format. `reasoning` (e.g. `{"effort": "low"}`), `store` and `include` are sent when
    given: for reasoning models without server-side storage, pass `store=False,
    include=["reasoning.encrypted_content"]` so that reasoning items can be sent back.
    `extra_body` is merged into every request body last.
    """

    turn_format = "openai-responses"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        temperature: float | None = None,
        max_output_tokens: int | None = None,
        reasoning: dict[str, Any] | None = None,
        store: bool | None = None,
        include: Sequence[str] | None = None,
        extra_body: dict[str, Any] | None = None,
        timeout: httpx.Timeout | float | None = DEFAULT_TIMEOUT,
    ) -> None:
        self.model = model
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or _DEFAULT_BASE_URL
        self.base_url = base_url.rstrip("/")
        self._api_key = clean_key(
            api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        )
        warn_if_keyless(
            "tl.OpenAIResponses", self._api_key, self.base_url, _DEFAULT_BASE_URL, "OPENAI_API_KEY"
        )
        self._client = client
        self.temperature = temperature
        self.max_output_tokens = max_output_tokens
        self.reasoning = dict(reasoning) if reasoning is not None else None
        self.store = store
        self.include = list(include) if include is not None else None
        self.extra_body = dict(extra_body or {})
        self.timeout = timeout

    def __repr__(self) -> str:  # the key stays out of reprs, logs and tracebacks
        return f"OpenAIResponses({self.model!r}, base_url={self.base_url!r})"

    @property
    def url(self) -> str:
        return f"{self.base_url}/responses"

    def _options(
        self, body: dict[str, Any], request: SolutionRequest | TurnRequest
    ) -> dict[str, Any]:
        if self.temperature is not None:
            body["temperature"] = self.temperature
        limit = output_limit(self.max_output_tokens, request)  # a budget's room (§12)
        if limit is not None:
            body["max_output_tokens"] = limit
        if self.reasoning is not None:
            body["reasoning"] = self.reasoning
        if self.store is not None:
            body["store"] = self.store
        if self.include is not None:
            body["include"] = self.include
        body.update(self.extra_body)
        return body

    async def _post(self, body: dict[str, Any]) -> AsyncIterator[TurnItem]:
        what = f"responses request ({self.model} at {self.url})"
        secrets = (self._api_key,)
        headers = bearer_headers(self._api_key)
        async with open_stream(
            self._client, self.timeout, self.url, body, headers, what=what, secrets=secrets
        ) as response:
            async for item in _read_stream(response, what, secrets):
                yield item

    # -- the solution protocol --------------------------------------------------------------

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        system = [m["content"] for m in request.messages if m.get("role") == "system"]
        messages = solution_messages(request.messages, "openai-responses", request.media)
        body: dict[str, Any] = {
            "model": self.model,
            "input": [
                {"role": m["role"], "content": m["content"]}
                for m in messages
                if m.get("role") != "system"
            ],
            "stream": True,
        }
        if request.schema is not None:  # else a plain-text answer (a code plan's program)
            body["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": request.schema_name,
                    "schema": request.schema,
                    "strict": True,
                }
            }
        if system:
            body["instructions"] = "\n\n".join(str(text) for text in system)
        async for item in self._post(self._options(body, request)):
            if isinstance(item, TextDelta | Usage):
                yield item

    # -- native tool calling (PROTOCOL §9) ------------------------------------------------

    def _turn_body(self, request: TurnRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "input": wire_conversation(
                request.conversation,
                self.turn_format,
                text_message=lambda role, text: {"role": role, "content": text},
                media=request.media,
                strip_reasoning=_strip_reasoning,
            ),
            "stream": True,
        }
        if request.system:
            body["instructions"] = request.system
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": spec.name,
                    **({"description": spec.description} if spec.description else {}),
                    "parameters": spec.parameters,
                }
                for spec in request.tools
            ]
        return self._options(body, request)

    async def stream_turn(self, request: TurnRequest) -> AsyncIterator[TurnItem]:
        async for item in self._post(self._turn_body(request)):
            yield item

    def tool_result_messages(
        self, response: TurnResponse, results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        return responses_tool_messages(response, results)


def _strip_reasoning(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items without reasoning items: a turn without tool calls does not send its
    reasoning back."""
    return [item for item in items if item.get("type") != "reasoning"]


async def _read_stream(
    response: httpx.Response, what: str, secrets: tuple[str | None, ...]
) -> AsyncIterator[TurnItem]:
    """The text and items of a Responses event stream, then its usage and the whole turn.

    Each output item is taken from its `response.output_item.done` event, the complete
    item as the API will expect it back; an item that never got one is rebuilt from its
    `added` event and deltas.
    """
    items: dict[int, dict[str, Any]] = {}
    arguments: dict[int, list[str]] = {}
    text: list[str] = []
    usage: Usage | None = None
    finish: str | None = None
    events = typed_events(response, what=what, secrets=secrets)
    async with aclosing(events):
        async for kind, payload in events:
            index = payload.get("output_index", 0)
            if kind == "error":
                raise _stream_error(payload, what, secrets)
            if kind == "response.failed":
                error = (payload.get("response") or {}).get("error") or {}
                raise _stream_error(error if isinstance(error, dict) else {}, what, secrets)
            if kind == "response.output_item.added":
                item = dict(payload.get("item") or {})
                items[index] = item
                if item.get("type") == "function_call":
                    arguments[index] = []
                    yield ToolCallStarted(index, str(item.get("name", "")))
            elif kind == "response.output_text.delta":
                delta = payload.get("delta")
                if isinstance(delta, str) and delta:
                    text.append(delta)
                    yield TextDelta(delta)
            elif kind == "response.function_call_arguments.delta":
                delta = payload.get("delta")
                if isinstance(delta, str):
                    arguments.setdefault(index, []).append(delta)
            elif kind == "response.output_item.done":
                finished = payload.get("item")
                if isinstance(finished, dict):
                    items[index] = dict(finished)
            elif kind in ("response.completed", "response.incomplete"):
                body = payload.get("response") or {}
                counts = body.get("usage") or {}
                if counts:
                    # As reported: the loop checks they are counts (`checked_usage`).
                    usage = Usage(counts.get("input_tokens") or 0, counts.get("output_tokens") or 0)
                finish = "completed" if kind == "response.completed" else "incomplete"
                break
    if finish is None:
        raise ModelError(f"{what}: the stream ended before the response did", status=None)
    if usage is not None:
        yield usage
    output: list[dict[str, Any]] = []
    calls: list[TurnToolCall] = []
    reasoning: list[str] = []
    for index in sorted(items):
        item = items[index]
        kind = item.get("type")
        if kind == "function_call":
            if not item.get("arguments") and arguments.get(index):
                item["arguments"] = "".join(arguments[index])
            item.setdefault("arguments", "")
            calls.append(
                TurnToolCall(
                    str(item.get("call_id") or item.get("id") or ""),
                    str(item.get("name", "")),
                    str(item["arguments"]),
                )
            )
        elif kind == "reasoning":
            for part in item.get("summary") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    reasoning.append(part["text"])
        output.append(item)
    yield TurnResponse(
        text="".join(text),
        tool_calls=calls,
        messages=output,
        reasoning="\n\n".join(reasoning) or None,
        finish_reason=finish,
    )


def _stream_error(error: dict[str, Any], what: str, secrets: tuple[str | None, ...]) -> ModelError:
    code = error.get("code")
    message = str(error.get("message") or code or "no message")
    return ModelError(
        f"{what}: error in stream: {code or 'error'}: {redact(message, secrets)}",
        status=_ERROR_STATUS.get(code) if isinstance(code, str) else None,
        body=redact(json.dumps(error, ensure_ascii=False), secrets),
    )

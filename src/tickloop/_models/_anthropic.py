"""Anthropic's Messages API, streamed.

The Messages API has no response-format switch; a forced tool call is how it guarantees
the solution's shape, and its `input_json_delta` events stream the tool's arguments as
JSON text, which is exactly the solution text the loop parses as it arrives.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, aclosing
from typing import Any, Literal

import httpx

from .._errors import ConfigurationError
from .._json._stream import resilient_json_parse_with_strategy
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
    anthropic_tool_messages,
    output_limit,
    solution_messages,
    wire_conversation,
)
from ._http import (
    DEFAULT_TIMEOUT,
    clean_key,
    json_instruction,
    open_stream,
    redact,
    typed_events,
    warn_if_keyless,
)

__all__ = ["Anthropic"]

StructuredMode = Literal["tool", "json"]
_DEFAULT_BASE_URL = "https://api.anthropic.com"

# The HTTP status Anthropic documents for each error type, so that an error sent inside a
# 200 stream is classified as the same error sent as a response would be.
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class Anthropic:
    """A model client for `{base_url}/v1/messages`.

    `base_url` (without `/v1`) and `api_key` default to the `ANTHROPIC_BASE_URL` and
    `ANTHROPIC_API_KEY` environment variables. System messages become the top-level
    `system` field and consecutive messages of one role are merged, as the API requires.

    `structured="tool"` (the default) forces a tool named after the request's schema
    (`tool_choice: {"type": "tool", ...}`) whose input schema is the solution schema; its
    arguments, streamed, are the solution. `structured="json"` asks for the JSON in the
    system prompt instead and streams the text: for models or proxies without tools.

    `client`: an `httpx.AsyncClient` to send through (never closed here); without one,
    each request opens and closes its own, with `timeout`. `extra_body` is merged into
    every request body last (e.g. `{"thinking": {"type": "enabled", "budget_tokens":
    2048}}` for extended thinking).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        max_tokens: int = 4096,
        structured: StructuredMode = "tool",
        anthropic_version: str = "2023-06-01",
        timeout: httpx.Timeout | float | None = DEFAULT_TIMEOUT,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if structured not in ("tool", "json"):
            raise ConfigurationError(f"structured must be 'tool' or 'json', not {structured!r}")
        if max_tokens < 1:
            raise ConfigurationError(f"max_tokens must be at least 1, not {max_tokens}")
        self.model = model
        base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or _DEFAULT_BASE_URL
        self.base_url = base_url.rstrip("/")
        self._api_key = clean_key(
            api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        )
        warn_if_keyless(
            "tl.Anthropic", self._api_key, self.base_url, _DEFAULT_BASE_URL, "ANTHROPIC_API_KEY"
        )
        self._client = client
        self.max_tokens = max_tokens
        self.structured: StructuredMode = structured
        self.anthropic_version = anthropic_version
        self.timeout = timeout
        self.extra_body = dict(extra_body or {})

    def __repr__(self) -> str:  # the key stays out of reprs, logs and tracebacks
        return f"Anthropic({self.model!r}, base_url={self.base_url!r})"

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1/messages"

    def _headers(self) -> dict[str, str]:
        headers = {"anthropic-version": self.anthropic_version, "Accept": "text/event-stream"}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def _body(self, request: SolutionRequest) -> dict[str, Any]:
        system, messages = _split_messages(
            solution_messages(request.messages, "anthropic", request.media)
        )
        plain = request.schema is None  # a plain-text answer (a code plan's program)
        if self.structured == "json" and not plain:
            system.append(json_instruction(request.schema or {}))
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": output_limit(self.max_tokens, request),
            "messages": messages,
            "stream": True,
        }
        if system:
            body["system"] = "\n\n".join(system)
        if self.structured == "tool" and not plain:
            body["tools"] = [
                {
                    "name": request.schema_name,
                    "description": "Give your answer as this tool's input.",
                    "input_schema": request.schema,
                }
            ]
            body["tool_choice"] = {"type": "tool", "name": request.schema_name}
        body.update(self.extra_body)
        return body

    @property
    def _what(self) -> str:
        return f"messages request ({self.model} at {self.url})"

    def _post(self, body: dict[str, Any]) -> AbstractAsyncContextManager[httpx.Response]:
        """The Messages endpoint's streamed answer to `body` (see `open_stream`)."""
        return open_stream(
            self._client,
            self.timeout,
            self.url,
            body,
            self._headers(),
            what=self._what,
            secrets=(self._api_key,),
        )

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        wanted = "text" if request.schema is None or self.structured != "tool" else "tool_use"
        async with self._post(self._body(request)) as response:
            async for item in self._read_stream(response, self._what, (self._api_key,), wanted):
                yield item

    async def _read_stream(
        self,
        response: httpx.Response,
        what: str,
        secrets: tuple[str | None, ...],
        wanted: str | None = None,
    ) -> AsyncIterator[TextDelta | Usage]:
        """The solution text of a Messages event stream, then its usage.

        Only the blocks that carry the solution are read: the forced tool's arguments
        (`input_json_delta`) in tool mode, text in json mode; thinking is skipped.
        """
        if wanted is None:
            wanted = "tool_use" if self.structured == "tool" else "text"
        blocks: dict[int, str] = {}  # content block index -> block type
        stream = _MessageStream(response, what, secrets)
        async for kind, payload in stream.events():
            if kind == "content_block_start":
                block = payload.get("content_block") or {}
                blocks[payload.get("index", 0)] = block.get("type", "")
            elif kind == "content_block_delta":
                if blocks.get(payload.get("index", 0)) != wanted:
                    continue
                delta = payload.get("delta") or {}
                if delta.get("type") == "input_json_delta":
                    text = delta.get("partial_json")
                elif delta.get("type") == "text_delta":
                    text = delta.get("text")
                else:
                    continue
                if isinstance(text, str) and text:
                    yield TextDelta(text)
        yield stream.usage

    # -- native tool calling (protocol "tools", PROTOCOL §9) --------------------------------

    turn_format = "anthropic"

    def _turn_body(self, request: TurnRequest) -> dict[str, Any]:
        messages = _merge_roles(
            wire_conversation(
                request.conversation,
                self.turn_format,
                text_message=lambda role, text: {"role": role, "content": text},
                media=request.media,
                strip_reasoning=_strip_thinking,
            )
        )
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": output_limit(self.max_tokens, request),
            "messages": messages,
            "stream": True,
        }
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [
                {
                    "name": spec.name,
                    **({"description": spec.description} if spec.description else {}),
                    "input_schema": spec.parameters,
                }
                for spec in request.tools
            ]
        body.update(self.extra_body)
        return body

    async def stream_turn(self, request: TurnRequest) -> AsyncIterator[TurnItem]:
        """One request with the tools offered (not forced); see `_read_turn_stream`."""
        async with self._post(self._turn_body(request)) as response:
            async for item in _read_turn_stream(response, self._what, (self._api_key,)):
                yield item

    def tool_result_messages(
        self, response: TurnResponse, results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        return anthropic_tool_messages(response, results)


def _input_tokens(counts: dict[str, Any]) -> Any:
    """All the prompt's tokens: Anthropic counts cached ones apart from `input_tokens`.
    A value that is not a whole number is returned as it came, for the loop to refuse
    as a count (`checked_usage`)."""
    total = 0
    for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        value = counts.get(key) or 0
        if type(value) is not int:
            return value
        total += value
    return total


class _MessageStream:
    """A Messages event stream as both readers walk it, so that where it ends, its errors
    and its token counts are read one way.

    `events()` yields `(type, payload)` up to `message_stop`, the one end of a whole
    answer: an `error` event is raised as a `ModelError`, and a stream that stops before
    `message_stop` broke off. `usage` follows the counts of `message_start` and
    `message_delta`, updated after the reader has handled the event, the order each
    reader had when it kept its own count.
    """

    def __init__(
        self, response: httpx.Response, what: str, secrets: tuple[str | None, ...]
    ) -> None:
        self._response = response
        self._what = what
        self._secrets = secrets
        self.usage = Usage()

    async def events(self) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
        what, secrets = self._what, self._secrets
        async with aclosing(typed_events(self._response, what=what, secrets=secrets)) as events:
            async for kind, payload in events:
                if kind == "error":
                    raise _stream_error(payload, what, secrets)
                if kind == "message_stop":
                    return
                yield kind, payload
                self._count(kind, payload)
        raise ModelError(f"{what}: the stream ended before message_stop", status=None)

    def _count(self, kind: Any, payload: dict[str, Any]) -> None:
        if kind == "message_start":
            counts = (payload.get("message") or {}).get("usage") or {}
            self.usage = Usage(_input_tokens(counts), counts.get("output_tokens") or 0)
        elif kind == "message_delta":
            # Counts here are running totals for the message, not increments.
            counts = payload.get("usage") or {}
            if counts.get("output_tokens") is not None:
                self.usage.output_tokens = counts["output_tokens"]
            if counts.get("input_tokens") is not None:
                self.usage.input_tokens = _input_tokens(counts)


def _stream_error(
    payload: dict[str, Any], what: str, secrets: tuple[str | None, ...]
) -> ModelError:
    error = payload.get("error") or {}
    kind = error.get("type", "error") if isinstance(error, dict) else "error"
    message = error.get("message", "") if isinstance(error, dict) else str(error)
    return ModelError(
        f"{what}: error in stream: {kind}: {redact(str(message), secrets)}",
        status=_ERROR_STATUS.get(kind),
        body=redact(json.dumps(payload, ensure_ascii=False), secrets),
    )


def _split_messages(
    messages: list[dict[str, Any]],
) -> tuple[list[str], list[dict[str, Any]]]:
    """System texts apart; the rest with consecutive same-role messages merged.

    The Messages API takes the system prompt as a field of its own and wants user and
    assistant turns to alternate; the loop's log may put several user messages in a row.
    """
    system: list[str] = []
    merged: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content", "")
        if role == "system":
            system.append(content if isinstance(content, str) else _text_of(content))
            continue
        if merged and merged[-1]["role"] == role:
            merged[-1]["content"] = _join(merged[-1]["content"], content)
        else:
            merged.append({"role": role, "content": content})
    return system, merged


def _join(first: Any, second: Any) -> Any:
    if isinstance(first, str) and isinstance(second, str):
        return f"{first}\n\n{second}"
    return _blocks(first) + _blocks(second)


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def _text_of(content: Any) -> str:
    """The text of a system message given as content blocks."""
    return "\n\n".join(block.get("text", "") for block in content if isinstance(block, dict))


# ---------------------------------------------------------------------------------------
# Native tool calling

_THINKING_BLOCKS = ("thinking", "redacted_thinking")


def _strip_thinking(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages without thinking blocks: a turn without tool calls does not send its
    thinking back. A message left with no content at all is dropped."""
    kept: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = [
                block
                for block in content
                if not (isinstance(block, dict) and block.get("type") in _THINKING_BLOCKS)
            ]
            if not content:
                continue
            message = {**message, "content": content}
        kept.append(message)
    return kept


def _merge_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive messages of one role merged into one, as the Messages API wants (the
    tool results' user message and a user text after it become one message)."""
    merged: list[dict[str, Any]] = []
    for message in messages:
        if merged and merged[-1].get("role") == message.get("role"):
            merged[-1] = {
                **merged[-1],
                "content": _join(merged[-1].get("content", ""), message.get("content", "")),
            }
        else:
            merged.append(message)
    return merged


async def _read_turn_stream(
    response: httpx.Response, what: str, secrets: tuple[str | None, ...]
) -> AsyncIterator[TurnItem]:
    """Every content block of a Messages stream rebuilt as the API would return it, then
    the whole turn.

    Blocks are kept whole and in order (text, tool_use, thinking with its signature,
    redacted_thinking, and any block type this code does not know), because the assistant
    turn must be sent back with every original block (PROTOCOL §9).
    """
    blocks: dict[int, dict[str, Any]] = {}
    arguments: dict[int, list[str]] = {}
    text: list[str] = []
    thinking: list[str] = []
    stop_reason: str | None = None
    stream = _MessageStream(response, what, secrets)
    async for kind, payload in stream.events():
        index = payload.get("index", 0)
        if kind == "content_block_start":
            block = dict(payload.get("content_block") or {})
            blocks[index] = block
            if block.get("type") == "tool_use":
                arguments[index] = []
                yield ToolCallStarted(index, str(block.get("name", "")))
            elif block.get("type") == "text" and isinstance(block.get("text"), str):
                if block["text"]:  # a block may start with some of its text
                    text.append(block["text"])
                    yield TextDelta(block["text"])
        elif kind == "content_block_delta":
            block = blocks.setdefault(index, {})
            delta = payload.get("delta") or {}
            kind_of_delta = delta.get("type")
            if kind_of_delta == "text_delta" and isinstance(delta.get("text"), str):
                block["text"] = str(block.get("text", "")) + delta["text"]
                text.append(delta["text"])
                if delta["text"]:
                    yield TextDelta(delta["text"])
            elif kind_of_delta == "input_json_delta":
                arguments.setdefault(index, []).append(str(delta.get("partial_json") or ""))
            elif kind_of_delta == "thinking_delta":
                block["thinking"] = str(block.get("thinking", "")) + str(delta.get("thinking", ""))
                thinking.append(str(delta.get("thinking", "")))
            elif kind_of_delta == "signature_delta":
                block["signature"] = str(block.get("signature", "")) + str(
                    delta.get("signature", "")
                )
        elif kind == "content_block_stop":
            closed = blocks.get(index)
            if closed is not None and index in arguments:
                closed["input"] = _tool_input(closed, "".join(arguments[index]))
        elif kind == "message_delta":
            stop_reason = (payload.get("delta") or {}).get("stop_reason") or stop_reason
    yield stream.usage
    content = [blocks[index] for index in sorted(blocks)]
    calls = [
        TurnToolCall(
            str(blocks[index].get("id", "")),
            str(blocks[index].get("name", "")),
            "".join(arguments[index]).strip() or json.dumps(blocks[index].get("input") or {}),
        )
        for index in sorted(blocks)
        if blocks[index].get("type") == "tool_use" and index in arguments
    ]
    yield TurnResponse(
        text="".join(text),
        tool_calls=calls,
        messages=[{"role": "assistant", "content": content}],
        reasoning="".join(thinking) or None,
        finish_reason=stop_reason,
    )


def _tool_input(block: dict[str, Any], raw: str) -> Any:
    """The `input` object of a tool_use block sent back: the streamed JSON. Arguments the
    loop cannot parse get an error result; the block itself must still hold an object."""
    if not raw.strip():
        return block.get("input") or {}
    try:
        value = json.loads(raw)
    except ValueError:
        value, _ = resilient_json_parse_with_strategy(raw)
    return value if isinstance(value, dict) else {}

"""Any OpenAI-compatible chat-completions server: hosted OpenAI, vLLM, llama.cpp, Ollama.

These servers agree on the streaming wire format but not on structured output, so the
client asks for the strongest form first and steps down when the server says it does not
understand it (see `OpenAIChat`). Stepping down happens inside one request and is not a
retry: the loop's attempts are kept for real failures.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import httpx

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
    solution_messages,
    wire_conversation,
)
from ._http import (
    DEFAULT_TIMEOUT,
    bearer_headers,
    clean_key,
    client_scope,
    error_from_response,
    json_instruction,
    load_event,
    open_stream,
    redact,
    server_message,
    transport_error,
    warn_if_keyless,
)
from ._sse import aiter_sse

__all__ = ["OpenAIChat"]

StructuredMode = Literal["json_schema", "json_object", "none"]
_MODES: tuple[StructuredMode, ...] = ("json_schema", "json_object", "none")
# Words a server's error names when it is the response_format it cannot handle.
_FORMAT_WORDS = ("response_format", "json_schema", "json_object")
_DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIChat:
    """A model client for `{base_url}/chat/completions`, streamed over server-sent events.

    `base_url` includes the `/v1`; it and `api_key` default to the `OPENAI_BASE_URL` and
    `OPENAI_API_KEY` environment variables (read when the client is made). Without a key
    no `Authorization` header is sent, as local servers expect.

    Structured output (`structured=`):

    * `"json_schema"` (the default): ask for `{"type": "json_schema", ...}` with the
      solution schema, strict. When the server rejects that, with an HTTP error whatever
      its status whose body names `response_format`, `json_schema` or `json_object`, the
      client at once asks again with `{"type": "json_object", "schema": S}` (llama.cpp
      enforces that schema), and then with no `response_format` and the schema
      in the prompt. The step that worked is kept for this client's later requests.
    * `"json_object"` or `"none"`: that mode only, with no stepping down.

    `client`: an `httpx.AsyncClient` to send through (its timeout applies; it is never
    closed here). Without one, each request opens and closes its own, with `timeout`.
    `extra_body` is merged into every request body last, for server-specific options.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        structured: StructuredMode = "json_schema",
        temperature: float | None = None,
        extra_body: dict[str, Any] | None = None,
        timeout: httpx.Timeout | float | None = DEFAULT_TIMEOUT,
    ) -> None:
        if structured not in _MODES:
            raise ConfigurationError(
                f"structured must be one of {', '.join(_MODES)}, not {structured!r}"
            )
        self.model = model
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or _DEFAULT_BASE_URL
        self.base_url = base_url.rstrip("/")
        self._api_key = clean_key(
            api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        )
        warn_if_keyless(
            "tl.OpenAIChat", self._api_key, self.base_url, _DEFAULT_BASE_URL, "OPENAI_API_KEY"
        )
        self._client = client
        self.structured: StructuredMode = structured
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})
        self.timeout = timeout
        self._mode: StructuredMode = structured  # lowered when the server rejects a mode

    def __repr__(self) -> str:  # the key stays out of reprs, logs and tracebacks
        return f"OpenAIChat({self.model!r}, base_url={self.base_url!r})"

    @property
    def mode(self) -> StructuredMode:
        """The structured-output mode the next request starts with."""
        return self._mode

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _headers(self) -> dict[str, str]:
        return bearer_headers(self._api_key)

    def _body(self, request: SolutionRequest, mode: StructuredMode) -> dict[str, Any]:
        messages = solution_messages(request.messages, "openai-chat", request.media)
        plain = request.schema is None  # a plain-text answer (a code plan's program)
        if mode == "none" and not plain:
            _add_system_text(messages, json_instruction(request.schema or {}))
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.max_output_tokens is not None:  # a budget's room (PROTOCOL §12)
            body["max_completion_tokens"] = request.max_output_tokens
        if plain:
            pass  # no response_format, no JSON instruction
        elif mode == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.schema_name,
                    "schema": request.schema,
                    "strict": True,
                },
            }
        elif mode == "json_object":
            body["response_format"] = {"type": "json_object", "schema": request.schema}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        return body

    def _step_down(self, mode: StructuredMode, response: httpx.Response) -> StructuredMode | None:
        """The next mode to try after `response` rejected `mode`, or None to fail."""
        if self.structured != "json_schema" or mode == "none":
            return None
        text = response.text.lower()
        if not any(word in text for word in _FORMAT_WORDS):
            return None
        lower = _MODES[_MODES.index(mode) + 1]
        # Concurrent requests may have stepped down further already: never step back up.
        if _MODES.index(lower) > _MODES.index(self._mode):
            self._mode = lower
        return lower

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        what = f"chat completion ({self.model} at {self.url})"
        secrets = (self._api_key,)
        mode = self._mode
        try:
            async with client_scope(self._client, self.timeout) as client:
                while True:
                    async with client.stream(
                        "POST", self.url, json=self._body(request, mode), headers=self._headers()
                    ) as response:
                        if not response.is_success:
                            await response.aread()
                            lower = self._step_down(mode, response)
                            if lower is not None:
                                mode = lower
                                continue
                            raise error_from_response(response, what=what, secrets=secrets)
                        async for item in _read_stream(response, what, secrets):
                            yield item
                        return
        except httpx.TransportError as exc:
            raise transport_error(exc, what=what, secrets=secrets) from None

    # -- native tool calling (protocol "tools", PROTOCOL §9) --------------------------------

    turn_format = "openai-chat"

    def _turn_body(self, request: TurnRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages += wire_conversation(
            request.conversation,
            self.turn_format,
            text_message=lambda role, text: {"role": role, "content": text},
            media=request.media,
            strip_reasoning=_strip_chat_reasoning,
        )
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.max_output_tokens is not None:  # a budget's room (PROTOCOL §12)
            body["max_completion_tokens"] = request.max_output_tokens
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": spec.name,
                        **({"description": spec.description} if spec.description else {}),
                        "parameters": spec.parameters,
                    },
                }
                for spec in request.tools
            ]
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        return body

    async def stream_turn(self, request: TurnRequest) -> AsyncIterator[TurnItem]:
        """One request with the tools as functions; see `_read_turn_stream`."""
        what = f"chat completion ({self.model} at {self.url})"
        secrets = (self._api_key,)
        body = self._turn_body(request)
        async with open_stream(
            self._client, self.timeout, self.url, body, self._headers(), what=what, secrets=secrets
        ) as response:
            async for item in _read_turn_stream(response, what, secrets, request.iteration):
                yield item

    def tool_result_messages(
        self, response: TurnResponse, results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        """One `tool` message per call, in the calls' order (PROTOCOL §9)."""
        return chat_tool_messages(response, results)


async def _read_stream(
    response: httpx.Response, what: str, secrets: tuple[str | None, ...]
) -> AsyncIterator[TextDelta | Usage]:
    """The text and usage of a chat-completions event stream (see `_ChunkStream`)."""
    stream = _ChunkStream(response, what, secrets)
    async for choice in stream.choices():
        content = (choice.get("delta") or {}).get("content")
        if isinstance(content, str) and content:
            yield TextDelta(content)
    if stream.usage is not None:
        yield stream.usage


class _ChunkStream:
    """A chat-completions event stream as both readers walk it, so that where it ends,
    its errors and its usage are read one way.

    `choices()` yields each chunk's first choice until `[DONE]`: a chunk that reports an
    error is raised as a `ModelError`, and a stream that stops before `[DONE]` and before
    any `finish_reason` broke off. `usage` is the last chunk's that carried one, for the
    reader to yield once, at the end: servers that report running totals (vLLM's
    continuous usage) would otherwise be counted twice. `finish_reason` is the last one
    a choice gave.
    """

    def __init__(
        self, response: httpx.Response, what: str, secrets: tuple[str | None, ...]
    ) -> None:
        self._response = response
        self._what = what
        self._secrets = secrets
        self.usage: Usage | None = None
        self.finish_reason: str | None = None

    async def choices(self) -> AsyncIterator[dict[str, Any]]:
        what, secrets = self._what, self._secrets
        finished = False
        async for event in aiter_sse(self._response):
            data = event.data.strip()
            if data == "[DONE]":
                finished = True
                break
            if not data:
                continue
            chunk = load_event(data, what=what, secrets=secrets)
            if not isinstance(chunk, dict):
                continue
            if chunk.get("error") is not None:
                raise _stream_error(chunk, what, secrets)
            if isinstance(chunk.get("usage"), dict):
                counts = chunk["usage"]
                # As reported: the loop checks they are counts (`checked_usage`).
                self.usage = Usage(
                    counts.get("prompt_tokens") or 0, counts.get("completion_tokens") or 0
                )
            choices = chunk.get("choices") or []
            if choices and isinstance(choices[0], dict):
                choice = choices[0]
                yield choice
                if choice.get("finish_reason"):
                    finished = True
                    self.finish_reason = choice["finish_reason"]
        if not finished:
            raise ModelError(f"{what}: the stream ended before the answer did", status=None)


def _stream_error(chunk: dict[str, Any], what: str, secrets: tuple[str | None, ...]) -> ModelError:
    """An error the server reported inside a 200 stream.

    Its status comes from the error's numeric `code` when it has one (llama.cpp sends
    one); an `invalid_request_error` is the request's fault (400); anything else is
    taken as the server's fault, left without a status, and so retryable.
    """
    error = chunk["error"]
    status: int | None = None
    if isinstance(error, dict):
        code = error.get("code")
        if isinstance(code, int) and 400 <= code <= 599:
            status = code
        elif error.get("type") == "invalid_request_error":
            status = 400
    message = server_message(chunk) or json.dumps(error, ensure_ascii=False)
    return ModelError(
        f"{what}: error in stream: {redact(message, secrets)}",
        status=status,
        body=redact(json.dumps(chunk, ensure_ascii=False), secrets),
    )


def _add_system_text(messages: list[dict[str, Any]], text: str) -> None:
    """Append `text` to the first system message, or start the conversation with one.

    Not a trailing system message: several chat templates (served by llama.cpp, vLLM)
    refuse a system message anywhere but first.
    """
    for message in messages:
        if message.get("role") == "system" and isinstance(message.get("content"), str):
            message["content"] = f"{message['content']}\n\n{text}"
            return
    messages.insert(0, {"role": "system", "content": text})


# ---------------------------------------------------------------------------------------
# Native tool calling

# Where OpenAI-compatible servers put reasoning: DeepSeek and older vLLM send
# `reasoning_content`, newer vLLM and others `reasoning`, OpenRouter structured
# `reasoning_details`. It is sent back as `reasoning_content` (and the details verbatim).
_REASONING_KEYS = ("reasoning_content", "reasoning", "reasoning_details")


def _strip_chat_reasoning(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages without reasoning: a turn without tool calls does not send it back."""
    return [
        {key: value for key, value in message.items() if key not in _REASONING_KEYS}
        for message in messages
    ]


class _CallParts:
    """One tool call being assembled from its deltas."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


async def _read_turn_stream(
    response: httpx.Response, what: str, secrets: tuple[str | None, ...], iteration: int
) -> AsyncIterator[TurnItem]:
    """Text, tool calls and reasoning of a chat-completions stream, then the whole turn.

    Tool calls arrive as deltas keyed by `index`: the first carries the id and the name,
    the rest pieces of the arguments, which are concatenated until the stream ends. A
    server that leaves out `index` (some do) is read by id: a new id starts a new call.
    """
    text: list[str] = []
    reasoning: list[str] = []
    details: list[Any] = []
    calls: list[_CallParts] = []
    by_index: dict[int, _CallParts] = {}
    stream = _ChunkStream(response, what, secrets)
    async for choice in stream.choices():
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if isinstance(content, str) and content:
            text.append(content)
            yield TextDelta(content)
        # A server that sends both names sends the same text twice: read one.
        thought = delta.get("reasoning_content")
        if not isinstance(thought, str):
            thought = delta.get("reasoning")
        if isinstance(thought, str) and thought:
            reasoning.append(thought)
        if isinstance(delta.get("reasoning_details"), list):
            _merge_details(details, delta["reasoning_details"])
        for position, part in enumerate(delta.get("tool_calls") or []):
            if not isinstance(part, dict):
                continue
            call = _call_for(part, position, calls, by_index)
            if call is None:
                call = _CallParts()
                calls.append(call)
                if isinstance(part.get("index"), int):
                    by_index[part["index"]] = call
                function = part.get("function") or {}
                name = function.get("name") if isinstance(function, dict) else None
                yield ToolCallStarted(len(calls) - 1, name if isinstance(name, str) else "")
            if isinstance(part.get("id"), str) and part["id"] and not call.id:
                call.id = part["id"]
            function = part.get("function") or {}
            if isinstance(function, dict):
                if isinstance(function.get("name"), str) and not call.name:
                    call.name = function["name"]
                if isinstance(function.get("arguments"), str):
                    call.arguments.append(function["arguments"])
                elif isinstance(function.get("arguments"), dict):  # a server that sends objects
                    call.arguments.append(json.dumps(function["arguments"], ensure_ascii=False))
    if stream.usage is not None:
        yield stream.usage
    tool_calls = [
        TurnToolCall(call.id or f"call_{iteration}_{index}", call.name, "".join(call.arguments))
        for index, call in enumerate(calls)
    ]
    message = chat_assistant_message("".join(text), tool_calls)
    thoughts = "".join(reasoning)
    if thoughts:
        message["reasoning_content"] = thoughts
    if details:
        message["reasoning_details"] = details
    yield TurnResponse(
        text="".join(text),
        tool_calls=tool_calls,
        messages=[message],
        reasoning=thoughts or _details_text(details),
        finish_reason=stream.finish_reason,
    )


def _call_for(
    part: dict[str, Any], position: int, calls: list[_CallParts], by_index: dict[int, _CallParts]
) -> _CallParts | None:
    """The call a delta continues, or None when it starts a new one."""
    index = part.get("index")
    if isinstance(index, int):
        return by_index.get(index)
    # No index: a delta with an id not seen yet starts a call, anything else continues
    # the latest one.
    new_id = part.get("id")
    if not calls or (isinstance(new_id, str) and new_id and new_id != calls[-1].id):
        return None
    return calls[-1]


def _merge_details(details: list[Any], pieces: list[Any]) -> None:
    """Add streamed `reasoning_details` pieces: a piece with the same `index` and `type`
    as the last detail continues it (its text fields are concatenated), others are new."""
    for piece in pieces:
        if not isinstance(piece, dict):
            details.append(piece)
            continue
        last = details[-1] if details else None
        if (
            isinstance(last, dict)
            and "index" in piece
            and last.get("index") == piece.get("index")
            and last.get("type") == piece.get("type")
        ):
            for key, value in piece.items():
                if key in ("text", "summary", "data") and isinstance(value, str):
                    last[key] = str(last.get(key) or "") + value
                elif value is not None:
                    last[key] = value
        else:
            details.append(dict(piece))


def _details_text(details: list[Any]) -> str | None:
    parts = [
        str(detail.get("text") or detail.get("summary") or "")
        for detail in details
        if isinstance(detail, dict)
    ]
    return "".join(parts) or None

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

import base64
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .._errors import ModelError, is_retryable_status

__all__ = [
    "ModelClient",
    "ModelError",
    "SolutionRequest",
    "TextDelta",
    "ToolCallStarted",
    "ToolResult",
    "ToolSpec",
    "TurnClient",
    "TurnRequest",
    "TurnResponse",
    "TurnToolCall",
    "Usage",
    "chat_assistant_message",
    "chat_tool_messages",
    "estimate_tokens",
    "is_retryable_status",
    "output_limit",
    "wire_conversation",
]


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


# More tokens than any model's context holds: a count beyond it is not a count.
MAX_TOKEN_COUNT = 10**9


def checked_usage(usage: Usage, model: Any) -> Usage | None:
    """`usage` as a model client reported it, when both its fields are counts of tokens
    (whole numbers from 0 to `MAX_TOKEN_COUNT`); else None, said on the `tickloop`
    logger: a budget then counts the request's estimate (PROTOCOL §12), and the answer
    that came with it is kept."""
    counts: list[int] = []
    for name in ("input_tokens", "output_tokens"):
        value = getattr(usage, name)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if type(value) is not int or not 0 <= value <= MAX_TOKEN_COUNT:
            logging.getLogger("tickloop").warning(
                "%r reported %s=%.80r, which is not a count of tokens; the request's "
                "estimate counts instead",
                model,
                name,
                value,
            )
            return None
        counts.append(value)
    return Usage(*counts)


def estimate_tokens(text_chars: int) -> int:
    """Tokens estimated from characters: about four a token, the usual rule of thumb for
    English and JSON. Budgets (PROTOCOL §12) reserve a request's prompt by it, and count
    it for a request whose server reports no usage."""
    return -(-text_chars // 4)


def output_limit(own: int | None, request: SolutionRequest | TurnRequest) -> int | None:
    """The output limit a client sends: its own, or the request's (a budget's room) when
    that is lower; None when neither says."""
    limits = [limit for limit in (own, request.max_output_tokens) if limit is not None]
    return min(limits) if limits else None


@dataclass(slots=True)
class SolutionRequest:
    """One request of the solution protocol.

    `messages` are chat messages `{"role": "system"|"user"|"assistant", "content": str}`;
    `schema` is the solution's JSON Schema (strict-mode compatible), or None when the
    answer is plain text (a code plan's program, PROTOCOL §14: a client then asks for no
    structured output at all); `iteration` counts
    requests of the run from 1 (a scripted model answers by it); `path` is the ids of the
    agent calls above the run that asks (`()` at the root, PROTOCOL §11). `max_output_tokens`,
    when set, is the most the answer may write (a budget's room, PROTOCOL §12): a client
    sends it as the request's output limit.
    """

    messages: list[dict[str, Any]]
    schema: dict[str, Any] | None
    iteration: int
    schema_name: str = "solution"
    metadata: dict[str, Any] = field(default_factory=dict)
    # The agent-call ids above the run asking: a sub-agent's (PROTOCOL §11), () at the root.
    path: tuple[str, ...] = ()
    max_output_tokens: int | None = None
    # The bytes of the media its messages show (`{"type": "media"}` parts), by id.
    media: MediaLookup | None = None

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


# ---------------------------------------------------------------------------------------
# Native tool calling (protocol "tools", PROTOCOL §9)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call, as every provider describes one.

    `parameters` is the schema the model sees: bound parameters are already removed.
    """

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(slots=True)
class TurnRequest:
    """One request of the native tool-calling loop.

    `conversation` is provider-neutral at the top and provider-specific inside, so the
    loop never needs to know a wire format and a client never needs to know the log:

    * `{"role": "user" | "assistant", "text": str}`: plain text a person (or the loop,
      e.g. "your answer did not match the schema") wrote;
    * `{"format": str, "messages": [...], "keep_reasoning": bool}`: messages in a
      client's own wire format, exactly as that client produced them earlier in the run.
      `keep_reasoning` is False for a turn without tool calls, whose reasoning must not
      be sent back (PROTOCOL §9).

    `system` is the instructions (None when there are none); `iteration` counts the
    run's requests from 1; `path` is as `SolutionRequest.path`.
    """

    system: str | None
    conversation: list[dict[str, Any]]
    tools: list[ToolSpec]
    iteration: int
    metadata: dict[str, Any] = field(default_factory=dict)
    # The agent-call ids above the run asking: a sub-agent's (PROTOCOL §11), () at the root.
    path: tuple[str, ...] = ()
    max_output_tokens: int | None = None  # as `SolutionRequest.max_output_tokens`
    # The bytes of the media its messages mark (`media_mark`), by id: the run's keeper.
    media: MediaLookup | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "conversation": self.conversation,
            "tools": [
                {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
                for spec in self.tools
            ],
        }


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A tool call began in the stream: this response is (also) a tool-call turn.

    Streamed as soon as the call's name is known, so that the loop can stop showing the
    response's text as a final answer (PROTOCOL §9, streaming the final answer).
    """

    index: int
    name: str


@dataclass(frozen=True, slots=True)
class TurnToolCall:
    """One complete tool call of a response.

    `id` is the provider's id, kept only to pair the result (models may reuse one id in
    every turn, or even twice in one response: results are paired by position);
    `arguments` is the raw argument text, exactly as the model wrote it.
    """

    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class TurnResponse:
    """A whole response of the model: the last item a `stream_turn` yields.

    `messages` is the assistant turn in the client's wire format with every original
    part kept (text, tool calls, reasoning or thinking blocks, in order), ready to be
    sent back; `reasoning` is its reasoning as plain text, for people reading the log.
    """

    text: str
    tool_calls: list[TurnToolCall]
    messages: list[dict[str, Any]]
    reasoning: str | None = None
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result of one tool call, as text for the model; `is_error` when it failed.

    `media` are the `$media` references the result holds (images, audio): each wire
    format shows them as its own content parts, their bytes marked (`media_mark`) until
    the request is sent (`with_media`), so the log and journal hold references only."""

    content: str
    is_error: bool = False
    media: tuple[dict[str, Any], ...] = ()


TurnItem = TextDelta | ToolCallStarted | Usage | TurnResponse


@runtime_checkable
class TurnClient(Protocol):
    """A client that can drive the provider's own function calling.

    `turn_format` names the wire format of the messages it makes, so a log made with one
    format is never sent to a client that speaks another.
    """

    turn_format: str

    def stream_turn(self, request: TurnRequest) -> AsyncIterator[TurnItem]:
        """Yield the answer's text as it arrives, a `ToolCallStarted` when a call begins,
        a `Usage` when the server says, and last the complete `TurnResponse`.

        Raise `ModelError` for a failed request.
        """
        ...

    def tool_result_messages(
        self, response: TurnResponse, results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        """The messages that answer `response`'s tool calls: `results[i]` answers
        `response.tool_calls[i]`, in that order."""
        ...


def wire_conversation(
    conversation: Sequence[dict[str, Any]],
    turn_format: str,
    *,
    text_message: Callable[[str, str], dict[str, Any]],
    strip_reasoning: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    media: MediaLookup | None = None,
) -> list[dict[str, Any]]:
    """A `TurnRequest.conversation` as one client's wire messages.

    Every client walks the conversation the same way; only how a plain text becomes a
    message and how reasoning is removed differ, so those are passed in.
    """
    messages: list[dict[str, Any]] = []
    for entry in conversation:
        if "text" in entry:
            messages.append(text_message(str(entry.get("role", "user")), str(entry["text"])))
            continue
        if entry.get("format") != turn_format:
            raise ModelError(
                f"the conversation holds messages in the {entry.get('format')!r} wire format, "
                f"which a {turn_format!r} client cannot send; resume it with the same kind "
                "of model client (status 400, not retried)",
                status=400,
            )
        wire = [dict(message) for message in entry.get("messages", [])]
        wire = wire if entry.get("keep_reasoning") else strip_reasoning(wire)
        # The bytes of the media it shows, read now (the log holds references only).
        messages.extend(with_media(wire, media) if holds_media_mark(wire) else wire)
    return messages


# OpenAI's chat shape: `OpenAIChat` sends it and `ScriptedModel` records it, so that a
# script reads like the conversation a chat server would see.


def chat_assistant_message(text: str, calls: Sequence[TurnToolCall]) -> dict[str, Any]:
    """An assistant turn as a chat message: its text, and its calls (if any) as functions."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in calls
        ]
    return message


def chat_tool_messages(
    response: TurnResponse, results: Sequence[ToolResult]
) -> list[dict[str, Any]]:
    """One `tool` message per call, in the calls' order (PROTOCOL §9); a chat `tool`
    message cannot carry an image, so the media of the results follow in one user
    message of image (and audio) parts."""
    messages: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": call.id, "content": result.content}
        for call, result in zip(response.tool_calls, results, strict=True)
    ]
    parts: list[dict[str, Any]] = []
    for call, result in zip(response.tool_calls, results, strict=True):
        for ref in result.media:
            parts.append({"type": "text", "text": f"{ref[MEDIA_KEY]} ({call.name}):"})
            parts.append(_chat_media_part(ref))
    if parts:
        messages.append({"role": "user", "content": parts})
    return messages


def _chat_media_part(ref: dict[str, Any]) -> dict[str, Any]:
    mime = str(ref["mime"])
    if mime.startswith(_IMAGE_TYPES):
        return {"type": "image_url", "image_url": {"url": media_mark(ref)}}
    audio = _AUDIO_FORMATS.get(mime)
    if audio is not None:
        return {"type": "input_audio", "input_audio": {"data": media_mark(ref), "format": audio}}
    return {"type": "text", "text": f"({mime}, {ref.get('bytes')} bytes: not shown)"}


_AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


def anthropic_tool_messages(
    response: TurnResponse, results: Sequence[ToolResult]
) -> list[dict[str, Any]]:
    """Every result as a `tool_result` block, all in one user message, in the calls'
    order (PROTOCOL §9); a failed call's block says `is_error`."""
    blocks = [
        {
            "type": "tool_result",
            "tool_use_id": call.id,
            "content": _anthropic_content(result),
            **({"is_error": True} if result.is_error else {}),
        }
        for call, result in zip(response.tool_calls, results, strict=True)
    ]
    return [{"role": "user", "content": blocks}]


def _anthropic_content(result: ToolResult) -> Any:
    """A result's text, and its images as image blocks inside the `tool_result`."""
    if not result.media:
        return result.content
    blocks: list[dict[str, Any]] = [{"type": "text", "text": result.content}]
    for ref in result.media:
        mime = str(ref["mime"])
        if mime.startswith(_IMAGE_TYPES):
            source = {"type": "base64", "media_type": mime, "data": media_mark(ref)}
            blocks.append({"type": "image", "source": source})
        else:  # no audio blocks in the Messages API
            blocks.append(
                {"type": "text", "text": f"({mime}, {ref.get('bytes')} bytes: not shown)"}
            )
    return blocks


def responses_tool_messages(
    response: TurnResponse, results: Sequence[ToolResult]
) -> list[dict[str, Any]]:
    """One `function_call_output` item per call, in the calls' order (PROTOCOL §9); a
    result with images is a list of `input_text` and `input_image` parts."""
    return [
        {"type": "function_call_output", "call_id": call.id, "output": _responses_output(result)}
        for call, result in zip(response.tool_calls, results, strict=True)
    ]


def _responses_output(result: ToolResult) -> Any:
    if not result.media:
        return result.content
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": result.content}]
    for ref in result.media:
        mime = str(ref["mime"])
        if mime.startswith(_IMAGE_TYPES):
            parts.append({"type": "input_image", "image_url": media_mark(ref)})
        else:
            parts.append({"type": "input_text", "text": f"({mime}, {ref.get('bytes')} bytes)"})
    return parts


# -- media in requests -------------------------------------------------------------------

#: The MIME types of images (a MIME type, not a path; tests/test_run_paths.py).
_IMAGE_TYPES = "image/"

#: The key of a media reference (`_core._media.MEDIA_KEY`; `_models` sits beside `_core`).
MEDIA_KEY = "$media"

#: What a message holds where a media's bytes go, until the request is sent: the log, the
#: journal and a replay's comparison see the reference, never the bytes.
MEDIA_MARK = "tickloop-media:"

MediaLookup = Callable[[str], "tuple[str, bytes] | None"]


def media_mark(ref: dict[str, Any]) -> str:
    return MEDIA_MARK + str(ref[MEDIA_KEY])


def with_media(value: Any, media: MediaLookup | None, key: str = "") -> Any:
    """`value` (messages about to be sent) with each media mark replaced by the bytes it
    names: base64 under a `data` key (Anthropic's image source, OpenAI's input_audio),
    a `data:` URL anywhere else (OpenAI's image_url, Responses' image_url)."""
    if isinstance(value, str):
        if not value.startswith(MEDIA_MARK) or media is None:
            return value
        found = media(value[len(MEDIA_MARK) :])
        if found is None:
            raise ModelError(
                f"the request shows media {value[len(MEDIA_MARK) :]!r}, whose bytes are not "
                "kept (a run without a store, resumed elsewhere?) (status 400, not retried)",
                status=400,
            )
        mime, data = found
        encoded = base64.b64encode(data).decode("ascii")
        return encoded if key == "data" else f"data:{mime};base64,{encoded}"
    if isinstance(value, dict):
        return {name: with_media(item, media, name) for name, item in value.items()}
    if isinstance(value, list):
        return [with_media(item, media, key) for item in value]
    return value


def solution_messages(
    messages: list[dict[str, Any]], wire: str, media: MediaLookup | None
) -> list[dict[str, Any]]:
    """A solution request's messages for one wire format: a content given as parts
    (`{"type": "text"}`, and `{"type": "media", "$media": ...}` for an image or audio
    clip the state shows) becomes that format's own parts, the bytes read now."""
    converted: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            converted.append(dict(message))
            continue
        parts = [_solution_part(part, wire) for part in content]
        converted.append({**message, "content": with_media(parts, media)})
    return converted


def _solution_part(part: dict[str, Any], wire: str) -> dict[str, Any]:
    if part.get("type") != "media":
        text = str(part.get("text", ""))
        return {"type": "input_text" if wire == "openai-responses" else "text", "text": text}
    if wire == "anthropic":
        result = ToolResult("", media=(part,))
        return dict(_anthropic_content(result)[1])
    if wire == "openai-responses":
        return dict(_responses_output(ToolResult("", media=(part,)))[1])
    return _chat_media_part(part)


def marked_media(value: Any) -> Iterator[str]:
    """The ids of the media `value` (messages in a wire format) marks, in order."""
    if isinstance(value, str):
        if value.startswith(MEDIA_MARK):
            yield value[len(MEDIA_MARK) :]
    elif isinstance(value, dict):
        for item in value.values():
            yield from marked_media(item)
    elif isinstance(value, list):
        for item in value:
            yield from marked_media(item)


def holds_media_mark(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith(MEDIA_MARK)
    if isinstance(value, dict):
        return any(holds_media_mark(item) for item in value.values())
    if isinstance(value, list):
        return any(holds_media_mark(item) for item in value)
    return False


# How each wire format (`TurnClient.turn_format`) answers a turn's tool calls: a client
# of that format and a replay of a run recorded in it (`tl.ReplayModel`) answer alike.
TOOL_RESULT_MESSAGES: dict[
    str, Callable[[TurnResponse, Sequence[ToolResult]], list[dict[str, Any]]]
] = {
    "openai-chat": chat_tool_messages,
    "scripted": chat_tool_messages,
    "anthropic": anthropic_tool_messages,
    "openai-responses": responses_tool_messages,
}

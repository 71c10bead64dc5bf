"""Tests of the Anthropic Messages client against recorded-looking streams (no network)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from tickloop._errors import ConfigurationError
from tickloop._models._anthropic import Anthropic
from tickloop._models._base import ModelClient, ModelError, SolutionRequest, TextDelta, Usage

KEY = "sk-ant-test-0123456789"
BASE = "http://claude.test"
SCHEMA = {
    "type": "object",
    "properties": {"calls": {"type": "array"}, "output": {"type": ["string", "null"]}},
    "required": ["calls", "output"],
}
MESSAGES = [
    {"role": "system", "content": "You plan tool calls."},
    {"role": "user", "content": "What is 1 + 2?"},
]


class Server:
    """Answers the i-th request with the i-th reply and keeps every request."""

    def __init__(self, *replies: httpx.Response | Exception) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    @property
    def body(self) -> dict[str, Any]:
        return json.loads(self.requests[-1].content)


def event(payload: dict[str, Any]) -> str:
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n"


def message_start(input_tokens: int = 472, **cache: int) -> dict[str, Any]:
    usage = {"input_tokens": input_tokens, "output_tokens": 2}
    usage.update(cache)
    return {
        "type": "message_start",
        "message": {
            "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        },
    }


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def json_delta(index: int, text: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "input_json_delta", "partial_json": text},
    }


def text_delta(index: int, text: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "text_delta", "text": text},
    }


def ending(output_tokens: int = 89, stop_reason: str = "tool_use") -> list[dict[str, Any]]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]


def tool_stream(pieces: list[str], name: str = "solution") -> list[dict[str, Any]]:
    tool = {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": name, "input": {}}
    return [
        message_start(),
        block_start(0, tool),
        {"type": "ping"},
        json_delta(0, ""),
        *(json_delta(0, piece) for piece in pieces),
        {"type": "content_block_stop", "index": 0},
        *ending(),
    ]


def stream(events: list[dict[str, Any]], *, tail: str = "") -> httpx.Response:
    body = ("".join(event(e) for e in events) + tail).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 5):  # small network chunks, split anywhere
            yield body[i : i + 5]

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())


def model_for(server: Server, **options: Any) -> Anthropic:
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    options = {"base_url": BASE, "api_key": KEY, "client": client} | options
    return Anthropic("claude-sonnet-4-5", **options)


def request(**overrides: Any) -> SolutionRequest:
    fields: dict[str, Any] = {"messages": MESSAGES, "schema": SCHEMA, "iteration": 1}
    return SolutionRequest(**(fields | overrides))


def run(model: Anthropic, req: SolutionRequest | None = None) -> list[TextDelta | Usage]:
    async def main() -> list[TextDelta | Usage]:
        return [item async for item in model.stream_solution(req or request())]

    return trio.run(main)


def run_error(model: Anthropic) -> tuple[list[TextDelta | Usage], ModelError]:
    received: list[TextDelta | Usage] = []

    async def main() -> None:
        async for item in model.stream_solution(request()):
            received.append(item)

    with pytest.raises(ModelError) as caught:
        trio.run(main)
    return received, caught.value


PIECES = ['{"calls": [', '], "out', 'put": "3"}']


# -- the request ----------------------------------------------------------------------------


def test_is_a_model_client() -> None:
    assert isinstance(model_for(Server()), ModelClient)


def test_url_and_headers() -> None:
    server = Server(stream(tool_stream(PIECES)))
    run(model_for(server))
    (sent,) = server.requests
    assert sent.method == "POST"
    assert str(sent.url) == f"{BASE}/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers


def test_anthropic_version_can_be_set() -> None:
    server = Server(stream(tool_stream(PIECES)))
    run(model_for(server, anthropic_version="2024-01-01"))
    assert server.requests[0].headers["anthropic-version"] == "2024-01-01"


def test_base_url_and_key_default_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://proxy.test/")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    server = Server(stream(tool_stream(PIECES)))
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    run(Anthropic("m", client=client))
    assert str(server.requests[0].url) == "http://proxy.test/v1/messages"
    assert server.requests[0].headers["x-api-key"] == "sk-ant-from-env"


def test_hosted_api_is_the_default_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    assert Anthropic("m").url == "https://api.anthropic.com/v1/messages"


def test_tool_mode_body_forces_the_solution_tool() -> None:
    server = Server(stream(tool_stream(PIECES, name="plan")))
    run(model_for(server, max_tokens=1000), request(schema_name="plan"))
    body = server.body
    assert body["model"] == "claude-sonnet-4-5"
    assert body["max_tokens"] == 1000
    assert body["stream"] is True
    assert body["system"] == "You plan tool calls."
    assert body["messages"] == [{"role": "user", "content": "What is 1 + 2?"}]
    (tool,) = body["tools"]
    assert tool["name"] == "plan"
    assert tool["input_schema"] == SCHEMA
    assert body["tool_choice"] == {"type": "tool", "name": "plan"}


def test_system_messages_go_to_the_system_field_and_same_roles_merge() -> None:
    messages = [
        {"role": "system", "content": "Rule one."},
        {"role": "user", "content": "Input: 1"},
        {"role": "user", "content": "State: {}"},
        {"role": "assistant", "content": '{"calls": []}'},
        {"role": "system", "content": "Rule two."},
        {"role": "user", "content": "Errors: none"},
    ]
    server = Server(stream(tool_stream(PIECES)))
    run(model_for(server), request(messages=messages))
    assert server.body["system"] == "Rule one.\n\nRule two."
    assert server.body["messages"] == [
        {"role": "user", "content": "Input: 1\n\nState: {}"},
        {"role": "assistant", "content": '{"calls": []}'},
        {"role": "user", "content": "Errors: none"},
    ]


def test_no_system_messages_means_no_system_field() -> None:
    server = Server(stream(tool_stream(PIECES)))
    run(model_for(server), request(messages=MESSAGES[1:]))
    assert "system" not in server.body


def test_json_mode_asks_in_the_prompt_and_sends_no_tools() -> None:
    server = Server(
        stream([message_start(), block_start(0, {"type": "text", "text": ""}), *ending()])
    )
    run(model_for(server, structured="json"))
    body = server.body
    assert "tools" not in body and "tool_choice" not in body
    assert body["system"].startswith("You plan tool calls.\n\n")
    assert json.dumps(SCHEMA) in body["system"]


def test_bad_options_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        Anthropic("m", structured="xml")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        Anthropic("m", max_tokens=0)


def test_the_key_is_not_in_the_repr() -> None:
    assert KEY not in repr(model_for(Server()))


# -- the stream -----------------------------------------------------------------------------


def test_partial_json_is_streamed_in_order_then_usage() -> None:
    items = run(model_for(Server(stream(tool_stream(PIECES)))))
    assert items == [*(TextDelta(piece) for piece in PIECES), Usage(472, 89)]


def test_cached_prompt_tokens_count_as_input() -> None:
    events = tool_stream(PIECES)
    events[0] = message_start(10, cache_creation_input_tokens=200, cache_read_input_tokens=3000)
    assert run(model_for(Server(stream(events))))[-1] == Usage(3210, 89)


def test_json_mode_streams_the_text() -> None:
    events = [
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        *(text_delta(0, piece) for piece in PIECES),
        {"type": "content_block_stop", "index": 0},
        *ending(output_tokens=12, stop_reason="end_turn"),
    ]
    items = run(model_for(Server(stream(events)), structured="json"))
    assert items == [*(TextDelta(piece) for piece in PIECES), Usage(472, 12)]


def test_tool_mode_ignores_thinking_and_text_blocks() -> None:
    events = [
        message_start(),
        block_start(0, {"type": "thinking", "thinking": ""}),
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Let me add."},
        },
        block_start(1, {"type": "text", "text": ""}),
        text_delta(1, "I will call the tool."),
        block_start(2, {"type": "tool_use", "id": "toolu_1", "name": "solution", "input": {}}),
        json_delta(2, "{}"),
        *ending(),
    ]
    assert run(model_for(Server(stream(events)))) == [TextDelta("{}"), Usage(472, 89)]


def test_error_event_mid_stream_overloaded_is_retryable_529() -> None:
    events = [*tool_stream(PIECES)[:4], json_delta(0, '{"calls": [')]
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    received, err = run_error(model_for(Server(stream([*events, overloaded]))))
    assert received == [TextDelta('{"calls": [')]
    assert err.status == 529 and err.retryable
    assert "overloaded_error" in str(err) and "Overloaded" in str(err)


def test_error_event_invalid_request_is_not_retryable() -> None:
    invalid = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long"},
    }
    _, err = run_error(model_for(Server(stream([message_start(), invalid]))))
    assert err.status == 400 and not err.retryable
    assert "prompt is too long" in str(err)


def test_a_stream_that_ends_before_message_stop_is_a_transport_error() -> None:
    events = tool_stream(PIECES)[:5]
    received, err = run_error(
        model_for(Server(stream(events, tail="event: content_block_delta\n")))
    )
    assert received == [TextDelta(PIECES[0])]
    assert err.status is None and err.retryable


# -- HTTP and transport errors --------------------------------------------------------------


def api_error(status: int, kind: str, message: str, **headers: str) -> httpx.Response:
    payload = {"type": "error", "error": {"type": kind, "message": message}}
    return httpx.Response(status, json=payload, headers=headers)


def test_overloaded_response_is_retryable_529() -> None:
    _, err = run_error(model_for(Server(api_error(529, "overloaded_error", "Overloaded"))))
    assert err.status == 529 and err.retryable
    assert "529" in str(err) and "Overloaded" in str(err)


def test_authentication_error_is_not_retryable_and_hides_the_key() -> None:
    response = api_error(401, "authentication_error", f"invalid x-api-key {KEY}")
    _, err = run_error(model_for(Server(response)))
    assert err.status == 401 and not err.retryable
    assert "authentication_error" in str(err) and "invalid x-api-key" in str(err)
    assert KEY not in str(err)


def test_rate_limit_carries_retry_after() -> None:
    response = api_error(
        429, "rate_limit_error", "Number of requests exceeded", **{"retry-after": "20"}
    )
    _, err = run_error(model_for(Server(response)))
    assert err.status == 429 and err.retry_after == 20.0


def test_transport_error_has_no_status() -> None:
    _, err = run_error(model_for(Server(httpx.ReadTimeout("timed out"))))
    assert err.status is None and err.retryable
    assert "ReadTimeout" in str(err)


def test_a_given_client_is_left_open() -> None:
    server = Server(stream(tool_stream(PIECES)))
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    run(Anthropic("m", base_url=BASE, client=client))
    assert not client.is_closed


def test_a_plain_text_request_forces_no_tool_and_streams_the_text() -> None:
    """A code plan's program (PROTOCOL §14) is asked for as plain text: no schema, no
    forced tool, no JSON instruction; the text blocks stream, whatever the mode."""
    program = ["```python\n", "x = 1\n", "final_answer(x)\n```"]
    events = [
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        *(text_delta(0, piece) for piece in program),
        {"type": "content_block_stop", "index": 0},
        *ending(output_tokens=12, stop_reason="end_turn"),
    ]
    for mode in ("tool", "json"):
        server = Server(stream(events))
        items = run(model_for(server, structured=mode), request(schema=None))
        assert "tools" not in server.body and "tool_choice" not in server.body
        assert "JSON" not in server.body.get("system", "")
        assert [i.text for i in items if isinstance(i, TextDelta)] == program

"""Tests of OpenAIChat against recorded-looking chat-completions streams (no network).

Every server here is an `httpx.MockTransport` handler that answers the requests it is
sent in order, so the tests can look at exactly what the client asked.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
import trio

from tickloop._errors import ConfigurationError
from tickloop._models import _http
from tickloop._models._base import ModelClient, ModelError, SolutionRequest, TextDelta, Usage
from tickloop._models._openai_chat import OpenAIChat

KEY = "sk-test-0123456789abcdef"
BASE = "http://llm.test/v1"
SCHEMA = {
    "type": "object",
    "properties": {"calls": {"type": "array"}, "output": {"type": ["string", "null"]}},
    "required": ["calls", "output"],
    "additionalProperties": False,
}
MESSAGES = [
    {"role": "system", "content": "You plan tool calls."},
    {"role": "user", "content": "What is 1 + 2?"},
]
ANSWER = '{"calls": [], "output": "3"}'

Reply = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


class Server:
    """Answers the i-th request with the i-th reply and keeps every request."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if callable(reply):
            return reply(request)
        return reply

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(request.content) for request in self.requests]


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-AbC123",
        "object": "chat.completion.chunk",
        "created": 1730000000,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_0ba0d124f1",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        "usage": None,
        **extra,
    }


def openai_events(pieces: list[str], usage: tuple[int, int] | None = (52, 11)) -> list[str]:
    """The `data:` payloads OpenAI sends for an answer streamed in `pieces`."""
    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk({"content": piece}) for piece in pieces]
    events.append(chunk({}, finish="stop"))
    if usage is not None:
        prompt, completion = usage
        events.append(
            chunk({}, usage={"prompt_tokens": prompt, "completion_tokens": completion})
            | {"choices": []}
        )
    return [json.dumps(event) for event in events] + ["[DONE]"]


def sse(payloads: list[str], line_end: str = "\n") -> bytes:
    return "".join(f"data: {p}{line_end}{line_end}" for p in payloads).encode()


def stream_response(body: bytes, split: int | None = None) -> httpx.Response:
    """A 200 event stream, delivered in network chunks of `split` bytes when given."""

    async def pieces() -> AsyncIterator[bytes]:
        step = split or len(body) or 1
        for i in range(0, len(body), step):
            yield body[i : i + step]

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=pieces())


def ok(pieces: list[str] | None = None, usage: tuple[int, int] | None = (52, 11)) -> httpx.Response:
    return stream_response(sse(openai_events(pieces or [ANSWER], usage)))


def error(status: int, payload: Any, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=payload, headers=headers)


def request(**overrides: Any) -> SolutionRequest:
    fields: dict[str, Any] = {"messages": MESSAGES, "schema": SCHEMA, "iteration": 1}
    return SolutionRequest(**(fields | overrides))


def model_for(server: Server, **options: Any) -> OpenAIChat:
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    options = {"base_url": BASE, "api_key": KEY, "client": client} | options
    return OpenAIChat("gpt-4o-mini", **options)


async def _collect(model: OpenAIChat, req: SolutionRequest) -> list[TextDelta | Usage]:
    return [item async for item in model.stream_solution(req)]


def run(model: OpenAIChat, req: SolutionRequest | None = None) -> list[TextDelta | Usage]:
    return trio.run(_collect, model, req or request())


def run_error(
    model: OpenAIChat, req: SolutionRequest | None = None
) -> tuple[list[TextDelta | Usage], ModelError]:
    """What arrived before the stream failed, and the failure."""
    received: list[TextDelta | Usage] = []

    async def main() -> None:
        async for item in model.stream_solution(req or request()):
            received.append(item)

    with pytest.raises(ModelError) as caught:
        trio.run(main)
    return received, caught.value


def text_of(items: list[TextDelta | Usage]) -> str:
    return "".join(item.text for item in items if isinstance(item, TextDelta))


# -- the request ----------------------------------------------------------------------------


def test_is_a_model_client() -> None:
    assert isinstance(model_for(Server()), ModelClient)


def test_request_shape() -> None:
    server = Server(ok())
    run(model_for(server), request(schema_name="solution"))
    (sent,) = server.requests
    assert sent.method == "POST"
    assert str(sent.url) == f"{BASE}/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["content-type"] == "application/json"
    assert server.bodies[0] == {
        "model": "gpt-4o-mini",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "solution", "schema": SCHEMA, "strict": True},
        },
    }


def test_schema_name_comes_from_the_request() -> None:
    server = Server(ok())
    run(model_for(server), request(schema_name="plan_v2"))
    assert server.bodies[0]["response_format"]["json_schema"]["name"] == "plan_v2"


def test_temperature_and_extra_body_are_sent() -> None:
    server = Server(ok())
    run(model_for(server, temperature=0.2, extra_body={"top_k": 20, "seed": 7}))
    body = server.bodies[0]
    assert (body["temperature"], body["top_k"], body["seed"]) == (0.2, 20, 7)


def test_base_url_and_key_default_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server = Server(ok())
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    run(OpenAIChat("m", client=client))
    assert str(server.requests[0].url) == "http://localhost:8000/v1/chat/completions"
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"


def test_hosted_openai_is_the_default_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert OpenAIChat("m").url == "https://api.openai.com/v1/chat/completions"


def test_no_key_sends_no_authorization_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = Server(ok())
    run(model_for(server, api_key=None))
    assert "authorization" not in server.requests[0].headers


def test_the_key_is_not_in_the_repr() -> None:
    assert KEY not in repr(model_for(Server()))


def test_unknown_structured_mode_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        OpenAIChat("m", structured="xml")  # type: ignore[arg-type]


# -- the stream -----------------------------------------------------------------------------


def test_text_deltas_arrive_in_order_and_usage_once_at_the_end() -> None:
    pieces = ['{"calls"', ': [], "out', 'put": "3"}']
    items = run(model_for(Server(ok(pieces, usage=(52, 11)))))
    assert items == [*(TextDelta(piece) for piece in pieces), Usage(52, 11)]


def test_network_chunks_at_any_size_reassemble_the_same_answer() -> None:
    body = sse(openai_events(['{"calls": [], ', '"output": "naïve ☃"}']), "\r\n")
    for split in (1, 2, 3, 7, 64):
        items = run(model_for(Server(stream_response(body, split))))
        assert text_of(items) == '{"calls": [], "output": "naïve ☃"}', split
        assert items[-1] == Usage(52, 11)


def test_keep_alive_comments_and_empty_deltas_are_ignored() -> None:
    body = (
        b": keep-alive\n\n"
        + sse(openai_events(["{}"], usage=None)[:1])
        + b": keep-alive\n\n"
        + sse(openai_events(["{}"], usage=None)[1:])
    )
    assert run(model_for(Server(stream_response(body)))) == [TextDelta("{}")]


def test_usage_in_several_chunks_is_counted_once() -> None:
    # vLLM's continuous usage stats repeat running totals on every chunk.
    events = [
        chunk({"content": "{"}, usage={"prompt_tokens": 30, "completion_tokens": 1}),
        chunk({"content": "}"}, usage={"prompt_tokens": 30, "completion_tokens": 2}),
        chunk({}, finish="stop", usage={"prompt_tokens": 30, "completion_tokens": 3}),
    ]
    body = sse([*(json.dumps(e) for e in events), "[DONE]"])
    assert run(model_for(Server(stream_response(body)))) == [
        TextDelta("{"),
        TextDelta("}"),
        Usage(30, 3),
    ]


def test_a_stream_without_done_but_with_a_finish_reason_is_complete() -> None:
    body = sse(openai_events([ANSWER], usage=None)[:-1])  # no [DONE]
    assert run(model_for(Server(stream_response(body)))) == [TextDelta(ANSWER)]


def test_a_stream_that_stops_early_is_a_retryable_error_after_its_text() -> None:
    body = sse(openai_events(['{"calls": ['])[:2])  # role chunk, one piece, then nothing
    received, err = run_error(model_for(Server(stream_response(body))))
    assert received == [TextDelta('{"calls": [')]
    assert err.status is None and err.retryable


def test_an_error_chunk_mid_stream_raises_after_the_text_so_far() -> None:
    failure = {"error": {"message": "The server had an error", "type": "server_error"}}
    payloads = [*openai_events(['{"calls": [', "{"])[:3], json.dumps(failure)]
    received, err = run_error(model_for(Server(stream_response(sse(payloads)))))
    assert text_of(received) == '{"calls": [{'
    assert "The server had an error" in str(err)
    assert err.retryable


def test_an_error_chunk_with_a_code_takes_its_status() -> None:
    payloads = [json.dumps({"error": {"code": 400, "message": "context too long"}})]
    _, err = run_error(model_for(Server(stream_response(sse(payloads)))))
    assert err.status == 400 and not err.retryable
    assert "context too long" in str(err)


def test_a_chunk_that_is_not_json_is_an_error() -> None:
    _, err = run_error(model_for(Server(stream_response(b"data: {oops\n\n"))))
    assert "not JSON" in str(err)


# -- structured-output fallback -------------------------------------------------------------

REJECT_400 = {
    "error": {
        "message": "Invalid parameter: 'response_format' of type 'json_schema' is not "
        "supported with this model.",
        "type": "invalid_request_error",
        "param": "response_format",
        "code": None,
    }
}
# llama.cpp answers an unsupported response_format with a 500.
REJECT_500 = {
    "error": {
        "code": 500,
        "message": 'response_format type must be one of "text" or "json_object", '
        "but got: json_schema",
        "type": "server_error",
    }
}
REJECT_OBJECT_500 = {
    "error": {"code": 500, "message": "Unsupported response_format", "type": "server_error"}
}


def test_rejected_json_schema_falls_back_to_json_object_at_once() -> None:
    server = Server(error(400, REJECT_400), ok())
    model = model_for(server)
    assert text_of(run(model)) == ANSWER
    first, second = server.bodies
    assert first["response_format"]["type"] == "json_schema"
    assert second["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert second["messages"] == MESSAGES


def test_fallback_goes_down_to_no_response_format_on_a_500_naming_it() -> None:
    server = Server(error(500, REJECT_500), error(500, REJECT_OBJECT_500), ok())
    model = model_for(server)
    assert text_of(run(model)) == ANSWER
    kinds = [body.get("response_format", {}).get("type") for body in server.bodies]
    assert kinds == ["json_schema", "json_object", None]
    # With nothing enforcing the shape, the schema is asked for in the system prompt.
    system = server.bodies[2]["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("You plan tool calls.")
    assert json.dumps(SCHEMA) in system["content"]
    assert server.bodies[2]["messages"][1:] == MESSAGES[1:]


def test_no_response_format_adds_a_system_message_when_there_is_none() -> None:
    server = Server(ok())
    run(model_for(server, structured="none"), request(messages=MESSAGES[1:]))
    messages = server.bodies[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert json.dumps(SCHEMA) in messages[0]["content"]


def test_the_mode_that_worked_is_kept_for_later_requests() -> None:
    server = Server(error(400, REJECT_400), ok(), ok())
    model = model_for(server)
    run(model)
    run(model)
    kinds = [body["response_format"]["type"] for body in server.bodies]
    assert kinds == ["json_schema", "json_object", "json_object"]
    assert model.mode == "json_object"


def test_the_mode_is_kept_per_client() -> None:
    server = Server(error(400, REJECT_400), ok(), ok())
    run(model_for(server))
    run(model_for(server))
    kinds = [body["response_format"]["type"] for body in server.bodies]
    assert kinds == ["json_schema", "json_object", "json_schema"]


def test_a_rejection_is_remembered_even_when_the_next_step_fails() -> None:
    # The retry the loop makes after the 503 should not ask for json_schema again.
    server = Server(error(400, REJECT_400), error(503, {"error": "busy"}), ok())
    model = model_for(server)
    _, err = run_error(model)
    assert err.status == 503
    run(model)
    kinds = [body["response_format"]["type"] for body in server.bodies]
    assert kinds == ["json_schema", "json_object", "json_object"]


def test_no_fallback_on_a_500_that_does_not_name_the_format() -> None:
    server = Server(error(500, {"error": {"message": "CUDA out of memory", "type": "server"}}))
    model = model_for(server)
    _, err = run_error(model)
    assert len(server.requests) == 1
    assert err.status == 500 and err.retryable
    assert "CUDA out of memory" in str(err)
    assert model.mode == "json_schema"


@pytest.mark.parametrize("mode", ["json_object", "none"])
def test_a_forced_mode_is_asked_and_never_stepped_down(mode: str) -> None:
    server = Server(error(400, REJECT_400))
    model = model_for(server, structured=mode)
    _, err = run_error(model)
    assert err.status == 400
    assert len(server.requests) == 1
    expected = {"type": "json_object", "schema": SCHEMA} if mode == "json_object" else None
    assert server.bodies[0].get("response_format") == expected


# -- errors ---------------------------------------------------------------------------------


def test_401_is_not_retryable_and_carries_the_servers_message() -> None:
    payload = {
        "error": {
            "message": f"Incorrect API key provided: {KEY}. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    _, err = run_error(model_for(Server(error(401, payload))))
    assert err.status == 401 and not err.retryable
    assert "401" in str(err)
    assert "Incorrect API key provided" in str(err)
    # Even a server that echoes the key does not get it into the exception.
    assert KEY not in str(err)
    assert err.body is not None and KEY not in err.body


def test_an_error_body_that_is_not_json_is_quoted() -> None:
    response = httpx.Response(502, text="<html>Bad Gateway</html>")
    _, err = run_error(model_for(Server(response)))
    assert err.status == 502 and err.retryable
    assert "Bad Gateway" in str(err)


def test_ollama_style_string_error_is_the_message() -> None:
    _, err = run_error(model_for(Server(error(404, {"error": 'model "llama9" not found'}))))
    assert err.status == 404
    assert 'model "llama9" not found' in str(err)


def test_429_with_retry_after_seconds() -> None:
    payload = {"error": {"message": "Rate limit reached", "type": "requests"}}
    _, err = run_error(model_for(Server(error(429, payload, **{"retry-after": "7"}))))
    assert err.status == 429 and err.retryable
    assert err.retry_after == 7.0
    assert "Rate limit reached" in str(err)


def test_429_with_retry_after_http_date(monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
    monkeypatch.setattr(_http, "_now", now.timestamp)
    later = format_datetime(datetime(2025, 3, 1, 12, 0, 30, tzinfo=UTC), usegmt=True)
    assert later == "Sat, 01 Mar 2025 12:00:30 GMT"
    _, err = run_error(model_for(Server(error(429, {}, **{"retry-after": later}))))
    assert err.retry_after == 30.0


def test_retry_after_date_in_the_past_means_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "_now", datetime(2025, 3, 1, tzinfo=UTC).timestamp)
    headers = {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}
    _, err = run_error(model_for(Server(error(503, {}, **headers))))
    assert err.retry_after == 0.0


def test_retry_after_ms_is_preferred() -> None:
    headers = {"retry-after": "1", "retry-after-ms": "1500"}
    _, err = run_error(model_for(Server(error(429, {}, **headers))))
    assert err.retry_after == 1.5


def test_unreadable_retry_after_is_ignored() -> None:
    _, err = run_error(model_for(Server(error(429, {}, **{"retry-after": "soon"}))))
    assert err.retry_after is None


def test_a_transport_error_has_no_status_and_is_retryable() -> None:
    server = Server(httpx.ConnectError("[Errno 111] Connection refused"))
    _, err = run_error(model_for(server))
    assert err.status is None and err.retryable
    assert "ConnectError" in str(err) and "Connection refused" in str(err)
    assert KEY not in str(err)


def test_a_connection_lost_mid_stream_is_a_transport_error_after_the_text() -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield sse(openai_events(['{"calls": ['])[:2])
        raise httpx.RemoteProtocolError("peer closed connection without sending complete body")

    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=broken())
    received, err = run_error(model_for(Server(response)))
    assert received == [TextDelta('{"calls": [')]
    assert err.status is None
    assert "peer closed connection" in str(err)


# -- the httpx client -----------------------------------------------------------------------


def test_a_given_client_is_used_and_left_open() -> None:
    server = Server(ok(), ok())
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    model = OpenAIChat("m", base_url=BASE, client=client)
    run(model)
    run(model)
    assert len(server.requests) == 2
    assert not client.is_closed


def test_without_a_client_each_request_opens_and_closes_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Server(ok(), error(500, {"error": "down"}))
    opened: list[httpx.AsyncClient] = []
    real = httpx.AsyncClient

    def fake_client(**kwargs: Any) -> httpx.AsyncClient:
        client = real(transport=httpx.MockTransport(server), **kwargs)
        opened.append(client)
        return client

    monkeypatch.setattr(httpx, "AsyncClient", fake_client)
    model = OpenAIChat("m", base_url=BASE, timeout=12.5)
    run(model)
    run_error(model)
    assert len(opened) == 2
    assert all(client.is_closed for client in opened)
    assert opened[0].timeout == httpx.Timeout(12.5)


@pytest.mark.parametrize("mode", ["json_schema", "json_object", "none"])
def test_a_plain_text_request_asks_for_no_response_format(mode: str) -> None:
    """A code plan's program (PROTOCOL §14) is plain text: no `response_format` and no
    JSON instruction, in every structured mode."""
    server = Server(ok(["```python\nfinal_answer(1)\n```"]))
    items = run(model_for(server, structured=mode), request(schema=None))
    body = server.bodies[0]
    assert "response_format" not in body
    assert body["messages"] == MESSAGES
    assert text_of(items) == "```python\nfinal_answer(1)\n```"

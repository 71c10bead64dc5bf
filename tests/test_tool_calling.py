"""Native tool calling (PROTOCOL §9) on every provider's wire format, with no network.

Each provider is an `httpx.MockTransport` that answers with recorded-looking event
streams (OpenAI chat completions, Anthropic Messages, OpenAI Responses), so the tests see
exactly what the client sends back on the next turn. Scenarios that every provider must
pass are parametrized over the three; the exact request bodies are checked per provider.
Time is trio's virtual clock: handlers "take" seconds that pass instantly.
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pydantic
import pytest
import trio
import trio.testing

import tickloop as tl

# ------------------------------------------------------------------------------------------
# Streams as the providers send them


def sse_response(events: list[tuple[str | None, dict[str, Any] | str]]) -> httpx.Response:
    """A 200 event stream, split into small network chunks as real servers' are."""
    text = ""
    for name, payload in events:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        text += (f"event: {name}\n" if name else "") + f"data: {data}\n\n"
    body = text.encode()

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 97):
            yield body[i : i + 97]

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=pieces())


def split(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


Call = tuple[str, str, str]  # provider id, tool name, raw argument text


class Provider:
    """What a test needs to know about one wire format."""

    name = ""

    def model(self, client: httpx.AsyncClient) -> Any:
        raise NotImplementedError

    def tool_turn(self, calls: list[Call], *, reasoning: str | None = None) -> httpx.Response:
        raise NotImplementedError

    def text_turn(self, text: str, *, reasoning: str | None = None) -> httpx.Response:
        raise NotImplementedError

    def results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        """(provider id, content) of the tool results that end a request body."""
        raise NotImplementedError

    def tool_names(self, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Tool name -> the parameter schema the model was shown."""
        raise NotImplementedError

    def assistant_turns(self, body: dict[str, Any]) -> list[tuple[bool, bool]]:
        """(has tool calls, carries reasoning) of every assistant turn sent back."""
        raise NotImplementedError


class OpenAIChatProvider(Provider):
    name = "openai-chat"

    def model(self, client: httpx.AsyncClient) -> Any:
        return tl.OpenAIChat(
            "gpt-4o-mini", base_url="http://llm.test/v1", api_key="sk-t", client=client
        )

    @staticmethod
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
            "object": "chat.completion.chunk",
            "created": 1741570283,
            "model": "gpt-4o-mini-2024-07-18",
            "system_fingerprint": "fp_06737a9306",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    def _finish(self, events: list[dict[str, Any]], reason: str) -> httpx.Response:
        events.append(self.chunk({}, reason))
        usage = {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99}
        events.append({**self.chunk({}), "choices": [], "usage": usage})
        return sse_response([(None, e) for e in events] + [(None, "[DONE]")])

    def _reasoning(self, reasoning: str | None) -> list[dict[str, Any]]:
        if not reasoning:
            return []
        return [self.chunk({"reasoning_content": piece}) for piece in split(reasoning)]

    def tool_turn(self, calls: list[Call], *, reasoning: str | None = None) -> httpx.Response:
        events = [self.chunk({"role": "assistant", "content": None, "refusal": None})]
        events += self._reasoning(reasoning)
        for index, (id, name, arguments) in enumerate(calls):
            start = {"index": index, "id": id, "type": "function"}
            events.append(
                self.chunk({"tool_calls": [{**start, "function": {"name": name, "arguments": ""}}]})
            )
            for piece in split(arguments):
                events.append(
                    self.chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        return self._finish(events, "tool_calls")

    def text_turn(self, text: str, *, reasoning: str | None = None) -> httpx.Response:
        events = [self.chunk({"role": "assistant", "content": "", "refusal": None})]
        events += self._reasoning(reasoning)
        events += [self.chunk({"content": piece}) for piece in split(text)]
        return self._finish(events, "stop")

    def results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        tail = []
        for message in reversed(body["messages"]):
            if message["role"] != "tool":
                break
            tail.append((message["tool_call_id"], message["content"]))
        return tail[::-1]

    def tool_names(self, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {t["function"]["name"]: t["function"]["parameters"] for t in body.get("tools", [])}

    def assistant_turns(self, body: dict[str, Any]) -> list[tuple[bool, bool]]:
        return [
            ("tool_calls" in m, "reasoning_content" in m)
            for m in body["messages"]
            if m["role"] == "assistant"
        ]


class AnthropicProvider(Provider):
    name = "anthropic"

    def model(self, client: httpx.AsyncClient) -> Any:
        return tl.Anthropic(
            "claude-sonnet-4-5", base_url="http://claude.test", api_key="k", client=client
        )

    @staticmethod
    def _start() -> list[tuple[str, dict[str, Any]]]:
        message = {
            "id": "msg_01Aq9w938a90dw8q",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 472, "output_tokens": 2},
        }
        return [
            ("message_start", {"type": "message_start", "message": message}),
            ("ping", {"type": "ping"}),
        ]

    @staticmethod
    def _block(index: int, block: dict[str, Any], deltas: list[dict[str, Any]]) -> list[Any]:
        events: list[Any] = [
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": block},
            )
        ]
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        return events

    def _thinking(self, reasoning: str | None) -> list[Any]:
        if not reasoning:
            return []
        deltas = [{"type": "thinking_delta", "thinking": piece} for piece in split(reasoning)]
        deltas.append({"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"})
        return self._block(0, {"type": "thinking", "thinking": "", "signature": ""}, deltas)

    def _stop(self, events: list[Any], reason: str) -> httpx.Response:
        delta = {"stop_reason": reason, "stop_sequence": None}
        events.append(
            (
                "message_delta",
                {"type": "message_delta", "delta": delta, "usage": {"output_tokens": 89}},
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return sse_response(events)

    def tool_turn(self, calls: list[Call], *, reasoning: str | None = None) -> httpx.Response:
        events = self._start() + self._thinking(reasoning)
        first = 1 if reasoning else 0
        for offset, (id, name, arguments) in enumerate(calls):
            block = {"type": "tool_use", "id": id, "name": name, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [{"type": "input_json_delta", "partial_json": p} for p in split(arguments)]
            events += self._block(first + offset, block, deltas)
        return self._stop(events, "tool_use")

    def text_turn(self, text: str, *, reasoning: str | None = None) -> httpx.Response:
        events = self._start() + self._thinking(reasoning)
        deltas = [{"type": "text_delta", "text": piece} for piece in split(text)]
        events += self._block(1 if reasoning else 0, {"type": "text", "text": ""}, deltas)
        return self._stop(events, "end_turn")

    def results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        last = body["messages"][-1]
        assert last["role"] == "user"
        return [
            (block["tool_use_id"], block["content"])
            for block in last["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]

    def tool_names(self, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {t["name"]: t["input_schema"] for t in body.get("tools", [])}

    def assistant_turns(self, body: dict[str, Any]) -> list[tuple[bool, bool]]:
        turns = []
        for message in body["messages"]:
            if message["role"] != "assistant":
                continue
            types = [block["type"] for block in message["content"]]
            turns.append(("tool_use" in types, "thinking" in types))
        return turns


class ResponsesProvider(Provider):
    name = "openai-responses"

    def model(self, client: httpx.AsyncClient) -> Any:
        return tl.OpenAIResponses(
            "gpt-5-mini", base_url="http://llm.test/v1", api_key="sk-t", client=client
        )

    @staticmethod
    def _created() -> list[Any]:
        response = {"id": "resp_67ccd2bed1ec8190", "object": "response", "status": "in_progress"}
        return [
            ("response.created", {"type": "response.created", "response": response}),
            ("response.in_progress", {"type": "response.in_progress", "response": response}),
        ]

    @staticmethod
    def _item(
        index: int, added: dict[str, Any], done: dict[str, Any], middle: list[Any]
    ) -> list[Any]:
        return [
            (
                "response.output_item.added",
                {"type": "response.output_item.added", "output_index": index, "item": added},
            ),
            *middle,
            (
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": index, "item": done},
            ),
        ]

    def _reasoning(self, reasoning: str | None) -> list[Any]:
        if not reasoning:
            return []
        added = {"id": "rs_68af4030592c8193", "type": "reasoning", "summary": []}
        done = {
            **added,
            "summary": [{"type": "summary_text", "text": reasoning}],
            "encrypted_content": "gAAAAABor0BF-enc",
        }
        return self._item(0, added, done, [])

    def _completed(self, events: list[Any], output: list[dict[str, Any]]) -> httpx.Response:
        response = {
            "id": "resp_67ccd2bed1ec8190",
            "object": "response",
            "status": "completed",
            "output": output,
            "usage": {"input_tokens": 120, "output_tokens": 31, "total_tokens": 151},
        }
        events.append(("response.completed", {"type": "response.completed", "response": response}))
        return sse_response(events)

    def tool_turn(self, calls: list[Call], *, reasoning: str | None = None) -> httpx.Response:
        events = self._created() + self._reasoning(reasoning)
        first = 1 if reasoning else 0
        output = []
        for offset, (id, name, arguments) in enumerate(calls):
            index = first + offset
            item_id = f"fc_{index:02d}68af403d"
            added = {
                "id": item_id,
                "type": "function_call",
                "status": "in_progress",
                "arguments": "",
                "call_id": id,
                "name": name,
            }
            done = {**added, "status": "completed", "arguments": arguments}
            middle: list[Any] = [
                (
                    "response.function_call_arguments.delta",
                    {
                        "type": "response.function_call_arguments.delta",
                        "item_id": item_id,
                        "output_index": index,
                        "delta": piece,
                    },
                )
                for piece in split(arguments)
            ]
            events += self._item(index, added, done, middle)
            output.append(done)
        return self._completed(events, output)

    def text_turn(self, text: str, *, reasoning: str | None = None) -> httpx.Response:
        events = self._created() + self._reasoning(reasoning)
        index = 1 if reasoning else 0
        added = {
            "id": "msg_68af4044",
            "type": "message",
            "status": "in_progress",
            "content": [],
            "role": "assistant",
        }
        done = {
            **added,
            "status": "completed",
            "content": [{"type": "output_text", "annotations": [], "text": text}],
        }
        middle = [
            (
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": "msg_68af4044",
                    "output_index": index,
                    "content_index": 0,
                    "delta": piece,
                },
            )
            for piece in split(text)
        ]
        events += self._item(index, added, done, middle)
        return self._completed(events, [done])

    def results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        tail = []
        for item in reversed(body["input"]):
            if item.get("type") != "function_call_output":
                break
            tail.append((item["call_id"], item["output"]))
        return tail[::-1]

    def tool_names(self, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {t["name"]: t["parameters"] for t in body.get("tools", [])}

    def assistant_turns(self, body: dict[str, Any]) -> list[tuple[bool, bool]]:
        turns: list[tuple[bool, bool]] = []
        current: list[str] | None = None
        for item in body["input"]:
            kind = item.get("type", "message")
            assistant = kind in ("reasoning", "function_call") or (
                kind == "message" and item.get("role") == "assistant"
            )
            if assistant:
                current = current if current is not None else []
                current.append(kind)
            elif current is not None:
                turns.append(("function_call" in current, "reasoning" in current))
                current = None
        if current is not None:
            turns.append(("function_call" in current, "reasoning" in current))
        return turns


PROVIDERS = [OpenAIChatProvider(), AnthropicProvider(), ResponsesProvider()]
each_provider = pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)


class Server:
    """Answers the i-th request with the i-th reply and keeps every request body."""

    def __init__(self, *replies: httpx.Response) -> None:
        self.replies = list(replies)
        self.bodies: list[dict[str, Any]] = []
        self.urls: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        self.urls.append(str(request.url))
        return self.replies.pop(0)


def run_agent(
    provider: Provider,
    server: Server,
    tools: list[tl.Tool],
    input: Any = "What is the weather?",
    **options: Any,
) -> tuple[tl.RunResult, float]:
    """Run on virtual time; returns the result and the virtual seconds it took."""
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    agent = tl.Agent(provider.model(client), tools=tools, protocol="tools", **options)

    async def main() -> tuple[tl.RunResult, float]:
        result = await agent.run_async(input)
        return result, trio.current_time()

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# ------------------------------------------------------------------------------------------
# Tools


@tl.tool
async def weather(city: str) -> str:
    """The current weather of a city."""
    await trio.sleep(1)
    return f"{city}: 21°C and sunny"


@tl.tool
def echo(text: str) -> str:
    """Say a text back."""
    return text


@tl.tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


# ------------------------------------------------------------------------------------------
# Every provider


@each_provider
def test_two_parallel_calls_then_a_final_answer(provider: Provider) -> None:
    server = Server(
        provider.tool_turn(
            [("call_a", "weather", '{"city": "Paris"}'), ("call_b", "weather", '{"city": "Oslo"}')]
        ),
        provider.text_turn("Paris is sunny; so is Oslo."),
    )
    result, elapsed = run_agent(provider, server, [weather])
    assert result.output == "Paris is sunny; so is Oslo."
    assert result.iterations == 2
    first, second = result.records["c1.0"], result.records["c1.1"]
    # Both ran at once: each takes a second, and the whole run took one.
    assert first.started == second.started == 0
    assert first.finished == second.finished == elapsed == 1
    assert provider.results(server.bodies[1]) == [
        ("call_a", "Paris: 21°C and sunny"),
        ("call_b", "Oslo: 21°C and sunny"),
    ]
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert result.usage.total_tokens == sum((result.usage.input_tokens, result.usage.output_tokens))


@each_provider
def test_an_id_reused_every_turn_and_twice_in_one_response_pairs_by_position(
    provider: Provider,
) -> None:
    server = Server(
        provider.tool_turn(
            [("call_0", "echo", '{"text": "one"}'), ("call_0", "echo", '{"text": "two"}')]
        ),
        provider.tool_turn([("call_0", "echo", '{"text": "three"}')]),
        provider.text_turn("done"),
    )
    result, _ = run_agent(provider, server, [echo])
    assert result.output == "done"
    assert provider.results(server.bodies[1]) == [("call_0", "one"), ("call_0", "two")]
    assert provider.results(server.bodies[2]) == [("call_0", "three")]
    # Engine ids stay unique whatever the provider's ids were.
    assert [r.output for r in result.records.values()] == ["one", "two", "three"]
    assert list(result.records) == ["c1.0", "c1.1", "c2.0"]


ARGUMENTS = [
    ('```json\n{"text": "fenced",}\n```', "fenced"),
    ('Sure! Here are the arguments: {"text": "in prose"} Hope that helps.', "in prose"),
    ('{"text": "trailing",}', "trailing"),
    (
        '{"text": "a } and a { and a \\"quoted, comma\\" inside",}',
        'a } and a { and a "quoted, comma" inside',
    ),
]


@each_provider
def test_tool_arguments_are_repaired_only_as_far_as_the_protocol_allows(
    provider: Provider,
) -> None:
    calls = [(f"call_{i}", "echo", raw) for i, (raw, _) in enumerate(ARGUMENTS)]
    calls.append(("call_x", "echo", '{"text": "never closed'))
    server = Server(provider.tool_turn(calls), provider.text_turn("ok"))
    result, _ = run_agent(provider, server, [echo])
    results = provider.results(server.bodies[1])
    assert [content for _, content in results[:-1]] == [expected for _, expected in ARGUMENTS]
    hopeless = results[-1][1]
    assert hopeless.startswith("Error: Tool 'echo' got arguments that are not valid JSON")
    assert "Unterminated string" in hopeless  # the parser's own words, for the model
    # The hopeless call never ran and is an error of the run, with the raw text kept.
    (error,) = result.errors
    assert error["data"]["call"]["_arguments"] == '{"text": "never closed'
    assert "c1.4" not in result.records


@each_provider
def test_handler_exceptions_and_unknown_tools_become_results_and_the_loop_goes_on(
    provider: Provider,
) -> None:
    server = Server(
        provider.tool_turn(
            [
                ("call_1", "explode", '{"reason": "disk full"}'),
                ("call_2", "teleport", '{"to": "Mars"}'),
                ("call_3", "echo", '{"text": 42}'),
                ("call_4", "echo", '{"text": "fine"}'),
            ]
        ),
        provider.text_turn("Sorry, some tools failed."),
    )
    events: list[tl.RunEvent] = []
    result, _ = run_agent(provider, server, [echo, explode], on_event=events.append)
    assert result.output == "Sorry, some tools failed."
    assert provider.results(server.bodies[1]) == [
        ("call_1", "Error: Tool 'explode' failed: RuntimeError: disk full"),
        ("call_2", "Error: Tool 'teleport' does not exist; the tools are: echo, explode"),
        (
            "call_3",
            "Error: Tool 'echo' was not run: parameters of 'echo' do not match its schema: "
            "text: 42 is not of type 'string'",
        ),
        ("call_4", "fine"),
    ]
    failed = [e for e in events if isinstance(e, tl.CallFinished) and e.status == "failed"]
    assert [(e.call_id, e.error["message"]) for e in failed] == [
        ("c1.0", "RuntimeError: disk full")
    ]


@tl.tool(bind={"unit": "preferred_unit"})
def temperature(city: str, unit: str) -> str:
    """The temperature of a city, in a unit."""
    return f"{city}: 21 {unit}"


@each_provider
def test_bound_parameters_are_hidden_and_the_input_wins(provider: Provider) -> None:
    server = Server(
        provider.tool_turn([("call_1", "temperature", '{"city": "Rome", "unit": "kelvin"}')]),
        provider.text_turn("21 degrees."),
    )
    result, _ = run_agent(
        provider, server, [temperature], input={"question": "Rome?", "preferred_unit": "celsius"}
    )
    shown = provider.tool_names(server.bodies[0])["temperature"]
    assert list(shown["properties"]) == ["city"] and shown["required"] == ["city"]
    assert provider.results(server.bodies[1]) == [("call_1", "Rome: 21 celsius")]
    assert result.records["c1.0"].params == {"city": "Rome", "unit": "celsius"}


class Forecast(pydantic.BaseModel):
    city: str
    celsius: int


@each_provider
def test_reasoning_is_resent_on_tool_turns_only_and_a_bad_final_answer_is_fed_back(
    provider: Provider,
) -> None:
    server = Server(
        provider.tool_turn(
            [("call_1", "weather", '{"city": "Lima"}')], reasoning="I need the weather first."
        ),
        provider.text_turn("It is warm in Lima.", reasoning="Now I answer."),
        provider.text_turn('{"city": "Lima", "celsius": 21}', reasoning="JSON this time."),
    )
    result, _ = run_agent(provider, server, [weather], output=Forecast)
    assert result.output == Forecast(city="Lima", celsius=21)
    assert result.iterations == 3
    # Turn 1 called a tool: its reasoning goes back. Turn 2 did not: its reasoning stays
    # in the log but is not sent.
    assert provider.assistant_turns(server.bodies[1]) == [(True, True)]
    assert provider.assistant_turns(server.bodies[2]) == [(True, True), (False, False)]
    kept = [e.get("reasoning") for e in result.view("turn") if e["role"] == "assistant"]
    assert kept == ["I need the weather first.", "Now I answer.", "JSON this time."]
    # The invalid answer was an error of the run and was told to the model.
    (error,) = result.errors
    assert error["data"]["call"] == {"output": "It is warm in Lima."}
    assert "not JSON" in error["data"]["error"]["message"]
    assert "not accepted" in json.dumps(server.bodies[2])
    assert "JSON Schema" in json.dumps(server.bodies[0])  # the schema was asked for


@tl.tool(output_path="†state.token")
async def login(user: str) -> str:
    """Log in and get a token."""
    await trio.sleep(2)
    return f"token-{user}"


@tl.tool(depends_on=["login"])
async def fetch(path: str, ctx: tl.CallContext) -> str:
    """Fetch a path with the session token."""
    await trio.sleep(1)
    return f"{path} as {ctx.state['token']}"


@each_provider
def test_depends_on_between_two_calls_of_one_response_is_honoured(provider: Provider) -> None:
    server = Server(
        provider.tool_turn(
            [("call_1", "login", '{"user": "ann"}'), ("call_2", "fetch", '{"path": "/me"}')]
        ),
        provider.text_turn("You are ann."),
    )
    result, elapsed = run_agent(provider, server, [login, fetch])
    first, second = result.records["c1.0"], result.records["c1.1"]
    assert first.finished == second.started == 2  # fetch waited for login, then started
    assert elapsed == 3
    assert result.state == {"token": "token-ann"}  # the prescribed output path
    assert provider.results(server.bodies[1]) == [
        ("call_1", "token-ann"),
        ("call_2", "/me as token-ann"),
    ]


@each_provider
def test_the_final_answer_streams_and_the_tool_turn_does_not(provider: Provider) -> None:
    server = Server(
        provider.tool_turn([("call_1", "echo", '{"text": "x"}')], reasoning="Think first."),
        provider.text_turn("A final answer, in pieces.", reasoning="Then answer."),
    )
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    agent = tl.Agent(provider.model(client), tools=[echo], protocol="tools")

    async def main() -> tuple[list[str], tl.RunResult]:
        async with agent.stream("go") as stream:
            chunks = [chunk async for chunk in stream.text()]
        return chunks, stream.result

    chunks, result = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert "".join(chunks) == result.output == "A final answer, in pieces."
    assert len(chunks) == len(split(result.output))  # as the server sent them


@each_provider
def test_an_overloaded_server_is_retried_after_its_retry_after(provider: Provider) -> None:
    busy = httpx.Response(
        503, json={"error": {"message": "overloaded"}}, headers={"retry-after": "7"}
    )
    server = Server(busy, provider.text_turn("back"))
    result, elapsed = run_agent(provider, server, [])
    assert result.output == "back" and elapsed == 7
    assert server.bodies[0] == server.bodies[1]


# ------------------------------------------------------------------------------------------
# The exact second request, per provider


def test_openai_chat_second_request_body() -> None:
    provider = OpenAIChatProvider()
    server = Server(
        provider.tool_turn(
            [("call_a", "weather", '{"city": "Paris"}'), ("call_b", "weather", '{"city": "Oslo"}')],
            reasoning="Two cities: two calls.",
        ),
        provider.text_turn("Sunny in both."),
    )
    run_agent(provider, server, [weather], instructions="Answer briefly.")
    assert server.urls == ["http://llm.test/v1/chat/completions"] * 2
    assert server.bodies[1] == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What is the weather?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    },
                ],
                "reasoning_content": "Two cities: two calls.",
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "Paris: 21°C and sunny"},
            {"role": "tool", "tool_call_id": "call_b", "content": "Oslo: 21°C and sunny"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "description": "The current weather of a city.",
                    "parameters": weather.parameters,
                },
            }
        ],
    }


def test_anthropic_second_request_body() -> None:
    provider = AnthropicProvider()
    server = Server(
        provider.tool_turn(
            [
                ("toolu_01", "weather", '{"city": "Paris"}'),
                ("toolu_02", "weather", '{"city": "Oslo"}'),
            ],
            reasoning="Two cities: two calls.",
        ),
        provider.text_turn("Sunny in both."),
    )
    run_agent(provider, server, [weather], instructions="Answer briefly.")
    assert server.urls == ["http://claude.test/v1/messages"] * 2
    assert server.bodies[1] == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "system": "Answer briefly.",
        "messages": [
            {"role": "user", "content": "What is the weather?"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": "Two cities: two calls.",
                        "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h",
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": "weather",
                        "input": {"city": "Paris"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_02",
                        "name": "weather",
                        "input": {"city": "Oslo"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01",
                        "content": "Paris: 21°C and sunny",
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_02",
                        "content": "Oslo: 21°C and sunny",
                    },
                ],
            },
        ],
        "stream": True,
        "tools": [
            {
                "name": "weather",
                "description": "The current weather of a city.",
                "input_schema": weather.parameters,
            }
        ],
    }


def test_openai_responses_second_request_body() -> None:
    provider = ResponsesProvider()
    server = Server(
        provider.tool_turn(
            [("call_a", "weather", '{"city": "Paris"}'), ("call_b", "weather", '{"city": "Oslo"}')],
            reasoning="Two cities: two calls.",
        ),
        provider.text_turn("Sunny in both."),
    )
    run_agent(provider, server, [weather], instructions="Answer briefly.")
    assert server.urls == ["http://llm.test/v1/responses"] * 2
    assert server.bodies[1] == {
        "model": "gpt-5-mini",
        "instructions": "Answer briefly.",
        "input": [
            {"role": "user", "content": "What is the weather?"},
            {
                "id": "rs_68af4030592c8193",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "Two cities: two calls."}],
                "encrypted_content": "gAAAAABor0BF-enc",
            },
            {
                "id": "fc_0168af403d",
                "type": "function_call",
                "status": "completed",
                "arguments": '{"city": "Paris"}',
                "call_id": "call_a",
                "name": "weather",
            },
            {
                "id": "fc_0268af403d",
                "type": "function_call",
                "status": "completed",
                "arguments": '{"city": "Oslo"}',
                "call_id": "call_b",
                "name": "weather",
            },
            {
                "type": "function_call_output",
                "call_id": "call_a",
                "output": "Paris: 21°C and sunny",
            },
            {"type": "function_call_output", "call_id": "call_b", "output": "Oslo: 21°C and sunny"},
        ],
        "stream": True,
        "tools": [
            {
                "type": "function",
                "name": "weather",
                "description": "The current weather of a city.",
                "parameters": weather.parameters,
            }
        ],
    }


# ------------------------------------------------------------------------------------------
# Provider details


def test_anthropic_failed_results_say_is_error_and_a_user_text_joins_their_message() -> None:
    provider = AnthropicProvider()
    server = Server(
        provider.tool_turn([("toolu_01", "explode", '{"reason": "no"}')]),
        provider.text_turn("not json"),
        provider.text_turn('{"city": "Oslo", "celsius": 3}'),
    )
    run_agent(provider, server, [explode], output=Forecast)
    (tool_results,) = [m for m in server.bodies[1]["messages"] if m["role"] == "user"][1:]
    assert tool_results["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01",
            "content": "Error: Tool 'explode' failed: RuntimeError: no",
            "is_error": True,
        }
    ]
    roles = [m["role"] for m in server.bodies[2]["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]  # alternating


def test_anthropic_text_before_a_tool_call_is_kept_in_the_assistant_turn() -> None:
    provider = AnthropicProvider()
    events = provider._start()
    events += provider._block(
        0, {"type": "text", "text": ""}, [{"type": "text_delta", "text": "Let me check."}]
    )
    events += provider._block(
        1,
        {"type": "tool_use", "id": "toolu_01", "name": "echo", "input": {}},
        [{"type": "input_json_delta", "partial_json": '{"text": "hi"}'}],
    )
    server = Server(provider._stop(events, "tool_use"), provider.text_turn("hi"))
    run_agent(provider, server, [echo])
    assistant = server.bodies[1]["messages"][1]
    assert assistant["content"] == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_01", "name": "echo", "input": {"text": "hi"}},
    ]


def test_openai_chat_reasoning_field_and_structured_details_are_sent_back_verbatim() -> None:
    provider = OpenAIChatProvider()
    chunk = provider.chunk
    details = [{"type": "reasoning.encrypted", "data": "gAAAAAB", "id": "rs_1", "index": 0}]
    events = [
        chunk({"role": "assistant", "content": None}),
        chunk({"reasoning": "vLLM calls it "}),
        chunk({"reasoning": "reasoning."}),
        chunk({"reasoning_details": details}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "echo", "arguments": '{"text": "x"}'},
                    }
                ]
            }
        ),
    ]
    server = Server(provider._finish(events, "tool_calls"), provider.text_turn("x"))
    run_agent(provider, server, [echo])
    assistant = server.bodies[1]["messages"][1]
    assert assistant["reasoning_content"] == "vLLM calls it reasoning."
    assert assistant["reasoning_details"] == details


def test_openai_chat_calls_without_ids_or_indexes_still_pair() -> None:
    """Some compatible servers send whole calls with no `index`, or no `id` at all."""
    provider = OpenAIChatProvider()
    chunk = provider.chunk
    events = [
        chunk({"role": "assistant", "content": None}),
        chunk({"tool_calls": [{"id": "a", "function": {"name": "echo", "arguments": '{"text"'}}]}),
        chunk({"tool_calls": [{"function": {"arguments": ': "one"}'}}]}),
        chunk(
            {
                "tool_calls": [
                    {"id": "b", "function": {"name": "echo", "arguments": '{"text": "two"}'}}
                ]
            }
        ),
    ]
    no_ids = [
        chunk({"role": "assistant", "content": None}),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "function": {"name": "echo", "arguments": '{"text": "3"}'}}
                ]
            }
        ),
    ]
    server = Server(
        provider._finish(events, "tool_calls"),
        provider._finish(no_ids, "tool_calls"),
        provider.text_turn("done"),
    )
    run_agent(provider, server, [echo])
    assert provider.results(server.bodies[1]) == [("a", "one"), ("b", "two")]
    (call,) = server.bodies[2]["messages"][-2]["tool_calls"]
    assert provider.results(server.bodies[2]) == [(call["id"], "3")]
    assert call["id"] == "call_2_0"  # made up once, used on both sides


def test_responses_solution_protocol_streams_the_solution_text() -> None:
    provider = ResponsesProvider()
    server = Server(provider.text_turn(json.dumps({"calls": [], "output": "42"})))
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    agent = tl.Agent(provider.model(client), instructions="Answer.")
    result = trio.run(agent.run_async, "question")
    assert result.output == "42"
    body = server.bodies[0]
    assert body["text"]["format"]["type"] == "json_schema"
    assert body["text"]["format"]["strict"] is True
    assert body["instructions"].startswith("Answer.")
    assert [item["role"] for item in body["input"]] == ["user"]


def test_responses_failed_stream_is_retried_then_raises_execute_error_with_the_log() -> None:
    failed = sse_response(
        [
            (
                "response.failed",
                {
                    "type": "response.failed",
                    "response": {"error": {"code": "server_error", "message": "try again"}},
                },
            )
        ]
    )
    provider = ResponsesProvider()
    server = Server(failed, provider.text_turn("recovered"))
    result, elapsed = run_agent(provider, server, [])
    assert result.output == "recovered"
    assert 2 <= elapsed <= 3  # one backoff of 2 + jitter seconds, on virtual time

    bad = sse_response(
        [("error", {"type": "error", "code": "invalid_prompt", "message": "refused"})]
    )
    server = Server(bad)
    with pytest.raises(tl.ExecuteError) as caught:
        run_agent(provider, server, [])
    assert "invalid_prompt: refused" in str(caught.value)
    assert len(server.bodies) == 1  # a 400-class error is not retried
    assert caught.value.messages[-1] == {
        "type": "text",
        "role": "user",
        "text": "What is the weather?",
    }


def test_clients_are_exported_and_speak_their_formats() -> None:
    names: dict[str, Callable[..., Any]] = {
        "openai-chat": tl.OpenAIChat,
        "anthropic": tl.Anthropic,
        "openai-responses": tl.OpenAIResponses,
    }
    for format, client in names.items():
        assert client("m", api_key="k").turn_format == format
    assert "sk-secret" not in repr(tl.OpenAIResponses("m", api_key="sk-secret"))


class _When(pydantic.BaseModel):
    at: datetime.date
    amount: decimal.Decimal


@each_provider
def test_a_pydantic_input_reaches_the_model_as_json(provider: Provider) -> None:
    """Issue 16 item 1: it used to be a raw TypeError under protocol="tools"."""
    server = Server(provider.text_turn("done."))
    result, _ = run_agent(
        provider, server, [echo], input=_When(at=datetime.date(2026, 1, 2), amount="1.5")
    )
    assert result.output == "done."
    assert '\\"at\\": \\"2026-01-02\\", \\"amount\\": \\"1.5\\"' in json.dumps(server.bodies[0])

"""The native tool-calling loop (PROTOCOL §9) itself: log, limits, retries, streaming.

Provider wire formats are tested in test_tool_calling.py; here the model is the scripted
one, or a small fake client when a test needs a stream no script can make. Time is trio's
virtual clock throughout.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
import trio
import trio.testing

import tickloop as tl
from tickloop._models._base import (
    ModelError,
    TextDelta,
    ToolCallStarted,
    ToolResult,
    TurnRequest,
    TurnResponse,
    TurnToolCall,
    Usage,
)


def virtual(function: Callable[[], Any]) -> Any:
    return trio.run(function, clock=trio.testing.MockClock(autojump_threshold=0))


def run(agent: tl.Agent, input: Any = "Go.", **options: Any) -> tl.RunResult:
    return virtual(lambda: agent.run_async(input, **options))


def call(name: str, arguments: Any, id: str | None = None) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, **({"id": id} if id else {})}


@tl.tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    await trio.sleep(1)
    return a + b


@tl.tool
def echo(text: str) -> str:
    """Say a text back."""
    return text


@tl.tool
def now() -> dict[str, int]:
    """The time, as fields."""
    return {"hour": 9, "minute": 30}


class FakeTurns:
    """A client whose turns are given as async generator functions of the request."""

    turn_format = "fake"

    def __init__(self, *turns: Callable[[TurnRequest], AsyncIterator[Any]]) -> None:
        self.turns = list(turns)
        self.requests: list[TurnRequest] = []

    async def stream_turn(self, request: TurnRequest) -> AsyncIterator[Any]:
        self.requests.append(request)
        async for item in self.turns.pop(0)(request):
            yield item

    def tool_result_messages(
        self, response: TurnResponse, results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        return [
            {"role": "tool", "id": c.id, "content": r.content}
            for c, r in zip(response.tool_calls, results, strict=True)
        ]


def text_turn(*pieces: str, delay: float = 0.0) -> Callable[[TurnRequest], AsyncIterator[Any]]:
    async def turn(request: TurnRequest) -> AsyncIterator[Any]:
        for piece in pieces:
            await trio.sleep(delay)
            yield TextDelta(piece)
        text = "".join(pieces)
        yield TurnResponse(text, [], [{"role": "assistant", "content": text}])

    return turn


def failing(status: int | None, after: Sequence[str] = ()) -> Callable[..., AsyncIterator[Any]]:
    async def turn(request: TurnRequest) -> AsyncIterator[Any]:
        for piece in after:
            yield TextDelta(piece)
        raise ModelError(f"HTTP {status}: unavailable", status=status)

    return turn


# ------------------------------------------------------------------------------------------
# The log and the conversation


def test_the_conversation_is_kept_in_the_log_and_rebuilt_for_each_request() -> None:
    model = tl.ScriptedModel(
        [
            {"tool_calls": [call("add", {"a": 1, "b": 2}, "call_0")], "reasoning": "Add."},
            "It is 3.",
        ]
    )
    agent = tl.Agent(model, tools=[add], protocol="tools", instructions="Be exact.")
    result = run(agent, {"question": "1 + 2?"})
    assert result.output == "It is 3."
    types = [(m["type"], m.get("kind") or m.get("role")) for m in result.messages]
    assert types == [
        ("data", "input"),
        ("text", "user"),  # the input, as the first user message
        ("data", "turn"),  # the assistant's tool call
        ("data", "turn"),  # its result
        ("data", "turn"),  # the final answer
    ]
    assert result.messages[1]["text"] == '{"question": "1 + 2?"}'
    assistant, results, final = result.view("turn")
    assert assistant["tool_calls"] == [
        {"id": "c1.0", "provider_id": "call_0", "name": "add", "arguments": '{"a": 1, "b": 2}'}
    ]
    assert assistant["reasoning"] == "Add." and assistant["format"] == "scripted"
    assert results["results"] == [{"id": "c1.0", "content": "3", "is_error": False}]
    assert final["text"] == "It is 3." and final["tool_calls"] == []
    second = model.requests[1]
    assert second["system"] == "Be exact."
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "tool"]
    assert second["messages"][2] == {"role": "tool", "tool_call_id": "call_0", "content": "3"}
    assert second["tools"] == [
        {"name": "add", "description": "Add two integers.", "parameters": add.parameters}
    ]


def test_results_that_are_not_strings_go_back_as_json() -> None:
    model = tl.ScriptedModel([{"tool_calls": [call("now", "")]}, "Half past nine."])
    result = run(tl.Agent(model, tools=[now], protocol="tools"))
    assert model.requests[1]["messages"][-1]["content"] == '{"hour": 9, "minute": 30}'
    assert result.records["c1.0"].params == {}  # empty arguments: a call without any


def test_model_strings_are_literals_never_references() -> None:
    model = tl.ScriptedModel([{"tool_calls": [call("echo", {"text": "†state.secret"})]}, "ok"])
    result = run(tl.Agent(model, tools=[echo], protocol="tools"))
    assert model.requests[1]["messages"][-1]["content"] == "†state.secret"
    assert result.records["c1.0"].status == "done"


@pytest.mark.parametrize(
    ("arguments", "fault"),
    [
        ('["a", "b"]', "got arguments that are not a JSON object"),
        ("", "got arguments that are not valid JSON"),  # §9: never a silent {}
        ({"text": "x", "_outputPath": "†state.stolen"}, "got argument '_outputPath'"),
    ],
)
def test_arguments_that_cannot_make_a_call_are_error_results(arguments: Any, fault: str) -> None:
    model = tl.ScriptedModel([{"tool_calls": [call("echo", arguments)]}, "ok"])
    result = run(tl.Agent(model, tools=[echo], protocol="tools"))
    content = model.requests[1]["messages"][-1]["content"]
    assert content.startswith(f"Error: Tool 'echo' {fault}")
    assert result.state == {} and result.records == {}


def test_without_an_output_schema_the_output_is_the_text_and_with_one_it_is_parsed() -> None:
    model = tl.ScriptedModel(['```json\n{"n": 3}\n```'])
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    result = run(tl.Agent(model, output=schema, protocol="tools"))
    assert result.output == {"n": 3}
    assert "JSON Schema" in model.requests[0]["system"]
    plain = run(tl.Agent(tl.ScriptedModel(['{"n": 3}']), protocol="tools"))
    assert plain.output == '{"n": 3}'


def test_an_output_that_fails_the_schema_is_fed_back() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    model = tl.ScriptedModel(['{"n": "three"}', '{"n": 3}'])
    result = run(tl.Agent(model, output=schema, protocol="tools"))
    assert result.output == {"n": 3} and result.iterations == 2
    feedback = model.requests[1]["messages"][-1]
    assert feedback["role"] == "user"
    assert "not accepted" in feedback["content"] and "'three' is not of type" in feedback["content"]


def test_depends_on_a_reference_waits_for_the_call_that_writes_it() -> None:
    @tl.tool(output_path="†state.token")
    async def login(user: str) -> str:
        """Log in."""
        await trio.sleep(2)
        return f"t-{user}"

    @tl.tool(depends_on=["†state.token"])
    async def fetch(path: str, ctx: tl.CallContext) -> str:
        """Fetch with the token."""
        return f"{path}:{ctx.state['token']}"

    model = tl.ScriptedModel(
        [{"tool_calls": [call("fetch", {"path": "/a"}), call("login", {"user": "bo"})]}, "ok"]
    )
    result = run(tl.Agent(model, tools=[login, fetch], protocol="tools"))
    # fetch came first in the response, yet waited for login's write.
    assert result.records["c1.0"].started == result.records["c1.1"].finished == 2
    assert [m["content"] for m in model.requests[1]["messages"][-2:]] == ["/a:t-bo", "t-bo"]


# ------------------------------------------------------------------------------------------
# Approval


@tl.tool(requires_approval=lambda p: p["cents"] > 100, bind={"account": "account"})
def pay(account: str, cents: int) -> dict[str, Any]:
    """Pay from an account."""
    return {"paid": cents, "from": account}


def test_the_approval_hook_sees_resolved_parameters_and_its_answers_become_results() -> None:
    seen: list[dict[str, Any]] = []

    def approve(pending: tl.PendingCall) -> Any:
        seen.append(pending.params)
        if pending.params["cents"] > 1000:
            return tl.Deny("over budget")
        return tl.Respond({"paid": 0, "dry_run": True})

    model = tl.ScriptedModel(
        [
            {
                "tool_calls": [
                    call("pay", {"cents": 5000, "account": "model-chose-this"}),
                    call("pay", {"cents": 500}),
                    call("pay", {"cents": 50}),
                ]
            },
            "done",
        ]
    )
    agent = tl.Agent(model, tools=[pay], protocol="tools", approve=approve)
    result = run(agent, {"account": "acct-7"})
    assert seen == [{"cents": 5000, "account": "acct-7"}, {"cents": 500, "account": "acct-7"}]
    assert [m["content"] for m in model.requests[1]["messages"][-3:]] == [
        "Error: Tool 'pay' was denied: over budget",
        '{"paid": 0, "dry_run": true}',
        '{"paid": 50, "from": "acct-7"}',
    ]
    assert [r.status for r in result.records.values()] == ["denied", "done", "done"]


# ------------------------------------------------------------------------------------------
# Loop controls


def test_too_many_iterations_raise_with_the_log() -> None:
    model = tl.ScriptedModel([{"tool_calls": [call("echo", {"text": "again"})]}] * 3)
    agent = tl.Agent(model, tools=[echo], protocol="tools", max_iterations=2)
    with pytest.raises(tl.MaxIterationsError) as caught:
        run(agent)
    assert len(model.requests) == 2
    assert caught.value.messages[-1]["data"]["role"] == "tool"


def test_model_failures_are_retried_with_backoff_on_virtual_time() -> None:
    client = FakeTurns(failing(503), failing(None), text_turn("fine"))
    agent = tl.Agent(client, protocol="tools", max_llm_retries=3, seed=1)
    events: list[tl.RunEvent] = []

    async def main() -> tuple[tl.RunResult, float]:
        result = await agent.run_async("hi", on_event=events.append)
        return result, trio.current_time()

    result, elapsed = virtual(main)
    assert result.output == "fine"
    assert 2 + 4 <= elapsed <= 3 + 5  # min(2**k + U(0, 1), 60) after attempts 1 and 2
    retried = [e for e in events if isinstance(e, tl.RequestRetried)]
    assert [e.attempt for e in retried] == [1, 2]
    kinds = [e.kind for e in events if e.kind.startswith("request.")]
    assert kinds == ["request.started", "request.retried", "request.retried", "request.finished"]


def test_used_up_attempts_raise_execute_error_and_the_run_resumes_from_its_log() -> None:
    script = [{"tool_calls": [call("add", {"a": 2, "b": 3})]}, "Five."]
    model = tl.ScriptedModel(script)
    calls = 0
    sent: list[list[dict[str, Any]]] = []

    class Flaky:
        turn_format = "scripted"

        def stream_turn(self, request: TurnRequest) -> AsyncIterator[Any]:
            nonlocal calls
            calls += 1
            sent.append(request.conversation)
            if request.iteration == 2 and calls <= 3:
                return failing(500)(request)
            return model.stream_turn(request)

        def tool_result_messages(self, *args: Any) -> list[dict[str, Any]]:
            return model.tool_result_messages(*args)

    agent = tl.Agent(Flaky(), tools=[add], protocol="tools", max_llm_retries=2)
    with pytest.raises(tl.ExecuteError) as caught:
        run(agent, "2 + 3?")
    assert calls == 3  # iteration 1, then two attempts at iteration 2
    saved = caught.value.messages
    assert saved[-1]["data"]["results"][0]["content"] == "5"
    result = run(agent, messages=saved)
    assert result.output == "Five."
    assert result.iterations == 2  # the count went on from the log
    # The resumed request showed the model the same conversation as the failed ones.
    assert sent[-1] == sent[-2] == sent[-3]
    assert [m["role"] for m in model.requests[-1]["messages"]] == ["user", "assistant", "tool"]


def test_a_log_in_another_wire_format_is_refused_before_anything_runs() -> None:
    result = run(tl.Agent(tl.ScriptedModel(["hi"]), protocol="tools"))
    other = FakeTurns(text_turn("never"))
    with pytest.raises(tl.ConfigurationError, match="'scripted' wire format"):
        run(tl.Agent(other, protocol="tools"), messages=result.messages)
    assert other.requests == []


def test_configuration_errors() -> None:
    latent = tl.Tool("think", parameters={"type": "object"}, output={"type": "string"})
    with pytest.raises(tl.ConfigurationError, match="latent tool"):
        tl.Agent(tl.ScriptedModel([]), tools=[latent], protocol="tools")

    class SolutionsOnly:
        async def stream_solution(self, request: Any) -> AsyncIterator[Any]:
            yield TextDelta("{}")

    with pytest.raises(tl.ConfigurationError, match="native tool calling"):
        tl.Agent(SolutionsOnly(), protocol="tools")
    with pytest.raises(tl.ConfigurationError, match="protocol='tools'"):
        tl.Agent(tl.ScriptedModel([])).stream("x")


def test_a_scripted_solution_is_not_a_turn() -> None:
    model = tl.ScriptedModel([{"calls": [], "output": 1}])
    with pytest.raises(tl.ExecuteError, match="not a turn"):
        run(tl.Agent(model, protocol="tools"))


# ------------------------------------------------------------------------------------------
# Streaming the final answer


def test_the_final_answer_streams_as_it_is_written_and_tool_turns_do_not() -> None:
    model = tl.ScriptedModel(
        [{"tool_calls": [call("add", {"a": 20, "b": 22})]}, "The answer is 42."],
        chunk_chars=5,
        chunk_delay=1.0,
    )
    agent = tl.Agent(model, tools=[add], protocol="tools")
    received: list[tuple[float, str]] = []

    async def main() -> tl.RunResult:
        async with agent.stream("20 + 22?") as stream:
            async for chunk in stream.text():
                received.append((trio.current_time(), chunk))
            return stream.result

    result = virtual(main)
    assert "".join(chunk for _, chunk in received) == result.output == "The answer is 42."
    # Chunks arrive one a second as the model writes them, after the call's second.
    assert [time for time, _ in received] == [1.0, 2.0, 3.0, 4.0]
    assert [chunk for _, chunk in received] == ["The a", "nswer", " is 4", "2."]


def test_a_response_that_starts_with_a_tool_call_is_never_shown() -> None:
    async def tools_first(request: TurnRequest) -> AsyncIterator[Any]:
        yield ToolCallStarted(0, "echo")
        yield TextDelta("hidden commentary")
        calls = [TurnToolCall("c", "echo", '{"text": "x"}')]
        yield Usage(10, 5)
        yield TurnResponse("hidden commentary", calls, [{"role": "assistant"}])

    client = FakeTurns(tools_first, text_turn("  ", "visible"))
    agent = tl.Agent(client, tools=[echo], protocol="tools")

    async def main() -> tuple[list[str], tl.RunResult]:
        async with agent.stream("go") as stream:
            chunks = [chunk async for chunk in stream.text()]
        return chunks, stream.result

    chunks, result = virtual(main)
    assert chunks == ["  visible"]  # leading whitespace is held until the text decides
    assert result.output == "  visible"
    # The first request reported 10; the second reported none and is estimated (§12).
    assert result.usage.requests == 2 and result.usage.input_tokens > 10


def test_a_stream_that_breaks_after_it_was_shown_is_asked_again() -> None:
    client = FakeTurns(failing(None, after=["Hel"]), text_turn("Hello."))
    agent = tl.Agent(client, protocol="tools")

    async def main() -> tuple[list[str], tl.RunResult]:
        async with agent.stream("go") as stream:
            chunks = [chunk async for chunk in stream.text()]
        return chunks, stream.result

    chunks, result = virtual(main)
    assert chunks == ["Hel", "Hello."]
    assert result.output == "Hello." and result.iterations == 2
    assert "broke off" in result.errors[0]["data"]["error"]["message"]
    assert result.view("turn")[0]["broken"] is True
    # With nobody reading, nothing was shown, so the same failure is simply retried.
    quiet = FakeTurns(failing(None, after=["Hel"]), text_turn("Hello."))
    again = run(tl.Agent(quiet, protocol="tools"))
    assert again.output == "Hello." and again.iterations == 1 and again.errors == []


def test_a_failed_stream_raises_from_text_once() -> None:
    agent = tl.Agent(FakeTurns(failing(400)), protocol="tools")

    async def main() -> None:
        async with agent.stream("go") as stream:
            with pytest.raises(tl.ExecuteError, match="HTTP 400"):
                async for _ in stream.text():
                    pass
        with pytest.raises(tl.ExecuteError):
            stream.result  # noqa: B018

    virtual(main)

    async def unread() -> None:
        async with agent.stream("go"):
            pass

    agent = tl.Agent(FakeTurns(failing(400)), protocol="tools")
    with pytest.raises(tl.ExecuteError):
        virtual(unread)


def test_the_result_is_not_ready_before_the_run_ends_and_leaving_early_waits() -> None:
    model = tl.ScriptedModel(["a long answer"], chunk_chars=2, chunk_delay=1.0)
    agent = tl.Agent(model, protocol="tools")

    async def main() -> tuple[str, float]:
        async with agent.stream("go") as stream:
            async for chunk in stream.text():
                with pytest.raises(RuntimeError, match="not finished"):
                    stream.result  # noqa: B018
                first = chunk
                break
        return first + "|" + stream.result.output, trio.current_time()

    text, elapsed = virtual(main)
    assert text == "a |a long answer"
    assert elapsed == 6.0  # the block waited for the rest of the run


def test_the_caller_leaving_with_an_error_cancels_the_run() -> None:
    model = tl.ScriptedModel(["slow"], chunk_chars=1, chunk_delay=100.0)
    agent = tl.Agent(model, protocol="tools")

    async def main() -> float:
        with pytest.raises(KeyError):
            async with agent.stream("go") as stream:
                async for _ in stream.text():
                    raise KeyError("reader failed")
        return trio.current_time()

    assert virtual(main) == 0.0


def test_streamed_runs_emit_run_events() -> None:
    events: list[tl.RunEvent] = []
    agent = tl.Agent(tl.ScriptedModel(["hi"]), protocol="tools")

    async def main() -> tl.RunResult:
        async with agent.stream("go", on_event=events.append, run_id="r1") as stream:
            pass
        return stream.result

    result = virtual(main)
    assert result.run_id == "r1"
    assert (events[0].kind, events[-1].kind) == ("run.started", "run.ended")
    assert json.dumps([e.to_dict() for e in events])


def test_a_final_answer_nested_too_deeply_is_fed_back_not_a_crash() -> None:
    deep = "[" * 5000 + "]" * 5000
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    model = tl.ScriptedModel([deep, '{"n": 3}'])
    result = run(tl.Agent(model, output=schema, protocol="tools"))
    assert result.output == {"n": 3} and result.iterations == 2
    assert "not accepted" in model.requests[1]["messages"][-1]["content"]


def test_arguments_nested_too_deeply_are_an_error_result() -> None:
    deep = '{"text": ' + "[" * 500 + "]" * 500 + "}"
    model = tl.ScriptedModel([{"tool_calls": [call("echo", deep)]}, "ok"])
    result = run(tl.Agent(model, tools=[echo], protocol="tools"))
    content = model.requests[1]["messages"][-1]["content"]
    assert content.startswith("Error: Tool 'echo' got arguments that cannot make a call:")
    assert result.output == "ok"

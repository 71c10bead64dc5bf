"""The outer loop (PROTOCOL §8) on the scripted model and on failing fake models."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pydantic
import pytest
import trio
import trio.testing

import tickloop as tl
from tickloop._agent._prompt import solution_schema, strip_strict_nulls
from tickloop._core._tools import ToolSet
from tickloop._models._base import ModelError, SolutionRequest, TextDelta


@tl.tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    await trio.sleep(1)
    return a + b


@tl.tool
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


class Answer(pydantic.BaseModel):
    total: int


def run_virtual(agent: tl.Agent, input: Any = None, **options: Any) -> tl.RunResult:
    return trio.run(
        lambda: agent.run_async(input, **options),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )


def test_two_iterations_feed_state_and_typed_output() -> None:
    model = tl.ScriptedModel(
        [
            {
                "calls": [{"_tool": "add", "a": "†input.x", "b": 2, "_outputPath": "†state.sum"}],
                "output": None,
            },
            {"calls": [], "output": {"total": 5}},
        ]
    )
    agent = tl.Agent(model, tools=[add], output=Answer, instructions="Add things.")
    result = run_virtual(agent, {"x": 3})
    assert result.output == Answer(total=5)
    assert result.state == {"sum": 5}
    assert result.iterations == 2
    assert result.records["c1.0"].status == "done"
    # The second request was built from the log: it shows the input, the state and the plan.
    first, second = model.requests
    json.dumps(model.requests)  # requests are JSON-serialisable
    assert first["messages"][0]["role"] == "system"
    assert "Add things." in first["messages"][0]["content"]
    context = second["messages"][-1]["content"]
    assert '"sum": 5' in context and '"x": 3' in context
    assert "Previous plan" in context and '"_id": "c1.0"' in context
    assert "Previous plan" not in first["messages"][-1]["content"]
    kinds = [m["type"] for m in result.messages]
    assert kinds.count("solution") == 2 and kinds.count("plan") == 2


def test_errors_reach_the_next_request_only() -> None:
    model = tl.ScriptedModel(
        [
            {
                "calls": [
                    {"_tool": "fail", "reason": "boom", "_outputPath": "†state.x"},
                    {"_tool": "nope"},
                ],
                "output": None,
            },
            {"calls": [], "output": None},
            {"calls": [], "output": "done"},
        ]
    )
    result = run_virtual(tl.Agent(model, tools=[fail]))
    assert result.output == "done"
    second = model.requests[1]["messages"][-1]["content"]
    third = model.requests[2]["messages"][-1]["content"]
    assert "ValueError: boom" in second and "unknown tool 'nope'" in second
    assert "ValueError: boom" not in third  # only the last tick's errors are shown
    assert [e["data"]["error"]["type"] for e in result.errors] == ["structural", "runtime"]


def test_invalid_output_is_fed_back_and_the_loop_goes_on() -> None:
    model = tl.ScriptedModel(
        [{"calls": [], "output": {"total": "many"}}, {"calls": [], "output": {"total": 7}}]
    )
    result = run_virtual(tl.Agent(model, output=Answer))
    assert result.output.total == 7
    assert result.iterations == 2
    assert "output does not match" in result.errors[0]["data"]["error"]["message"]
    assert "output does not match" in model.requests[1]["messages"][-1]["content"]


def test_calls_and_output_in_one_solution_still_run() -> None:
    model = tl.ScriptedModel(
        [
            {
                "calls": [{"_tool": "add", "a": 1, "b": 1, "_outputPath": "†state.y"}],
                "output": {"total": 2},
            }
        ]
    )
    result = run_virtual(tl.Agent(model, tools=[add], output=Answer))
    assert result.output.total == 2 and result.state == {"y": 2}
    assert result.iterations == 1


def test_unparseable_solution_is_a_structural_error_and_closed_calls_still_run() -> None:
    call = json.dumps({"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.z"})
    model = tl.ScriptedModel(
        ['{"calls": [' + call + ', {"_tool": "add", "a"', {"calls": [], "output": 1}]
    )
    result = run_virtual(tl.Agent(model, tools=[add]))
    assert result.state == {"z": 3}
    assert result.output == 1
    message = result.errors[0]["data"]["error"]["message"]
    assert "cut off" in message
    solution = next(m for m in result.messages if m["type"] == "solution")
    assert solution["solution"] is None and solution["text"].startswith('{"calls"')


def test_iteration_limit_raises_with_the_log() -> None:
    model = tl.ScriptedModel([{"calls": [], "output": None}] * 5)
    with pytest.raises(tl.MaxIterationsError) as caught:
        run_virtual(tl.Agent(model, max_iterations=3))
    assert isinstance(caught.value, RuntimeError)
    assert len(model.requests) == 3
    assert sum(m["type"] == "solution" for m in caught.value.messages) == 3


def test_calls_start_while_the_model_is_still_streaming() -> None:
    calls = [{"_tool": "add", "a": i, "b": 1, "_outputPath": f"†state.v{i}"} for i in range(4)]
    model = tl.ScriptedModel(
        [{"calls": calls, "output": None}, {"calls": [], "output": 0}],
        chunk_chars=10,
        chunk_delay=0.1,
    )
    agent = tl.Agent(model, tools=[add])
    result = run_virtual(agent)
    text_length = len(json.dumps({"calls": calls, "output": None}, ensure_ascii=False))
    stream_end = (text_length // 10) * 0.1
    first = result.records["c1.0"]
    assert first.started is not None and first.started < stream_end - 1
    # Each call started when its object closed, so start times are strictly increasing.
    starts = [result.records[f"c1.{i}"].started for i in range(4)]
    assert starts == sorted(starts) and len(set(starts)) == 4


class FlakyModel:
    """Fails with the given errors first, then plays the script."""

    def __init__(self, failures: list[ModelError], script: list[dict[str, Any]]) -> None:
        self.failures = list(failures)
        self.scripted = tl.ScriptedModel(script)
        self.attempts: list[float] = []

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[Any]:
        self.attempts.append(trio.current_time())
        if self.failures:
            raise self.failures.pop(0)
        async for item in self.scripted.stream_solution(request):
            yield item


def test_retries_back_off_exponentially_on_the_virtual_clock() -> None:
    model = FlakyModel(
        [ModelError("busy", status=503), ModelError("busy", status=500)],
        [{"calls": [], "output": 1}],
    )
    result = run_virtual(tl.Agent(model, max_llm_retries=3, seed=1))
    assert result.output == 1
    gaps = [b - a for a, b in zip(model.attempts, model.attempts[1:], strict=False)]
    assert 2 <= gaps[0] < 3 and 4 <= gaps[1] < 5  # 2**k + uniform(0, 1)


def test_retry_after_is_honoured() -> None:
    model = FlakyModel(
        [ModelError("slow down", status=429, retry_after=7.5)], [{"calls": [], "output": 1}]
    )
    run_virtual(tl.Agent(model))
    assert model.attempts[1] - model.attempts[0] == 7.5


def test_no_retry_on_400_and_the_log_comes_back() -> None:
    model = FlakyModel([ModelError("bad request: no such model", status=400)], [])
    with pytest.raises(tl.ExecuteError) as caught:
        run_virtual(tl.Agent(model), {"q": 1})
    assert len(model.attempts) == 1
    assert "no such model" in str(caught.value)
    assert caught.value.messages[0] == {"type": "data", "kind": "input", "data": {"q": 1}}


def test_exhausted_retries_raise_and_a_resumed_run_finishes() -> None:
    script = [
        {"calls": [{"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.s"}], "output": None},
        {"calls": [], "output": {"total": 3}},
    ]

    class FailsOnSecond(FlakyModel):
        async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[Any]:
            self.attempts.append(trio.current_time())
            if request.iteration == 2 and self.failures:
                raise self.failures.pop(0)
            async for item in self.scripted.stream_solution(request):
                yield item

    model = FailsOnSecond([ModelError("down", status=502)] * 2, script)
    agent = tl.Agent(model, tools=[add], output=Answer, max_llm_retries=2)
    with pytest.raises(tl.ExecuteError) as caught:
        run_virtual(agent)
    log = caught.value.messages
    assert sum(m["type"] == "solution" for m in log) == 1
    result = run_virtual(agent, messages=log)
    assert result.output.total == 3 and result.state == {"s": 3}
    assert result.iterations == 2


def test_cancellation_stops_a_backoff_at_once() -> None:
    model = FlakyModel([ModelError("busy", status=503)] * 3, [{"calls": [], "output": 1}])
    agent = tl.Agent(model, max_llm_retries=3)

    async def main() -> float:
        with trio.move_on_after(1):
            await agent.run_async()
        return trio.current_time()

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == 1


finished_in_background: list[tuple[str, float]] = []


@tl.tool
async def background(tag: str, seconds: float) -> None:
    """Work whose value nobody reads (fire-and-forget); fails when its tag says so."""
    await trio.sleep(seconds)
    finished_in_background.append((tag, trio.current_time()))
    if tag.startswith("fail"):
        raise RuntimeError(f"late {tag}")


def _late_errors(messages: list[dict[str, Any]]) -> list[str]:
    return [
        m["data"]["error"]["message"]
        for m in messages
        if m.get("type") == "data" and m.get("kind") == "error"
    ]


def test_the_iteration_limit_waits_for_fire_and_forget_calls_and_reports_them() -> None:
    # PROTOCOL §4: the run does not end before a fire-and-forget call does, and its late
    # failure is reported before the run returns, here in MaxIterationsError's log.
    finished_in_background.clear()
    model = tl.ScriptedModel(
        [{"calls": [{"_tool": "background", "tag": "fail-ff", "seconds": 10}], "output": None}]
    )
    agent = tl.Agent(model, tools=[background], max_iterations=1)
    raised_at: list[float] = []

    async def main() -> None:
        try:
            await agent.run_async()
        finally:
            raised_at.append(trio.current_time())

    with pytest.raises(tl.MaxIterationsError, match="made 1 requests") as caught:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert finished_in_background == [("fail-ff", 10.0)]  # not cancelled
    assert raised_at == [10.0]
    assert _late_errors(caught.value.messages) == ["RuntimeError: late fail-ff"]


def test_execute_error_waits_for_fire_and_forget_calls_and_reports_them() -> None:
    finished_in_background.clear()
    script = [{"calls": [{"_tool": "background", "tag": "fail-ff", "seconds": 10}], "output": None}]

    class DownOnSecond(FlakyModel):
        async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[Any]:
            if request.iteration == 2:
                raise ModelError("bad request: no such model", status=400)
            async for item in self.scripted.stream_solution(request):
                yield item

    agent = tl.Agent(DownOnSecond([], script), tools=[background])
    with pytest.raises(tl.ExecuteError, match="no such model") as caught:
        run_virtual(agent)
    assert finished_in_background == [("fail-ff", 10.0)]
    assert _late_errors(caught.value.messages) == ["RuntimeError: late fail-ff"]


def test_a_cancel_by_the_caller_does_not_wait_for_fire_and_forget_calls() -> None:
    # Only the run's own stop waits; the caller's cancel (here after the iteration limit
    # was reached, while the session waits for the call) still cancels at once.
    finished_in_background.clear()
    model = tl.ScriptedModel(
        [{"calls": [{"_tool": "background", "tag": "slow", "seconds": 100}], "output": None}]
    )
    agent = tl.Agent(model, tools=[background], max_iterations=1)

    async def main() -> float:
        with trio.move_on_after(5):
            await agent.run_async()
        return trio.current_time()

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == 5
    assert finished_in_background == []


def test_stream_broken_after_text_is_not_retried() -> None:
    class Breaks:
        calls = 0

        async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[Any]:
            self.calls += 1
            if request.iteration == 1:
                yield TextDelta(
                    '{"calls": [{"_tool": "add", "a": 1, "b": 1, "_outputPath": "†state.q"}'
                )
                raise ModelError("connection reset", status=None)
            yield TextDelta('{"calls": [], "output": 2}')

    model = Breaks()
    result = run_virtual(tl.Agent(model, tools=[add]))
    assert model.calls == 2 and result.state == {"q": 2}
    assert "broke off" in result.errors[0]["data"]["error"]["message"]


def test_asyncio_callers_can_await_a_run() -> None:
    model = tl.ScriptedModel(
        [
            {
                "calls": [{"_tool": "add", "a": 2, "b": 2, "_outputPath": "†state.r"}],
                "output": {"total": 4},
            }
        ]
    )
    agent = tl.Agent(model, tools=[add], output=Answer)

    async def main() -> tuple[tl.RunResult, int]:
        ticks = 0

        async def heartbeat() -> None:  # the asyncio loop keeps running during the run
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        beating = asyncio.ensure_future(heartbeat())
        result = await agent.run_asyncio()
        beating.cancel()
        return result, ticks

    result, ticks = asyncio.run(main())
    assert result.output.total == 4 and result.state == {"r": 4}
    assert ticks > 1


def test_configuration_errors_before_anything_runs() -> None:
    model = tl.ScriptedModel([])
    with pytest.raises(tl.ConfigurationError):
        tl.Agent(model, max_iterations=0)
    with pytest.raises(tl.ConfigurationError):
        tl.Agent(model, protocol="telepathy")
    with pytest.raises(tl.ConfigurationError):
        tl.Agent(model, output=42)

    @tl.tool(requires_approval=True)
    def pay(cents: int) -> int:
        return cents

    # Checked when a run starts, not when the agent is made: an agent used as a
    # sub-agent needs no hook of its own, the root's serves it (PROTOCOL §11).
    with pytest.raises(tl.ConfigurationError, match="no approval hook"):
        tl.Agent(model, tools=[pay]).run({})
    assert model.requests == []


def _walk(schema: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(schema, dict):
        found.append(schema)
        for value in schema.values():
            found.extend(_walk(value))
    elif isinstance(schema, list):
        for item in schema:
            found.extend(_walk(item))
    return found


class Address(pydantic.BaseModel):
    city: str
    zip: str | None = None


@tl.tool
def ship(to: Address, express: bool = False, note: str | None = None) -> str:
    """Ship a parcel."""
    return f"{to.city} {express} {note}"


latent = tl.Tool(
    name="think",
    parameters={"type": "object", "properties": {}},
    output={"type": "object", "properties": {"idea": {"type": "string"}}},
)


def test_solution_schema_is_strict_mode_compatible() -> None:
    schema = solution_schema(ToolSet([ship, add, latent]), Answer.model_json_schema())
    for node in _walk(schema):
        if node.get("type") == "object" and "properties" in node:
            assert node["additionalProperties"] is False
            assert sorted(node["required"]) == sorted(node["properties"])
        assert "default" not in node or not isinstance(node.get("default"), dict | list | str)
    variants = schema["properties"]["calls"]["items"]["anyOf"]
    assert [v["properties"]["_tool"]["enum"] for v in variants] == [["ship"], ["add"], ["think"]]
    assert "_output" in variants[2]["properties"] and "_output" not in variants[0]["properties"]
    assert list(schema["properties"]) == ["calls", "output"]


def test_strict_nulls_are_stripped_but_required_values_kept() -> None:
    tools = ToolSet([ship])
    call = {
        "_tool": "ship",
        "to": {"city": "Oslo", "zip": None},
        "express": None,
        "note": None,
        "_outputPath": None,
        "_id": None,
    }
    assert strip_strict_nulls(call, tools) == {
        "_tool": "ship",
        "to": {"city": "Oslo", "zip": None},
        "note": None,
    }


class Item(pydantic.BaseModel):
    price: float
    tags: list[int] = []


@tl.tool
def price_with_tax(item: Item, rate: float) -> float:
    """Price an item."""
    return round(item.price * (1 + rate), 2)


def test_strict_schema_lets_a_reference_stand_for_a_nested_value() -> None:
    import jsonschema

    schema = solution_schema(ToolSet([price_with_tax]), None)
    nested = {
        "_tool": "price_with_tax",
        "item": {"price": "†state.price", "tags": ["†state.tag", 3]},
        "rate": 0.25,
        "_outputPath": "†state.total",
        "_outputMethod": None,
        "_id": None,
        "_reasoningForCall": None,
    }
    jsonschema.validate({"calls": [nested], "output": None}, schema)
    with pytest.raises(jsonschema.ValidationError):  # a nested object is still an object
        jsonschema.validate(
            {"calls": [{**nested, "item": {"price": {"x": 1}, "tags": []}}], "output": None},
            schema,
        )
    # and the engine resolves what the model could write
    result = tl.run_calls(
        [
            {
                "_tool": "price_with_tax",
                "item": {"price": "†state.price"},
                "rate": 0.25,
                "_outputPath": "†state.total",
            }
        ],
        tools=[price_with_tax],
        state={"price": 8},
    )
    assert result.state["total"] == 10.0


class Reply(pydantic.BaseModel):
    text: str
    note: str = "none"
    to: Address | None = None


def test_an_output_written_to_the_strict_schema_is_accepted() -> None:
    """Strict mode makes the model write null for an optional field it leaves out; the
    output is checked against the user's own schema, which must not see those nulls."""
    import jsonschema

    written = {"text": "hi", "note": None, "to": {"city": "Oslo", "zip": None}}
    agent = tl.Agent(tl.ScriptedModel([{"calls": [], "output": written}]), output=Reply)
    jsonschema.validate({"calls": [], "output": written}, agent.schema)  # what it must write
    result = agent.run({})
    assert result.output == Reply(text="hi", to=Address(city="Oslo"))
    assert result.iterations == 1


def test_every_request_shows_the_state_even_before_anything_is_written() -> None:
    model = tl.ScriptedModel([{"calls": [], "output": 1}])
    tl.Agent(model, output={"type": "integer"}).run({"q": 1})
    context = model.requests[0]["messages"][-1]["content"]
    assert "## input\n" in context and '{"q": 1}' in context
    assert "## state\nRead it with references like †state.<key>.\n{}" in context


def test_a_failure_of_tickloop_on_a_call_is_not_blamed_on_the_model_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tickloop._engine._engine import Engine

    def broken(self: Engine, call: object, date: str | None = None) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(Engine, "receive", broken)
    model = tl.ScriptedModel([{"calls": [{"_tool": "add", "a": 1, "b": 2}], "output": None}])
    with pytest.raises(tl.ExecuteError) as raised:
        tl.Agent(model, tools=[add]).run({})
    message = str(raised.value)
    assert "tickloop could not take a call the model wrote (RuntimeError: boom)" in message
    assert "model client" not in message
    assert raised.value.messages  # the log comes back, to resume from

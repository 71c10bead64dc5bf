"""A user's script, as docs/api.md shows the API: `mypy --strict` and pyright pass on it
(tests/test_typing.py). It runs too (offline, on the scripted model), so what it claims
about the types is also what happens. Not a test module: pytest collects `test_*.py`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pydantic
import trio

import tickloop as tl
from tickloop.events import CallFinished, RunEvent
from tickloop.models import ModelClient, SolutionRequest, TextDelta, Usage


class Answer(pydantic.BaseModel):
    total: int
    note: str


@tl.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tl.tool(requires_approval=lambda params: params["cents"] > 10_000, timeout=10)
async def charge(customer: str, cents: int, ctx: tl.CallContext) -> dict[str, str]:
    """Charge a customer."""
    return {"customer": customer, "call": ctx.id}


def approve(call: tl.PendingCall) -> tl.Decision | bool:
    if call.params["cents"] > 50_000:
        return tl.Deny("over the limit")
    return tl.Edit(cents=call.params["cents"] - 100)


finished: list[str] = []


def on_event(event: RunEvent) -> None:
    if isinstance(event, CallFinished):
        finished.append(event.status)


def typed_run() -> Answer:
    tools: list[tl.Tool] = [add, charge]
    model = tl.ScriptedModel(
        [
            {
                "calls": [
                    {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.sum"},
                    {"_tool": "charge", "customer": "ada", "cents": 20_000},
                ]
            },
            {"output": {"total": "†state.sum", "note": "charged"}},
        ]
    )
    agent: tl.Agent[Answer] = tl.Agent(model, tools=tools, output=Answer, approve=approve)
    result: tl.RunResult[Answer] = agent.run({"question": "1 + 2?"}, on_event=on_event)
    answer: Answer = result.output
    return answer


def plain_outputs() -> tuple[int, list[str]]:
    number = tl.Agent(tl.ScriptedModel([{"output": 3}]), output=int).run().output
    words = tl.Agent(tl.ScriptedModel([{"output": ["a", "b"]}]), output=list[str]).run().output
    return number + 1, [word.upper() for word in words]


def tools_protocol() -> str:
    model = tl.ScriptedModel(["hello"])
    text: str = tl.Agent(model, protocol="tools", output=str).run().output
    return text


class EchoModel:
    """A client of my own: anything with `stream_solution` is a `tl.ModelClient`."""

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        yield TextDelta('{"output": "echo"}')
        yield Usage(input_tokens=1, output_tokens=1)


def own_client() -> object:
    client: ModelClient = EchoModel()
    return tl.Agent(client).run().output


def stopped() -> int:
    model = tl.ScriptedModel([{"calls": []}] * 3)
    try:
        tl.Agent(model, max_iterations=2).run()
    except tl.RunStopped as error:
        return len(error.messages)
    return 0


async def inside_trio() -> int:
    result = await tl.execute(
        [{"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.x"}], tools=[add]
    )
    value = result.state["x"]
    assert isinstance(value, int)
    return value


def agent_in_run_calls() -> int:
    plan = {"calls": [{"_tool": "add", "a": "†input.a", "b": 1, "_outputPath": "†state.x"}]}
    adder = tl.Agent(
        tl.ScriptedModel([plan, {"output": "†state.x"}]),
        tools=[add],
        name="adder",
        input={"type": "object"},
    )
    result = tl.run_calls([{"_tool": "adder", "a": 2, "_outputPath": "†state.y"}], tools=[adder])
    value = result.state["y"]
    assert isinstance(value, int)
    return value


if __name__ == "__main__":
    assert typed_run() == Answer(total=3, note="charged")
    assert plain_outputs() == (4, ["A", "B"])
    assert tools_protocol() == "hello"
    assert own_client() == "echo"
    assert stopped() > 0
    assert trio.run(inside_trio) == 3
    assert agent_in_run_calls() == 3
    print("ok")

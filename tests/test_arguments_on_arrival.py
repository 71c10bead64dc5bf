"""What a model writes into a native tool call's arguments is checked on arrival (issue 29,
items 10 and 12): a lone surrogate or a number JSON cannot hold (`1e999`) is that call's
structural error, as it is in the solution protocol, never the run's crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

import tickloop as tl
from test_tool_calling import PROVIDERS, Server, each_provider, echo  # noqa: F401


@tl.tool
def number(n: float) -> float:
    """Say a number back."""
    return n


def agent_for(provider: Any, server: Server, **options: Any) -> tl.Agent:
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    return tl.Agent(provider.model(client), tools=[echo, number], protocol="tools", **options)


def run(agent: tl.Agent, **options: Any) -> tl.RunResult:
    async def main() -> tl.RunResult:
        return await agent.run_async("go", **options)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@each_provider
@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ('{"text": "a\\ud800"}', "lone surrogate"),
        ('{"\\udc80": "a"}', "lone surrogate"),
        ('{"n": 1e999}', "finite"),
        ('{"n": -1e999}', "finite"),
    ],
    ids=["surrogate-value", "surrogate-key", "overflow", "negative-overflow"],
)
def test_a_bad_argument_is_that_calls_structural_error(
    provider: Any, raw: str, said: str, tmp_path: Path
) -> None:
    tool = "number" if '"n"' in raw else "echo"
    server = Server(
        provider.tool_turn([("call_bad", tool, raw), ("call_ok", "echo", '{"text": "fine"}')]),
        provider.text_turn("done"),
    )
    store = tl.SQLiteStore(tmp_path / "runs.db")
    result = run(agent_for(provider, server, store=store), run_id="r1")
    assert result.status == "done" and result.output == "done"
    results = dict(provider.results(server.bodies[1]))
    assert results["call_ok"] == "fine"
    assert said in results["call_bad"]
    (error,) = result.errors
    assert error["data"]["error"]["type"] == "structural"
    assert said in error["data"]["error"]["message"]
    assert [call.status for call in store.calls("r1")][-1] == "done"


def test_1e999_in_the_solution_protocol_is_a_structural_error_on_arrival(
    tmp_path: Path,
) -> None:
    seen: list[float] = []

    @tl.tool
    def record(n: float) -> float:
        seen.append(n)
        return n

    model = tl.ScriptedModel(
        [
            '{"calls": [{"_tool": "record", "n": 1e999}, {"_tool": "record", "n": 2}],'
            ' "output": null}',
            {"calls": [], "output": "ok"},
        ]
    )
    store = tl.SQLiteStore(tmp_path / "runs.db")
    result = tl.Agent(model, tools=[record], store=store).run("go", run_id="r1")
    assert seen == [2]
    assert result.records["c1.0"].status == "invalid"
    assert "not finite" in result.records["c1.0"].error["message"]
    assert result.output == "ok"


def test_a_non_finite_number_in_run_calls_is_refused_on_arrival() -> None:
    result = tl.run_calls(
        [
            {"_tool": "number", "n": float("inf"), "_outputPath": "†state.a"},
            {"_tool": "number", "n": [float("nan")]},
            {"_tool": "number", "n": 1.5, "_outputPath": "†state.b"},
        ],
        tools=[number],
    )
    assert {i: r.status for i, r in result.records.items()} == {
        "c1.0": "invalid",
        "c1.1": "invalid",
        "c1.2": "done",
    }
    assert result.state == {"b": 1.5}


def test_an_async_tool_that_blocks_past_its_timeout_is_warned_about() -> None:
    import time

    @tl.tool(timeout=0.05)
    async def blocking() -> str:
        time.sleep(0.2)  # never awaits: the timeout cannot cancel it
        return "kept"

    with pytest.warns(RuntimeWarning, match="blocked the event loop past its timeout"):
        result = tl.run_calls([{"_tool": "blocking", "_outputPath": "†state.a"}], tools=[blocking])
    assert result.state == {"a": "kept"}  # a returned result is never lost

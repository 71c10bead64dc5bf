"""Budgets (PROTOCOL §12, docs/budgets.md): limits that hold across parallel fan-out.

Everything runs through the public API (`tl.run_calls`, `tl.execute`, `tl.Agent`) on
`trio.testing.MockClock(autojump_threshold=0)`: a call's duration is virtual time, so how
many calls run at once is exact, never a wall-clock guess.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trio.testing import MockClock

import tickloop as tl


def run(calls: list[Any], *, tools: list[tl.Tool], **options: Any) -> tl.ExecutionResult:
    return trio.run(
        partial(tl.execute, calls, tools=tools, **options), clock=MockClock(autojump_threshold=0)
    )


STARTED: Counter[str] = Counter()


@tl.tool
async def fetch(n: int = 0, seconds: float = 0) -> int:
    """Return `n` after `seconds` of trio time."""
    STARTED["fetch"] += 1
    await trio.sleep(seconds)
    return n


@tl.tool(max_concurrency=2)
async def charge(n: int = 0, seconds: float = 0) -> int:
    """Charge something (at most two at once)."""
    STARTED["charge"] += 1
    await trio.sleep(seconds)
    return n


summarize = tl.Tool(
    name="summarize",
    description="latent: the model writes its output",
    parameters={"type": "object", "properties": {}},
    output={"type": "string"},
)

TOOLS = [fetch, charge, summarize]


@pytest.fixture(autouse=True)
def _reset() -> None:
    STARTED.clear()


def budget_errors(result: tl.ExecutionResult) -> list[dict[str, Any]]:
    return [m["data"]["error"] for m in result.errors if m["data"]["error"]["type"] == "budget"]


# -- the public names -------------------------------------------------------------------------


def test_budget_fields_are_optional_and_checked() -> None:
    assert tl.Budget() == tl.Budget(
        requests=None,
        input_tokens=None,
        output_tokens=None,
        total_tokens=None,
        tool_calls=None,
        per_tool={},
        cost=None,
        wall_time=None,
    )
    for bad in ({"tool_calls": -1}, {"requests": 1.5}, {"cost": float("nan")}, {"per_tool": 3}):
        with pytest.raises(tl.ConfigurationError):
            tl.Budget(**bad)
    with pytest.raises(tl.ConfigurationError, match="per_tool"):
        tl.Budget(per_tool={"charge": -2})


def test_a_grant_adds_room_to_the_limits_there_are() -> None:
    more = tl.Budget(tool_calls=3, per_tool={"charge": 1}, cost=0.5) + tl.Budget(
        tool_calls=2, per_tool={"charge": 2, "fetch": 9}, cost=0.25, requests=4
    )
    assert more == tl.Budget(tool_calls=5, per_tool={"charge": 3}, cost=0.75)


def test_price_is_per_million_tokens() -> None:
    price = tl.Price(input=0.40, output=1.60)
    assert price.cost(1_000_000, 0) == pytest.approx(0.40)
    assert price.cost(500_000, 250_000) == pytest.approx(0.60)


def test_run_usage_adds_up() -> None:
    total = tl.RunUsage(requests=1, input_tokens=10, output_tokens=2, per_tool={"a": 1}) + (
        tl.RunUsage(requests=2, tool_calls=3, per_tool={"a": 1, "b": 2}, cost=0.5)
    )
    assert total == tl.RunUsage(3, 10, 2, 3, {"a": 2, "b": 2}, 0.5)
    assert total.total_tokens == 12


def test_budget_exceeded_is_a_run_stopped() -> None:
    assert issubclass(tl.BudgetExceeded, tl.RunStopped)
    assert issubclass(tl.MaxIterationsError, tl.RunStopped)
    assert issubclass(tl.ExecuteError, tl.RunStopped)
    assert issubclass(tl.RunStopped, tl.TickloopError)


# -- tool calls: reservation before dispatch ------------------------------------------------


def test_a_fan_out_of_50_with_tool_calls_9_runs_exactly_9_every_time() -> None:
    for seconds in (0, 1):
        STARTED.clear()
        calls = [{"_tool": "fetch", "n": i, "seconds": seconds} for i in range(50)]
        result = run(calls, tools=TOOLS, budget=tl.Budget(tool_calls=9))
        assert STARTED["fetch"] == 9
        assert result.usage.tool_calls == 9 and result.usage.per_tool == {"fetch": 9}
        done = [r.id for r in result.records.values() if r.status == "done"]
        assert done == [f"c1.{i}" for i in range(9)]  # in ready order, which is plan order
        errors = budget_errors(result)
        assert len(errors) == 41
        assert errors[0] == {
            "type": "budget",
            "message": "no room left in the budget: the tool_calls limit of 9 is used up; "
            "this call did not run",
            "limit": "tool_calls",
        }
        assert all(r.status == "failed" for r in result.records.values() if r.status != "done")


def test_per_tool_limits_name_the_tool() -> None:
    calls = [{"_tool": "charge", "n": i, "seconds": 1} for i in range(5)]
    calls += [{"_tool": "fetch", "n": i} for i in range(3)]
    result = run(calls, tools=TOOLS, budget=tl.Budget(per_tool={"charge": 2}))
    assert STARTED == {"charge": 2, "fetch": 3}
    assert {e["limit"] for e in budget_errors(result)} == {"per_tool.charge"}
    assert result.usage.per_tool == {"charge": 2, "fetch": 3}


def test_latent_calls_and_responses_are_not_counted() -> None:
    calls = [
        {"_tool": "summarize", "_output": "short"},
        {"_tool": "fetch", "n": 1},
        {"_tool": "fetch", "n": 2},
    ]
    result = run(calls, tools=TOOLS, budget=tl.Budget(tool_calls=2))
    assert [r.status for r in result.records.values()] == ["done", "done", "done"]
    assert result.usage.tool_calls == 2


def test_a_refused_call_is_not_counted_and_its_dependents_settle_naming_it() -> None:
    calls = [
        {"_tool": "fetch", "n": 1, "_outputPath": "†state.a"},
        {"_tool": "fetch", "n": 2, "_outputPath": "†state.b"},
        {"_tool": "fetch", "n": "†state.b", "_outputPath": "†state.c"},
    ]
    result = run(calls, tools=TOOLS, budget=tl.Budget(tool_calls=1))
    statuses = {r.id: r.status for r in result.records.values()}
    assert statuses == {"c1.0": "done", "c1.1": "failed", "c1.2": "invalid"}
    assert result.records["c1.1"].error["type"] == "budget"
    assert "c1.1" in result.records["c1.2"].error["message"]
    assert result.usage.tool_calls == 1


def test_a_call_denied_by_approval_takes_no_room() -> None:
    guarded = tl.tool(requires_approval=True, name="guarded")(fetch.handler)

    def approve(pending: tl.PendingCall) -> tl.Decision:
        return tl.Deny("no") if pending.params["n"] == 0 else tl.Approve()

    calls = [{"_tool": "guarded", "n": i} for i in range(3)]
    result = run(calls, tools=[guarded], approve=approve, budget=tl.Budget(tool_calls=2))
    assert [r.status for r in result.records.values()] == ["denied", "done", "done"]


def test_without_a_budget_usage_is_still_counted() -> None:
    result = run([{"_tool": "fetch"}, {"_tool": "charge"}], tools=TOOLS)
    assert result.usage == tl.RunUsage(tool_calls=2, per_tool={"fetch": 1, "charge": 1})


def test_run_calls_takes_budget_and_checks_it() -> None:
    result = tl.run_calls(
        [{"_tool": "fetch"}] * 3, tools=TOOLS, budget=tl.Budget(per_tool={"fetch": 1})
    )
    assert result.usage.tool_calls == 1
    with pytest.raises(tl.ConfigurationError, match="budget"):
        tl.run_calls([], tools=TOOLS, budget={"tool_calls": 1})  # type: ignore[arg-type]
    with pytest.raises(tl.ConfigurationError, match="on_budget"):
        tl.run_calls([], tools=TOOLS, on_budget=3)  # type: ignore[arg-type]


# -- the property: calls started never exceed any limit ---------------------------------------

_plans = st.lists(
    st.tuples(
        st.sampled_from(["fetch", "charge"]),
        st.integers(0, 3),  # seconds
        st.one_of(st.none(), st.integers(0, 30)),  # reads the output of an earlier call
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _plans,
    st.one_of(st.none(), st.integers(0, 12)),
    st.one_of(st.none(), st.integers(0, 6)),
    st.one_of(st.none(), st.integers(1, 5)),
)
def test_calls_started_never_exceed_any_limit(
    plan: list[tuple[str, int, int | None]],
    tool_calls: int | None,
    charges: int | None,
    concurrency: int | None,
) -> None:
    STARTED.clear()
    calls = []
    for index, (tool, seconds, reads) in enumerate(plan):
        call: dict[str, Any] = {
            "_tool": tool,
            "seconds": seconds,
            "_outputPath": f"†state.v{index}",
        }
        if reads is not None and reads < index:
            call["n"] = f"†state.v{reads}"
        else:
            call["n"] = index
        calls.append(call)
    per_tool = {} if charges is None else {"charge": charges}
    budget = tl.Budget(tool_calls=tool_calls, per_tool=per_tool)
    result = run(calls, tools=TOOLS, budget=budget, max_concurrency=concurrency)
    started = sum(STARTED.values())
    assert tool_calls is None or started <= tool_calls
    assert charges is None or STARTED["charge"] <= charges
    assert result.usage.tool_calls == started
    assert result.usage.per_tool == {name: count for name, count in STARTED.items() if count}
    # Nothing is refused while there is room: a refusal means the limit it names is used up.
    for error in budget_errors(result):
        if error["limit"] == "tool_calls":
            assert started == tool_calls
        else:
            assert error["limit"] == "per_tool.charge" and STARTED["charge"] == charges


# -- model requests ---------------------------------------------------------------------------

PLAN = {"calls": [{"_tool": "fetch", "n": 1}]}
DONE = {"calls": [], "output": "done"}


def virtual(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return trio.run(partial(fn, *args, **kwargs), clock=MockClock(autojump_threshold=0))


class Metered:
    """A model client that answers from a script and reports fixed usage per request,
    recording the output limit each request carried."""

    def __init__(
        self,
        responses: list[Any],
        usage: tuple[int, int] | None = (100, 10),
        model: str = "metered",
        break_off: tuple[int, ...] = (),
    ) -> None:
        self.responses = responses
        self.usage = usage
        self.model = model
        self.break_off = break_off
        self.limits: list[int | None] = []

    async def stream_solution(self, request: tl.SolutionRequest) -> Any:
        self.limits.append(request.max_output_tokens)
        text = __import__("json").dumps(self.responses[request.iteration - 1])
        yield tl.TextDelta(text)
        if request.iteration in self.break_off:
            raise tl.ModelError("connection reset", status=None)
        if self.usage is not None:
            given, wrote = self.usage
            limit = request.max_output_tokens
            yield tl.Usage(given, wrote if limit is None else min(wrote, limit))


def test_a_requests_limit_stops_the_run_with_the_log_to_continue_from() -> None:
    model = tl.ScriptedModel([PLAN, PLAN, PLAN, DONE])
    agent = tl.Agent(model, tools=TOOLS, output={"type": "string"}, budget=tl.Budget(requests=2))
    with pytest.raises(tl.BudgetExceeded) as caught:
        agent.run("go")
    stopped = caught.value
    assert stopped.limit == "requests"
    assert "requests limit of 2 is used up" in str(stopped)
    assert len(model.requests) == 2  # the third was never sent
    assert stopped.usage.requests == 2 and stopped.usage.tool_calls == 2
    assert sum(m.get("type") == "solution" for m in stopped.messages) == 2
    # The log continues with more budget: the script's third and fourth answers.
    more = tl.Agent(
        tl.ScriptedModel([PLAN, PLAN, PLAN, DONE]),
        tools=TOOLS,
        output={"type": "string"},
        budget=tl.Budget(requests=2),
    )
    result = more.run(messages=stopped.messages)
    assert result.output == "done" and result.usage.requests == 2


def test_usage_is_what_the_server_reports_priced_by_the_model() -> None:
    model = Metered([PLAN, DONE])
    agent = tl.Agent(
        model,
        tools=TOOLS,
        output={"type": "string"},
        pricing={"metered": tl.Price(input=2.0, output=8.0)},
    )
    result = agent.run("go")
    assert result.usage == tl.RunUsage(
        requests=2,
        input_tokens=200,
        output_tokens=20,
        tool_calls=1,
        per_tool={"fetch": 1},
        cost=pytest.approx((200 * 2.0 + 20 * 8.0) / 1e6),
    )
    assert model.limits == [None, None]  # no limit on output: none is sent


def test_without_reported_usage_the_estimate_counts() -> None:
    result = tl.Agent(Metered([DONE], usage=None), output={"type": "string"}, tools=TOOLS).run("go")
    import json

    assert result.usage.output_tokens == -(-len(json.dumps(DONE)) // 4)  # four chars a token
    assert result.usage.input_tokens > 0


def test_the_output_limit_sent_is_what_remains() -> None:
    model = Metered([PLAN, PLAN, PLAN, DONE], usage=(100, 10))
    agent = tl.Agent(
        model, tools=TOOLS, output={"type": "string"}, budget=tl.Budget(output_tokens=25)
    )
    with pytest.raises(tl.BudgetExceeded) as caught:
        agent.run("go")
    assert model.limits == [25, 15, 5]  # what remained before each request
    assert caught.value.limit == "output_tokens"
    assert caught.value.usage.output_tokens == 25 and caught.value.usage.requests == 3


def test_a_total_tokens_limit_caps_the_output_after_the_prompt() -> None:
    model = Metered([DONE], usage=(100, 10))
    agent = tl.Agent(model, output={"type": "string"}, budget=tl.Budget(total_tokens=100_000))
    agent.run("go")
    [limit] = model.limits
    assert limit is not None and 99_000 < limit < 100_000  # the prompt's estimate is reserved


def test_a_cost_limit_stops_before_the_request_that_could_overshoot() -> None:
    price = tl.Price(input=10.0, output=1000.0)  # a cent per 1000 tokens in, per 10 out
    model = Metered([PLAN] * 30 + [DONE], usage=(100, 10))
    agent = tl.Agent(
        model,
        tools=TOOLS,
        output={"type": "string"},
        budget=tl.Budget(cost=0.1),
        pricing={"metered": price},
        max_iterations=31,
    )
    with pytest.raises(tl.BudgetExceeded) as caught:
        agent.run("go")
    stopped = caught.value
    assert stopped.limit == "cost"
    assert 0.05 < stopped.usage.cost <= 0.1
    assert stopped.usage.requests == len(model.limits) >= 2
    assert all(limit is not None and limit >= 1 for limit in model.limits)


def test_a_cost_budget_needs_a_price_for_the_model() -> None:
    model = tl.ScriptedModel([DONE])
    with pytest.raises(tl.ConfigurationError, match="'scripted'"):
        tl.Agent(model, budget=tl.Budget(cost=1.0))
    agent = tl.Agent(model)
    with pytest.raises(tl.ConfigurationError, match="price"):
        agent.run("go", budget=tl.Budget(cost=1.0))
    named = tl.ScriptedModel([DONE], model="gpt-test")
    priced = tl.Agent(
        named,
        output={"type": "string"},
        budget=tl.Budget(cost=1.0),
        pricing={"gpt-test": tl.Price(input=1.0, output=1.0)},
    )
    result = priced.run("go")
    assert result.usage.cost > 0 and result.usage.requests == 1


def test_a_request_cut_off_counts_its_whole_reservation() -> None:
    model = Metered([DONE, DONE], break_off=(1,))
    agent = tl.Agent(
        model, tools=TOOLS, output={"type": "string"}, budget=tl.Budget(output_tokens=40)
    )
    with pytest.raises(tl.BudgetExceeded) as caught:
        agent.run("go")
    assert model.limits == [40]  # the second request had no room left
    assert caught.value.usage.output_tokens == 40 and caught.value.usage.requests == 1


# -- clients send the budget's room as the request's output limit -----------------------------


def _refusing_client() -> tuple[Any, list[dict[str, Any]]]:
    """An httpx client whose server keeps each request body and answers 400."""
    import json

    import httpx

    bodies: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(400, json={"error": {"message": "stop here"}})

    return httpx.AsyncClient(transport=httpx.MockTransport(answer)), bodies


@pytest.mark.parametrize(
    ("make", "field", "expected"),
    [
        (lambda c: tl.OpenAIChat("gpt-x", api_key="k", client=c), "max_completion_tokens", 300),
        (lambda c: tl.OpenAIResponses("gpt-x", api_key="k", client=c), "max_output_tokens", 300),
        (
            lambda c: tl.OpenAIResponses("gpt-x", api_key="k", client=c, max_output_tokens=200),
            "max_output_tokens",
            200,
        ),
        (lambda c: tl.Anthropic("claude-x", api_key="k", client=c), "max_tokens", 300),
        (
            lambda c: tl.Anthropic("claude-x", api_key="k", client=c, max_tokens=100),
            "max_tokens",
            100,
        ),
    ],
)
def test_clients_send_the_room_left_as_the_output_limit(
    make: Any, field: str, expected: int
) -> None:
    client, bodies = _refusing_client()
    agent = tl.Agent(make(client), budget=tl.Budget(output_tokens=300))
    with pytest.raises(tl.ExecuteError):
        agent.run("go")
    assert bodies[0][field] == expected


def test_without_an_output_limit_chat_sends_none() -> None:
    client, bodies = _refusing_client()
    with pytest.raises(tl.ExecuteError):
        tl.Agent(tl.OpenAIChat("gpt-x", api_key="k", client=client)).run("go")
    assert "max_completion_tokens" not in bodies[0]
    assert bodies[0]["stream_options"] == {"include_usage": True}


def test_a_budget_error_matches_error_json() -> None:
    import json
    from pathlib import Path

    import jsonschema

    schema = json.loads((Path(__file__).parent.parent / "schemas" / "error.json").read_text())
    result = run([{"_tool": "fetch"}] * 2, tools=TOOLS, budget=tl.Budget(per_tool={"fetch": 1}))
    [message] = result.errors
    jsonschema.validate(message, schema)
    assert message["data"]["error"]["limit"] == "per_tool.fetch"


# -- the budget hook ---------------------------------------------------------------------------


def test_the_hook_grants_more_calls_once_per_exhaustion_then_refuses() -> None:
    asked: list[tl.BudgetRequest] = []

    def on_budget(request: tl.BudgetRequest) -> tl.Budget | None:
        asked.append(request)
        return tl.Budget(tool_calls=2) if len(asked) == 1 else None

    calls = [{"_tool": "fetch", "n": i, "seconds": 1} for i in range(7)]
    result = run(calls, tools=TOOLS, budget=tl.Budget(tool_calls=2), on_budget=on_budget)
    assert STARTED["fetch"] == 4 and result.usage.tool_calls == 4
    assert [r.status for r in result.records.values()] == ["done"] * 4 + ["failed"] * 3
    assert [request.limit for request in asked] == ["tool_calls", "tool_calls"]
    first = asked[0]
    assert first.asked == 1 and first.limits.tool_calls == 2
    assert first.usage.tool_calls == 2  # what the run had used when it asked
    assert asked[1].limits.tool_calls == 4  # the grant was added to the limit
    assert {e["limit"] for e in budget_errors(result)} == {"tool_calls"}


def test_an_async_hook_and_a_per_tool_limit() -> None:
    async def on_budget(request: tl.BudgetRequest) -> tl.Budget:
        await trio.sleep(5)  # a person takes their time; other calls keep running
        return tl.Budget(per_tool={"charge": 10})

    calls = [{"_tool": "charge", "n": i} for i in range(3)] + [{"_tool": "fetch", "seconds": 1}]
    result = run(calls, tools=TOOLS, budget=tl.Budget(per_tool={"charge": 1}), on_budget=on_budget)
    assert STARTED == {"charge": 3, "fetch": 1}
    assert all(r.status == "done" for r in result.records.values())


def test_a_hook_that_raises_refuses(caplog: pytest.LogCaptureFixture) -> None:
    def on_budget(request: tl.BudgetRequest) -> tl.Budget:
        raise RuntimeError("no idea")

    result = run(
        [{"_tool": "fetch"}] * 2, tools=TOOLS, budget=tl.Budget(tool_calls=1), on_budget=on_budget
    )
    assert [r.status for r in result.records.values()] == ["done", "failed"]
    assert "budget hook bug" in caplog.text


def test_the_hook_extends_the_requests_of_a_run() -> None:
    asked: list[tl.BudgetRequest] = []

    def on_budget(request: tl.BudgetRequest) -> tl.Budget | None:
        asked.append(request)
        return tl.Budget(requests=1)

    model = tl.ScriptedModel([PLAN, PLAN, DONE])
    agent = tl.Agent(
        model,
        tools=TOOLS,
        output={"type": "string"},
        budget=tl.Budget(requests=1),
        on_budget=on_budget,
    )
    result = agent.run("go")
    assert result.output == "done" and result.usage.requests == 3
    assert [request.limit for request in asked] == ["requests", "requests"]
    assert asked[0].usage.requests == 1 and asked[1].limits.requests == 2


def test_a_refused_request_stops_the_run() -> None:
    agent = tl.Agent(
        tl.ScriptedModel([PLAN, DONE]),
        tools=TOOLS,
        output={"type": "string"},
        budget=tl.Budget(requests=1),
        on_budget=lambda request: None,
    )
    with pytest.raises(tl.BudgetExceeded) as caught:
        agent.run("go")
    assert caught.value.limit == "requests"


# -- durability ---------------------------------------------------------------------------------


def stored_agent(store: Any, **options: Any) -> tl.Agent:
    return tl.Agent(
        tl.ScriptedModel([PLAN, PLAN, PLAN, DONE]),
        tools=TOOLS,
        output={"type": "string"},
        store=store,
        **options,
    )


def test_a_deferred_budget_question_pauses_a_stored_run_until_a_resume_adds_room(
    tmp_path: Any,
) -> None:
    store = tmp_path / "runs.db"
    asked: list[str] = []

    def later(request: tl.BudgetRequest) -> tl.Defer:
        asked.append(request.limit)
        return tl.Defer()

    first = stored_agent(store, budget=tl.Budget(requests=2), on_budget=later)
    result = first.run("go", run_id="r1")
    assert result.status == "paused" and asked == ["requests"]
    assert result.usage.requests == 2 and result.usage.tool_calls == 2
    # Another process: the same agent, more room given on resume (added to what is left).
    again = stored_agent(store, budget=tl.Budget(requests=2))
    result = again.resume("r1", budget=tl.Budget(requests=2))
    assert result.status == "done" and result.output == "done"
    assert result.usage.requests == 4 and result.usage.tool_calls == 3  # across the resume


def test_a_resume_never_resets_the_budget(tmp_path: Any) -> None:
    store = tmp_path / "runs.db"
    result = stored_agent(store, budget=tl.Budget(requests=2), on_budget=lambda r: tl.Defer())
    assert result.run("go", run_id="r2").status == "paused"
    # Resumed without more room: the two spent requests are still spent, so it stops.
    with pytest.raises(tl.BudgetExceeded) as caught:
        stored_agent(store, budget=tl.Budget(requests=2)).resume("r2")
    assert caught.value.usage.requests == 2


def test_tickloop_budget_adds_room_on_the_command_line(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from tickloop._cli._main import main

    store = str(tmp_path / "runs.db")
    paused = stored_agent(store, budget=tl.Budget(requests=2), on_budget=lambda r: tl.Defer())
    assert paused.run("go", run_id="r3").status == "paused"
    assert main(["budget", "r3", "--add", "requests=1", "--add", "cost=1", "--store", store]) == 0
    assert "tickloop resume r3" in capsys.readouterr().out
    assert main(["budget", "r3", "--add", "speed=3", "--store", store]) == 2
    assert "no limit is called 'speed'" in capsys.readouterr().err
    assert main(["budget", "nope", "--add", "requests=1", "--store", store]) == 2
    # The next resume adds it to what is left: one more request, then a deferral again.
    result = stored_agent(store, budget=tl.Budget(requests=2), on_budget=lambda r: tl.Defer())
    resumed = result.resume("r3")
    assert resumed.status == "paused" and resumed.usage.requests == 3
    assert main(["budget", "r3", "--add", "requests=5", "--store", store]) == 0
    done = stored_agent(store, budget=tl.Budget(requests=2)).resume("r3")
    assert done.status == "done" and done.usage.requests == 4


# -- wall time ----------------------------------------------------------------------------------


def test_wall_time_ends_running_calls_as_timed_out_and_stops_the_run() -> None:
    slow_plan = {
        "calls": [
            {"_tool": "fetch", "n": 1, "seconds": 2, "_outputPath": "†state.a"},
            {"_tool": "fetch", "n": 2, "seconds": 60, "_outputPath": "†state.b"},
        ]
    }
    agent = tl.Agent(
        tl.ScriptedModel([slow_plan, DONE]),
        tools=TOOLS,
        output={"type": "string"},
        budget=tl.Budget(wall_time=10),
    )

    async def main() -> None:
        with pytest.raises(tl.BudgetExceeded) as caught:
            await agent.run_async("go")
        assert trio.current_time() == 10  # stopped at the deadline, on the run's clock
        stopped = caught.value
        assert stopped.limit == "wall_time"
        errors = [m["data"] for m in stopped.messages if m.get("kind") == "error"]
        assert [e["call"]["n"] for e in errors] == [2]
        assert "wall_time budget ran out" in errors[0]["error"]["message"]

    virtual(main)


def test_wall_time_left_carries_over_a_resume(tmp_path: Any) -> None:
    store = tmp_path / "runs.db"
    plan = {"calls": [{"_tool": "fetch", "n": 1, "seconds": 4, "_outputPath": "†state.a"}]}

    def agent(**options: Any) -> tl.Agent:
        return tl.Agent(
            tl.ScriptedModel([plan, plan, plan, DONE]),
            tools=TOOLS,
            output={"type": "string"},
            store=store,
            budget=tl.Budget(wall_time=10, requests=2),
            **options,
        )

    async def first() -> None:
        result = await agent(on_budget=lambda r: tl.Defer()).run_async("go", run_id="w")
        assert result.status == "paused"  # after 8 s: two requests of 4 s each

    async def second() -> None:
        start = trio.current_time()
        with pytest.raises(tl.BudgetExceeded) as caught:
            await agent().resume_async("w", budget=tl.Budget(requests=5))
        assert caught.value.limit == "wall_time"
        assert trio.current_time() - start == 2  # what was left of the 10 s

    virtual(first)
    virtual(second)


def test_a_resumed_run_makes_the_same_refusals_and_counts_nothing_twice(tmp_path: Any) -> None:
    store = tmp_path / "runs.db"
    guarded = tl.tool(requires_approval=True, name="guarded")(charge.handler)
    script = [
        {"calls": [{"_tool": "fetch", "n": i, "_outputPath": f"†state.f{i}"} for i in range(3)]},
        {"calls": [{"_tool": "guarded", "n": 1, "_outputPath": "†state.g"}]},
        {"calls": [{"_tool": "fetch", "n": 9, "_outputPath": "†state.late"}]},
        DONE,
    ]

    def agent() -> tl.Agent:
        return tl.Agent(
            tl.ScriptedModel(script),
            tools=[fetch, guarded],
            output={"type": "string"},
            store=store,
            approve=lambda pending: tl.Defer(),
            budget=tl.Budget(per_tool={"fetch": 2}),
        )

    paused = agent().run("go", run_id="same")
    assert paused.status == "paused" and paused.usage.per_tool == {"fetch": 2}
    STARTED.clear()
    done = agent().resume("same", decisions={"c2.0": tl.Approve()})
    assert done.status == "done"
    assert STARTED == {"charge": 1}  # nothing ran again; the late fetch had no room
    statuses = {r.id: r.status for r in done.records.values()}
    assert statuses == {
        "c1.0": "done",
        "c1.1": "done",
        "c1.2": "failed",
        "c2.0": "done",
        "c3.0": "failed",
    }
    assert done.records["c3.0"].error["limit"] == "per_tool.fetch"
    assert done.usage.per_tool == {"fetch": 2, "guarded": 1}
    assert done.usage.requests == 4


def test_the_hook_is_shown_the_run_id() -> None:
    asked: list[tl.BudgetRequest] = []

    def on_budget(request: tl.BudgetRequest) -> None:
        asked.append(request)

    agent = tl.Agent(
        tl.ScriptedModel([{"calls": [{"_tool": "fetch"}] * 2}, DONE]),
        tools=TOOLS,
        output={"type": "string"},
        budget=tl.Budget(tool_calls=1, requests=1),
        on_budget=on_budget,
    )
    with pytest.raises(tl.BudgetExceeded):
        agent.run("go", run_id="named")
    assert [(r.limit, r.run_id) for r in asked] == [("tool_calls", "named"), ("requests", "named")]


def test_the_worked_example_of_docs_budgets(tmp_path: Any) -> None:
    """docs/budgets.md: a money cap, a person asked to extend it, the run resumed."""
    store = tmp_path / "runs.db"
    notified: list[str] = []

    def ask_finance(request: tl.BudgetRequest) -> tl.Defer | None:
        if request.limit == "cost":
            notified.append(f"run {request.run_id} has spent ${request.usage.cost:.4f}")
            return tl.Defer()
        return None

    def shop() -> tl.Agent:
        return tl.Agent(
            tl.ScriptedModel([PLAN] * 8 + [DONE], model="gpt-4.1-mini"),
            tools=TOOLS,
            output={"type": "string"},
            budget=tl.Budget(cost=0.002, per_tool={"fetch": 2}),
            pricing={"gpt-4.1-mini": tl.Price(input=0.40, output=1.60)},
            on_budget=ask_finance,
            store=store,
        )

    result = shop().run({"task": "find and buy"}, run_id="trip-7")
    assert result.status == "paused" and notified == ["run trip-7 has spent $" + notified[0][-6:]]
    assert result.usage.cost <= 0.002
    spent = result.usage
    more = shop().resume("trip-7", budget=tl.Budget(cost=0.01))
    assert more.status == "done" and more.output == "done"
    assert more.usage.cost > spent.cost and more.usage.requests == 9
    assert more.usage.per_tool == {"fetch": 2}  # the per-tool cap held across the resume


# -- one tree, one count (the ledger sub-agents draw from; no public API of its own yet) ---


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(st.none(), st.integers(0, 6)),
    st.lists(st.one_of(st.none(), st.integers(0, 6)), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["a", "b"]), st.booleans()), max_size=40),
)
def test_a_child_ledger_never_lets_the_tree_overshoot(
    root_limit: int | None, child_limits: list[int | None], steps: list[tuple[int, str, bool]]
) -> None:
    from tickloop._core._budget import Ledger, call_amount

    root = Ledger(tl.Budget(tool_calls=root_limit))
    children = [root.child(tl.Budget(tool_calls=limit)) for limit in child_limits]
    held: list[tuple[Ledger, dict[str, float]]] = []
    for index, tool, settle_one in steps:
        child = children[index % len(children)]
        amount = call_amount(tool)
        if child.reserve(amount) is None:
            held.append((child, amount))
        if settle_one and held:
            ledger, taken = held.pop(0)
            ledger.settle(taken, taken)  # started: the reservation becomes spending
        for ledger in (root, *children):
            limit = ledger.limits.tool_calls
            taken_here = ledger.spent.get("tool_calls", 0) + ledger.reserved.get("tool_calls", 0)
            assert limit is None or taken_here <= limit
    assert root.spent.get("tool_calls", 0) == sum(c.spent.get("tool_calls", 0) for c in children)


def test_a_request_cut_off_by_the_process_ending_stays_counted_whole(tmp_path: Any) -> None:
    store = tmp_path / "runs.db"

    class Hanging(Metered):
        max_tokens = 300  # the client's own cap on a request's output
        hang = True

        async def stream_solution(self, request: tl.SolutionRequest) -> Any:
            self.limits.append(request.max_output_tokens)
            if self.hang:
                yield tl.TextDelta('{"calls": [')
                await trio.sleep(1000)  # the process is stopped meanwhile
            async for item in Metered.stream_solution(self, request):
                yield item

    model = Hanging([DONE], usage=(100, 10))

    def agent() -> tl.Agent:
        return tl.Agent(
            model, output={"type": "string"}, store=store, budget=tl.Budget(output_tokens=1500)
        )

    async def interrupted() -> None:
        with trio.move_on_after(5):  # as if the process stopped mid-request
            await agent().run_async("go", run_id="cut")

    virtual(interrupted)
    model.hang = False
    result = agent().resume("cut")
    assert result.status == "done" and model.limits[:2] == [300, 300]
    assert result.usage.requests == 2
    assert result.usage.output_tokens == 300 + 10  # the cut one counts its whole cap


def _three_fetches_agent(store: Any, **options: Any) -> tl.Agent:
    three = {"calls": [{"_tool": "fetch", "n": i, "_outputPath": f"†state.f{i}"} for i in range(3)]}
    return tl.Agent(
        tl.ScriptedModel([three, DONE]),
        tools=TOOLS,
        output={"type": "string"},
        store=store,
        budget=tl.Budget(tool_calls=2),
        **options,
    )


def test_a_deferred_call_limit_parks_the_calls_until_a_resume_adds_room(tmp_path: Any) -> None:
    store = tmp_path / "runs.db"
    asked: list[str] = []

    def later(request: tl.BudgetRequest) -> tl.Defer:
        asked.append(request.limit)
        return tl.Defer()

    paused = _three_fetches_agent(store, on_budget=later).run("go", run_id="calls")
    assert paused.status == "paused" and asked == ["tool_calls"]
    assert paused.usage.requests == 1 and paused.usage.tool_calls == 2
    assert budget_errors(paused) == []  # nothing refused: the third call waits
    assert paused.records["c1.2"].status == "deferred"
    assert paused.pending == []  # it waits for room, not for a person's decision
    STARTED.clear()
    done = _three_fetches_agent(store).resume("calls", budget=tl.Budget(tool_calls=1))
    assert done.status == "done" and done.output == "done"
    assert STARTED == {"fetch": 1}  # only the parked call ran, once
    assert done.records["c1.2"].status == "done" and done.state["f2"] == 2
    assert done.usage.tool_calls == 3 and done.usage.requests == 2
    assert budget_errors(done) == []


def test_a_parked_call_resumed_without_room_is_asked_about_again(tmp_path: Any) -> None:
    store = tmp_path / "runs.db"
    asked: list[str] = []

    def later(request: tl.BudgetRequest) -> tl.Defer:
        asked.append(request.limit)
        return tl.Defer()

    assert _three_fetches_agent(store, on_budget=later).run("go", run_id="again").status == "paused"
    # Resumed with no more room: the question is asked again, and deferred again.
    again = _three_fetches_agent(store, on_budget=later).resume("again")
    assert again.status == "paused" and asked == ["tool_calls", "tool_calls"]
    assert again.records["c1.2"].status == "deferred" and again.usage.tool_calls == 2
    # Without a hook, a resume with no room refuses it (PROTOCOL §12), and the run goes on.
    done = _three_fetches_agent(store).resume("again")
    assert done.status == "done" and done.records["c1.2"].status == "failed"
    [refused] = budget_errors(done)
    assert refused["limit"] == "tool_calls"


def test_tickloop_budget_gives_a_parked_call_room(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from tickloop._cli._main import main

    store = str(tmp_path / "runs.db")
    paused = _three_fetches_agent(store, on_budget=lambda r: tl.Defer()).run("go", run_id="cli")
    assert paused.status == "paused"
    assert main(["pending", "cli", "--store", store]) == 0
    shown = capsys.readouterr().out
    assert "budget:tool_calls" in shown and "tickloop budget cli --add tool_calls=" in shown
    assert main(["budget", "cli", "--add", "tool_calls=1", "--store", store]) == 0
    STARTED.clear()
    done = _three_fetches_agent(store).resume("cli")
    assert done.status == "done" and STARTED == {"fetch": 1}
    assert done.records["c1.2"].status == "done" and done.usage.tool_calls == 3


def test_a_budget_question_left_open_is_asked_again_on_resume(tmp_path: Any) -> None:
    store = tmp_path / "runs.db"
    plan = {"calls": [{"_tool": "fetch", "n": i, "_outputPath": f"†state.f{i}"} for i in range(3)]}
    asked: list[str] = []

    async def slow_person(request: tl.BudgetRequest) -> tl.Budget:
        asked.append(request.limit)
        await trio.sleep(1000)  # the process stops before the answer
        return tl.Budget(tool_calls=5)

    def agent(on_budget: Any) -> tl.Agent:
        return tl.Agent(
            tl.ScriptedModel([plan, DONE]),
            tools=TOOLS,
            output={"type": "string"},
            store=store,
            budget=tl.Budget(tool_calls=1),
            on_budget=on_budget,
        )

    async def interrupted() -> None:
        with trio.move_on_after(5):
            await agent(slow_person).run_async("go", run_id="open")

    virtual(interrupted)
    assert asked == ["tool_calls"]

    async def grants(request: tl.BudgetRequest) -> tl.Budget:
        asked.append(request.limit)
        return tl.Budget(tool_calls=5)

    async def resumed() -> tl.RunResult:
        with trio.fail_after(100):  # without the question asked again, the tick never ends
            return await agent(grants).resume_async("open")

    done = virtual(resumed)
    assert done.status == "done" and asked == ["tool_calls", "tool_calls"]
    assert done.usage.tool_calls == 3


def test_a_request_cut_off_after_reporting_its_prompt_counts_its_whole_output_cap() -> None:
    class PromptFirst(Metered):
        async def stream_solution(self, request: tl.SolutionRequest) -> Any:
            self.limits.append(request.max_output_tokens)
            yield tl.Usage(100, 0)  # as Anthropic reports the prompt at the start
            yield tl.TextDelta('{"calls": [')
            raise tl.ModelError("connection reset", status=None)

    agent = tl.Agent(
        PromptFirst([DONE]),
        output={"type": "string"},
        budget=tl.Budget(output_tokens=40),
    )
    with pytest.raises(tl.BudgetExceeded) as caught:
        agent.run("go")
    usage = caught.value.usage
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (1, 100, 40)


def test_agent_stream_takes_a_budget_too() -> None:
    agent = tl.Agent(tl.ScriptedModel(["the answer"] * 2, model="scripted"), protocol="tools")

    async def main() -> tl.RunResult:
        async with agent.stream("go", budget=tl.Budget(requests=0)) as stream:
            async for _ in stream.text():
                pass
        return stream.result

    with pytest.raises(tl.BudgetExceeded):
        virtual(main)


def test_a_stored_run_stopped_by_its_budget_resumes_with_more(tmp_path: Any) -> None:
    store = tmp_path / "runs.db"
    with pytest.raises(tl.BudgetExceeded):
        stored_agent(store, budget=tl.Budget(requests=1)).run("go", run_id="stopped")
    done = stored_agent(store, budget=tl.Budget(requests=1)).resume(
        "stopped", budget=tl.Budget(requests=3)
    )
    assert done.status == "done" and done.usage.requests == 4 and done.usage.tool_calls == 3


def test_a_runs_own_budget_is_the_one_its_resume_continues_with(tmp_path: Any) -> None:
    store = tmp_path / "runs.db"
    # The agent allows 10 requests; this run only 2 (PROTOCOL §12: `run(budget=)` is for
    # that run), so it pauses after two, deferred.
    agent = stored_agent(store, budget=tl.Budget(requests=10), on_budget=lambda r: tl.Defer())
    paused = agent.run("go", run_id="own", budget=tl.Budget(requests=2))
    assert paused.status == "paused" and paused.usage.requests == 2
    # Resumed with one more request: 2 + 1 of the run's own, not 10 + 1 of the agent's.
    again = agent.resume("own", budget=tl.Budget(requests=1))
    assert again.status == "paused" and again.usage.requests == 3
    done = stored_agent(store, budget=tl.Budget(requests=10)).resume(
        "own", budget=tl.Budget(requests=5)
    )
    assert done.status == "done" and done.usage.requests == 4


def _approval_agent(slow_fetch: float) -> tl.Agent:
    guarded = tl.tool(requires_approval=True, name="guarded")(charge.handler)
    plan = {
        "calls": [
            {"_tool": "guarded", "n": 1, "_outputPath": "†state.g"},
            {"_tool": "fetch", "n": 2, "seconds": slow_fetch, "_outputPath": "†state.f"},
        ]
    }

    async def person(pending: tl.PendingCall) -> tl.Approve:
        await trio.sleep(100)  # a person takes their time
        return tl.Approve()

    return tl.Agent(
        tl.ScriptedModel([plan, DONE]),
        tools=[fetch, guarded],
        output={"type": "string"},
        approve=person,
        budget=tl.Budget(wall_time=10),
    )


def test_time_waiting_only_for_a_person_does_not_count_toward_wall_time() -> None:
    async def main() -> None:
        result = await _approval_agent(slow_fetch=0).run_async("go")
        assert result.output == "done"
        assert trio.current_time() >= 100  # the person's 100 s did not stop the run

    virtual(main)


def test_time_a_person_takes_while_calls_run_still_counts() -> None:
    async def main() -> None:
        with pytest.raises(tl.BudgetExceeded) as caught:
            await _approval_agent(slow_fetch=50).run_async("go")
        assert caught.value.limit == "wall_time"
        # The fetch ran while the person was asked: at 10 s it ended as timed out.
        late = [m["data"] for m in caught.value.messages if m.get("kind") == "error"]
        assert late[0]["call"]["n"] == 2 and "wall_time" in late[0]["error"]["message"]

    virtual(main)


def test_a_run_continued_after_a_budget_error_counts_what_the_first_used() -> None:
    """PROTOCOL §12: a run continued from a budget error's log goes on from what is left;
    its usage is the whole conversation's (issue 44)."""
    agent = tl.Agent(
        tl.ScriptedModel([PLAN, PLAN, PLAN, DONE]),
        tools=TOOLS,
        output={"type": "string"},
        budget=tl.Budget(requests=2),
    )
    with pytest.raises(tl.BudgetExceeded) as caught:
        agent.run("go")
    first = caught.value
    more = tl.Agent(
        tl.ScriptedModel([PLAN, PLAN, PLAN, DONE]),
        tools=TOOLS,
        output={"type": "string"},
        budget=tl.Budget(requests=3),  # room for one more request in all, not three
    )
    with pytest.raises(tl.BudgetExceeded) as again:
        more.run(messages=first.messages, usage=first.usage)
    second = again.value
    assert second.usage.requests == 3 and second.usage.tool_calls == 3
    # Continued once more with room: the usage adds up over all three runs.
    last = tl.Agent(
        tl.ScriptedModel([PLAN, PLAN, PLAN, DONE]),
        tools=TOOLS,
        output={"type": "string"},
        budget=tl.Budget(requests=4),
    ).run(messages=second.messages, usage=second.usage)
    assert last.output == "done"
    assert last.usage.requests == 4 and last.usage.per_tool == {"fetch": 3}


def test_usage_without_messages_or_of_the_wrong_type_is_refused_before_anything_runs() -> None:
    model = tl.ScriptedModel([DONE])
    agent = tl.Agent(model, tools=TOOLS, output={"type": "string"})
    with pytest.raises(tl.ConfigurationError, match="messages="):
        agent.run("go", usage=tl.RunUsage(requests=1))
    with pytest.raises(tl.ConfigurationError, match=r"tl\.RunUsage"):
        log = [{"type": "data", "kind": "input", "data": {}}]
        agent.run(messages=log, usage={"requests": 1})  # type: ignore[arg-type]
    assert model.requests == []


def test_a_continued_stored_run_counts_what_it_carried_once_across_a_resume(
    tmp_path: Any,
) -> None:
    """The carried usage is a journaled input: a resume of the continued run replays
    it and never adds it again."""
    with pytest.raises(tl.BudgetExceeded) as caught:
        tl.Agent(
            tl.ScriptedModel([PLAN, PLAN, PLAN, DONE]),
            tools=TOOLS,
            output={"type": "string"},
            budget=tl.Budget(requests=1),
        ).run("go")
    first = caught.value
    store = tmp_path / "runs.db"
    continued = stored_agent(store, budget=tl.Budget(requests=3), on_budget=lambda r: tl.Defer())
    paused = continued.run(messages=first.messages, usage=first.usage, run_id="c1")
    assert paused.status == "paused" and paused.usage.requests == 3
    again = stored_agent(store, budget=tl.Budget(requests=3))
    done = again.resume("c1", budget=tl.Budget(requests=1))
    assert done.status == "done" and done.usage.requests == 4 and done.usage.tool_calls == 3

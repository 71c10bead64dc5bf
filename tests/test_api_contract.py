"""The public contract of docs/api.md, checked as an outside user would.

Only `import tickloop as tl`: no private module is touched. Each snippet of the API is run
as written, adapted only to run offline (`tl.ScriptedModel` or an `httpx.MockTransport`
for models, `trio.testing.MockClock(autojump_threshold=0)` for anything timed, so no
assertion depends on the wall clock). The sections follow docs/api.md's; a test
fails when a documented name or meaning drifts.
"""

from __future__ import annotations

import inspect
import json
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest
import trio
import trio.testing

import tickloop as tl


def virtual_run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`trio.run` on a virtual clock: timed things take no real time and are exact."""
    return trio.run(
        partial(fn, *args, **kwargs), clock=trio.testing.MockClock(autojump_threshold=0)
    )


def signature_of(fn: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    """(name, kind, default) of every parameter, as a user reads the signature."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


P, K = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
EMPTY = inspect.Parameter.empty


# ------------------------------------------------------------------------------------------
# Everything public is importable from the top-level package

API_PAGE = Path(__file__).resolve().parent.parent / "docs" / "api.md"
# Every `tl.Name` the page writes, in its order: each must be a public name.
DOCUMENTED_NAMES = list(
    dict.fromkeys(re.findall(r"\btl\.([A-Za-z_]\w*)", API_PAGE.read_text(encoding="utf-8")))
)


@pytest.mark.parametrize("name", DOCUMENTED_NAMES)
def test_every_documented_name_is_public_at_the_top_level(name: str) -> None:
    assert hasattr(tl, name)
    assert name in tl.__all__


# ------------------------------------------------------------------------------------------
# Tools (the snippet of docs/api.md, with the charge handler filled in)


@tl.tool
def add(a: int, b: int) -> int:
    """Add two integers."""  # the docstring is the description
    return a + b


CHARGE_CONTEXTS: list[tl.CallContext] = []


@tl.tool(
    requires_approval=True,
    output_path="†state.receipt",
    timeout=10,
    max_concurrency=2,
    depends_on=["†state.user"],
)
async def charge(customer: str, cents: int, ctx: tl.CallContext) -> dict:
    CHARGE_CONTEXTS.append(ctx)
    await trio.sleep(1)
    return {"customer": customer, "cents": cents, "by": ctx.state["user"]}


summarize = tl.Tool(  # latent: no handler, the model writes `_output`
    name="summarize",
    description="Summarize a text in one sentence.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    output={"type": "string"},
)


def test_tool_signature_and_defaults() -> None:
    assert signature_of(tl.tool) == [
        ("fn", P, None),
        ("name", K, None),
        ("description", K, None),
        ("requires_approval", K, False),
        ("depends_on", K, ()),
        ("output_path", K, None),
        ("timeout", K, None),
        ("max_concurrency", K, None),
        ("bind", K, None),
        ("idempotent", K, False),
        ("expected_duration", K, None),
        ("read_only", K, False),
        ("defer_loading", K, False),
    ]
    assert isinstance(add, tl.Tool) and isinstance(charge, tl.Tool)

    # Usable bare and with options; name= and description= override the function's.
    def total(a: int, b: int) -> int:
        """Add."""
        return a + b

    renamed = tl.tool(name="plus", description="Adds.")(total)
    assert (renamed.name, renamed.description) == ("plus", "Adds.")
    assert (tl.tool(total).name, tl.tool(total).description) == ("total", "Add.")


def test_parameter_schema_from_the_signature_and_output_schema_from_the_return() -> None:
    assert add.name == "add"
    assert add.description == "Add two integers."
    assert add.parameters["type"] == "object"
    assert add.parameters["required"] == ["a", "b"]
    assert {k: v["type"] for k, v in add.parameters["properties"].items()} == {
        "a": "integer",
        "b": "integer",
    }
    assert add.output == {"type": "integer"}
    assert add.is_latent is False

    class Invoice(pydantic.BaseModel):
        number: str
        total: float

    @tl.tool
    def invoice(number: str, ctx: tl.CallContext, total: float = 0.0) -> Invoice:
        return Invoice(number=number, total=total)

    # A model local to the defining function resolves, under `from __future__ import
    # annotations` too, and the context parameter is still recognised.
    assert set(invoice.parameters["properties"]) == {"number", "total"}
    assert invoice.parameters["required"] == ["number"]  # a default makes it optional
    assert invoice.output == Invoice.model_json_schema()

    @tl.tool
    def log(text: str) -> None:
        return None

    assert log.output is None  # nothing to check


def test_call_context_is_injected_and_not_part_of_the_schema() -> None:
    assert set(charge.parameters["properties"]) == {"customer", "cents"}
    assert "ctx" not in charge.parameters.get("required", [])
    assert charge.output is not None and charge.output["type"] == "object"

    CHARGE_CONTEXTS.clear()
    wire = {"_tool": "charge", "customer": "ada", "cents": 500}
    result = tl.run_calls(
        [wire], tools=[charge], state={"user": "bob"}, input={"order": 7}, approve=lambda c: True
    )
    (ctx,) = CHARGE_CONTEXTS
    assert ctx.id == "c1.0"
    assert ctx.call["_tool"] == "charge" and ctx.call["cents"] == 500  # the wire call
    assert ctx.state["user"] == "bob" and ctx.input["order"] == 7
    with pytest.raises(TypeError):  # read-only views
        ctx.state["user"] = "eve"  # type: ignore[index]
    # output_path: a call that names none gets the tool's.
    assert result.state["receipt"] == {"customer": "ada", "cents": 500, "by": "bob"}


def test_tool_options_of_the_snippet_take_effect() -> None:
    """depends_on waits for †state.user, max_concurrency=2 runs two at once, timeout=10."""

    @tl.tool(output_path="†state.user")
    async def login(name: str) -> str:
        await trio.sleep(3)
        return name

    async def approve_all(call: tl.PendingCall) -> bool:
        # Async: it answers in no virtual time. A sync hook runs in a worker thread, and
        # the autojumping virtual clock may move on while a thread runs.
        return True

    calls = [{"_tool": "charge", "customer": c, "cents": 1} for c in ("a", "b", "c")]
    result = virtual_run(
        tl.execute,
        [*calls, {"_tool": "login", "name": "bob"}],
        tools=[charge, login],
        approve=approve_all,
    )
    times = sorted((r.started, r.finished) for r in result.records.values() if r.tool == "charge")
    assert times == [(3, 4), (3, 4), (4, 5)]  # waited on †state.user; two at a time

    @tl.tool(timeout=10)
    async def slow() -> int:
        await trio.sleep(60)
        return 1

    result = virtual_run(tl.execute, [{"_tool": "slow", "_outputPath": "†state.s"}], tools=[slow])
    record = result.records["c1.0"]
    assert record.status == "failed" and record.finished == 10
    assert result.errors[0]["data"]["error"]["type"] == "runtime"


def test_arguments_are_checked_with_jsonschema_then_converted_by_pydantic() -> None:
    import datetime

    seen: list[Any] = []

    @tl.tool
    def weekday(day: datetime.date) -> str:
        seen.append(day)
        return day.strftime("%A")

    result = tl.run_calls(
        [
            {"_tool": "weekday", "day": "2024-05-17", "_outputPath": "†state.a"},
            {"_tool": "add", "a": "1", "b": 2, "_outputPath": "†state.b"},
        ],  # "1" is no integer
        tools=[weekday, add],
    )
    assert seen == [datetime.date(2024, 5, 17)]  # converted to the annotated type
    assert result.state == {"a": "Friday"}
    assert result.records["c1.1"].status == "invalid"  # jsonschema is strict, before pydantic
    assert result.errors[0]["data"]["error"]["type"] == "structural"


def test_tool_constructor_with_json_schema_and_pydantic_model() -> None:
    assert signature_of(tl.Tool)[:5] == [
        ("name", P, EMPTY),
        ("description", P, ""),
        ("parameters", P, None),
        ("output", P, None),
        ("handler", P, None),
    ]
    assert summarize.name == "summarize"
    assert summarize.parameters == {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    assert summarize.output == {"type": "string"}
    assert summarize.is_latent is True

    class Query(pydantic.BaseModel):
        text: str
        limit: int = 5

    class Hits(pydantic.BaseModel):
        hits: list[str]

    search = tl.Tool("search", "Search.", Query, Hits, handler=lambda text, limit=5: {"hits": []})
    assert search.parameters == Query.model_json_schema()  # a JSON Schema dict
    assert search.output == Hits.model_json_schema()
    assert search.is_latent is False
    assert tl.Tool("noted", parameters=Query, requires_approval=True).is_latent is True

    result = tl.run_calls(
        [
            {"_tool": "summarize", "text": "long", "_output": "Short.", "_outputPath": "†state.s"},
            {"_tool": "search", "text": "x", "_outputPath": "†state.h"},
        ],
        tools=[summarize, search],
    )
    assert result.state == {"s": "Short.", "h": {"hits": []}}

    with pytest.raises(tl.ConfigurationError):
        tl.Tool("bad", parameters=42)  # type: ignore[arg-type]


def test_an_activity_returns_branch_to_choose_an_output_branch() -> None:
    @tl.tool
    def check(n: int) -> int | tl.Branch:
        return n if n > 0 else tl.Branch("†state.failed", f"{n} is not positive")

    assert check.output is None  # a Branch's value may be anything: nothing to check

    result = tl.run_calls(
        [
            {"_tool": "check", "n": -1, "_outputPath": "†state.ok || †state.failed"},
            {"_tool": "add", "a": "†state.ok", "b": 1, "_outputPath": "†state.next"},
        ],
        tools=[check, add],
    )
    assert result.state == {"failed": "-1 is not positive"}
    assert result.records["c1.1"].status == "skipped"  # the branch not taken
    assert result.errors == []  # skipping is not an error

    plain = tl.run_calls(
        [{"_tool": "check", "n": 4, "_outputPath": "†state.ok || †state.failed"}],
        tools=[check],
    )
    assert plain.state == {"ok": 4}  # a plain value goes to the first term


# ------------------------------------------------------------------------------------------
# Running calls without a model


def test_run_calls_example_as_written() -> None:
    result = tl.run_calls(
        [
            {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.x"},
            {"_tool": "add", "a": "†state.x", "b": 10, "_outputPath": "†state.y"},
        ],
        tools=[add],
    )
    assert result.state == {"x": 3, "y": 13}
    assert isinstance(result, tl.ExecutionResult)
    assert list(result.records) == ["c1.0", "c1.1"]  # engine ids, run_calls is iteration 1


def test_run_calls_and_execute_signatures() -> None:
    expected = [
        ("calls", P, EMPTY),
        ("tools", K, EMPTY),
        ("state", K, None),
        ("input", K, None),
        ("approve", K, None),
        ("max_concurrency", K, None),
        ("budget", K, None),  # PROTOCOL §12
        ("on_budget", K, None),
        ("schedule", K, "critical_path"),
        ("questions", K, None),  # an MCP server's questions (API.md "MCP servers")
    ]
    assert signature_of(tl.run_calls) == expected
    assert signature_of(tl.execute) == expected
    assert inspect.iscoroutinefunction(tl.execute)
    assert not inspect.iscoroutinefunction(tl.run_calls)


@tl.tool
async def nap(seconds: float) -> float:
    await trio.sleep(seconds)
    return seconds


def test_execute_inside_trio_no_limit_by_default_and_fire_and_forget_awaited() -> None:
    calls = [{"_tool": "nap", "seconds": 2, "_outputPath": f"†state.n{i}"} for i in range(3)]
    calls.append({"_tool": "nap", "seconds": 5})  # fire-and-forget: no output path

    async def main(max_concurrency: int | None) -> tuple[tl.ExecutionResult, float]:
        result = await tl.execute(calls, tools=[nap], max_concurrency=max_concurrency)
        return result, trio.current_time()

    result, ended = virtual_run(main, None)
    assert [r.finished for r in result.records.values()] == [2, 2, 2, 5]  # no limit
    assert ended == 5  # returned once the fire-and-forget call had finished too
    assert result.records["c1.3"].status == "done" and result.state == {"n0": 2, "n1": 2, "n2": 2}
    result, _ = virtual_run(main, 1)
    assert [r.finished for r in result.records.values()] == [2, 4, 6, 11]


def test_execution_result_and_call_records() -> None:
    @tl.tool
    async def boom(x: int) -> int:
        await trio.sleep(1)
        raise RuntimeError("disk full")

    @tl.tool(requires_approval=True)
    def wire(cents: int) -> str:
        return "sent"

    calls = [
        {"_tool": "nap", "seconds": 2, "_outputPath": "†state.waited"},
        {"_tool": "boom", "x": 1, "_outputPath": "†state.b"},
        {"_tool": "wire", "cents": 9, "_outputPath": "†state.w"},
        {"_tool": "nap", "seconds": "†state.b", "_outputPath": "†state.never"},
        {"_tool": "nap", "seconds": "†input.delay", "_outputPath": "†notes.n"},
        {"_tool": "nap", "_outputPath": "†state.bad"},
    ]
    result = virtual_run(
        tl.execute, calls, tools=[nap, boom, wire], input={"delay": 3}, approve=lambda c: False
    )
    records = result.records
    assert all(isinstance(r, tl.CallRecord) for r in records.values())
    assert {i: r.status for i, r in records.items()} == {
        "c1.0": "done",
        "c1.1": "failed",
        "c1.2": "denied",
        "c1.3": "invalid",  # unresolved: what it reads came from a failed call
        "c1.4": "done",
        "c1.5": "invalid",  # schema mismatch
    }
    done = records["c1.0"]
    assert (done.started, done.finished, done.params, done.output) == (0, 2, {"seconds": 2}, 2)
    assert records["c1.4"].params == {"seconds": 3}  # resolved parameters
    assert (records["c1.1"].started, records["c1.1"].finished) == (0, 1)
    for never_ran in ("c1.2", "c1.3", "c1.5"):
        assert records[never_ran].started is None and records[never_ran].finished is None

    assert result.state == {"waited": 2}
    assert result.view("input") == {"delay": 3}
    assert result.view("notes") == {"n": 3}  # any kind is a view
    # Errors: the Error Messages of PROTOCOL §7, in the order they happened.
    assert all(e["type"] == "data" and e["kind"] == "error" for e in result.errors)
    kinds = [(e["data"]["call"]["_id"], e["data"]["error"]["type"]) for e in result.errors]
    assert sorted(kinds) == [
        ("c1.1", "runtime"),
        ("c1.2", "denied"),
        ("c1.3", "structural"),
        ("c1.5", "structural"),
    ]
    assert "disk full" in next(
        e["data"]["error"]["message"] for e in result.errors if e["data"]["call"]["_id"] == "c1.1"
    )
    # Messages: the log, with each write and each Error Message appended to it.
    assert all(isinstance(m, dict) for m in result.messages)
    writes = [m for m in result.messages if m.get("kind") == "state"]
    assert writes[0]["data"] == {"waited": 2}
    assert {"_call", "_date", "_outputMethod"} <= writes[0].keys()
    assert [m for m in result.messages if m.get("kind") == "error"] == result.errors


def test_engine_ids_count_calls_of_each_request_and_keep_given_ids() -> None:
    result = tl.run_calls(
        [
            {"_tool": "add", "a": 1, "b": 1, "_outputPath": "†state.a"},
            {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.b", "_id": "mine"},
            {"_tool": "add", "a": 1, "b": 3, "_outputPath": "†state.c"},
        ],
        tools=[add],
    )
    assert list(result.records) == ["c1.0", "mine", "c1.2"]


# ------------------------------------------------------------------------------------------
# Approval (docs/api.md)

ASKED: list[tl.PendingCall] = []


@tl.tool(requires_approval=lambda p: p["cents"] > 10_000)  # or True
async def charge_big(customer: str, cents: int) -> dict:
    return {"customer": customer, "cents": cents}


def approve(call: tl.PendingCall) -> tl.Decision | bool:
    ASKED.append(call)
    if call.params["cents"] > 50_000:
        return tl.Deny("over the limit")
    if call.params["customer"] == "test":
        return tl.Respond({"id": "dry-run"})
    return tl.Edit({**call.params, "cents": call.params["cents"] - 100})


def test_the_approval_example() -> None:
    ASKED.clear()
    result = tl.run_calls(
        [
            {"_tool": "charge_big", "customer": "ada", "cents": 60_000, "_outputPath": "†state.a"},
            {"_tool": "charge_big", "customer": "test", "cents": 20_000, "_outputPath": "†state.b"},
            {
                "_tool": "charge_big",
                "customer": "ada",
                "cents": "†state.amount",
                "_outputPath": "†state.c",
            },
            {"_tool": "charge_big", "customer": "ada", "cents": 500, "_outputPath": "†state.d"},
        ],
        tools=[charge_big],
        state={"amount": 20_000},
        approve=approve,
    )
    # Only calls that require approval go to the hook, with resolved parameters.
    assert [(c.id, c.tool, c.params) for c in ASKED] == [
        ("c1.0", "charge_big", {"customer": "ada", "cents": 60_000}),
        ("c1.1", "charge_big", {"customer": "test", "cents": 20_000}),
        ("c1.2", "charge_big", {"customer": "ada", "cents": 20_000}),
    ]
    assert ASKED[2].call["cents"] == "†state.amount"  # .call is the wire call
    assert isinstance(ASKED[0], tl.PendingCall)
    statuses = {i: r.status for i, r in result.records.items()}
    assert statuses == {"c1.0": "denied", "c1.1": "done", "c1.2": "done", "c1.3": "done"}
    assert result.state["b"] == {"id": "dry-run"}  # Respond: written as its result
    assert result.state["c"] == {"customer": "ada", "cents": 19_900}  # Edit
    assert result.state["d"] == {"customer": "ada", "cents": 500}  # never asked
    (denied,) = result.errors
    assert denied["data"]["error"] == {"type": "denied", "message": "over the limit"}


def test_decisions_are_values_of_tl_decision() -> None:
    import typing

    assert typing.get_type_hints(approve)["return"] == tl.Decision | bool  # the snippet's hint
    decisions = [
        tl.Approve(),
        tl.Deny("why"),
        tl.Edit({"a": 1}),
        tl.Replace({"_tool": "add"}),
        tl.Respond(42),
        tl.Defer(),
    ]
    assert all(isinstance(decision, tl.Decision) for decision in decisions)
    assert (decisions[1].reason, decisions[2].params, decisions[3].call, decisions[4].value) == (
        "why",
        {"a": 1},
        {"_tool": "add"},
        42,
    )


@pytest.mark.parametrize("answer", [True, False, tl.Approve()])
@pytest.mark.parametrize("is_async", [False, True])
def test_true_and_false_mean_approve_and_deny_from_sync_or_async_hooks(
    answer: Any, is_async: bool
) -> None:
    def sync_hook(call: tl.PendingCall) -> Any:
        return answer

    async def async_hook(call: tl.PendingCall) -> Any:
        await trio.sleep(1)
        return answer

    result = virtual_run(
        tl.execute,
        [{"_tool": "charge_big", "customer": "ada", "cents": 20_000, "_outputPath": "†state.a"}],
        tools=[charge_big],
        approve=async_hook if is_async else sync_hook,
    )
    assert result.records["c1.0"].status == ("denied" if answer is False else "done")


def test_replace_queues_a_new_call_under_the_same_id() -> None:
    result = tl.run_calls(
        [{"_tool": "charge_big", "customer": "ada", "cents": 20_000, "_outputPath": "†state.a"}],
        tools=[charge_big, add],
        approve=lambda c: tl.Replace({"_tool": "add", "a": 1, "b": 1, "_outputPath": "†state.a"}),
    )
    assert result.state == {"a": 2}
    assert result.records["c1.0"].tool == "add"


def test_hook_is_asked_one_call_at_a_time_while_other_calls_keep_running() -> None:
    active: list[int] = [0]
    most: list[int] = [0]

    async def slow_person(call: tl.PendingCall) -> bool:
        active[0] += 1
        most[0] = max(most[0], active[0])
        await trio.sleep(10)
        active[0] -= 1
        return True

    calls = [
        {"_tool": "charge_big", "customer": "a", "cents": 20_000, "_outputPath": "†state.a"},
        {"_tool": "charge_big", "customer": "b", "cents": 30_000, "_outputPath": "†state.b"},
        {"_tool": "nap", "seconds": 1, "_outputPath": "†state.n"},
    ]
    result = virtual_run(tl.execute, calls, tools=[charge_big, nap], approve=slow_person)
    assert most[0] == 1
    assert result.records["c1.2"].finished == 1  # never waited for the hook
    assert [result.records[i].started for i in ("c1.0", "c1.1")] == [10, 20]


# ------------------------------------------------------------------------------------------
# Agents


class Answer(pydantic.BaseModel):
    total: int
    summary: str


PLAN = {
    "calls": [
        {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.x"},
        {
            "_tool": "summarize",
            "text": "†input.question",
            "_output": "About sums.",
            "_outputPath": "†state.summary",
        },
    ],
    "output": None,
}
FINAL = {"calls": [], "output": {"total": 3, "summary": "About sums."}}


def make_agent(model: Any, **options: Any) -> tl.Agent:
    settings: dict[str, Any] = dict(
        tools=[add, charge, summarize],
        output=Answer,  # pydantic model or JSON Schema; None: any JSON
        instructions="You are a billing assistant.",
        approve=approve,
        max_iterations=10,
        max_llm_retries=3,
        max_concurrency=None,
        protocol="solution",  # or "tools": the model's native function calling
    )
    return tl.Agent(model, **(settings | options))


def test_agent_constructor_options_and_defaults() -> None:
    params = {name: (kind, default) for name, kind, default in signature_of(tl.Agent)}
    assert params["model"] == (P, EMPTY)
    assert params["tools"][0] == K
    assert params["output"] == (K, None)
    assert params["instructions"] == (K, None)
    assert params["approve"] == (K, None)
    assert params["max_iterations"] == (K, 10)
    assert params["max_llm_retries"] == (K, 3)
    assert params["max_concurrency"] == (K, None)
    assert params["schedule"] == (K, "critical_path")
    assert params["protocol"] == (K, "solution")
    assert params["store"] == (K, None)
    for method in ("run", "run_async", "resume"):
        names = [name for name, _, _ in signature_of(getattr(tl.Agent, method))]
        assert "on_event" in names
    assert {"messages", "run_id"} <= {n for n, _, _ in signature_of(tl.Agent.run)}
    assert inspect.iscoroutinefunction(tl.Agent.run_async)


def test_agent_run_sync_and_run_async_give_a_typed_result() -> None:
    model = tl.ScriptedModel([PLAN, FINAL])
    events: list[Any] = []
    result = make_agent(model).run({"question": "..."}, on_event=events.append)  # sync
    assert isinstance(events[0], tl.RunStarted) and isinstance(events[-1], tl.RunEnded)
    assert isinstance(result, tl.RunResult)
    assert isinstance(result.output, Answer)
    assert result.output == Answer(total=3, summary="About sums.")
    assert result.state == {"x": 3, "summary": "About sums."}
    assert result.iterations == 2
    assert result.errors == []
    assert set(result.records) == {"c1.0", "c1.1"}
    assert all(isinstance(m, dict) for m in result.messages)
    assert result.view("input") == {"question": "..."}
    assert isinstance(result.usage, tl.RunUsage) and result.usage.input_tokens > 0
    assert isinstance(result.run_id, str) and result.run_id
    assert result.status == "done" and result.pending == []

    async def inside_trio() -> tl.RunResult:
        model = tl.ScriptedModel([PLAN, FINAL])
        return await make_agent(model).run_async({"question": "..."})  # inside trio

    again = virtual_run(inside_trio)
    assert again.output == result.output and again.state == result.state

    async def iterate_the_events() -> tuple[list[Any], Any]:
        agent = make_agent(tl.ScriptedModel([PLAN, FINAL]))
        async with agent.events({"question": "..."}) as stream:
            seen = [event async for event in stream]
        return seen, stream.result

    seen, third = virtual_run(iterate_the_events)
    assert isinstance(seen[0], tl.RunStarted) and isinstance(seen[-1], tl.RunEnded)
    assert sorted(type(e).__name__ for e in seen) == sorted(type(e).__name__ for e in events)
    assert third.output == result.output


def test_output_json_schema_or_none_gives_plain_json() -> None:
    schema = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}
    result = make_agent(
        tl.ScriptedModel([{"calls": [], "output": {"total": 3}}]), output=schema
    ).run({"question": "..."})
    assert result.output == {"total": 3}
    result = make_agent(tl.ScriptedModel([{"calls": [], "output": [1, "two"]}]), output=None).run(
        {"question": "..."}
    )
    assert result.output == [1, "two"]


def test_engine_ids_carry_the_iteration_in_an_agent_run() -> None:
    second = {
        "calls": [{"_tool": "add", "a": "†state.x", "b": 1, "_outputPath": "†state.y"}],
        "output": None,
    }
    model = tl.ScriptedModel([PLAN, second, FINAL])
    result = make_agent(model).run({"question": "..."})
    assert list(result.records) == ["c1.0", "c1.1", "c2.0"]
    assert result.records["c2.0"].output == 4


# ------------------------------------------------------------------------------------------
# Errors


def test_error_class_tree() -> None:
    for name in (
        "ConfigurationError",
        "MaxIterationsError",
        "ExecuteError",
        "ResumeError",
        "StoreError",
        "ReferenceSyntaxError",
    ):
        assert issubclass(getattr(tl, name), tl.TickloopError), name
    assert issubclass(tl.TickloopError, Exception)
    assert issubclass(tl.MaxIterationsError, RuntimeError)
    assert issubclass(tl.ReferenceSyntaxError, ValueError)


def test_configuration_errors_are_raised_before_anything_runs() -> None:
    ran: list[int] = []

    @tl.tool(requires_approval=True)
    def guarded(n: int) -> int:
        ran.append(n)
        return n

    with pytest.raises(tl.ConfigurationError):  # may need approval, and no hook
        tl.run_calls([{"_tool": "guarded", "n": 1}], tools=[guarded])
    with pytest.raises(tl.ConfigurationError):  # when the run starts (a sub-agent needs
        tl.Agent(tl.ScriptedModel([]), tools=[guarded]).run({})  # no hook: PROTOCOL §11)
    with pytest.raises(tl.ConfigurationError):
        tl.Agent(tl.ScriptedModel([]), tools=[add, add])
    with pytest.raises(tl.ConfigurationError):
        tl.Agent(tl.ScriptedModel([]), protocol="telepathy")
    with pytest.raises(tl.ConfigurationError):
        tl.tool(timeout=-1)(lambda: None)
    assert ran == []


def test_max_iterations_error_carries_the_log_and_a_resumed_run_continues_the_script() -> None:
    model = tl.ScriptedModel([PLAN, FINAL])
    with pytest.raises(tl.MaxIterationsError) as caught:
        make_agent(model, max_iterations=1).run({"question": "..."})
    error = caught.value
    assert isinstance(error, RuntimeError)
    assert [m["iteration"] for m in error.messages if m["type"] == "solution"] == [1]
    # Resumed from the log: iteration 2 is answered by responses[1], even by a fresh model.
    fresh = tl.ScriptedModel([PLAN, FINAL])
    result = make_agent(fresh).run(messages=error.messages)
    assert result.output == Answer(total=3, summary="About sums.")
    assert result.iterations == 2
    assert len(fresh.requests) == 1
    assert result.state["x"] == 3  # what the first run did is kept


class FailingThen:
    """A model client that fails with a retryable error `failures` times, then delegates."""

    def __init__(self, failures: int, then: Any) -> None:
        self.failures = failures
        self.then = then
        self.attempts = 0

    async def stream_solution(self, request: Any) -> Any:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise tl.ModelError("503 Service Unavailable", status=503)
        async for item in self.then.stream_solution(request):
            yield item


def test_max_llm_retries_counts_attempts_in_all_and_execute_error_resumes() -> None:
    model = FailingThen(3, tl.ScriptedModel([PLAN, FINAL]))
    agent = make_agent(model, max_llm_retries=3)
    with pytest.raises(tl.ExecuteError) as caught:
        virtual_run(agent.run_async, {"question": "..."})
    assert model.attempts == 3  # three requests for one iteration, no more
    assert isinstance(caught.value.messages, list) and caught.value.messages

    # agent.run(..., messages=err.messages): the model now answers; the script starts at 1.
    result = agent.run({"question": "..."}, messages=caught.value.messages)
    assert result.output == Answer(total=3, summary="About sums.")
    assert model.attempts == 5

    model = FailingThen(2, tl.ScriptedModel([FINAL]))
    result = virtual_run(make_agent(model, max_llm_retries=3).run_async, {"question": "..."})
    assert model.attempts == 3 and result.output.total == 3


# ------------------------------------------------------------------------------------------
# Model clients: ScriptedModel


def test_scripted_model_signature() -> None:
    params = signature_of(tl.ScriptedModel)
    assert params[:3] == [("responses", P, EMPTY), ("chunk_chars", K, 16), ("chunk_delay", K, 0.0)]


def stream_text(model: tl.ScriptedModel, iteration: int = 1) -> list[tuple[float, str]]:
    """(trio time, text) of every chunk the model streams for one request."""

    async def main() -> list[tuple[float, str]]:
        request = tl.SolutionRequest(
            messages=[{"role": "user", "content": "hi"}],
            schema={"type": "object"},
            iteration=iteration,
        )
        start = trio.current_time()
        return [
            (trio.current_time() - start, item.text)
            async for item in model.stream_solution(request)
            if isinstance(item, tl.TextDelta)
        ]

    return virtual_run(main)


def test_scripted_model_streams_dicts_as_json_and_strings_verbatim_in_timed_chunks() -> None:
    solution = {"calls": [], "output": "café ☕ — naïve"}
    chunks = stream_text(tl.ScriptedModel([solution]))
    text = json.dumps(solution, ensure_ascii=False)
    assert "".join(piece for _, piece in chunks) == text
    assert [len(piece) for _, piece in chunks[:-1]] == [16] * (len(chunks) - 1)  # default 16

    raw = '{"calls": [ oops'
    chunks = stream_text(
        tl.ScriptedModel([{"calls": []}, raw], chunk_chars=5, chunk_delay=0.5), iteration=2
    )
    assert [piece for _, piece in chunks] == ['{"cal', 'ls": ', "[ oop", "s"]
    assert [at for at, _ in chunks] == [0.0, 0.5, 1.0, 1.5]  # chunk i at i * chunk_delay


def test_scripted_model_past_the_end_names_the_script_length() -> None:
    with pytest.raises(tl.ModelError, match=r"\b2 response"):
        stream_text(tl.ScriptedModel([PLAN, FINAL]), iteration=3)
    model = tl.ScriptedModel([PLAN])  # one response; the run needs a second
    with pytest.raises(tl.ExecuteError, match=r"\b1 response") as caught:
        make_agent(model).run({"question": "..."})
    assert len(model.requests) == 2  # not retried: a script that ran out is final
    assert caught.value.messages  # and the log comes back, as for any ExecuteError


def test_scripted_model_string_response_is_sent_verbatim_to_the_loop() -> None:
    model = tl.ScriptedModel(['{"calls": [], "output": {"total": 1, "summ', FINAL])
    result = make_agent(model).run({"question": "..."})
    assert result.iterations == 2 and result.output.total == 3
    assert result.errors[0]["data"]["error"]["type"] == "structural"


def test_scripted_model_records_json_serialisable_requests() -> None:
    model = tl.ScriptedModel([PLAN, FINAL])
    make_agent(model).run({"question": "How much?"})
    assert len(model.requests) == 2
    for request in model.requests:
        assert set(request) == {"messages", "schema"}
        assert json.loads(json.dumps(request)) == request
        assert isinstance(request["messages"], list) and isinstance(request["schema"], dict)
    assert "How much?" in json.dumps(model.requests[0]["messages"])
    assert "You are a billing assistant." in json.dumps(model.requests[0]["messages"])
    assert "c1.0" in json.dumps(model.requests[1]["messages"])  # the previous plan


# ------------------------------------------------------------------------------------------
# Model clients over HTTP (httpx.MockTransport: no network)


class Server:
    """Answers the i-th request with the i-th reply and keeps every request."""

    def __init__(self, *replies: httpx.Response) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.replies.pop(0)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(request.content) for request in self.requests]


def sse(*payloads: dict[str, Any] | str, named: bool = False) -> httpx.Response:
    text = ""
    for payload in payloads:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        name = f"event: {payload['type']}\n" if named and isinstance(payload, dict) else ""
        text += f"{name}data: {data}\n\n"
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=text)


def openai_answer(text: str) -> httpx.Response:
    half = len(text) // 2
    return sse(
        *(
            {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
            for piece in (text[:half], text[half:])
        ),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        "[DONE]",
    )


ANSWER_TEXT = json.dumps(FINAL)


def test_openai_chat_signature() -> None:
    assert signature_of(tl.OpenAIChat)[:5] == [
        ("model", P, EMPTY),
        ("base_url", K, None),
        ("api_key", K, None),
        ("client", K, None),
        ("structured", K, "json_schema"),
    ]


def test_openai_chat_posts_to_base_url_chat_completions_with_env_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.test/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server = Server(openai_answer(ANSWER_TEXT))
    result = make_agent(tl.OpenAIChat("gpt-test", client=server.client())).run({"question": "?"})
    assert result.output.total == 3
    (request,) = server.requests
    assert (request.method, str(request.url)) == ("POST", "http://env.test/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer sk-from-env"
    body = server.bodies[0]
    assert body["model"] == "gpt-test" and body["stream"] is True
    format_ = body["response_format"]
    assert format_["type"] == "json_schema" and format_["json_schema"]["name"] == "solution"
    assert "calls" in format_["json_schema"]["schema"]["properties"]

    server = Server(openai_answer(ANSWER_TEXT))
    model = tl.OpenAIChat(
        "m", base_url="http://local:8080/v1", api_key="sk-given", client=server.client()
    )
    make_agent(model).run({"question": "?"})
    assert str(server.requests[0].url) == "http://local:8080/v1/chat/completions"
    assert server.requests[0].headers["authorization"] == "Bearer sk-given"


def test_openai_chat_steps_down_structured_output_without_counting_retries() -> None:
    def rejects(word: str, status: int) -> httpx.Response:
        return httpx.Response(status, json={"error": {"message": f"{word} is not supported"}})

    server = Server(
        rejects("response_format", 400),
        rejects("json_schema", 500),  # whatever the status
        openai_answer(json.dumps(PLAN)),
        openai_answer(ANSWER_TEXT),
    )
    model = tl.OpenAIChat("m", base_url="http://local/v1", api_key="k", client=server.client())
    result = virtual_run(make_agent(model, max_llm_retries=1).run_async, {"question": "?"})
    assert result.output.total == 3
    formats = [body.get("response_format") for body in server.bodies]
    assert formats[0]["type"] == "json_schema"
    schema = formats[0]["json_schema"]["schema"]
    assert formats[1] == {"type": "json_object", "schema": schema}
    assert formats[2] is None and formats[3] is None  # the mode that worked is kept

    server = Server(openai_answer(ANSWER_TEXT))
    forced = tl.OpenAIChat(
        "m", base_url="http://local/v1", client=server.client(), structured="json_object"
    )
    make_agent(forced).run({"question": "?"})
    assert server.bodies[0]["response_format"]["type"] == "json_object"


def anthropic_answer(text: str) -> httpx.Response:
    usage = {"input_tokens": 10, "output_tokens": 1}
    return sse(
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude",
                "usage": usage,
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "solution", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": text},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
        named=True,
    )


def test_anthropic_signature_url_headers_and_forced_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    assert signature_of(tl.Anthropic)[:4] == [
        ("model", P, EMPTY),
        ("base_url", K, None),
        ("api_key", K, None),
        ("client", K, None),
    ]
    server = Server(anthropic_answer(ANSWER_TEXT))
    model = tl.Anthropic(
        "claude-test", base_url="http://claude.test", api_key="sk-ant", client=server.client()
    )
    result = make_agent(model).run({"question": "?"})
    assert result.output.total == 3
    (request,) = server.requests
    assert (request.method, str(request.url)) == ("POST", "http://claude.test/v1/messages")
    assert request.headers["x-api-key"] == "sk-ant"
    assert request.headers["anthropic-version"]
    body = server.bodies[0]
    assert body["model"] == "claude-test" and body["stream"] is True
    assert body["tool_choice"]["type"] == "tool"
    assert body["tool_choice"]["name"] in [tool["name"] for tool in body["tools"]]

    # Where the API is silent, the ecosystem's convention: ANTHROPIC_BASE_URL / _API_KEY.
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://env.test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    server = Server(anthropic_answer(ANSWER_TEXT))
    make_agent(tl.Anthropic("claude-test", client=server.client())).run({"question": "?"})
    assert str(server.requests[0].url) == "http://env.test/v1/messages"
    assert server.requests[0].headers["x-api-key"] == "sk-ant-env"


def test_anthropic_solution_as_json_text() -> None:
    events = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude",
                "usage": {"input_tokens": 10, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
            for t in (ANSWER_TEXT[:9], ANSWER_TEXT[9:])
        ),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]
    server = Server(sse(*events, named=True))
    model = tl.Anthropic(
        "claude-test",
        base_url="http://claude.test",
        api_key="k",
        client=server.client(),
        structured="json",
    )
    assert make_agent(model).run({"question": "?"}).output.total == 3
    assert "tool_choice" not in server.bodies[0]


def test_openai_responses_client_exists() -> None:
    model = tl.OpenAIResponses("gpt-test", base_url="http://local/v1", api_key="k")
    assert tl.Agent(model, protocol="tools").protocol == "tools"


# ------------------------------------------------------------------------------------------
# Native tool calling


@tl.tool(bind={"unit": "preferred_unit"})
def temperature(city: str, unit: str) -> str:
    """The temperature of a city, in a unit."""
    return f"{city}: 21 {unit}"


def test_protocol_tools_without_output_gives_text_and_bind_hides_and_injects() -> None:
    model = tl.ScriptedModel(
        [
            {"content": "", "tool_calls": [{"name": "temperature", "arguments": {"city": "Rome"}}]},
            "It is 21 degrees in Rome.",
        ]
    )
    agent = tl.Agent(model, tools=[temperature], protocol="tools")
    result = agent.run({"question": "Rome?", "preferred_unit": "celsius"})
    assert result.output == "It is 21 degrees in Rome."
    assert isinstance(result.output, str)
    assert list(result.records) == ["c1.0"]
    assert result.records["c1.0"].params == {"city": "Rome", "unit": "celsius"}
    assert result.records["c1.0"].output == "Rome: 21 celsius"
    (shown,) = model.requests[0]["tools"]
    assert list(shown["parameters"]["properties"]) == ["city"]  # hidden from the model


def test_the_final_text_answer_can_be_read_as_it_streams() -> None:
    model = tl.ScriptedModel(["It is 21 degrees in Rome."], chunk_chars=4, chunk_delay=1)
    agent = tl.Agent(model, tools=[temperature], protocol="tools")

    async def main() -> tuple[list[str], Any]:
        async with agent.stream({"question": "Rome?", "preferred_unit": "celsius"}) as stream:
            pieces = [piece async for piece in stream.text()]
        return pieces, stream.result

    pieces, result = virtual_run(main)
    assert len(pieces) > 1 and "".join(pieces) == "It is 21 degrees in Rome."
    assert result.output == "It is 21 degrees in Rome."


# ------------------------------------------------------------------------------------------
# Durable runs

PAY_LOG: list[int] = []


@tl.tool(requires_approval=True, output_path="†state.receipt")
def pay(cents: int) -> str:
    PAY_LOG.append(cents)
    return f"receipt-{cents}"


@tl.tool
def email(receipt: str) -> str:
    return f"mailed {receipt}"


DURABLE_SCRIPT = [
    {
        "calls": [
            {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.x"},
            {"_tool": "pay", "cents": 250},
            {"_tool": "email", "receipt": "†state.receipt", "_outputPath": "†state.mail"},
        ],
        "output": None,
    },
    {"calls": [], "output": "paid"},
]


def durable_agent(store: Any, approve: Any = lambda call: tl.Defer()) -> tl.Agent:
    return tl.Agent(
        tl.ScriptedModel(DURABLE_SCRIPT), tools=[add, pay, email], approve=approve, store=store
    )


def test_a_durable_run_pauses_on_defer_and_resumes_with_decisions(tmp_path: Path) -> None:
    PAY_LOG.clear()
    store = tmp_path / "runs.db"
    agent = durable_agent(str(store))
    result = agent.run({"customer": "ada"}, run_id="order-42")
    assert (result.run_id, result.status) == ("order-42", "paused")
    (pending,) = result.pending
    assert isinstance(pending, tl.PendingCall)
    assert (pending.id, pending.tool, pending.params) == ("c1.1", "pay", {"cents": 250})
    # What does not depend on the deferred call finished; what does waits.
    assert result.state == {"x": 3}
    assert result.records["c1.0"].status == "done"
    assert PAY_LOG == []
    assert stat.S_IMODE(store.stat().st_mode) == 0o600  # a new store file: owner only

    # From a fresh agent (as another process would), with tl.SQLiteStore(path).
    events: list[Any] = []
    later = durable_agent(tl.SQLiteStore(store))
    done = later.resume("order-42", decisions={"c1.1": tl.Approve()}, on_event=events.append)
    assert (done.run_id, done.status, done.pending) == ("order-42", "done", [])
    assert done.output == "paid"
    assert done.state == {"x": 3, "receipt": "receipt-250", "mail": "mailed receipt-250"}
    assert PAY_LOG == [250]
    assert events and all(isinstance(event, tl.RunEvent) for event in events)
    assert any(isinstance(event, tl.RunEnded) for event in events)


def test_resume_errors_are_raised_before_anything_runs(tmp_path: Path) -> None:
    PAY_LOG.clear()
    store = str(tmp_path / "runs.db")
    agent = durable_agent(store)
    agent.run({"customer": "ada"}, run_id="order-1")
    size = len(tl.SQLiteStore(store).journal("order-1"))
    with pytest.raises(tl.ResumeError):  # not a pending call
        agent.resume("order-1", decisions={"c1.0": tl.Approve()})
    with pytest.raises(tl.ResumeError):  # no such call
        agent.resume("order-1", decisions={"c9.9": tl.Approve()})
    with pytest.raises(tl.ResumeError):  # no such run
        agent.resume("order-404", decisions={})
    assert len(tl.SQLiteStore(store).journal("order-1")) == size and PAY_LOG == []

    agent.resume("order-1", decisions={"c1.1": tl.Deny("no")})
    with pytest.raises(tl.ResumeError):  # finished
        agent.resume("order-1")
    assert PAY_LOG == []

    finished = durable_agent(store, approve=lambda call: True)
    finished.run({"customer": "bob"}, run_id="order-2")
    with pytest.raises(tl.ResumeError):
        finished.resume("order-2")


def another_apps_database(path: Path) -> None:
    import sqlite3

    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    connection.execute("INSERT INTO notes (text) VALUES ('keep me')")
    connection.commit()
    connection.close()


@pytest.mark.parametrize("kind", ["text", "header only", "another app's SQLite database"])
def test_a_bad_store_file_raises_store_error_and_is_left_unchanged(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "notes.db"
    if kind == "text":
        path.write_bytes(b"not a database at all, just text\n")
    elif kind == "header only":
        path.write_bytes(b"SQLite format 3\x00")
    else:
        another_apps_database(path)
    content = path.read_bytes()
    before = path.stat()
    agent = durable_agent(str(path))  # a store given as a path is opened by a run
    PAY_LOG.clear()
    with pytest.raises(tl.StoreError) as caught:
        agent.run({"customer": "ada"})
    assert str(path) in str(caught.value)
    assert PAY_LOG == []  # before anything ran
    with pytest.raises(tl.StoreError):
        tl.SQLiteStore(path)
    assert path.read_bytes() == content
    assert (path.stat().st_mtime_ns, path.stat().st_mode) == (before.st_mtime_ns, before.st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]  # no -wal, no -journal


# ------------------------------------------------------------------------------------------
# Helpers


def test_parse_expression_and_its_errors_with_position() -> None:
    expression = tl.parse_expression("†state.a || †state.b")
    assert isinstance(expression, tl.Expression)
    for text, position in [("†state.x ||", 11), ("†state..x", 7), ("state.x", 0)]:
        with pytest.raises(tl.ReferenceSyntaxError) as caught:
            tl.parse_expression(text)
        assert isinstance(caught.value, ValueError)
        assert caught.value.position == position
        assert f"position {position}" in str(caught.value)


def test_resilient_json_parse() -> None:
    assert tl.resilient_json_parse('{"a": 1}') == {"a": 1}
    assert tl.resilient_json_parse('```json\n{"a": [1, 2,],}\n```') == {"a": [1, 2]}
    assert tl.resilient_json_parse("Sure: [1, 2] and more") == [1, 2]
    assert tl.resilient_json_parse("null") is None
    with pytest.raises(ValueError):
        tl.resilient_json_parse("no JSON here")
    with pytest.raises(ValueError):
        tl.resilient_json_parse("{broken")


# ------------------------------------------------------------------------------------------
# Command line


def tickloop_command(*arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    entry = Path(sys.executable).with_name("tickloop")
    command = [str(entry)] if entry.exists() else [sys.executable, "-m", "tickloop._cli._main"]
    return subprocess.run(
        [*command, *arguments], capture_output=True, text=True, cwd=cwd, timeout=60, check=False
    )


def test_tickloop_help_lists_the_commands() -> None:
    done = tickloop_command("--help")
    assert done.returncode == 0
    for command in ("demo", "runs", "pending", "approve", "deny", "resume", "trace"):
        assert command in done.stdout


def test_tickloop_runs_prints_one_run_per_line_id_first(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    durable_agent(store).run({"customer": "ada"}, run_id="order-42")
    durable_agent(store, approve=lambda call: True).run({"customer": "bob"}, run_id="order-43")
    done = tickloop_command("runs", "--store", store)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sorted(line.split()[0] for line in lines) == ["order-42", "order-43"]
    status = {line.split()[0]: line.split()[1] for line in lines}
    assert status == {"order-42": "paused", "order-43": "done"}


def test_the_api_page_documents_the_public_names() -> None:
    """docs/api.md is the contract this file reads: it names the documented API, and
    every name of `__all__` is on it (a public name nobody wrote down is not a contract)."""
    assert len(DOCUMENTED_NAMES) > 50
    assert set(tl.__all__) <= set(DOCUMENTED_NAMES), set(tl.__all__) - set(DOCUMENTED_NAMES)

"""Tests of the engine through `tl.run_calls` / `tl.execute`, the way a user runs a plan.

Timing assertions run on `trio.testing.MockClock(autojump_threshold=0)`: `trio.sleep` takes
no real time and every start and finish is an exact number of virtual seconds, so "starts
the moment its inputs exist" is an equality, never a wall-clock guess.
"""

from __future__ import annotations

import argparse
import json
import threading
from datetime import datetime
from functools import partial
from typing import Annotated, Any

import pydantic
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trio.testing import MockClock

import tickloop as tl


def run(calls: list[Any], *, tools: list[tl.Tool], **options: Any) -> tl.ExecutionResult:
    """One tick on a virtual clock that starts at 0."""
    return trio.run(
        partial(tl.execute, calls, tools=tools, **options), clock=MockClock(autojump_threshold=0)
    )


@tl.tool
async def wait(value: Any = None, seconds: float = 0) -> Any:
    """Return `value` after `seconds` of trio time."""
    await trio.sleep(seconds)
    return value


@tl.tool
async def fail(message: str = "boom", seconds: float = 0) -> Any:
    """Raise after `seconds` of trio time."""
    await trio.sleep(seconds)
    raise ValueError(message)


@tl.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOLS = [wait, fail, add]


def statuses(result: tl.ExecutionResult) -> dict[str, str]:
    return {call_id: record.status for call_id, record in result.records.items()}


def error_of(result: tl.ExecutionResult, call_id: str) -> dict[str, Any]:
    [error] = [e["data"]["error"] for e in result.errors if e["data"]["call"].get("_id") == call_id]
    return error


def writes_by(result: tl.ExecutionResult, call_id: str) -> list[dict[str, Any]]:
    return [m for m in result.messages if m.get("_call", {}).get("_id") == call_id]


# -- running a plan --------------------------------------------------------------------------


def test_the_api_example_runs_dependent_calls_in_order() -> None:
    result = tl.run_calls(
        [
            {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.x"},
            {"_tool": "add", "a": "†state.x", "b": 10, "_outputPath": "†state.y"},
        ],
        tools=[add],
    )
    assert result.state == {"x": 3, "y": 13}
    assert result.errors == []
    assert statuses(result) == {"c1.0": "done", "c1.1": "done"}
    assert result.records["c1.1"].params == {"a": 3, "b": 10}


def test_sync_handlers_run_in_worker_threads_and_async_ones_in_trio() -> None:
    @tl.tool
    def where_sync() -> bool:
        return threading.current_thread() is threading.main_thread()

    @tl.tool
    async def where_async() -> bool:
        return threading.current_thread() is threading.main_thread()

    result = tl.run_calls(
        [
            {"_tool": "where_sync", "_outputPath": "†state.sync_on_main"},
            {"_tool": "where_async", "_outputPath": "†state.async_on_main"},
        ],
        tools=[where_sync, where_async],
    )
    assert result.state == {"sync_on_main": False, "async_on_main": True}


class Item(pydantic.BaseModel):
    name: str
    price: float


def test_parameters_are_converted_to_the_annotated_types_and_results_to_json() -> None:
    @tl.tool
    def discount(item: Item, percent: int) -> Item:
        assert isinstance(item, Item)
        return Item(name=item.name, price=item.price * (100 - percent) / 100)

    result = tl.run_calls(
        [
            {
                "_tool": "discount",
                "item": "†state.item",
                "percent": 10,
                "_outputPath": "†state.sale",
            }
        ],
        tools=[discount],
        state={"item": {"name": "pen", "price": 2.0}},
    )
    assert result.state["sale"] == {"name": "pen", "price": 1.8}


def test_a_reference_inside_an_optional_model_is_resolved_then_checked() -> None:
    @tl.tool
    def buy(item: Item | None = None, qty: int | None = None) -> float:
        return 0 if item is None else item.price * (qty or 1)

    result = run(
        [
            {
                "_tool": "buy",
                "item": {"name": "pen", "price": "†state.p"},
                "qty": "†state.q",
                "_outputPath": "†state.total",
            },
            {"_tool": "buy", "item": {"name": 5, "price": "†state.p"}, "_outputPath": "†state.x"},
        ],
        tools=[buy],
        state={"p": 2.5, "q": 2},
    )
    assert result.state["total"] == 5.0
    # A bad literal next to the reference is caught once the reference is resolved.
    error = error_of(result, "c1.1")
    assert error["message"].startswith("resolved parameters of 'buy' do not match its schema")


def test_calls_run_in_parallel_and_the_tick_lasts_as_long_as_the_slowest() -> None:
    calls = [
        {"_tool": "wait", "value": i, "seconds": 1 + i % 3, "_outputPath": f"†state.v{i}"}
        for i in range(9)
    ]
    result = run(calls, tools=TOOLS)
    assert {r.started for r in result.records.values()} == {0}
    assert max(r.finished for r in result.records.values() if r.finished is not None) == 3


def test_a_tool_made_from_json_schema_or_pydantic_models_runs_its_handler() -> None:
    class Query(pydantic.BaseModel):
        q: str

    def search(q: str) -> dict:
        return {"hits": [q.upper()]}

    by_model = tl.Tool(name="by_model", parameters=Query, handler=search)
    by_schema = tl.Tool(
        name="by_schema",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        output={"type": "object", "required": ["hits"]},
        handler=search,
    )
    result = run(
        [
            {"_tool": "by_model", "q": "a", "_outputPath": "†state.a"},
            {"_tool": "by_schema", "q": "b", "_outputPath": "†state.b"},
            {"_tool": "by_schema", "q": 3, "_outputPath": "†state.c"},
        ],
        tools=[by_model, by_schema],
    )
    assert result.state == {"a": {"hits": ["A"]}, "b": {"hits": ["B"]}}
    assert "3 is not of type 'string'" in error_of(result, "c1.2")["message"]


def test_a_return_value_that_does_not_match_the_output_schema_is_a_runtime_error() -> None:
    @tl.tool
    async def count() -> int:
        return "many"  # type: ignore[return-value]

    @tl.tool
    async def opaque():
        return object()

    result = run(
        [
            {"_tool": "count", "_outputPath": "†state.n"},
            {"_tool": "opaque", "_outputPath": "†state.o"},
        ],
        tools=[count, opaque],
    )
    assert statuses(result) == {"c1.0": "failed", "c1.1": "failed"}
    assert error_of(result, "c1.0") == {
        "type": "runtime",
        "message": "output of 'count' does not match its schema: (output): 'many' is not of type "
        "'integer'",
    }
    assert error_of(result, "c1.1")["type"] == "runtime"
    assert result.state == {}


def positive(value: int) -> int:
    if value <= 0:
        raise ValueError("must be positive")
    return value


def test_a_value_the_handler_types_reject_is_a_structural_error() -> None:
    @tl.tool
    async def take(n: Annotated[int, pydantic.AfterValidator(positive)]) -> int:
        return n

    result = run([{"_tool": "take", "n": -1, "_outputPath": "†state.n"}], tools=[take])
    error = error_of(result, "c1.0")
    assert error["type"] == "structural"
    assert (
        "do not convert to the handler's types: n: Value error, must be positive"
        in (error["message"])
    )
    assert statuses(result) == {"c1.0": "invalid"}


# -- the result ------------------------------------------------------------------------------


def test_the_execution_result_carries_state_views_errors_messages_and_records() -> None:
    result = run(
        [
            {"_tool": "wait", "value": 5, "seconds": 2, "_outputPath": "†state.x && †audit.x"},
            {"_tool": "fail", "seconds": 1, "_outputPath": "†state.y"},
            {"_tool": "add", "a": "†state.y", "b": 1, "_outputPath": "†state.z"},
        ],
        tools=TOOLS,
        input={"question": "why?"},
    )
    assert result.state == {"x": 5}
    assert result.view("audit") == {"x": 5}
    assert result.view("input") == {"question": "why?"}
    assert result.view("nothing") is None

    done, failed, invalid = (result.records[f"c1.{i}"] for i in range(3))
    assert (done.status, done.started, done.finished, done.output) == ("done", 0, 2, 5)
    assert done.params == {"value": 5, "seconds": 2}
    assert (failed.status, failed.started, failed.finished) == ("failed", 0, 1)
    assert failed.error == {"type": "runtime", "message": "ValueError: boom"}
    assert (invalid.status, invalid.started, invalid.finished) == ("invalid", None, None)
    assert invalid.output is None

    assert [e["data"]["call"]["_id"] for e in result.errors] == ["c1.1", "c1.2"]
    assert result.messages[0] == {"type": "data", "kind": "input", "data": {"question": "why?"}}
    [to_state, to_audit] = writes_by(result, "c1.0")
    assert (to_state["kind"], to_state["_path"], to_state["data"]) == (
        "state",
        "†state.x",
        {"x": 5},
    )
    assert (to_audit["kind"], to_audit["_path"]) == ("audit", "†audit.x")
    assert to_state["_outputMethod"] == "set"
    assert to_state["_call"] == {
        "_tool": "wait",
        "value": 5,
        "seconds": 2,
        "_outputPath": "†state.x && †audit.x",
        "_id": "c1.0",
    }
    date = datetime.fromisoformat(to_state["_date"].replace("Z", "+00:00"))
    assert to_state["_date"].endswith("Z") and date.utcoffset() is not None


def test_engine_ids_count_every_call_of_the_request_including_bad_ones() -> None:
    result = run(
        [{"_tool": "wait"}, {"_tool": "nope"}, "not a call", {"_tool": "wait", "_id": "mine"}],
        tools=TOOLS,
    )
    assert list(result.records) == ["c1.0", "c1.1", "c1.2", "mine"]


# -- approval rules on tools -----------------------------------------------------------------


def test_only_calls_whose_tool_requires_approval_go_to_the_hook() -> None:
    @tl.tool(requires_approval=True)
    def delete(path: str) -> str:
        return path

    shown: list[str] = []

    def hook(call: tl.PendingCall) -> bool:
        shown.append(call.id)
        return True

    result = tl.run_calls(
        [{"_tool": "delete", "path": "/tmp/x"}, {"_tool": "add", "a": 1, "b": 1}],
        tools=[delete, add],
        approve=hook,
    )
    assert shown == ["c1.0"]
    assert statuses(result) == {"c1.0": "done", "c1.1": "done"}


def test_an_approval_predicate_sees_the_resolved_parameters() -> None:
    seen: list[Any] = []

    def expensive(params: dict[str, Any]) -> bool:
        seen.append(params["cents"])
        return params["cents"] > 10_000

    @tl.tool(requires_approval=expensive)
    def charge(cents: int) -> int:
        return cents

    shown: list[int] = []

    def hook(call: tl.PendingCall) -> bool:
        shown.append(call.params["cents"])
        return True

    result = tl.run_calls(
        [
            {"_tool": "charge", "cents": "†state.big", "_outputPath": "†state.a"},
            {"_tool": "charge", "cents": "†state.small", "_outputPath": "†state.b"},
        ],
        tools=[charge],
        state={"big": 20_000, "small": 5},
        approve=hook,
    )
    assert seen == [20_000, 5]
    assert shown == [20_000]
    assert result.state["a"] == 20_000 and result.state["b"] == 5


def test_a_tool_that_may_need_approval_without_a_hook_fails_before_anything_runs() -> None:
    ran: list[int] = []

    @tl.tool
    def side_effect() -> None:
        ran.append(1)

    @tl.tool(requires_approval=lambda params: False)
    def maybe() -> None:
        return None

    with pytest.raises(tl.ConfigurationError, match="'maybe' may require approval"):
        tl.run_calls([{"_tool": "side_effect"}], tools=[side_effect, maybe])
    assert ran == []


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "2"])
def test_a_bad_global_limit_is_a_configuration_error(limit: Any) -> None:
    with pytest.raises(tl.ConfigurationError, match="max_concurrency"):
        tl.run_calls([], tools=[add], max_concurrency=limit)


# -- depends_on ------------------------------------------------------------------------------


def test_depends_on_a_reference_holds_the_call_until_the_path_is_present() -> None:
    @tl.tool(depends_on=["†state.token"])
    async def use_token(ctx: tl.CallContext) -> str:
        return ctx.state["token"]

    result = run(
        [
            {"_tool": "use_token", "_outputPath": "†state.used"},
            {"_tool": "wait", "value": "t0k", "seconds": 3, "_outputPath": "†state.token"},
        ],
        tools=[use_token, wait],
    )
    assert result.state["used"] == "t0k"
    assert result.records["c1.0"].started == 3


def test_depends_on_a_reference_nothing_writes_is_unresolved() -> None:
    @tl.tool(depends_on=["†state.token"])
    async def use_token() -> None:
        return None

    result = run([{"_tool": "use_token"}], tools=[use_token])
    assert statuses(result) == {"c1.0": "invalid"}
    message = error_of(result, "c1.0")["message"]
    assert "unresolved reference †state.token in depends_on of tool 'use_token'" in message


def test_depends_on_a_tool_waits_for_its_earlier_calls_however_they_end() -> None:
    @tl.tool
    async def login(seconds: float, ok: bool) -> str:
        await trio.sleep(seconds)
        if not ok:
            raise PermissionError("bad password")
        return "session"

    @tl.tool(depends_on=["login"])
    async def fetch() -> str:
        return "page"

    result = run(
        [
            {"_tool": "login", "seconds": 2, "ok": False},
            {"_tool": "login", "seconds": 1, "ok": True},
            {"_tool": "fetch", "_outputPath": "†state.page"},
            {"_tool": "login", "seconds": 5, "ok": True},  # later: fetch does not wait for it
        ],
        tools=[login, fetch],
    )
    assert statuses(result)["c1.0"] == "failed"
    assert result.records["c1.2"].started == 2
    assert result.state == {"page": "page"}


# -- output_path, timeout, concurrency ---------------------------------------------------------


def test_a_prescribed_output_path_is_used_when_omitted_and_enforced_when_given() -> None:
    ran: list[str] = []

    @tl.tool(output_path="†state.receipt")
    async def charge(customer: str) -> str:
        ran.append(customer)
        return f"receipt for {customer}"

    result = run(
        [
            {"_tool": "charge", "customer": "ada"},
            {"_tool": "charge", "customer": "bob", "_outputPath": " †state.receipt "},
            {"_tool": "charge", "customer": "eve", "_outputPath": "†state.other"},
        ],
        tools=[charge],
    )
    assert sorted(ran) == ["ada", "bob"]
    assert statuses(result) == {"c1.0": "done", "c1.1": "done", "c1.2": "invalid"}
    error = error_of(result, "c1.2")
    assert error["type"] == "structural"
    assert "'†state.other' is not allowed" in error["message"]
    assert "†state.receipt" in error["message"]
    assert "other" not in result.state


def test_a_call_that_runs_over_its_timeout_fails_with_a_timeout_error() -> None:
    @tl.tool(timeout=2)
    async def slow() -> str:
        await trio.sleep(10)
        return "late"

    result = run([{"_tool": "slow", "_outputPath": "†state.x"}], tools=[slow])
    record = result.records["c1.0"]
    assert record.status == "failed"
    assert (record.started, record.finished) == (0, 2)
    assert error_of(result, "c1.0") == {
        "type": "runtime",
        "message": "TimeoutError: slow ran over 2 s",
    }
    assert result.state == {}


def test_a_sync_handler_that_runs_over_its_timeout_is_abandoned() -> None:
    release = threading.Event()

    @tl.tool(timeout=0.05)
    def blocking() -> str:
        release.wait(10)
        return "late"

    try:
        result = tl.run_calls([{"_tool": "blocking", "_outputPath": "†state.x"}], tools=[blocking])
    finally:
        release.set()
    assert error_of(result, "c1.0")["message"] == "TimeoutError: blocking ran over 0.05 s"
    assert result.state == {}


def test_the_timeout_of_a_call_never_includes_the_wait_for_an_abandoned_thread() -> None:
    # `stuck` times out and its thread is abandoned, but keeps the one worker thread
    # (global limit 1) until its handler returns. `quick` waits for that thread; its
    # 0.5 s must measure `quick`'s handler, not the wait (PROTOCOL §7.2: per-call timeout).
    # The clock moves only when the test jumps it (a thread's run takes no virtual time).
    entered, release = threading.Event(), threading.Event()
    ran: list[str] = []

    @tl.tool(timeout=1)
    def stuck() -> int:
        entered.set()
        release.wait(30)
        ran.append("stuck returned")
        return 1

    @tl.tool(timeout=0.5)
    def quick() -> int:
        ran.append("quick ran")
        return 2

    clock = MockClock()
    results: list[tl.ExecutionResult] = []

    async def main() -> None:
        async def execute() -> None:
            calls = [
                {"_tool": "stuck", "_outputPath": "†state.a"},
                {"_tool": "quick", "_outputPath": "†state.b"},
            ]
            results.append(await tl.execute(calls, tools=[stuck, quick], max_concurrency=1))

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(execute)
                assert await trio.to_thread.run_sync(entered.wait, 30)
                clock.jump(1)  # stuck runs over: abandoned, quick starts and waits
                await trio.testing.wait_all_tasks_blocked()
                clock.jump(10)  # long past quick's 0.5 s, had its timeout begun
                await trio.testing.wait_all_tasks_blocked()
                release.set()  # stuck's handler returns: its thread is free for quick
        finally:
            release.set()

    trio.run(main, clock=clock)
    [result] = results
    assert error_of(result, "c1.0")["message"] == "TimeoutError: stuck ran over 1 s"
    assert result.records["c1.1"].status == "done", result.errors
    assert result.state == {"b": 2}
    # The global limit held for threads too: quick ran once stuck's thread was free.
    assert ran == ["stuck returned", "quick ran"]


def _counting_tool(name: str, **options: Any) -> tuple[tl.Tool, list[int]]:
    """An async tool that records how many calls of any counted tool run at once."""
    running = [0]
    peaks: list[int] = []

    async def handler(seconds: float = 1) -> None:
        running[0] += 1
        peaks.append(running[0])
        await trio.sleep(seconds)
        running[0] -= 1

    return tl.tool(handler, name=name, **options), peaks


def test_a_tool_limit_caps_its_calls_running_at_once() -> None:
    limited, peaks = _counting_tool("limited", max_concurrency=2)
    result = run(
        [{"_tool": "limited"} for _ in range(6)] + [{"_tool": "wait", "seconds": 1}],
        tools=[limited, wait],
    )
    assert max(peaks) == 2
    assert result.records["c1.6"].started == 0  # another tool is not held back
    assert sorted(r.started for r in result.records.values()) == [0, 0, 0, 1, 1, 2, 2]


def test_the_global_limit_caps_every_call_running_at_once() -> None:
    one, peaks = _counting_tool("one")
    two = tl.tool(one.handler, name="two")  # the same counter: peaks count both tools
    calls = [{"_tool": "one" if i % 2 else "two"} for i in range(7)]
    result = run(calls, tools=[one, two], max_concurrency=3)
    assert max(peaks) == 3
    assert max(r.finished for r in result.records.values() if r.finished is not None) == 3


def test_no_limit_means_every_ready_call_runs_at_once() -> None:
    counted, peaks = _counting_tool("counted")
    result = run([{"_tool": "counted"} for _ in range(100)], tools=[counted], max_concurrency=None)
    assert max(peaks) == 100
    assert {r.finished for r in result.records.values()} == {1}


def test_no_limit_means_every_ready_sync_call_gets_a_thread_at_once() -> None:
    # PROTOCOL §2: a global max_concurrency of None is no limit, for sync handlers too.
    # Each handler waits at a barrier for all the others, so the calls all complete only
    # if every one of them runs at once (the timeout makes a failure fail, not hang).
    count = 80  # above the 64 threads the engine once capped sync handlers at
    barrier = threading.Barrier(count, timeout=20)

    @tl.tool
    def meet(i: int) -> int:
        barrier.wait()
        return i

    try:
        result = tl.run_calls(
            [{"_tool": "meet", "i": i, "_outputPath": f"†state.r{i}"} for i in range(count)],
            tools=[meet],
        )
    finally:
        barrier.abort()  # frees any thread still waiting when the test fails
    assert set(statuses(result).values()) == {"done"}, result.errors[:1]
    assert result.state == {f"r{i}": i for i in range(count)}


# -- the call context ------------------------------------------------------------------------


def test_a_call_context_gives_the_id_the_wire_call_and_read_only_views() -> None:
    seen: dict[str, Any] = {}

    @tl.tool
    async def inspect_call(label: str, ctx: tl.CallContext) -> str:
        seen.update(id=ctx.id, tool=ctx.tool, call=dict(ctx.call), user=ctx.state["user"])
        seen["input"] = ctx.input["q"]
        try:
            ctx.state["user"] = "mallory"  # type: ignore[index]
        except TypeError:
            seen["read_only"] = True
        return label

    result = run(
        [
            {"_tool": "wait", "value": "ada", "seconds": 1, "_outputPath": "†state.user"},
            {"_tool": "inspect_call", "label": "†state.user", "_id": "look"},
        ],
        tools=[wait, inspect_call],
        input={"q": "who?"},
    )
    assert seen == {
        "id": "look",
        "tool": "inspect_call",
        "call": {"_tool": "inspect_call", "label": "†state.user", "_id": "look"},
        "user": "ada",
        "input": "who?",
        "read_only": True,
    }
    assert result.state == {"user": "ada"}


# -- references --------------------------------------------------------------------------------


def test_or_waits_for_an_earlier_term_that_could_still_be_written() -> None:
    result = run(
        [
            {"_tool": "wait", "value": "†state.a || †state.b", "_outputPath": "†state.got"},
            {"_tool": "wait", "value": "new", "seconds": 5, "_outputPath": "†state.a"},
        ],
        tools=TOOLS,
        state={"b": "old"},
    )
    assert result.state["got"] == "new"
    assert result.records["c1.0"].started == 5


def test_or_falls_back_once_the_earlier_term_can_no_longer_be_written() -> None:
    result = run(
        [
            {"_tool": "wait", "value": "†state.a || †state.b", "_outputPath": "†state.got"},
            {"_tool": "fail", "seconds": 3, "_outputPath": "†state.a"},
            {"_tool": "wait", "value": "†state.c || †state.b", "_outputPath": "†state.got2"},
        ],
        tools=TOOLS,
        state={"b": "old"},
    )
    assert result.state["got"] == "old" and result.state["got2"] == "old"
    assert result.records["c1.0"].started == 3
    assert result.records["c1.2"].started == 0  # nothing writes state.c: falls back at once
    assert [e["data"]["call"]["_id"] for e in result.errors] == ["c1.1"]


def test_a_stored_null_is_present() -> None:
    result = run(
        [{"_tool": "wait", "value": "†state.a || †state.b", "_outputPath": "†state.got"}],
        tools=TOOLS,
        state={"a": None, "b": "b"},
    )
    assert result.state["got"] is None


def test_and_waits_for_every_term_and_gives_the_last_one() -> None:
    result = run(
        [
            {"_tool": "wait", "value": "†state.a && †state.b", "_outputPath": "†state.got"},
            {"_tool": "wait", "value": "A", "seconds": 4, "_outputPath": "†state.a"},
            {"_tool": "wait", "value": "B", "seconds": 2, "_outputPath": "†state.b"},
        ],
        tools=TOOLS,
    )
    assert result.state["got"] == "B"
    assert result.records["c1.0"].started == 4


def test_a_doubled_dagger_is_a_literal_dagger_and_other_strings_are_untouched() -> None:
    result = run(
        [
            {
                "_tool": "wait",
                "value": {"escaped": "††state.x", "inner": "a †state.x", "deep": ["††y"]},
                "_outputPath": "†state.got",
            }
        ],
        tools=TOOLS,
        state={"x": "never read"},
    )
    assert result.state["got"] == {"escaped": "†state.x", "inner": "a †state.x", "deep": ["†y"]}


def test_references_are_resolved_deep_inside_nested_parameters() -> None:
    wire = {
        "_tool": "wait",
        "value": {"items": ["†state.a", {"b": "†state.page.title"}, 3], "k": "†input.n"},
        "_outputPath": "†state.got",
    }
    result = run([wire], tools=TOOLS, state={"a": [1], "page": {"title": "T"}}, input={"n": 7})
    assert result.state["got"] == {"items": [[1], {"b": "T"}, 3], "k": 7}
    assert result.records["c1.0"].call["value"]["items"][0] == "†state.a"  # wire kept as sent


def test_indices_in_references_read_list_items() -> None:
    result = run(
        [{"_tool": "wait", "value": "†state.rows[1].name", "_outputPath": "†state.got"}],
        tools=TOOLS,
        state={"rows": [{"name": "a"}, {"name": "b"}]},
    )
    assert result.state["got"] == "b"


def test_a_resolved_value_is_a_copy_the_handler_cannot_use_to_change_the_state() -> None:
    @tl.tool
    async def mutate(items: list) -> None:
        items.append("sneaky")

    result = run(
        [{"_tool": "mutate", "items": "†state.items"}], tools=[mutate], state={"items": [1]}
    )
    assert result.state == {"items": [1]}


def test_changing_the_plan_after_the_run_changes_neither_a_written_call_record_nor_log() -> None:
    """A call's record and the `_call` of what it wrote show the call as it was sent:
    the caller's own lists and dicts are not held by either (the two are one private
    copy, kept once for the whole run)."""
    plan = [
        {"_tool": "wait", "value": {"tags": ["a"]}, "_outputPath": "†state.x && †audit.x"},
        {"_tool": "wait", "value": ["†state.x", 2], "_outputPath": "†state.y"},
        {"_tool": "wait", "value": 3, "_outputPath": "†state.z"},
    ]
    sent = json.loads(json.dumps(plan))
    result = run(plan, tools=TOOLS)
    plan[0]["value"]["tags"].append("changed")
    plan[1]["value"].append("changed")
    for index, call_id in enumerate(("c1.0", "c1.1", "c1.2")):
        record = result.records[call_id]
        assert record.call == {**sent[index], "_id": call_id}
        for message in writes_by(result, call_id):
            assert message["_call"] == record.call
    assert len(writes_by(result, "c1.0")) == 2 and result.state["y"] == [{"tags": ["a"]}, 2]


# -- output paths ------------------------------------------------------------------------------


def test_a_fan_out_that_cannot_write_one_term_writes_none() -> None:
    result = run(
        [{"_tool": "wait", "value": {"n": 1}, "_outputPath": "†state.a.b && †audit.log[0]"}],
        tools=TOOLS,
    )
    assert statuses(result) == {"c1.0": "failed"}
    assert "index step [0] needs an existing list" in error_of(result, "c1.0")["message"]
    assert result.state == {} and result.view("audit") is None


def test_a_fan_out_writes_both_terms_when_both_apply() -> None:
    result = run(
        [
            {"_tool": "wait", "value": 1, "_outputPath": "†state.a && †audit.a"},
            {"_tool": "wait", "value": "†state.a && †audit.a", "_outputPath": "†state.b"},
        ],
        tools=TOOLS,
    )
    assert result.state == {"a": 1, "b": 1}
    assert result.view("audit") == {"a": 1}
    assert [m["_path"] for m in writes_by(result, "c1.0")] == ["†state.a", "†audit.a"]


@pytest.mark.parametrize(
    ("state", "out", "method", "value", "fault"),
    [
        (
            {},
            "†state.a && †state.a.b",
            "set",
            5,
            "cannot set at †state.a.b: †state.a is an int, not a dict to take the key 'b' of "
            "(after the fan-out's earlier term †state.a); nothing was written",
        ),
        (
            {"a": [[0]]},
            "†state.a && †state.a[1]",
            "push",
            2,
            "cannot push onto an int at †state.a[1] (after the fan-out's earlier term "
            "†state.a); nothing was written",
        ),
        (
            {"a": {"x": {"y": {"z": 0}}}},
            "†state.a && †state.b && †state.a.x.y",
            "merge",
            {"x": {"y": 3}},
            "cannot merge into an int at †state.a.x.y (after the fan-out's earlier terms "
            "†state.a && †state.b); nothing was written",
        ),
    ],
)
def test_a_fan_out_whose_later_term_fails_on_what_an_earlier_one_wrote_writes_nothing(
    state: dict[str, Any], out: str, method: str, value: Any, fault: str
) -> None:
    # Every term is checked as the earlier ones leave the state, before any is written
    # (PROTOCOL §4: a type mismatch is a runtime error, and nothing is written).
    result = run(
        [
            {"_tool": "wait", "value": value, "_outputPath": out, "_outputMethod": method},
            {"_tool": "wait", "value": "†state.a", "seconds": 1, "_outputPath": "†state.seen"},
        ],
        tools=TOOLS,
        state=state,
    )
    assert statuses(result)["c1.0"] == "failed"
    assert writes_by(result, "c1.0") == []
    assert result.state == {**state, **({"seen": state["a"]} if state else {})}
    assert error_of(result, "c1.0") == {"type": "runtime", "message": fault}
    if not state:  # its reader is not woken by a value a failed call never wrote
        assert error_of(result, "c1.1")["writer"] == "c1.0"


def test_a_fan_out_writes_each_term_where_the_earlier_ones_leave_the_state() -> None:
    result = run(
        [
            {"_tool": "wait", "value": "x", "_outputPath": "†state.rows[1] && †state.rows[2]"},
            {"_tool": "wait", "value": {"n": 1}, "_outputPath": "†state.a && †state.a.copy"},
        ],
        tools=TOOLS,
        state={"rows": [0]},
    )
    assert statuses(result) == {"c1.0": "done", "c1.1": "done"}
    assert result.state == {"rows": [0, "x", "x"], "a": {"n": 1, "copy": {"n": 1}}}


def test_a_branch_output_goes_where_the_activity_chooses_and_the_other_side_is_skipped() -> None:
    @tl.tool
    async def check(amount: int) -> Any:
        if amount > 100:
            return tl.Branch("†state.rejected", {"reason": "too much"})
        return {"ok": amount}

    out = "†state.approved || †state.rejected"
    plan = [
        {"_tool": "check", "amount": 500, "_outputPath": out},
        {"_tool": "wait", "value": "†state.approved", "_outputPath": "†state.shipped"},
        {"_tool": "wait", "value": "†state.rejected.reason", "_outputPath": "†state.told"},
        {"_tool": "wait", "value": "†state.shipped", "_outputPath": "†state.invoiced"},
    ]
    result = run(plan, tools=[check, wait])
    assert result.state == {"rejected": {"reason": "too much"}, "told": "too much"}
    assert statuses(result) == {
        "c1.0": "done",
        "c1.1": "skipped",
        "c1.2": "done",
        "c1.3": "skipped",  # skipped because what it reads came from a skipped call
    }
    assert result.errors == []

    plan[0] = {"_tool": "check", "amount": 5, "_outputPath": out}  # a plain value: first term
    result = run(plan, tools=[check, wait])
    assert result.state["approved"] == {"ok": 5}
    assert statuses(result)["c1.2"] == "skipped"
    assert result.state["invoiced"] == {"ok": 5}


@pytest.mark.parametrize(
    ("out", "fault"),
    [
        ("†state.a || †state.b", "not one of †state.a, †state.b"),
        ("†state.a", "has no branches"),
    ],
)
def test_a_branch_the_output_path_does_not_offer_is_a_runtime_error(out: str, fault: str) -> None:
    @tl.tool
    async def choose() -> Any:
        return tl.Branch("†state.c", 1)

    result = run([{"_tool": "choose", "_outputPath": out}], tools=[choose])
    error = error_of(result, "c1.0")
    assert error["type"] == "runtime" and fault in error["message"]
    assert result.state == {}


# -- latent calls and thoughts -----------------------------------------------------------------

summarize = tl.Tool(
    name="summarize",
    description="Summarize a text in one sentence.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    output={"type": "string"},
)


def test_a_latent_call_writes_its_output_literally_and_a_thought_writes_nothing() -> None:
    result = run(
        [
            {
                "_tool": "summarize",
                "text": "†state.page",
                "_output": "†state.page is short",
                "_outputPath": "†state.summary",
            },
            {"_tool": "summarize", "text": "hmm", "_output": "thinking aloud"},
        ],
        tools=[summarize],
        state={"page": "a long text"},
    )
    assert result.state["summary"] == "†state.page is short"  # _output is not resolved
    assert statuses(result) == {"c1.0": "done", "c1.1": "done"}
    assert writes_by(result, "c1.1") == []
    assert result.records["c1.0"].params == {"text": "a long text"}


def test_a_latent_call_waits_for_its_references_like_any_call() -> None:
    result = run(
        [
            {
                "_tool": "summarize",
                "text": "†state.page",
                "_output": "short",
                "_outputPath": "†state.summary",
            },
            {"_tool": "wait", "value": "text", "seconds": 2, "_outputPath": "†state.page"},
            {"_tool": "wait", "value": "†state.summary", "_outputPath": "†state.after"},
        ],
        tools=[summarize, wait],
    )
    assert result.state["after"] == "short"
    assert result.records["c1.2"].started == 2


@pytest.mark.parametrize(
    ("call", "fault"),
    [
        ({"_tool": "summarize", "text": "x"}, "needs its result in _output"),
        ({"_tool": "summarize", "text": "x", "_output": 3}, "3 is not of type 'string'"),
        (
            {"_tool": "summarize", "text": "x", "_output": "s", "_outputPath": "†a.x || †a.y"},
            "a latent call must name exactly one output term, not the branch '†a.x || †a.y': "
            "latent tool 'summarize' writes its _output to one place; give one term, such as "
            "'†a.x'",
        ),
        (
            {"_tool": "summarize", "text": "x", "_output": "s", "_outputPath": "†a.x && †b.x"},
            "a latent call must name exactly one output term, not the fan-out '†a.x && †b.x': "
            "latent tool 'summarize' writes its _output to one place; give one term, such as "
            "'†a.x'",
        ),
        ({"_tool": "wait", "_output": 1}, "_output is only for latent tools"),
    ],
)
def test_bad_latent_calls_are_structural_errors(call: dict[str, Any], fault: str) -> None:
    result = run([call], tools=[summarize, wait])
    error = error_of(result, "c1.0")
    assert error["type"] == "structural" and fault in error["message"]
    assert statuses(result) == {"c1.0": "invalid"}


# -- fire-and-forget -------------------------------------------------------------------------


def test_a_fire_and_forget_call_runs_its_value_is_dropped_and_the_run_waits_for_it() -> None:
    done: list[float] = []

    @tl.tool
    async def notify(seconds: float) -> str:
        await trio.sleep(seconds)
        done.append(trio.current_time())
        return "sent"

    result = run(
        [
            {"_tool": "notify", "seconds": 10},
            {"_tool": "wait", "value": 1, "_outputPath": "†state.x"},
        ],
        tools=[notify, wait],
    )
    assert done == [10]
    record = result.records["c1.0"]
    assert (record.status, record.finished, record.output) == ("done", 10, "sent")
    assert result.state == {"x": 1}
    assert writes_by(result, "c1.0") == []


def test_a_fire_and_forget_failure_is_reported() -> None:
    result = run([{"_tool": "fail", "message": "smtp down", "seconds": 3}], tools=[fail])
    assert error_of(result, "c1.0") == {"type": "runtime", "message": "ValueError: smtp down"}
    assert result.messages[-1]["kind"] == "error"


# -- output methods ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "before", "value", "after"),
    [
        ("set", {"k": {"a": 1}}, {"b": 2}, {"b": 2}),
        ("merge", {"k": {"a": {"x": 1}, "b": 1}}, {"a": {"y": 2}}, {"a": {"x": 1, "y": 2}, "b": 1}),
        ("assign", {"k": {"a": {"x": 1}, "b": 1}}, {"a": {"y": 2}}, {"a": {"y": 2}, "b": 1}),
        ("push", {"k": [1]}, [2], [1, [2]]),
        ("push", {}, "first", ["first"]),
        ("concat", {"k": [1]}, [2, 3], [1, 2, 3]),
        ("concat", {}, [2, 3], [2, 3]),
    ],
)
def test_the_five_output_methods(method: str, before: dict, value: Any, after: Any) -> None:
    result = run(
        [{"_tool": "wait", "value": value, "_outputPath": "†state.k", "_outputMethod": method}],
        tools=TOOLS,
        state=before,
    )
    assert result.state["k"] == after
    [message] = writes_by(result, "c1.0")
    assert message["_outputMethod"] == method


@pytest.mark.parametrize(
    ("method", "before", "value", "fault"),
    [
        ("push", {"k": "text"}, 1, "cannot push onto a str at †state.k"),
        ("concat", {"k": [1]}, 2, "cannot concat an int"),
        ("merge", {"k": 1}, {"a": 1}, "cannot merge into an int"),
        ("assign", {"k": {}}, [1], "cannot assign a list"),
    ],
)
def test_a_method_that_cannot_apply_is_a_runtime_error_and_writes_nothing(
    method: str, before: dict, value: Any, fault: str
) -> None:
    result = run(
        [{"_tool": "wait", "value": value, "_outputPath": "†state.k", "_outputMethod": method}],
        tools=TOOLS,
        state=before,
    )
    assert statuses(result) == {"c1.0": "failed"}
    error = error_of(result, "c1.0")
    assert error["type"] == "runtime" and fault in error["message"]
    assert result.state == before
    assert writes_by(result, "c1.0") == []


def test_an_unknown_output_method_is_a_structural_error() -> None:
    result = run(
        [{"_tool": "wait", "_outputPath": "†state.k", "_outputMethod": "append"}], tools=TOOLS
    )
    assert "_outputMethod 'append' is not one of" in error_of(result, "c1.0")["message"]


@pytest.mark.parametrize(("slow", "fast"), [("first", "second"), ("second", "first")])
def test_of_concurrent_writes_the_last_in_the_plan_wins(slow: str, fast: str) -> None:
    """PROTOCOL §4: "last" is last in the plan, not last to finish; an early result of a
    later call is held, then applied after the earlier writer's."""
    seconds = {slow: 5, fast: 1}
    result = run(
        [
            {"_tool": "wait", "value": name, "seconds": seconds[name], "_outputPath": "†state.x"}
            for name in ("first", "second")
        ],
        tools=TOOLS,
    )
    assert result.state["x"] == "second"
    assert [m["data"]["x"] for m in result.messages] == ["first", "second"]
    assert result.records["c1.1"].finished == seconds["second"]  # ran at once, write held


def test_a_reader_waits_for_the_earlier_writer_of_a_present_path() -> None:
    """PROTOCOL §3: a reference reads what the calls before it leave, not what is there now."""
    result = run(
        [
            {"_tool": "wait", "value": "new", "seconds": 5, "_outputPath": "†state.x"},
            {"_tool": "wait", "value": "†state.x", "_outputPath": "†state.seen"},
        ],
        tools=TOOLS,
        state={"x": "old"},
    )
    assert result.state == {"x": "new", "seen": "new"}
    assert result.records["c1.1"].started == 5


def test_a_present_path_with_no_earlier_writer_is_read_at_once_and_kept() -> None:
    """A later writer never changes what an earlier call reads (PROTOCOL §4)."""
    result = run(
        [
            {"_tool": "wait", "value": "†state.x", "seconds": 3, "_outputPath": "†state.seen"},
            {"_tool": "wait", "value": "new", "seconds": 1, "_outputPath": "†state.x"},
        ],
        tools=TOOLS,
        state={"x": "old"},
    )
    assert result.state == {"x": "new", "seen": "old"}
    assert result.records["c1.0"].started == 0


@pytest.mark.parametrize("method", ["set-into-object", "push"])
def test_a_fan_in_reads_every_earlier_writer_whatever_order_they_finish(method: str) -> None:
    """The repro of issue 10: three writers finish in reverse order; the reader written
    after them sees all three, and a push fan-in lists them in plan order."""
    names = ["a", "b", "c"]
    if method == "push":
        writers = [
            {
                "_tool": "wait",
                "value": name,
                "seconds": 3 - index,
                "_outputPath": "†state.docs",
                "_outputMethod": "push",
            }
            for index, name in enumerate(names)
        ]
    else:
        writers = [
            {
                "_tool": "wait",
                "value": name,
                "seconds": 3 - index,
                "_outputPath": f"†state.docs.{name}",
            }
            for index, name in enumerate(names)
        ]
    combine = {"_tool": "wait", "value": "†state.docs", "_outputPath": "†state.combined"}
    result = run([*writers, combine], tools=TOOLS)
    expected: Any = names if method == "push" else {name: name for name in names}
    assert result.state["docs"] == expected
    assert result.state["combined"] == expected
    assert result.records["c1.3"].started == 3  # the moment the last writer ended
    assert [result.records[f"c1.{i}"].finished for i in range(3)] == [3, 2, 1]


def test_a_write_after_a_waiting_reader_is_held_until_the_reader_has_its_value() -> None:
    """c1 reads docs after c0 writes docs.a; c2 writes docs.b and finishes first: c1 still
    reads only what c0 left (PROTOCOL §4, serial equivalence)."""
    result = run(
        [
            {"_tool": "wait", "value": "a", "seconds": 3, "_outputPath": "†state.docs.a"},
            {"_tool": "wait", "value": "†state.docs", "_outputPath": "†state.seen"},
            {"_tool": "wait", "value": "b", "seconds": 1, "_outputPath": "†state.docs.b"},
        ],
        tools=TOOLS,
    )
    assert result.state["seen"] == {"a": "a"}
    assert result.state["docs"] == {"a": "a", "b": "b"}


def test_a_call_reading_the_path_it_writes_waits_for_another_writer() -> None:
    @tl.tool
    async def increment(n: int) -> int:
        return n + 1

    bump = {"_tool": "increment", "n": "†state.count", "_outputPath": "†state.count"}
    result = run(
        [bump, {"_tool": "wait", "value": 1, "seconds": 2, "_outputPath": "†state.count"}],
        tools=[increment, wait],
    )
    assert result.state["count"] == 2
    assert result.records["c1.0"].started == 2

    result = run([bump], tools=[increment], state={"count": 5})
    assert result.state["count"] == 6

    result = run([bump], tools=[increment])  # nobody else writes it
    assert statuses(result) == {"c1.0": "invalid"}
    assert "no call wrote it, and none will" in error_of(result, "c1.0")["message"]


# -- settling ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("writer", "ending"),
    [
        ({"_tool": "fail", "_outputPath": "†state.a"}, "ended failed"),
        (
            {"_tool": "add", "a": 1, "b": "†state.nowhere", "_outputPath": "†state.a"},
            "ended invalid",
        ),
    ],
)
def test_an_unresolved_reference_names_the_writer_that_did_not_write(
    writer: dict[str, Any], ending: str
) -> None:
    result = run(
        [writer, {"_tool": "wait", "value": {"deep": "†state.a.b"}, "_outputPath": "†state.c"}],
        tools=TOOLS,
    )
    assert statuses(result)["c1.1"] == "invalid"
    error = error_of(result, "c1.1")
    assert error["type"] == "structural"
    assert error["reference"] == "†state.a.b" and error["writer"] == "c1.0"
    assert "unresolved reference †state.a.b in parameter value.deep" in error["message"]
    culprit = f"call c1.0 ({writer['_tool']}), which should have written it, {ending}"
    assert culprit in error["message"]


def test_skipped_unresolved_and_cycle_are_told_apart() -> None:
    result = run(
        [
            {"_tool": "wait", "value": 1, "_outputPath": "†state.yes || †state.no"},
            {"_tool": "wait", "value": "†state.no", "_outputPath": "†state.skipped"},
            {"_tool": "wait", "value": "†state.missing", "_outputPath": "†state.unresolved"},
            {"_tool": "wait", "value": "†state.c2", "_outputPath": "†state.c1"},
            {"_tool": "wait", "value": "†state.c3", "_outputPath": "†state.c2"},
            {"_tool": "wait", "value": "†state.c1", "_outputPath": "†state.c3"},
        ],
        tools=TOOLS,
    )
    assert statuses(result) == {
        "c1.0": "done",
        "c1.1": "skipped",
        "c1.2": "invalid",
        "c1.3": "invalid",
        "c1.4": "invalid",
        "c1.5": "invalid",
    }
    assert "c1.1" not in {e["data"]["call"]["_id"] for e in result.errors}
    assert "no call wrote it" in error_of(result, "c1.2")["message"]
    for call_id in ("c1.3", "c1.4", "c1.5"):
        error = error_of(result, call_id)
        assert error["cycle"] == "c1.3 -> c1.4 -> c1.5 -> c1.3"
        assert error["message"].startswith("cycle: c1.3 -> c1.4 -> c1.5 -> c1.3")


def test_a_two_call_cycle_is_named_by_its_ids() -> None:
    result = run(
        [
            {"_tool": "wait", "value": "†state.b", "_outputPath": "†state.a"},
            {"_tool": "wait", "value": "†state.a", "_outputPath": "†state.b"},
        ],
        tools=TOOLS,
    )
    assert error_of(result, "c1.0")["cycle"] == "c1.0 -> c1.1 -> c1.0"


# -- structural errors -----------------------------------------------------------------------


def test_a_literal_of_the_wrong_type_is_caught_before_resolution() -> None:
    result = run(
        [
            {"_tool": "add", "a": "one", "b": "†state.b", "_outputPath": "†state.x"},
            {"_tool": "wait", "value": 2, "seconds": 5, "_outputPath": "†state.b"},
        ],
        tools=TOOLS,
    )
    error = error_of(result, "c1.0")
    assert error["type"] == "structural"
    assert (
        error["message"]
        == "parameters of 'add' do not match its schema: a: 'one' is not of type 'integer'"
    )
    assert result.records["c1.0"].started is None


def test_a_resolved_value_of_the_wrong_type_is_caught_after_resolution() -> None:
    result = run(
        [{"_tool": "add", "a": "†state.s", "b": 1, "_outputPath": "†state.x"}],
        tools=TOOLS,
        state={"s": "text"},
    )
    error = error_of(result, "c1.0")
    assert error["type"] == "structural"
    assert error["message"] == (
        "resolved parameters of 'add' do not match its schema: a: 'text' is not of type 'integer'"
    )
    assert result.records["c1.0"].params == {"a": "text", "b": 1}
    assert "x" not in result.state


@pytest.mark.parametrize(
    ("call", "fault"),
    [
        ({"_tool": "nope"}, "unknown tool 'nope'; the tools are: wait, fail, add"),
        ({"a": 1}, "the call has no _tool"),
        ({"_tool": "add", "a": 1, "b": 2, "_foo": 1}, "unknown meta key '_foo'"),
        ({"_tool": "add", "a": 1}, "'b' is a required property"),
        ({"_tool": "add", "a": 1, "b": 2, "c": 3}, "Additional properties are not allowed"),
        (
            {"_tool": "add", "a": 1, "b": "†state..x"},
            "parameter b: bad reference: expected a key after '.', found '.' at position 7",
        ),
        (
            {"_tool": "add", "a": 1, "b": "†state.x || †state.y && †state.z"},
            "cannot mix '||' and '&&'",
        ),
        ({"_tool": "add", "a": 1, "b": 2, "_outputPath": "state.x"}, "bad _outputPath"),
        ({"_tool": "add", "a": 1, "b": 2, "_outputPath": 3}, "_outputPath must be a string"),
        ({"_tool": "add", "a": 1, "b": 2, "_id": 3}, "_id must be a non-empty string"),
        ([1, 2], "a call must be a JSON object, got an array"),
        ("add(1, 2)", "a call must be a JSON object, got a string"),
        (None, "a call must be a JSON object, got null"),
    ],
)
def test_bad_calls_are_structural_errors_that_never_run(call: Any, fault: str) -> None:
    result = run([call], tools=TOOLS)
    [error] = result.errors
    assert error["data"]["error"]["type"] == "structural"
    assert fault in error["data"]["error"]["message"]
    # The error shows the call as sent, with the id the engine knows it by.
    assert error["data"]["call"] == ({**call, "_id": "c1.0"} if isinstance(call, dict) else call)
    assert statuses(result) == {"c1.0": "invalid"}
    assert result.state == {}


def test_a_repeated_id_is_a_structural_error_and_the_first_call_still_runs() -> None:
    result = run(
        [
            {"_tool": "wait", "value": 1, "_id": "x", "_outputPath": "†state.first"},
            {"_tool": "wait", "value": 2, "_id": "x", "_outputPath": "†state.second"},
        ],
        tools=TOOLS,
    )
    assert result.state == {"first": 1}
    assert statuses(result) == {"x": "done", "c1.1": "invalid"}
    error = error_of(result, "x")
    assert "id 'x' is already used" in error["message"]


# -- approval ----------------------------------------------------------------------------------


@tl.tool(requires_approval=True)
async def charge(customer: str, cents: int) -> dict:
    """Charge a customer."""
    return {"charged": cents, "customer": customer}


def charge_call(cents: Any = 500, customer: str = "ada", **meta: Any) -> dict[str, Any]:
    return {
        "_tool": "charge",
        "customer": customer,
        "cents": cents,
        "_outputPath": "†state.receipt",
        **meta,
    }


@pytest.mark.parametrize("answer", [tl.Approve(), True])
def test_approve_runs_the_call(answer: Any) -> None:
    result = run([charge_call()], tools=[charge], approve=lambda call: answer)
    assert result.state["receipt"] == {"charged": 500, "customer": "ada"}


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (tl.Deny("over the limit"), "over the limit"),
        (False, "denied by the approval hook"),
        ("maybe", "a reviewer refused this call"),  # the hook's bug: the model is not blamed
    ],
)
def test_deny_does_not_run_the_call_and_tells_why(answer: Any, reason: str) -> None:
    result = run(
        [charge_call(), {"_tool": "wait", "value": "†state.receipt", "_outputPath": "†state.x"}],
        tools=[charge, wait],
        approve=lambda call: answer,
    )
    assert statuses(result) == {"c1.0": "denied", "c1.1": "invalid"}
    kind = "hook" if reason == "a reviewer refused this call" else "denied"
    assert error_of(result, "c1.0") == {"type": kind, "message": reason}
    reader = error_of(result, "c1.1")["message"]
    assert "call c1.0 (charge), which should have written it, ended denied" in reader
    assert result.records["c1.0"].started is None


def test_a_hook_that_raises_denies_the_call() -> None:
    def hook(call: tl.PendingCall) -> bool:
        raise RuntimeError("policy service down")

    result = run([charge_call()], tools=[charge], approve=hook)
    assert statuses(result) == {"c1.0": "denied"}
    assert error_of(result, "c1.0") == {"type": "hook", "message": "a reviewer refused this call"}


def test_a_sync_hook_runs_in_a_worker_thread_while_other_calls_keep_running() -> None:
    # PROTOCOL §6: calls that need no approval never wait for the hook. The hook below can
    # only answer once a call that needs no approval, and the call that reads its result,
    # have run, so it answers in time only if it does not hold up the trio thread. (The
    # wait's timeout makes a failure fail, not hang.)
    other_calls_ran = threading.Event()
    asked: list[tuple[bool, bool]] = []

    def hook(call: tl.PendingCall) -> bool:
        answered = other_calls_ran.wait(10)
        asked.append((threading.current_thread() is threading.main_thread(), answered))
        return answered

    @tl.tool
    async def signal(value: int) -> int:
        other_calls_ran.set()
        return value

    result = run(
        [
            charge_call(_id="pay"),
            {"_tool": "wait", "value": 7, "seconds": 1, "_outputPath": "†state.w", "_id": "w"},
            {"_tool": "signal", "value": "†state.w", "_outputPath": "†state.s", "_id": "s"},
        ],
        tools=[charge, wait, signal],
        approve=hook,
    )
    assert asked == [(False, True)]  # in a worker thread, and answered after the others
    assert statuses(result) == {"pay": "done", "w": "done", "s": "done"}
    assert result.state == {"w": 7, "s": 7, "receipt": {"charged": 500, "customer": "ada"}}


def test_a_sync_callable_that_returns_a_coroutine_is_awaited() -> None:
    async def decide(call: tl.PendingCall) -> tl.Decision:
        return tl.Deny("not today")

    result = run([charge_call()], tools=[charge], approve=lambda call: decide(call))
    assert error_of(result, "c1.0") == {"type": "denied", "message": "not today"}


def test_an_async_hook_may_take_its_time() -> None:
    async def hook(call: tl.PendingCall) -> tl.Decision:
        await trio.sleep(30)
        return tl.Approve()

    result = run([charge_call()], tools=[charge], approve=hook)
    assert result.records["c1.0"].started == 30
    assert result.state["receipt"]["charged"] == 500


def test_the_hook_sees_the_resolved_parameters_the_id_the_tool_and_the_wire_call() -> None:
    shown: list[tl.PendingCall] = []

    def hook(call: tl.PendingCall) -> bool:
        shown.append(call)
        return True

    run(
        [charge_call("†state.total", _id="pay-1")],
        tools=[charge],
        approve=hook,
        state={"total": 1200},
    )
    assert shown == [
        tl.PendingCall(
            id="pay-1",
            tool="charge",
            params={"customer": "ada", "cents": 1200},
            call=charge_call("†state.total", _id="pay-1"),
        )
    ]


def test_edit_runs_the_edited_parameters_once_they_pass_the_schema() -> None:
    asked: list[str] = []

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        if call.params["cents"] > 1000:
            return tl.Edit({**call.params, "cents": "lots"})
        return tl.Edit({**call.params, "cents": call.params["cents"] - 100})

    result = run(
        [charge_call(500), charge_call(5000, _outputPath="†state.big")],
        tools=[charge],
        approve=hook,
    )
    assert asked == ["c1.0", "c1.1"]  # an edited call is not asked about again
    assert result.state == {"receipt": {"charged": 400, "customer": "ada"}}
    assert result.records["c1.0"].params == {"customer": "ada", "cents": 400}
    error = error_of(result, "c1.1")
    assert error == {
        "type": "hook",
        "message": "a reviewer changed this call, and the change could not run",
    }
    assert statuses(result)["c1.1"] == "invalid"


def test_replace_checks_the_new_call_and_runs_it_under_the_same_id_without_asking() -> None:
    asked: list[str] = []

    def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        replacements = {
            "good": {
                "_tool": "charge",
                "customer": "test",
                "cents": "†state.cap",
                "_outputPath": "†state.receipt",
            },
            "bad-schema": {"_tool": "charge", "customer": "x", "_outputPath": "†state.b"},
            "bad-ref": {"_tool": "wait", "value": "†state.nowhere", "_outputPath": "†state.c"},
        }
        return tl.Replace(replacements[call.id])

    result = run(
        [
            charge_call(_id="good"),
            charge_call(_id="bad-schema", _outputPath="†state.b"),
            charge_call(_id="bad-ref", _outputPath="†state.c"),
            {"_tool": "wait", "value": "†state.b", "_outputPath": "†state.after_b"},
        ],
        tools=[charge, wait],
        approve=hook,
        state={"cap": 99},
    )
    assert asked == ["good", "bad-schema", "bad-ref"]
    assert result.state["receipt"] == {"charged": 99, "customer": "test"}
    assert result.records["good"].call["_id"] == "good"
    assert result.records["good"].params == {"customer": "test", "cents": 99}
    assert statuses(result) == {
        "good": "done",
        "bad-schema": "invalid",
        "bad-ref": "invalid",
        "c1.3": "invalid",
    }
    assert error_of(result, "bad-schema")["type"] == "hook"
    assert "unresolved reference †state.nowhere" in error_of(result, "bad-ref")["message"]
    assert "call bad-schema (charge)" in error_of(result, "c1.3")["message"]


def test_a_replacement_that_writes_elsewhere_settles_the_readers_of_the_old_path() -> None:
    def hook(call: tl.PendingCall) -> tl.Decision:
        return tl.Replace({"_tool": "wait", "value": 1, "_outputPath": "†state.elsewhere"})

    result = run(
        [charge_call(), {"_tool": "wait", "value": "†state.receipt", "_outputPath": "†state.x"}],
        tools=[charge, wait],
        approve=hook,
    )
    assert result.state == {"elsewhere": 1}
    assert statuses(result) == {"c1.0": "done", "c1.1": "invalid"}


def test_respond_writes_the_answer_as_the_result_without_running_the_call() -> None:
    ran: list[int] = []

    @tl.tool(requires_approval=True)
    async def lookup(q: str) -> dict:
        ran.append(1)
        return {}

    def hook(call: tl.PendingCall) -> tl.Decision:
        return tl.Respond({"answer": 42} if call.params["q"] == "good" else "not a dict")

    result = run(
        [
            {"_tool": "lookup", "q": "good", "_outputPath": "†state.a"},
            {"_tool": "lookup", "q": "bad", "_outputPath": "†state.b"},
        ],
        tools=[lookup],
        approve=hook,
    )
    assert ran == []
    assert result.state == {"a": {"answer": 42}}
    assert statuses(result) == {"c1.0": "done", "c1.1": "failed"}
    assert result.records["c1.0"].output == {"answer": 42}
    error = error_of(result, "c1.1")
    assert error["type"] == "runtime"
    assert "output of 'lookup' does not match its schema" in error["message"]


def test_respond_to_a_latent_call_is_checked_against_its_output_schema() -> None:
    guarded = tl.Tool(
        name="guarded",
        parameters={"type": "object"},
        output={"type": "string"},
        requires_approval=True,
    )
    result = run(
        [{"_tool": "guarded", "_output": "model's", "_outputPath": "†state.a"}],
        tools=[guarded],
        approve=lambda call: tl.Respond(12),
    )
    assert statuses(result) == {"c1.0": "failed"}
    assert result.state == {}


def test_one_question_at_a_time_in_ready_order_while_other_calls_keep_running() -> None:
    questions: list[tuple[float, str]] = []
    open_questions = [0]

    async def slow_person(call: tl.PendingCall) -> bool:
        open_questions[0] += 1
        assert open_questions[0] == 1
        questions.append((trio.current_time(), call.id))
        await trio.sleep(10)
        open_questions[0] -= 1
        return True

    result = run(
        [
            charge_call(1, _id="p1", _outputPath="†state.p1"),
            {"_tool": "wait", "value": 7, "seconds": 3, "_outputPath": "†state.w", "_id": "w"},
            charge_call("†state.w", _id="p2", _outputPath="†state.p2"),
            charge_call(3, _id="p3", _outputPath="†state.p3"),
            {"_tool": "wait", "value": "†state.w", "seconds": 1, "_id": "after_w"},
        ],
        tools=[charge, wait],
        approve=slow_person,
    )
    assert questions == [(0, "p1"), (10, "p3"), (20, "p2")]
    assert (result.records["w"].started, result.records["w"].finished) == (0, 3)
    assert result.records["after_w"].started == 3  # needs no approval: never waits for it
    assert [result.records[i].started for i in ("p1", "p3", "p2")] == [10, 20, 30]


def test_a_call_that_is_still_blocked_is_never_shown_to_the_hook() -> None:
    shown: list[str] = []

    def hook(call: tl.PendingCall) -> bool:
        shown.append(call.id)
        return True

    result = run(
        [
            charge_call("†state.never"),
            {"_tool": "fail", "seconds": 2, "_outputPath": "†state.amount"},
            charge_call("†state.amount", _outputPath="†state.r2"),
        ],
        tools=[charge, fail],
        approve=hook,
    )
    assert shown == []
    assert statuses(result) == {"c1.0": "invalid", "c1.1": "failed", "c1.2": "invalid"}


# -- errors at the end of the tick -----------------------------------------------------------


def test_error_messages_come_after_the_writes_in_the_order_the_errors_happened() -> None:
    @tl.tool(timeout=2)
    async def slow() -> None:
        await trio.sleep(60)

    result = run(
        [
            {"_tool": "slow", "_outputPath": "†state.s"},
            {"_tool": "fail", "seconds": 1, "_outputPath": "†state.f"},
            {"_tool": "nope"},
            {"_tool": "wait", "value": "†state.s", "_outputPath": "†state.after"},
            {"_tool": "wait", "value": 1, "seconds": 5, "_outputPath": "†state.ok"},
        ],
        tools=[slow, fail, wait],
    )
    kinds = [m.get("kind") for m in result.messages]
    assert kinds == ["state", "error", "error", "error", "error"]
    order = [(e["data"]["call"]["_id"], e["data"]["error"]["type"]) for e in result.errors]
    assert order == [
        ("c1.2", "structural"),  # unknown tool, on arrival at 0
        ("c1.1", "runtime"),  # failed at 1
        ("c1.0", "runtime"),  # timed out at 2
        ("c1.3", "structural"),  # its writer timed out at 2
    ]
    assert result.errors == result.messages[1:]


# -- property: timing and values of random plans -----------------------------------------------


@tl.tool
async def node(name: int, inputs: list[int], seconds: int) -> int:
    await trio.sleep(seconds)
    return name + sum(inputs)


@st.composite
def dags(draw: Any) -> tuple[list[int], list[list[int]], list[int]]:
    """Durations, dependencies (each on earlier nodes) and an order to list the calls in."""
    size = draw(st.integers(1, 30))
    durations = [draw(st.integers(0, 5)) for _ in range(size)]
    dependencies = [
        sorted(draw(st.sets(st.integers(0, i - 1), max_size=4))) if i else [] for i in range(size)
    ]
    order = draw(st.permutations(range(size)))
    return durations, dependencies, list(order)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_every_call_starts_when_its_last_input_exists(
    plan: tuple[list[int], list[list[int]], list[int]],
) -> None:
    durations, dependencies, order = plan
    calls = [
        {
            "_tool": "node",
            "name": i,
            "inputs": [f"†state.n{j}" for j in dependencies[i]],
            "seconds": durations[i],
            "_outputPath": f"†state.n{i}",
            "_id": f"n{i}",
        }
        for i in order
    ]
    result = run(calls, tools=[node])

    values: list[int] = []
    finish: list[int] = []
    for i, deps in enumerate(dependencies):  # sequential evaluation in topological order
        values.append(i + sum(values[j] for j in deps))
        finish.append(max((finish[j] for j in deps), default=0) + durations[i])

    assert result.errors == []
    assert result.state == {f"n{i}": value for i, value in enumerate(values)}
    for i, deps in enumerate(dependencies):
        record = result.records[f"n{i}"]
        assert record.started == max((result.records[f"n{j}"].finished for j in deps), default=0)
        assert record.finished == finish[i]
    makespan = max(record.finished for record in result.records.values())
    assert makespan == max(finish)  # the critical path


def test_an_explicit_id_that_looks_like_an_engine_id_loses_no_call() -> None:
    # "c1.1" is the engine id the second call would get; the third call repeats "c1.1".
    result = run(
        [
            {"_tool": "wait", "value": 1, "_id": "c1.1", "_outputPath": "†state.first"},
            {"_tool": "wait", "value": 2, "_outputPath": "†state.second"},
            {"_tool": "wait", "value": 3, "_id": "c1.1", "_outputPath": "†state.third"},
        ],
        tools=TOOLS,
    )
    # The call without an `_id` is not at fault: it runs under a free id.
    assert result.state == {"first": 1, "second": 2}
    assert statuses(result) == {"c1.1": "done", "c1.1#2": "done", "c1.2": "invalid"}
    assert "id 'c1.1' is already used" in result.records["c1.2"].error["message"]
    assert result.records["c1.2"].call["_id"] == "c1.1"  # the call as the model wrote it


def test_a_repeated_id_whose_engine_id_is_taken_still_has_a_record() -> None:
    result = run(
        [
            {"_tool": "wait", "value": 1, "_id": "c1.1", "_outputPath": "†state.first"},
            {"_tool": "wait", "value": 2, "_id": "c1.1", "_outputPath": "†state.second"},
        ],
        tools=TOOLS,
    )
    assert result.state == {"first": 1}
    assert statuses(result) == {"c1.1": "done", "c1.1#2": "invalid"}
    assert "id 'c1.1' is already used" in result.records["c1.1#2"].error["message"]
    [error] = result.errors  # and the model is told, with the call as it wrote it
    assert error["data"]["call"]["value"] == 2


# -- misbehaving handlers and hooks: the call fails (or is denied), the run goes on -----------


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken")


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("__repr__ is broken")


def raising(error: BaseException, *, sync: bool = False) -> tl.Tool:
    """A tool `boom` whose handler raises `error` (in a worker thread when `sync`)."""

    def boom_sync() -> int:
        raise error

    async def boom_async() -> int:
        raise error

    return tl.tool(boom_sync if sync else boom_async, name="boom")


def one_bad_call(tool: tl.Tool) -> tl.ExecutionResult:
    """`boom` beside a call that succeeds, which must keep its result."""
    return run(
        [
            {"_tool": "wait", "value": 1, "seconds": 1, "_outputPath": "†state.good"},
            {"_tool": "boom", "_outputPath": "†state.bad"},
        ],
        tools=[wait, tool],
    )


@pytest.mark.parametrize("sync", [False, True])
def test_an_exception_whose_message_cannot_be_rendered_fails_only_its_call(sync: bool) -> None:
    result = one_bad_call(raising(Unprintable(), sync=sync))
    assert statuses(result) == {"c1.0": "done", "c1.1": "failed"}
    assert result.state == {"good": 1}
    assert error_of(result, "c1.1") == {
        "type": "runtime",
        "message": "Unprintable (its message could not be rendered: __str__ raised RuntimeError)",
    }


def test_a_hook_exception_whose_message_cannot_be_rendered_denies_the_call() -> None:
    def hook(call: tl.PendingCall) -> bool:
        raise Unprintable()

    result = run([charge_call()], tools=[charge], approve=hook)
    assert error_of(result, "c1.0") == {"type": "hook", "message": "a reviewer refused this call"}


def test_a_hook_answer_whose_repr_cannot_be_rendered_denies_the_call() -> None:
    result = run([charge_call()], tools=[charge], approve=lambda call: BadRepr())
    assert error_of(result, "c1.0") == {"type": "hook", "message": "a reviewer refused this call"}


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            ExceptionGroup("several", [OSError("disk full"), KeyError("user")]),
            "ExceptionGroup: several (2 sub-exceptions): OSError: disk full; KeyError: 'user'",
        ),
        (  # nested groups are flattened to their leaves, at most five shown
            ExceptionGroup(
                "outer",
                [ValueError(i) for i in range(3)]
                + [ExceptionGroup("inner", [ValueError(i) for i in range(3, 8)])],
            ),
            "ExceptionGroup: outer (4 sub-exceptions): ValueError: 0; ValueError: 1; "
            "ValueError: 2; ValueError: 3; ValueError: 4; and 3 more",
        ),
        (
            ExceptionGroup("one broken", [Unprintable()]),
            "ExceptionGroup: one broken (1 sub-exception): Unprintable (its message could not "
            "be rendered: __str__ raised RuntimeError)",
        ),
    ],
)
def test_an_exception_group_is_told_with_its_leaf_exceptions(
    error: BaseException, message: str
) -> None:
    result = one_bad_call(raising(error))
    assert error_of(result, "c1.1") == {"type": "runtime", "message": message}


def _exit_with_usage(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="cli", add_help=False)
    parser.add_argument("--n", type=int, required=True)
    return parser.parse_args(args).n


@pytest.mark.parametrize(
    ("error", "sync", "message"),
    [
        (SystemExit(2), True, "SystemExit: 2"),
        (SystemExit(2), False, "SystemExit: 2"),
        (SystemExit(), True, "SystemExit"),
        (GeneratorExit(), True, "GeneratorExit"),
        (GeneratorExit("closed"), False, "GeneratorExit: closed"),
        (
            BaseExceptionGroup("cli", [SystemExit(2), ValueError("bad")]),
            False,
            "BaseExceptionGroup: cli (2 sub-exceptions): SystemExit: 2; ValueError: bad",
        ),
    ],
)
def test_system_exit_and_generator_exit_from_a_handler_fail_only_its_call(
    error: BaseException, sync: bool, message: str
) -> None:
    result = one_bad_call(raising(error, sync=sync))
    assert statuses(result) == {"c1.0": "done", "c1.1": "failed"}
    assert result.state == {"good": 1}
    assert error_of(result, "c1.1") == {"type": "runtime", "message": message}


def test_a_handler_that_parses_bad_arguments_with_argparse_fails_only_its_call(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = tl.tool(_exit_with_usage, name="cli")
    result = run(
        [
            {"_tool": "wait", "value": 1, "seconds": 1, "_outputPath": "†state.good"},
            {"_tool": "cli", "args": ["--bogus"], "_outputPath": "†state.n"},
        ],
        tools=[wait, cli],
    )
    assert result.state == {"good": 1}
    assert error_of(result, "c1.1") == {"type": "runtime", "message": "SystemExit: 2"}
    assert "required: --n" in capsys.readouterr().err  # argparse's own usage message


@pytest.mark.parametrize("sync", [False, True])
@pytest.mark.parametrize(
    "error",
    [KeyboardInterrupt(), BaseExceptionGroup("stop", [SystemExit(1), KeyboardInterrupt()])],
    ids=["KeyboardInterrupt", "group-with-KeyboardInterrupt"],
)
def test_a_keyboard_interrupt_from_a_handler_still_stops_the_run(
    error: BaseException, sync: bool
) -> None:
    with pytest.raises(type(error)):
        one_bad_call(raising(error, sync=sync))


def test_a_cancel_by_the_caller_still_cancels_a_running_handler() -> None:
    @tl.tool
    async def forever() -> int:
        await trio.sleep_forever()
        return 0

    async def main() -> bool:
        with trio.move_on_after(5) as scope:
            await tl.execute([{"_tool": "forever"}], tools=[forever])
        return scope.cancelled_caught

    assert trio.run(main, clock=MockClock(autojump_threshold=0)) is True


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (SystemExit(2), "the approval hook raised SystemExit: 2"),
        (GeneratorExit(), "the approval hook raised GeneratorExit"),
        (
            BaseExceptionGroup("policy", [SystemExit(3)]),
            "the approval hook raised BaseExceptionGroup: policy (1 sub-exception): SystemExit: 3",
        ),
    ],
)
@pytest.mark.parametrize("sync", [False, True])
def test_a_hook_that_raises_system_exit_denies_the_call(
    error: BaseException, message: str, sync: bool
) -> None:
    def hook(call: tl.PendingCall) -> bool:
        raise error

    async def async_hook(call: tl.PendingCall) -> bool:
        raise error

    result = run([charge_call()], tools=[charge], approve=hook if sync else async_hook)
    assert statuses(result) == {"c1.0": "denied"}
    assert error_of(result, "c1.0") == {"type": "hook", "message": "a reviewer refused this call"}


def test_a_keyboard_interrupt_from_a_hook_still_stops_the_run() -> None:
    def hook(call: tl.PendingCall) -> bool:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run([charge_call()], tools=[charge], approve=hook)


def test_a_sync_handler_that_returns_an_awaitable_has_it_awaited() -> None:
    async def double(a: int) -> int:
        await trio.sleep(2)
        return a * 2

    def wrapper(a: int) -> int:
        return double(a)  # type: ignore[return-value]

    result = run(
        [{"_tool": "wrapper", "a": 2, "_outputPath": "†state.v"}],
        tools=[tl.tool(wrapper, name="wrapper")],
    )
    assert statuses(result) == {"c1.0": "done"}
    assert result.state == {"v": 4}
    assert result.records["c1.0"].finished == 2  # awaited in trio, on its clock


def test_a_validator_that_raises_something_other_than_a_value_error_fails_only_its_call() -> None:
    def broken(value: int) -> int:
        raise TypeError("validator blew up")

    @tl.tool
    async def strict(a: Annotated[int, pydantic.AfterValidator(broken)]) -> int:
        return a

    result = run(
        [
            {"_tool": "wait", "value": 1, "seconds": 1, "_outputPath": "†state.good"},
            {"_tool": "strict", "a": 1, "_outputPath": "†state.bad"},
        ],
        tools=[wait, strict],
    )
    assert result.state == {"good": 1}
    assert error_of(result, "c1.1") == {
        "type": "runtime",
        "message": "converting the parameters of 'strict' raised TypeError: validator blew up",
    }


# -- results that are not JSON -----------------------------------------------------------------


class Reading(pydantic.BaseModel):
    value: float


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("result", "fault"),
    [
        (float("nan"), "the result is not JSON: float NaN"),
        (float("inf"), "the result is not JSON: float inf"),
        ([1, 2, float("-inf")], "the result is not JSON: float -inf at [2]"),
        (
            {"rows": [{"v": 1.5}, {"v": float("nan")}]},
            "the result is not JSON: float NaN at rows[1].v",
        ),
        ({"a b": [float("nan")]}, 'the result is not JSON: float NaN at ["a b"][0]'),
        (Reading(value=float("nan")), "the result is not JSON: float NaN at value"),
        (
            10**5000,
            "the result is not JSON: an int of about 5,001 digits (Python writes at most "
            "4,300 as text)",
        ),
        (
            {"n": [-(10**5000)]},
            "the result is not JSON: an int of about 5,001 digits (Python writes at most "
            "4,300 as text) at n[0]",
        ),
        (
            tl.Branch("†state.b", [float("nan")]),
            "the result is not JSON: float NaN at [0]",
        ),
    ],
    ids=["nan", "inf", "list", "nested", "odd-key", "model", "huge-int", "nested-int", "branch"],
)
def test_a_result_that_is_not_json_is_a_runtime_error_and_nothing_is_written(
    result: Any, fault: str
) -> None:
    @tl.tool
    async def produce() -> Any:
        return result

    outcome = run(
        [
            {"_tool": "wait", "value": 1, "_outputPath": "†state.good"},
            {"_tool": "produce", "_outputPath": "†state.a || †state.b"},
            {"_tool": "wait", "value": "†state.a", "_outputPath": "†state.reader"},
        ],
        tools=[wait, produce],
    )
    assert statuses(outcome) == {"c1.0": "done", "c1.1": "failed", "c1.2": "invalid"}
    assert error_of(outcome, "c1.1") == {"type": "runtime", "message": fault}
    assert outcome.state == {"good": 1}
    assert outcome.records["c1.1"].output is None
    json.dumps(outcome.messages, allow_nan=False)  # the log stays strict JSON


@pytest.mark.parametrize("depth", [255, 300, 100_000])
def test_a_result_nested_too_deeply_is_a_runtime_error(depth: int) -> None:
    @tl.tool
    def deep() -> Any:
        return _nested(depth)

    result = one_bad_call(tl.tool(deep.handler, name="boom"))
    assert statuses(result) == {"c1.0": "done", "c1.1": "failed"}
    assert error_of(result, "c1.1") == {
        "type": "runtime",
        "message": "the result is not JSON: it nests more than 254 levels deep",
    }


def test_results_that_are_json_are_written_as_they_are() -> None:
    values = [
        10**600,  # long, but within what Python writes as text
        -0.0,
        1e308,
        "†",
        {"rows": [[True, None, 1.5, "x"]] * 3},
        _nested(254),  # as deep as a result may be
    ]

    @tl.tool
    async def give(i: int) -> Any:
        return values[i]

    result = run(
        [{"_tool": "give", "i": i, "_outputPath": f"†state.v{i}"} for i in range(len(values))],
        tools=[give],
    )
    assert set(statuses(result).values()) == {"done"}
    assert result.state == {f"v{i}": value for i, value in enumerate(values)}


def test_a_result_that_is_not_json_does_not_break_a_durable_run(tmp_path: Any) -> None:
    @tl.tool
    def big() -> int:
        return 10**5000

    agent = tl.Agent(
        tl.ScriptedModel(
            [
                {"calls": [{"_tool": "big", "_outputPath": "†state.v"}], "output": None},
                {"calls": [], "output": {"ok": 1}},
            ]
        ),
        tools=[big],
        store=str(tmp_path / "runs.db"),
    )
    result = agent.run({"q": 1}, run_id="r1")
    assert result.output == {"ok": 1}
    [error] = [m for m in result.messages if m.get("kind") == "error"]
    assert error["data"]["error"]["message"].startswith("the result is not JSON: an int")


# -- Deny reasons are text ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        (None, "denied by the approval hook"),
        ("", "denied by the approval hook"),
        (42, "42"),
        ("over the limit", "over the limit"),
    ],
)
def test_a_deny_reason_is_always_text(reason: Any, text: str) -> None:
    decision = tl.Deny(reason)
    assert decision.reason == text
    assert type(decision.reason) is str
    result = run([charge_call()], tools=[charge], approve=lambda call: decision)
    assert error_of(result, "c1.0") == {"type": "denied", "message": text}
    json.dumps(result.messages)


def test_a_deny_reason_that_cannot_be_rendered_still_denies() -> None:
    class Opaque:
        def __str__(self) -> str:
            raise RuntimeError("no")

    result = run([charge_call()], tools=[charge], approve=lambda call: tl.Deny(Opaque()))
    assert error_of(result, "c1.0") == {
        "type": "denied",
        "message": "denied by the approval hook (its reason could not be rendered: __str__ "
        "raised RuntimeError)",
    }

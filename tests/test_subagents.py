"""Sub-agents (PROTOCOL §11): an agent is a tool, its call a child run of the same run."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
import trio
import trio.testing

import tickloop as tl


def solution(*calls: dict[str, Any], output: Any = None) -> dict[str, Any]:
    return {"calls": list(calls), "output": output}


@tl.tool
async def search(q: str) -> str:
    """Search the web."""
    await trio.sleep(10)
    return f"notes on {q}"


def researcher(**options: Any) -> tl.Agent:
    """A child that searches once (10 s of virtual time) and answers with the notes."""
    model = tl.ScriptedModel(
        [
            solution({"_tool": "search", "q": "†input.task", "_outputPath": "†state.notes"}),
            solution(output="†state.notes"),
        ]
    )
    options.setdefault("name", "researcher")
    return tl.Agent(model, tools=[search], instructions="Research a topic.\nCite.", **options)


def run_on_mock_clock(agent: tl.Agent, input: Any = None, **options: Any) -> tl.RunResult:
    async def main() -> tl.RunResult:
        return await agent.run_async(input, **options)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# -- an agent as a tool ----------------------------------------------------------------------


def test_an_agent_in_tools_is_a_tool_named_after_it() -> None:
    class Notes(pydantic.BaseModel):
        text: str

    class Topic(pydantic.BaseModel):
        topic: str

    child = tl.Agent(tl.ScriptedModel([]), name="researcher", output=Notes, input=Topic)
    parent = tl.Agent(tl.ScriptedModel([]), tools=[child])
    tool = parent.tools["researcher"]
    assert tool.description == ""
    assert tool.parameters["properties"] == {"topic": {"title": "Topic", "type": "string"}}
    assert tool.output is not None and tool.output["properties"]["text"]["type"] == "string"

    plain = researcher()
    tool = tl.Agent(tl.ScriptedModel([]), tools=[plain]).tools["researcher"]
    assert tool.description == "Research a topic."  # the instructions' first line
    assert tool.parameters["required"] == ["task"]
    assert tool.parameters["properties"]["task"]["type"] == "string"

    described = researcher(description="Finds sources.")
    assert tl.Agent(tl.ScriptedModel([]), tools=[described]).tools["researcher"].description == (
        "Finds sources."
    )


def test_an_unnamed_agent_cannot_be_a_tool_and_as_tool_takes_options() -> None:
    unnamed = tl.Agent(tl.ScriptedModel([]))
    with pytest.raises(tl.ConfigurationError, match="needs a name"):
        tl.Agent(tl.ScriptedModel([]), tools=[unnamed])
    tool = unnamed.as_tool(name="helper", description="Helps.", requires_approval=True, timeout=3)
    assert (tool.name, tool.description, tool.timeout) == ("helper", "Helps.", 3.0)
    assert tool.may_require_approval


def test_the_child_output_is_the_call_result_and_records_hold_the_tree() -> None:
    parent = tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "researcher", "task": "trio", "_outputPath": "†state.a"}),
                solution(output="†state.a"),
            ]
        ),
        tools=[researcher()],
    )
    result = run_on_mock_clock(parent, {"topic": "trio"})
    assert result.output == "notes on trio"
    assert list(result.records) == ["c1.0", "c1.0/c1.0"]
    child_call = result.records["c1.0/c1.0"]
    assert child_call.id == "c1.0/c1.0" and child_call.output == "notes on trio"
    assert result.errors == []


def test_two_sub_agent_calls_run_in_parallel_and_a_third_waits_for_both() -> None:
    @tl.tool
    def combine(a: str, b: str) -> str:
        return f"{a} + {b}"

    parent = tl.Agent(
        tl.ScriptedModel(
            [
                solution(
                    {"_tool": "researcher", "task": "trio", "_outputPath": "†state.a"},
                    {"_tool": "researcher", "task": "asyncio", "_outputPath": "†state.b"},
                    {
                        "_tool": "combine",
                        "a": "†state.a",
                        "b": "†state.b",
                        "_outputPath": "†state.c",
                    },
                ),
                solution(output="†state.c"),
            ]
        ),
        tools=[researcher(), combine],
    )

    async def main() -> tuple[tl.RunResult, float]:
        start = trio.current_time()
        result = await parent.run_async({})
        return result, trio.current_time() - start

    result, makespan = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert result.output == "notes on trio + notes on asyncio"
    assert makespan == pytest.approx(10)  # one child's search, not two
    first, second, third = (result.records[i] for i in ("c1.0", "c1.1", "c1.2"))
    assert first.started == second.started
    assert third.started is not None and first.finished is not None
    assert second.finished is not None
    assert third.started >= max(first.finished, second.finished)


def test_the_agent_call_holds_one_slot_of_its_parents_limit() -> None:
    parent = tl.Agent(
        tl.ScriptedModel(
            [
                solution(
                    {"_tool": "researcher", "task": "trio", "_outputPath": "†state.a"},
                    {"_tool": "researcher", "task": "asyncio", "_outputPath": "†state.b"},
                ),
                solution(output="done"),
            ]
        ),
        tools=[researcher()],
        max_concurrency=1,
    )

    async def main() -> float:
        start = trio.current_time()
        await parent.run_async({})
        return trio.current_time() - start

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == pytest.approx(20)


def test_a_child_that_ends_without_output_fails_its_call_and_the_parent_goes_on() -> None:
    stuck = tl.Agent(tl.ScriptedModel([solution()]), name="stuck", max_iterations=1, tools=[search])
    parent = tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "stuck", "task": "x", "_outputPath": "†state.s"}),
                solution(output="recovered"),
            ]
        ),
        tools=[stuck],
    )
    result = run_on_mock_clock(parent, {})
    assert result.output == "recovered"
    record = result.records["c1.0"]
    assert record.status == "failed"
    assert record.error is not None and record.error["type"] == "runtime"
    assert "sub-agent 'stuck' ended without an output" in record.error["message"]
    assert "1 requests" in record.error["message"]  # why: the iteration limit
    assert result.errors[0]["data"]["error"] == record.error


def test_cancelling_the_agent_call_cancels_its_child() -> None:
    cancelled: list[str] = []

    @tl.tool
    async def slow() -> str:
        try:
            await trio.sleep(100)
        except trio.Cancelled:
            cancelled.append("slow")
            raise
        return "late"

    child = tl.Agent(
        tl.ScriptedModel([solution({"_tool": "slow", "_outputPath": "†state.x"})]),
        tools=[slow],
        name="child",
    )
    parent = tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "child", "task": "x", "_outputPath": "†state.c"}),
                solution(output="ok"),
            ]
        ),
        tools=[child.as_tool(timeout=5)],
    )
    result = run_on_mock_clock(parent, {})
    assert result.output == "ok"
    assert cancelled == ["slow"]
    record = result.records["c1.0"]
    assert record.status == "failed" and record.error is not None
    assert "TimeoutError" in record.error["message"]


# -- ids -------------------------------------------------------------------------------------


def test_a_model_chosen_id_with_a_slash_is_a_structural_error() -> None:
    @tl.tool
    def add(a: int, b: int) -> int:
        return a + b

    result = tl.run_calls(
        [
            {"_tool": "add", "a": 1, "b": 2, "_id": "c1.2/c1.0", "_outputPath": "†state.x"},
            {"_tool": "add", "a": 1, "b": 2, "_id": "fine", "_outputPath": "†state.y"},
        ],
        tools=[add],
    )
    assert result.state == {"y": 3}
    [bad] = [r for r in result.records.values() if r.status == "invalid"]
    assert "/" not in bad.id
    assert "'/'" in result.errors[0]["data"]["error"]["message"]


def test_events_carry_the_path_and_the_agent() -> None:
    events: list[tl.RunEvent] = []
    parent = tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "researcher", "task": "trio", "_outputPath": "†state.a"}),
                solution(output="†state.a"),
            ]
        ),
        tools=[researcher()],
        name="writer",
    )
    run_on_mock_clock(parent, {}, on_event=events.append)
    child = [e for e in events if e.call_id == "c1.0/c1.0"]
    assert {e.kind for e in child} >= {"call.received", "call.started", "call.finished"}
    assert all(e.path == ("c1.0",) and e.agent == "researcher" for e in child)
    root = [e for e in events if e.call_id == "c1.0"]
    assert root and all(e.path == () for e in root)


# -- approval --------------------------------------------------------------------------------


@tl.tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish a text."""
    return f"published {text}"


def publisher(**options: Any) -> tl.Agent:
    return tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "publish", "text": "†input.task", "_outputPath": "†state.p"}),
                solution(output="†state.p"),
            ]
        ),
        tools=[publish],
        name="publisher",
        **options,
    )


def test_a_child_approval_reaches_the_root_hook_while_an_unrelated_call_finishes() -> None:
    unrelated_done = trio.Event()
    asked: list[tl.PendingCall] = []

    @tl.tool
    async def unrelated() -> str:
        await trio.sleep(1)
        unrelated_done.set()
        return "fine"

    async def hook(call: tl.PendingCall) -> tl.Decision:
        asked.append(call)
        # A person thinks until the unrelated parent call has finished: it must not wait
        # for this answer (a barrier, not a time).
        await unrelated_done.wait()
        return tl.Approve()

    parent = tl.Agent(
        tl.ScriptedModel(
            [
                solution(
                    {"_tool": "publisher", "task": "post", "_outputPath": "†state.p"},
                    {"_tool": "unrelated", "_outputPath": "†state.u"},
                ),
                solution(output={"p": "†state.p", "u": "†state.u"}),
            ]
        ),
        tools=[publisher(), unrelated],
        approve=hook,
    )
    result = run_on_mock_clock(parent, {}, run_id="tree-1")
    assert result.output == {"p": "published post", "u": "fine"}
    [call] = asked
    assert call.id == "c1.0/c1.0" and call.path == ("c1.0",) and call.agent == "publisher"
    assert call.tool == "publish" and call.params == {"text": "post"}
    assert call.run_id == "tree-1"


def test_a_tool_needing_approval_in_a_child_needs_the_root_hook_when_the_run_starts() -> None:
    child = publisher()  # no hook of its own: fine for a sub-agent
    model = tl.ScriptedModel([solution(output="x")])
    parent = tl.Agent(model, tools=[child])
    with pytest.raises(tl.ConfigurationError, match="'publish' of sub-agent 'publisher'"):
        parent.run({})
    assert model.requests == []


def test_a_deferred_child_call_pauses_the_tree_and_is_pending_under_its_path() -> None:
    parent = tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "publisher", "task": "post", "_outputPath": "†state.p"}),
                solution(output="†state.p"),
            ]
        ),
        tools=[publisher()],
        approve=lambda call: tl.Defer(),
    )
    result = run_on_mock_clock(parent, {})
    assert result.status == "paused"
    [pending] = result.pending
    assert pending.id == "c1.0/c1.0" and pending.path == ("c1.0",)
    assert pending.agent == "publisher"


# -- depth -----------------------------------------------------------------------------------


def test_a_call_that_would_start_a_child_deeper_than_max_depth_is_invalid() -> None:
    leaf = researcher(name="leaf")
    middle = tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "leaf", "task": "x", "_outputPath": "†state.l"}),
                solution(output="middle done"),
            ]
        ),
        tools=[leaf],
        name="middle",
    )
    root = tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "middle", "task": "x", "_outputPath": "†state.m"}),
                solution(output="†state.m"),
            ]
        ),
        tools=[middle],
        max_depth=1,
    )
    result = run_on_mock_clock(root, {})
    assert result.output == "middle done"
    record = result.records["c1.0/c1.0"]
    assert record.status == "invalid"
    assert record.error is not None and record.error["type"] == "structural"
    assert "max_depth of 1" in record.error["message"]
    assert "c1.0/c1.0/c1.0" not in result.records

    deeper = tl.Agent(root.model, tools=[middle], max_depth=2)
    deeper.model = tl.ScriptedModel(
        [
            solution({"_tool": "middle", "task": "x", "_outputPath": "†state.m"}),
            solution(output="†state.m"),
        ]
    )
    result = run_on_mock_clock(deeper, {})
    assert result.records["c1.0/c1.0"].status == "done"
    assert result.records["c1.0/c1.0/c1.0"].status == "done"


def test_a_sub_agent_with_mcp_servers_is_refused_on_temporal() -> None:
    from tickloop import temporal as tlt
    from tickloop._core._tools import ToolSource

    class Elsewhere(ToolSource):
        label = "a server"

    child = tl.Agent(tl.ScriptedModel([]), tools=[Elsewhere()], name="child")
    writer = tl.Agent(tl.ScriptedModel([]), tools=[child], name="writer")
    with pytest.raises(tl.ConfigurationError, match="sub-agent 'child' has MCP servers"):
        tlt.worker(None, [writer], task_queue="q")  # type: ignore[arg-type]


def test_a_model_is_told_the_path_asking_and_the_usage_covers_the_tree() -> None:
    paths: list[tuple[str, ...]] = []

    class Recording:
        def __init__(self, responses: list[dict[str, Any]]) -> None:
            self.responses = responses

        async def stream_solution(self, request: Any) -> Any:
            paths.append(request.path)
            yield tl.TextDelta(json.dumps(self.responses[request.iteration - 1]))
            yield tl.Usage(input_tokens=100, output_tokens=10)

    child = tl.Agent(Recording([solution(output="child done")]), name="child", tools=[search])
    parent = tl.Agent(
        Recording(
            [
                solution({"_tool": "child", "task": "x", "_outputPath": "†state.c"}),
                solution(output="†state.c"),
            ]
        ),
        tools=[child],
    )
    result = run_on_mock_clock(parent, {})
    assert result.output == "child done"
    assert paths == [(), ("c1.0",), ()]
    usage = result.usage  # the whole tree's: the root's two requests and the child's one
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (3, 300, 30)


def test_a_sub_agent_may_use_native_tool_calling_under_a_solution_parent() -> None:
    @tl.tool
    def add(a: int, b: int) -> int:
        return a + b

    child = tl.Agent(
        tl.ScriptedModel(
            [
                {"tool_calls": [{"id": "t1", "name": "add", "arguments": '{"a": 2, "b": 3}'}]},
                "The sum is 5.",
            ]
        ),
        tools=[add],
        protocol="tools",
        name="adder",
    )
    parent = tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "adder", "task": "add 2 and 3", "_outputPath": "†state.s"}),
                solution(output="†state.s"),
            ]
        ),
        tools=[child],
    )
    result = run_on_mock_clock(parent, {})
    assert result.output == "The sum is 5."
    assert result.records["c1.0/c1.0"].output == 5


def test_a_call_context_in_a_child_names_the_call_by_its_full_path() -> None:
    """Issue 44 item 8: `CallContext.id` is the full path at any depth, so `(run_id, id)`
    is an idempotency key unique in the tree; `.path` names the agent calls above."""
    seen: list[tuple[str, tuple[str, ...], str | None]] = []

    @tl.tool
    def charge(cents: int, ctx: tl.CallContext) -> str:
        seen.append((ctx.id, ctx.path, ctx.run_id))
        return f"charged {cents}"

    payer = tl.Agent(
        tl.ScriptedModel(
            [
                solution({"_tool": "charge", "cents": 5, "_outputPath": "†state.paid"}),
                solution(output="†state.paid"),
            ]
        ),
        tools=[charge],
        name="payer",
    )
    root = tl.Agent(
        tl.ScriptedModel(
            [
                solution(
                    {"_tool": "charge", "cents": 1, "_outputPath": "†state.own"},
                    {"_tool": "payer", "task": "pay", "_outputPath": "†state.child"},
                ),
                solution(output="†state.child"),
            ]
        ),
        tools=[charge, payer],
    )
    result = run_on_mock_clock(root)
    assert result.output == "charged 5"
    assert sorted((call_id, path) for call_id, path, _ in seen) == [
        ("c1.0", ()),
        ("c1.1/c1.0", ("c1.1",)),
    ]
    assert {run_id for _, _, run_id in seen} == {result.run_id}
    keys = {(run_id, call_id) for call_id, _, run_id in seen}
    assert len(keys) == 2  # idempotency keys of the tree never collide

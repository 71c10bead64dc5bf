"""AG-UI (docs/web.md): the AG-UI project's own client (`@ag-ui/client`, from npm) reads a
run served by `tickloop.agui` end to end; the state it rebuilds from the deltas is the
run's; calls start while the model still streams; no token, no answer."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import tickloop as tl
from conftest import npm_installed
from tickloop import agui
from tickloop._engine._run import initial_log
from tickloop._human._guard import TokenGuard, serve_trio
from tickloop._models._base import SolutionRequest, TextDelta, Usage

CLIENT = Path(__file__).parent / "agui_client"


def _node_client() -> list[str]:
    node = shutil.which("node")
    assert node is not None, "Node.js is needed for the AG-UI client test (.ci/run)"
    npm_installed(CLIENT, "@ag-ui/client")
    return [node, str(CLIENT / "read_run.mjs")]


@tl.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tl.tool
def note(text: str) -> dict[str, Any]:
    """Keep a note."""
    return {"text": text, "words": text.split()}


PLAN = {
    "calls": [
        {"_tool": "add", "a": 1, "b": "†state.z", "_outputPath": "†state.sum"},
        {"_tool": "note", "text": "†input.task", "_outputPath": "†state.notes.first"},
        {"_tool": "add", "a": "†state.sum", "b": 2, "_outputPath": "†state.sum"},
        {"_tool": "nope"},
    ]
}
FINAL = {"calls": [], "output": {"total": "†state.sum"}}


def _agent() -> tl.Agent:
    return tl.Agent(tl.ScriptedModel([PLAN, FINAL]), tools=[add, note])


async def _read_with_the_client(app: Any, state: dict[str, Any], text: str) -> dict[str, Any]:
    guard = TokenGuard(app)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_trio, guard, "127.0.0.1", 0)
        command = [*_node_client(), f"http://127.0.0.1:{port}/", guard.token, json.dumps(state)]
        done = await trio.run_process([*command, text], capture_stdout=True, check=False)
        nursery.cancel_scope.cancel()
    seen: dict[str, Any] = json.loads(done.stdout)
    assert done.returncode == 0, seen.get("error")
    return seen


def test_the_agui_client_reads_a_run_and_holds_the_runs_state() -> None:
    seen = trio.run(_read_with_the_client, agui.app(_agent()), {"z": 10}, "plan it")

    expected = _agent().run(messages=initial_log({"task": "plan it"}, {"z": 10}).messages)
    assert (
        seen["state"]
        == expected.state
        == {
            "z": 10,
            "sum": 13,
            "notes": {"first": {"text": "plan it", "words": ["plan", "it"]}},
        }
    )
    kinds = [event["type"] for event in seen["events"]]
    assert kinds[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"]
    assert kinds[-1] == "RUN_FINISHED" and seen["result"] == {"total": 13}
    assert kinds.count("STATE_DELTA") == 3  # one per write that changed the state
    # Every call: START, then one ARGS with what ran, END, RESULT; the unknown tool too.
    by_call: dict[str, list[dict[str, Any]]] = {}
    for event in seen["events"]:
        if "toolCallId" in event:
            by_call.setdefault(event["toolCallId"], []).append(event)
    assert sorted(by_call) == ["c1.0", "c1.1", "c1.2", "c1.3"]
    for events in by_call.values():
        assert [event["type"] for event in events] == [
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
        ]
    assert json.loads(by_call["c1.2"][1]["delta"]) == {"a": 11, "b": 2}
    assert json.loads(by_call["c1.2"][3]["content"]) == 13
    invalid = json.loads(by_call["c1.3"][3]["content"])
    assert invalid["status"] == "invalid" and "nope" in invalid["error"]["message"]
    # The output as an assistant message, which the client keeps.
    said = [m.get("content") for m in seen["messages"] if m["role"] == "assistant"]
    assert [text for text in said if text] == ['{"total": 13}']


class _GatedModel:
    """Streams the plan, but holds the text after the first call until that call has
    finished: the run can only go on if calls start while the model still streams."""

    def __init__(self, ran: trio.Event) -> None:
        self.ran = ran
        self.requests = 0

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        self.requests += 1
        if self.requests > 1:
            yield TextDelta(json.dumps({"calls": [], "output": "†state.second"}))
            return
        first = json.dumps({"_tool": "mark", "_outputPath": "†state.first"})
        second = json.dumps({"_tool": "mark", "_outputPath": "†state.second"})
        yield TextDelta('{"calls": [' + first)
        with trio.fail_after(10):
            await self.ran.wait()  # the first call ran: the stream is still open
        yield TextDelta(", " + second + "]}")


def test_tool_call_start_arrives_while_the_model_still_streams() -> None:
    ran = trio.Event()

    @tl.tool
    def mark() -> str:
        return "ok"

    def on_event(event: tl.RunEvent) -> None:
        if isinstance(event, tl.CallFinished) and event.call_id == "c1.0":
            ran.set()

    agent = tl.Agent(_GatedModel(ran), tools=[mark], on_event=on_event)
    seen = trio.run(_read_with_the_client, agui.app(agent), {}, "go")
    order = [(e["type"], e.get("toolCallId")) for e in seen["events"] if "toolCallId" in e]
    # The first call started, ran and answered before the model sent the second call.
    assert order.index(("TOOL_CALL_RESULT", "c1.0")) < order.index(("TOOL_CALL_START", "c1.1"))
    assert seen["result"] == "ok"


def test_a_run_that_fails_ends_with_run_error() -> None:
    agent = tl.Agent(tl.ScriptedModel([PLAN] * 3), tools=[add, note], max_iterations=2)
    body = {"threadId": "t", "runId": "r", "messages": [], "forwardedProps": {"input": {}}}

    async def post() -> list[dict[str, Any]]:
        transport = httpx.ASGITransport(app=agui.app(agent))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            answer = await client.post("/", json=body)
        return [json.loads(line[6:]) for line in answer.text.splitlines() if line]

    import asyncio

    events = asyncio.run(post())  # the app also runs on asyncio servers
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_ERROR" and "MaxIterationsError" in events[-1]["message"]


def test_the_input_is_forwarded_props_else_the_last_user_message() -> None:
    from ag_ui.core import RunAgentInput

    def given(**fields: Any) -> RunAgentInput:
        return RunAgentInput.model_validate({"threadId": "t", "runId": "r", **fields})

    user = {"id": "1", "role": "user", "content": "first"}
    later = {"id": "2", "role": "user", "content": "second"}
    assert agui.run_input(given(messages=[user, later])) == {"task": "second"}
    props = {"input": {"q": 1}}
    assert agui.run_input(given(messages=[user], forwardedProps=props)) == {"q": 1}
    assert agui.run_input(given(messages=[])) == {}


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": "Bearer TOKEN", "Origin": "http://evil.example"}, 403),
    ],
)
def test_the_served_app_refuses_a_request_without_the_token(
    headers: dict[str, str], status: int
) -> None:
    ran: list[str] = []
    agent = tl.Agent(tl.ScriptedModel([FINAL]), tools=[add], on_event=lambda e: ran.append(e.kind))

    async def main() -> httpx.Response:
        guard = TokenGuard(agui.app(agent))
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_trio, guard, "127.0.0.1", 0)
            sent = {k: v.replace("TOKEN", guard.token) for k, v in headers.items()}
            body = {"threadId": "t", "runId": "r", "messages": []}
            async with httpx.AsyncClient() as client:
                answer = await client.post(f"http://127.0.0.1:{port}/", json=body, headers=sent)
            nursery.cancel_scope.cancel()
        return answer

    answer = trio.run(main)
    assert answer.status_code == status
    assert "RUN_STARTED" not in answer.text and ran == []


def test_a_call_waiting_for_approval_shows_as_custom_events_and_the_run_waits() -> None:
    asked: list[str] = []

    async def approve(pending: tl.PendingCall) -> tl.Decision:
        asked.append(pending.id)
        await trio.sleep(0)
        return tl.Deny("not today") if pending.params["b"] == 2 else tl.Approve()

    careful = tl.tool(add.handler, name="add", requires_approval=True)  # type: ignore[arg-type]
    agent = tl.Agent(tl.ScriptedModel([PLAN, FINAL]), tools=[careful, note], approve=approve)
    body = {"threadId": "t", "runId": "r", "messages": [], "state": {"z": 10}}

    async def post() -> list[dict[str, Any]]:
        transport = httpx.ASGITransport(app=agui.app(agent))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            answer = await client.post("/", json=body)
        return [json.loads(line[6:]) for line in answer.text.splitlines() if line]

    import asyncio

    events = asyncio.run(post())
    custom = [(e["name"], e["value"]["callId"]) for e in events if e["type"] == "CUSTOM"]
    assert custom == [
        (agui.APPROVAL_REQUESTED, "c1.0"),
        (agui.APPROVAL_DECIDED, "c1.0"),
        (agui.APPROVAL_REQUESTED, "c1.2"),
        (agui.APPROVAL_DECIDED, "c1.2"),
    ]
    requested = next(e for e in events if e["type"] == "CUSTOM")
    assert requested["value"] == {"callId": "c1.0", "tool": "add", "params": {"a": 1, "b": 10}}
    # The denied call never ran: it still ends, with its error as the result.
    denied = [e for e in events if e.get("toolCallId") == "c1.2"]
    assert [e["type"] for e in denied] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]
    assert json.loads(denied[1]["delta"]) == {"a": 11, "b": 2}
    assert json.loads(denied[3]["content"])["status"] == "denied"
    assert events.index(denied[3]) < len(events) - 1 and events[-1]["type"] in (
        "RUN_FINISHED",
        "RUN_ERROR",
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab/~", max_size=2),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text("ab/~", max_size=2), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(json_values, json_values)
def test_a_json_patch_turns_the_one_value_into_the_other(before: Any, after: Any) -> None:
    import jsonpatch  # an RFC 6902 implementation that is not ours

    patched = jsonpatch.apply_patch({"v": before}, _under_v(agui.json_patch(before, after)))
    assert patched == {"v": after}


def _under_v(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**op, "path": "/v" + op["path"]} for op in ops]


def test_a_paused_run_ends_its_calls_and_finishes_with_an_interrupt_per_deferred_call(
    tmp_path: Path,
) -> None:
    careful = tl.tool(add.handler, name="add", requires_approval=True)  # type: ignore[arg-type]
    agent = tl.Agent(
        tl.ScriptedModel([PLAN, FINAL]),
        tools=[careful, note],
        approve=lambda pending: tl.Defer(),
        store=tmp_path / "runs.db",
    )
    seen = trio.run(_read_with_the_client, agui.app(agent), {"z": 1}, "later")

    finished = seen["events"][-1]
    assert finished["type"] == "RUN_FINISHED"
    assert finished["outcome"] == {
        "type": "interrupt",
        "interrupts": [{"id": "c1.0", "reason": "tickloop.approval", "toolCallId": "c1.0"}],
    }
    # The deferred call and the one waiting on it were ended (the client checks it).
    ended = [e["toolCallId"] for e in seen["events"] if e["type"] == "TOOL_CALL_END"]
    assert sorted(ended) == ["c1.0", "c1.1", "c1.2", "c1.3"]
    assert tl.SQLiteStore(tmp_path / "runs.db").run("run-1").status == "paused"


def test_a_sub_agents_events_are_wrapped_in_subagent_events_the_client_accepts() -> None:
    """A real tree (PROTOCOL §11): the child's calls come under their paths, between
    SUBAGENT_STARTED and SUBAGENT_FINISHED, and the AG-UI client reads it all."""
    researcher = tl.Agent(
        tl.ScriptedModel(
            [
                {"calls": [{"_tool": "note", "text": "†input.task", "_outputPath": "†state.n"}]},
                {"calls": [], "output": "†state.n.words"},
            ]
        ),
        tools=[note],
        name="researcher",
        description="Research a topic.",
    )
    writer = tl.Agent(
        tl.ScriptedModel(
            [
                {
                    "calls": [
                        {
                            "_tool": "researcher",
                            "task": "trio nurseries",
                            "_outputPath": "†state.found",
                        }
                    ]
                },
                {"calls": [], "output": {"found": "†state.found"}},
            ]
        ),
        tools=[researcher],
    )
    seen = trio.run(_read_with_the_client, agui.app(writer), {}, "write")
    assert seen["result"] == {"found": ["trio", "nurseries"]}
    assert seen["state"] == {"found": ["trio", "nurseries"]}  # the child's state stays its own
    shown = [
        (event["type"], event.get("toolCallId") or event.get("subagentRunId"))
        for event in seen["events"]
    ]
    assert shown.index(("SUBAGENT_STARTED", "c1.0")) < shown.index(("TOOL_CALL_START", "c1.0/c1.0"))
    assert shown.index(("TOOL_CALL_RESULT", "c1.0/c1.0")) < shown.index(
        ("SUBAGENT_FINISHED", "c1.0")
    )
    assert shown.index(("SUBAGENT_FINISHED", "c1.0")) < shown.index(("TOOL_CALL_RESULT", "c1.0"))


def test_a_client_that_leaves_cancels_the_run() -> None:
    stopped = trio.Event()

    @tl.tool
    async def wait_forever() -> str:
        """Wait."""
        try:
            await trio.sleep_forever()
        finally:
            stopped.set()
        return "never"  # pragma: no cover

    plan = {"calls": [{"_tool": "wait_forever", "_outputPath": "†state.x"}]}
    agent = tl.Agent(tl.ScriptedModel([plan, FINAL]), tools=[wait_forever])
    body = {"threadId": "t", "runId": "r", "messages": []}

    async def main() -> None:
        guard = TokenGuard(agui.app(agent))
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_trio, guard, "127.0.0.1", 0)
            headers = {"Authorization": f"Bearer {guard.token}"}
            async with httpx.AsyncClient(headers=headers) as client:
                url = f"http://127.0.0.1:{port}/"
                async with client.stream("POST", url, json=body) as answer:
                    async for line in answer.aiter_lines():
                        if "TOOL_CALL_END" in line:  # the call runs: leave
                            break
            with trio.fail_after(10):
                await stopped.wait()
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_code_plans_calls_show_with_their_lines() -> None:
    """PROTOCOL §14: a program's calls are tool calls with their program line (a custom
    event after each start), their results, and the variables as the state."""
    program = "```python\nx = add(a=1, b=2)\ny = add(a=x, b=10)\nfinal_answer(y)\n```\n"
    agent = tl.Agent(tl.ScriptedModel([program]), tools=[add], protocol="code")
    seen = trio.run(_read_with_the_client, agui.app(agent), {}, "add them")
    assert seen["result"] == 13
    assert seen["state"] == {"x": 3, "y": 13}
    lines = {
        event["value"]["callId"]: event["value"]["line"]
        for event in seen["events"]
        if event["type"] == "CUSTOM" and event["name"] == agui.CODE_CALL
    }
    assert lines == {"c1.0": 1, "c1.1": 2}
    results = {
        event["toolCallId"]: json.loads(event["content"])
        for event in seen["events"]
        if event["type"] == "TOOL_CALL_RESULT"
    }
    assert results == {"c1.0": 3, "c1.1": 13}


def test_guardrail_verdicts_show_as_custom_events() -> None:
    """PROTOCOL §15: every verdict is a `CUSTOM tickloop.guardrail` event."""

    def small_only(call: tl.PendingCall, ctx: tl.GuardrailContext) -> Any:
        return tl.Deny("too big") if call.params["a"] > 10 else tl.Pass()

    plan = [
        {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.x"},
        {"_tool": "add", "a": 50, "b": 2, "_outputPath": "†state.y"},
    ]
    model = tl.ScriptedModel([{"calls": plan}, {"calls": [], "output": "†state.x"}])
    agent = tl.Agent(model, tools=[add], guardrails=[tl.ToolGuardrail(small_only)])
    seen = trio.run(_read_with_the_client, agui.app(agent), {}, "add them")
    verdicts = sorted(
        (event["value"]["callId"], event["value"]["verdict"], event["value"]["reason"])
        for event in seen["events"]
        if event["type"] == "CUSTOM" and event["name"] == agui.GUARDRAIL
    )
    assert verdicts == [("c1.0", "pass", None), ("c1.1", "deny", "too big")]


def test_a_paused_sub_agent_is_suspended_not_finished(tmp_path: Path) -> None:
    """Issue 44: a child that paused on a deferred call got a plain SUBAGENT_FINISHED (a
    success); it ends AG-UI's way for a paused sub-agent, the `suspended` outcome naming
    its own interrupts, and the client accepts it."""
    careful = tl.tool(add.handler, name="add", requires_approval=True)  # type: ignore[arg-type]
    child = tl.Agent(
        tl.ScriptedModel(
            [{"calls": [{"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.s"}]}, FINAL]
        ),
        tools=[careful],
        name="adder",
    )
    plan = {"calls": [{"_tool": "adder", "task": "add", "_outputPath": "†state.found"}]}
    writer = tl.Agent(
        tl.ScriptedModel([plan, {"calls": [], "output": "†state.found"}]),
        tools=[child],
        approve=lambda pending: tl.Defer(),
        store=tmp_path / "runs.db",
    )
    seen = trio.run(_read_with_the_client, agui.app(writer), {}, "go")
    ended = [e for e in seen["events"] if e["type"].startswith("SUBAGENT_")]
    assert [e["type"] for e in ended] == ["SUBAGENT_STARTED", "SUBAGENT_FINISHED"]
    assert ended[1]["outcome"] == {"type": "suspended", "interruptIds": ["c1.0/c1.0"]}
    finished = seen["events"][-1]
    assert finished["type"] == "RUN_FINISHED"
    assert [i["id"] for i in finished["outcome"]["interrupts"]] == ["c1.0/c1.0"]


async def _post(app: Any, raw: bytes) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.post("/", content=raw, headers={"content-type": "application/json"})


@pytest.mark.parametrize(
    "raw",
    [
        b'{"threadId": "t", "runId": "r\\ud800", "messages": []}',
        b'{"threadId": "t", "runId": "r", "messages": [{"id": "m", "role": "user", '
        b'"content": "a\\udc00"}]}',
        b'{"threadId": "t", "runId": "r", "messages": [], "state": {"x": "\\ud800"}}',
        b'{"threadId": "t", "runId": "r", "messages": [], "state": {"\\ud800": 1}}',
        b'{"threadId": "t", "runId": "r", "state": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"threadId": "t", "runId": "r", "state": {"x": ' + b"[" * 300 + b"]" * 300 + b"}}",
    ],
    ids=["runId", "text", "state value", "state key", "100,000 deep", "300 deep"],
)
def test_a_body_no_run_could_send_back_is_a_422_before_the_stream(raw: bytes) -> None:
    """Issue 44: a lone surrogate cut the stream or answered 500, as did a deep body."""
    ran: list[str] = []
    agent = tl.Agent(tl.ScriptedModel([FINAL]), on_event=lambda event: ran.append(event.kind))
    answer = trio.run(_post, agui.app(agent), raw)
    assert answer.status_code == 422
    assert "surrogate" in answer.json()["error"] or "deep" in answer.json()["error"]
    assert ran == []


def test_run_error_does_not_show_the_servers_host_and_process(tmp_path: Path) -> None:
    """Issue 44: a runId in use by another process answered `... (process host:pid)`."""
    import os
    import socket
    import sqlite3

    store = tmp_path / "runs.db"
    tl.Agent(tl.ScriptedModel([{"output": 1}]), store=store).run({}, run_id="taken")
    other = f"{socket.gethostname()}:{os.getppid()}"  # a live process, not this one
    with sqlite3.connect(store) as connection:
        connection.execute("UPDATE runs SET status = 'running', owner = ?", (other,))
    agent = tl.Agent(tl.ScriptedModel([FINAL]), store=store)
    raw = json.dumps({"threadId": "t", "runId": "taken", "messages": []}).encode()
    answer = trio.run(_post, agui.app(agent), raw)
    events = [json.loads(line[6:]) for line in answer.text.splitlines() if line]
    assert events[-1]["type"] == "RUN_ERROR"
    assert "'taken' is running now, in another process" in events[-1]["message"]
    assert socket.gethostname() not in answer.text and str(os.getppid()) not in answer.text

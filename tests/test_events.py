"""Typed run events: order, ids and times; the async iterator; redaction of secrets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

import tickloop as tl


@tl.tool
async def add(a: int, b: int) -> int:
    await trio.sleep(1)
    return a + b


@tl.tool(requires_approval=True)
async def pay(cents: int) -> str:
    return f"paid {cents}"


PLAN = [
    {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.x"},
    {"_tool": "pay", "cents": "†state.x", "_outputPath": "†state.p"},
    {"_tool": "nope"},
]


def _agent(**options: Any) -> tl.Agent:
    model = tl.ScriptedModel(
        [{"calls": PLAN, "output": None}, {"calls": [], "output": "ok"}], chunk_chars=10_000
    )
    return tl.Agent(model, tools=[add, pay], approve=lambda call: tl.Approve(), **options)


def _run(agent: tl.Agent, **options: Any) -> tuple[tl.RunResult, list[tl.RunEvent]]:
    events: list[tl.RunEvent] = []
    result = trio.run(
        lambda: agent.run_async({"q": 1}, on_event=events.append, **options),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    return result, events


def test_a_small_run_reports_every_transition_in_order() -> None:
    result, events = _run(_agent(), run_id="small")
    seen = [
        (
            event.kind,
            event.call_id,
            getattr(event, "status", None) or getattr(event, "decision", None),
        )
        for event in events
    ]
    assert seen == [
        ("run.started", None, None),
        ("request.started", None, None),
        ("call.received", "c1.0", None),
        ("call.ready", "c1.0", None),
        ("call.started", "c1.0", None),
        ("call.received", "c1.1", None),
        ("call.received", "c1.2", None),
        ("call.finished", "c1.2", "invalid"),
        ("request.finished", None, None),
        ("call.finished", "c1.0", "done"),
        ("call.ready", "c1.1", None),
        ("call.awaiting_approval", "c1.1", None),
        ("call.decided", "c1.1", "approve"),
        ("call.started", "c1.1", None),
        ("call.finished", "c1.1", "done"),
        ("tick.ended", None, None),
        ("request.started", None, None),
        ("request.finished", None, None),
        ("tick.ended", None, None),
        ("run.ended", None, "done"),
    ]
    assert {event.run_id for event in events} == {"small"} and result.run_id == "small"
    times = [event.time for event in events]
    assert times == sorted(times)
    by_kind = {(event.kind, event.call_id): event for event in events}
    finished = by_kind[("call.finished", "c1.0")]
    assert isinstance(finished, tl.CallFinished) and finished.duration == 1.0
    assert finished.time - by_kind[("call.started", "c1.0")].time == 1.0
    ready = by_kind[("call.ready", "c1.1")]
    assert isinstance(ready, tl.CallReady) and ready.params == {"cents": 3}
    first_tick = next(e for e in events if isinstance(e, tl.TickEnded))
    assert first_tick.iteration == 1 and first_tick.paused == []
    assert [error["data"]["call"] for error in first_tick.errors] == [
        {"_tool": "nope", "_id": "c1.2"}
    ]
    ended = events[-1]
    assert isinstance(ended, tl.RunEnded) and ended.iterations == 2
    assert json.dumps([event.to_dict() for event in events])  # events serialise as JSON


def test_events_can_be_iterated_while_the_run_goes_on() -> None:
    agent = _agent()
    kinds: list[str] = []

    async def main() -> tl.RunResult:
        async with agent.events({"q": 1}, run_id="iterated") as events:
            async for event in events:
                kinds.append(event.kind)
                if event.kind == "call.started":
                    # The run is still going: this event came before its end.
                    assert "run.ended" not in kinds
        assert events.result is not None
        return events.result

    result = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert result.output == "ok" and kinds[0] == "run.started" and kinds[-1] == "run.ended"
    assert kinds.count("call.finished") == 3


def test_a_failed_run_ends_with_a_failed_event() -> None:
    model = tl.ScriptedModel(["not json", "still not json"])
    events: list[tl.RunEvent] = []
    agent = tl.Agent(model, max_iterations=2)
    with pytest.raises(tl.MaxIterationsError):
        agent.run(on_event=events.append)
    ended = events[-1]
    assert isinstance(ended, tl.RunEnded) and ended.status == "failed"
    assert ended.error is not None and ended.error.startswith("MaxIterationsError")


def test_retries_are_reported() -> None:
    replies = [
        httpx.Response(503, json={"error": "busy"}),
        _sse_reply('{"calls": [], "output": 1}'),
    ]
    events: list[tl.RunEvent] = []
    agent = tl.Agent(_openai(replies), seed=1)
    result = trio.run(
        lambda: agent.run_async(on_event=events.append),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    assert result.output == 1
    [retry] = [event for event in events if isinstance(event, tl.RequestRetried)]
    assert (retry.iteration, retry.attempt) == (1, 1) and "503" in retry.error
    assert 2 <= retry.delay <= 3


# -- secrets --------------------------------------------------------------------------


KEY = "sk-live-DO-NOT-STORE-0123456789"


def _sse_reply(text: str) -> httpx.Response:
    chunk = {"choices": [{"index": 0, "delta": {"content": text}}]}
    body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


def _openai(replies: list[httpx.Response]) -> tl.OpenAIChat:
    def server(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == f"Bearer {KEY}"
        return replies.pop(0)

    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    return tl.OpenAIChat("gpt-test", base_url="http://llm.test/v1", api_key=KEY, client=client)


def _secret_run(tmp_path: Path, **options: Any) -> tuple[list[dict[str, Any]], Path, list[Any]]:
    received: list[Any] = []

    @tl.tool
    async def login(user: str, api_key: str, password: str, options: dict[str, Any]) -> str:
        received.append((api_key, password, options))
        return "welcome"

    call = {
        "_tool": "login",
        "user": "ada",
        "api_key": "ak-123",
        "password": "hunter2",
        "options": {"auth": {"Session_Token": "tok-456"}, "mode": "fast"},
        "_outputPath": "†state.session",
    }
    replies = [
        _sse_reply(json.dumps({"calls": [call], "output": None})),
        _sse_reply(json.dumps({"calls": [], "output": "in"})),
    ]
    events: list[tl.RunEvent] = []
    db = tmp_path / "runs.db"
    agent = tl.Agent(_openai(replies), tools=[login], store=db, **options)
    agent.run({"user": "ada"}, run_id="secret", on_event=events.append)
    return [event.to_dict() for event in events], db, received


def test_secret_parameters_are_redacted_in_events_but_not_for_the_tool(tmp_path: Path) -> None:
    events, db, received = _secret_run(tmp_path)
    assert received == [
        ("ak-123", "hunter2", {"auth": {"Session_Token": "tok-456"}, "mode": "fast"})
    ]
    text = json.dumps(events)
    for secret in ("ak-123", "hunter2", "tok-456", KEY):
        assert secret not in text
    [ready] = [event for event in events if event["kind"] == "call.ready"]
    assert ready["params"] == {
        "user": "ada",
        "api_key": "[redacted]",
        "password": "[redacted]",
        "options": {"auth": {"Session_Token": "[redacted]"}, "mode": "fast"},
    }
    # What the command line and the timeline show is redacted as well.
    [call] = tl.SQLiteStore(db).calls("secret")
    assert call.params["api_key"] == "[redacted]" and call.call["password"] == "[redacted]"
    page = tl.timeline_html(db, "secret")
    assert "hunter2" not in page and "ak-123" not in page and "tok-456" not in page


def test_the_model_api_key_never_reaches_the_store(tmp_path: Path) -> None:
    _secret_run(tmp_path)
    for path in tmp_path.iterdir():
        assert KEY.encode() not in path.read_bytes(), path.name


def test_redaction_patterns_are_configurable(tmp_path: Path) -> None:
    events, _, received = _secret_run(tmp_path, redact=["user", "*mode*"])
    [ready] = [event for event in events if event["kind"] == "call.ready"]
    assert ready["params"] == {
        "user": "[redacted]",
        "api_key": "ak-123",
        "password": "hunter2",
        "options": {"auth": {"Session_Token": "tok-456"}, "mode": "[redacted]"},
    }
    assert received[0][0] == "ak-123"


def test_a_resumed_run_names_the_tools_of_calls_it_received_before(tmp_path: Path) -> None:
    agent = _agent(store=tmp_path / "runs.db")
    agent.approve = lambda call: tl.Defer()
    paused = agent.run({"q": 1}, run_id="later")
    assert paused.status == "paused"
    [pending] = [r for r in paused.records.values() if r.status == "deferred"]
    events: list[tl.RunEvent] = []
    agent.resume("later", decisions={pending.id: tl.Deny("no")}, on_event=events.append)
    about_pay = [e for e in events if getattr(e, "call_id", None) == pending.id]
    assert [e.kind for e in about_pay] == ["call.decided", "call.finished"]
    assert all(e.tool == "pay" for e in about_pay)


def test_writes_become_events_only_for_a_write_listener() -> None:
    from tickloop._observe._events import DataWritten, WriteListener

    @tl.tool
    def one() -> int:
        return 1

    plan = {
        "calls": [
            {"_tool": "one", "_outputPath": "†state.a && †state.b"},
            {"_tool": "one"},  # writes nowhere
        ]
    }
    model = tl.ScriptedModel([plan, {"calls": [], "output": "†state.a"}] * 2)
    agent = tl.Agent(model, tools=[one])
    plain: list[tl.RunEvent] = []
    agent.run(on_event=plain.append)

    class Mirror(WriteListener):
        def __init__(self) -> None:
            self.events: list[tl.RunEvent] = []

        def __call__(self, event: tl.RunEvent) -> None:
            self.events.append(event)

    mirror = Mirror()
    agent.run(on_event=mirror)
    assert not any(event.kind == "data.written" for event in plain)
    written = [event for event in mirror.events if isinstance(event, DataWritten)]
    assert [(e.call_id, e.data_kind, e.output_path, e.data) for e in written] == [
        ("c1.0", "state", "†state.a", {"a": 1}),
        ("c1.0", "state", "†state.b", {"b": 1}),
    ]

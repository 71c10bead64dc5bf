"""An MCP server's questions (elicitation) and model requests (sampling), docs/mcp.md:
against a server written with the `mcp` package (tests/mcp_asking_server.py), through
the public API only."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import tickloop as tl

HERE = Path(__file__).parent
SERVER = HERE / "mcp_asking_server.py"
GOOD = {"city": "Oslo", "copies": 2}


def asking(**options: Any) -> tl.MCPServer:
    return tl.MCPServer.stdio(sys.executable, [str(SERVER)], **options)


def ship(item: str = "book") -> list[dict[str, Any]]:
    return [{"_tool": "ship", "item": item, "_outputPath": "†state.shipped"}]


def shipped(result: Any) -> str:
    return str(result.state["shipped"]["result"])


def test_an_accepted_answer_reaches_the_server_and_the_question_names_the_call() -> None:
    questions: list[tl.Question] = []

    def answer(question: tl.Question) -> tl.Accept:
        questions.append(question)
        return tl.Accept(GOOD)

    result = tl.run_calls(ship(), tools=[asking()], questions=answer)
    assert shipped(result) == "shipping 2 x book to Oslo"
    [question] = questions
    assert question.message == "Where should book go?"
    assert question.call_id == "c1.0"
    assert "mcp_asking_server.py" in question.server
    assert question.schema is not None
    assert question.schema["required"] == ["city", "copies"]
    assert question.schema["properties"]["copies"]["maximum"] == 10


def test_an_async_hook_answers_through_execute() -> None:
    async def answer(question: tl.Question) -> tl.Accept:
        await trio.sleep(0)
        return tl.Accept({"city": "Rome", "copies": 1})

    async def main() -> Any:
        return await tl.execute(ship("lamp"), tools=[asking()], questions=answer)

    assert shipped(trio.run(main)) == "shipping 1 x lamp to Rome"


@pytest.mark.parametrize(("verdict", "said"), [(tl.Decline(), "decline"), (tl.Cancel(), "cancel")])
def test_decline_and_cancel_reach_the_server(verdict: Any, said: str) -> None:
    result = tl.run_calls(ship(), tools=[asking()], questions=lambda question: verdict)
    assert shipped(result) == f"not shipped: {said}"


def test_without_a_hook_a_question_is_declined() -> None:
    result = tl.run_calls(ship(), tools=[asking()])
    assert shipped(result) == "not shipped: decline"


def test_an_answer_that_does_not_match_the_schema_is_asked_again_with_the_problem(
    caplog: pytest.LogCaptureFixture,
) -> None:
    problems: list[str | None] = []

    def answer(question: tl.Question) -> tl.Accept:
        problems.append(question.problem)
        if len(problems) == 1:
            return tl.Accept({"city": "Oslo", "copies": 99})  # above the maximum
        return tl.Accept(GOOD)

    result = tl.run_calls(ship(), tools=[asking()], questions=answer)
    assert shipped(result) == "shipping 2 x book to Oslo"
    assert problems[0] is None
    assert problems[1] is not None and "copies" in problems[1] and "10" in problems[1]


def test_a_hook_that_never_answers_validly_declines(caplog: pytest.LogCaptureFixture) -> None:
    asked: list[tl.Question] = []

    def answer(question: tl.Question) -> tl.Accept:
        asked.append(question)
        return tl.Accept({"city": 5})

    with caplog.at_level(logging.WARNING, logger="tickloop"):
        result = tl.run_calls(ship(), tools=[asking()], questions=answer)
    assert shipped(result) == "not shipped: decline"
    assert len(asked) == 3
    assert "does not match" in caplog.text


def test_a_hook_that_raises_declines_and_the_call_goes_on() -> None:
    def answer(question: tl.Question) -> Any:
        raise RuntimeError("boom")

    result = tl.run_calls(ship(), tools=[asking()], questions=answer)
    assert shipped(result) == "not shipped: decline"


def test_questions_must_be_callable() -> None:
    with pytest.raises(tl.ConfigurationError, match="questions must be a function"):
        tl.run_calls(ship(), tools=[asking()], questions="yes")  # type: ignore[arg-type]
    with pytest.raises(tl.ConfigurationError, match="questions must be a function"):
        tl.Agent(tl.ScriptedModel([]), questions=42)  # type: ignore[arg-type]


# -- sampling ---------------------------------------------------------------------------


def name_it() -> list[dict[str, Any]]:
    return [{"_tool": "name_it", "thing": "cat", "_outputPath": "†state.named"}]


def test_run_calls_answers_sampling_with_the_servers_function() -> None:
    seen: list[tl.Sampling] = []

    def sample(sampling: tl.Sampling) -> str:
        seen.append(sampling)
        return "Felix"

    result = tl.run_calls(name_it(), tools=[asking(sampling=sample)])
    assert result.state["named"]["result"] == "named: Felix"
    [sampling] = seen
    assert sampling.messages == [{"role": "user", "content": "Name a cat."}]
    assert sampling.system == "You name things."
    assert sampling.max_tokens == 50
    assert sampling.call_id == "c1.0"


def test_run_calls_without_a_model_refuses_sampling_clearly() -> None:
    result = tl.run_calls(name_it(), tools=[asking()])
    assert "sampling refused" in result.state["named"]["result"]
    assert "sampling=fn" in result.state["named"]["result"]


def test_approve_sampling_asks_the_hook_first() -> None:
    asked: list[tl.Question] = []

    def answer(question: tl.Question) -> Any:
        asked.append(question)
        return tl.Decline()

    calls: list[tl.Sampling] = []
    server = asking(sampling=lambda s: calls.append(s) or "Tom", approve_sampling=True)
    result = tl.run_calls(name_it(), tools=[server], questions=answer)
    assert "sampling refused" in result.state["named"]["result"]
    assert calls == []
    [question] = asked
    assert question.sampling is not None
    assert question.sampling.messages[0]["content"] == "Name a cat."

    result = tl.run_calls(name_it(), tools=[server], questions=lambda q: tl.Accept())
    assert result.state["named"]["result"] == "named: Tom"


def _plan_model(tool: str, sampled: list[Any], name: str = "Felix") -> tl.FunctionModel:
    def answer(request: dict[str, Any]) -> Any:
        if request["schema"] is None:  # the server's request: plain text
            sampled.append(request)
            return name
        if request["iteration"] == 1:
            return {"calls": [{"_tool": tool, "thing": "cat", "_outputPath": "†state.r"}]}
        return {"output": "done"}

    return tl.FunctionModel(answer)


def test_an_agents_model_answers_sampling_and_it_is_counted_in_usage() -> None:
    sampled: list[Any] = []
    agent = tl.Agent(_plan_model("name_it", sampled), tools=[asking()])
    result = agent.run("Name a cat.")
    assert result.state["r"]["result"] == "named: Felix"
    [request] = sampled
    assert request["messages"] == [
        {"role": "system", "content": "You name things."},
        {"role": "user", "content": "Name a cat."},
    ]
    assert result.usage.requests == 3  # two of the run's own, one of the server's


def test_a_budget_without_room_refuses_sampling_and_the_model_is_not_asked() -> None:
    sampled: list[Any] = []
    agent = tl.Agent(
        _plan_model("name_it", sampled), tools=[asking()], budget=tl.Budget(requests=1)
    )
    with pytest.raises(tl.BudgetExceeded) as caught:
        agent.run("Name a cat.")
    assert sampled == []
    text = str(caught.value.messages)
    assert "sampling refused" in text and "budget has no room" in text
    assert caught.value.usage is not None and caught.value.usage.requests == 1


# -- Defer, pause, resume -----------------------------------------------------------------


def test_defer_pauses_and_a_resume_answers_from_the_store_without_asking_again(
    tmp_path: Path,
) -> None:
    store_path = tmp_path / "runs.db"
    sampled: list[Any] = []
    asked: list[tl.Question] = []

    def later(question: tl.Question) -> Any:
        asked.append(question)
        return tl.Defer()

    agent = tl.Agent(
        _plan_model("name_then_ship", sampled), tools=[asking()], questions=later, store=store_path
    )
    paused = agent.run("Ship a cat.", run_id="r1")
    assert paused.status == "paused"
    assert [call.id for call in paused.pending] == ["c1.0"]
    assert len(asked) == 1 and len(sampled) == 1
    assert paused.usage.requests == 2

    store = tl.SQLiteStore(store_path)
    question = store.question("r1", "c1.0")
    assert question is not None and question.message == "Where should Felix go?"
    assert [pending.id for pending in store.pending("r1")] == ["c1.0"]
    store.decide("r1", "c1.0", tl.Accept({"city": "Oslo", "copies": 3}))

    def not_again(question: tl.Question) -> Any:
        raise AssertionError(f"asked again: {question}")

    resumed_sampled: list[Any] = []
    resumer = tl.Agent(
        _plan_model("name_then_ship", resumed_sampled, name="Other"),
        tools=[asking()],
        questions=not_again,
        store=store_path,
    )
    result = resumer.resume("r1")
    assert result.status == "done"
    # The journal answered the model request and the question: neither asked again.
    assert result.state["r"]["result"] == "shipping 3 x Felix to Oslo"
    assert resumed_sampled == []
    assert result.usage.requests == 3  # the sampling request counted once


def test_a_deferred_question_without_a_store_pauses_the_run() -> None:
    sampled: list[Any] = []
    agent = tl.Agent(
        _plan_model("name_then_ship", sampled), tools=[asking()], questions=lambda q: tl.Defer()
    )
    result = agent.run("Ship a cat.")
    assert result.status == "paused"
    assert [call.id for call in result.pending] == ["c1.0"]


def test_the_console_asks_each_field_and_checks_the_answer() -> None:
    import io

    typed = io.StringIO("a\nOslo\n99\na\nOslo\n3\n")
    shown = io.StringIO()
    console = tl.ConsoleApproval(input=typed, output=shown)
    result = tl.run_calls(ship(), tools=[asking()], questions=console)
    assert shipped(result) == "shipping 3 x book to Oslo"
    text = shown.getvalue()
    assert "Where should book go?" in text
    assert "copies (integer): How many" in text
    assert "not accepted" in text and "copies" in text


def test_the_console_declines_and_an_ended_input_cancels() -> None:
    import io

    console = tl.ConsoleApproval(input=io.StringIO("d\n"), output=io.StringIO())
    assert shipped(tl.run_calls(ship(), tools=[asking()], questions=console)) == (
        "not shipped: decline"
    )
    console = tl.ConsoleApproval(input=io.StringIO(""), output=io.StringIO())
    assert shipped(tl.run_calls(ship(), tools=[asking()], questions=console)) == (
        "not shipped: cancel"
    )


def test_the_browser_page_shows_a_form_and_takes_the_answer() -> None:
    import io
    import threading
    import time

    import httpx

    with tl.BrowserApproval(output=io.StringIO()) as page:
        box: dict[str, Any] = {}
        thread = threading.Thread(
            target=lambda: box.update(
                result=tl.run_calls(ship(), tools=[asking()], questions=page)
            ),
            daemon=True,
        )
        thread.start()
        deadline = time.monotonic() + 20
        while not page.snapshot()[1]:
            assert time.monotonic() < deadline, "the question never reached the page"
            time.sleep(0.02)
        [view] = page.snapshot()[1]
        base, token = page.url.split("/?token=")
        shown = httpx.get(base + "/", params={"token": token}).text
        assert "Where should book go?" in shown
        assert 'type="number" step="1" min="1" max="10" name="answer.copies"' in shown
        form = {"token": token, "call": view.id, "slot": str(view.slot), "action": "accept"}
        refused = httpx.post(
            base + "/decide",
            data={**form, "answer.city": "Oslo", "answer.copies": "11"},
            headers={"accept": "application/json"},
        )
        assert refused.status_code == 409 and "copies" in refused.json()["error"]
        answered = httpx.post(
            base + "/decide",
            data={**form, "answer.city": "Oslo", "answer.copies": "4"},
            headers={"accept": "application/json"},
        )
        assert answered.status_code == 200, answered.text
        thread.join(20)
    assert shipped(box["result"]) == "shipping 4 x book to Oslo"


def test_agui_shows_the_question_and_its_verdict_as_custom_events() -> None:
    import json

    import httpx

    from tickloop import agui

    agent = tl.Agent(
        tl.FunctionModel(
            lambda request: (
                {"calls": [{"_tool": "ship", "item": "map", "_outputPath": "†state.r"}]}
                if request["iteration"] == 1
                else {"output": "done"}
            )
        ),
        tools=[asking()],
        questions=lambda question: tl.Accept({"city": "Oslo", "copies": 1}),
    )
    body = {"threadId": "t", "runId": "r", "messages": [], "forwardedProps": {"input": {}}}

    async def post() -> list[dict[str, Any]]:
        transport = httpx.ASGITransport(app=agui.app(agent))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            answer = await client.post("/", json=body, timeout=60)
        return [json.loads(line[6:]) for line in answer.text.splitlines() if line]

    events = trio.run(post)
    custom = [e for e in events if e["type"] == "CUSTOM" and e["name"].startswith("tickloop.q")]
    asked, answered = custom
    assert asked["name"] == "tickloop.question"
    assert asked["value"]["callId"] == "c1.0"
    assert asked["value"]["message"] == "Where should map go?"
    assert asked["value"]["schema"]["required"] == ["city", "copies"]
    assert answered["name"] == "tickloop.question_answered"
    assert answered["value"] == {
        "callId": "c1.0",
        "server": asked["value"]["server"],
        "verdict": "accept",
    }
    assert "Oslo" not in json.dumps(custom)  # the answer itself is never shown


def test_a_sub_agents_server_asks_the_roots_hook_and_its_model_samples(tmp_path: Path) -> None:
    """A child run without a hook of its own asks its root's; the child's own model
    answers its server's model request, counted in the tree's usage."""
    questions: list[tl.Question] = []
    child_sampled: list[Any] = []

    def child_model(request: dict[str, Any]) -> Any:
        if request["schema"] is None:
            child_sampled.append(request)
            return "Felix"
        if request["iteration"] == 1:
            return {
                "calls": [{"_tool": "name_then_ship", "thing": "cat", "_outputPath": "†state.r"}]
            }
        return {"output": "child done"}

    def root_model(request: dict[str, Any]) -> Any:
        if request["iteration"] == 1:
            return {
                "calls": [{"_tool": "shipper", "task": "ship a cat", "_outputPath": "†state.c"}]
            }
        return {"output": "root done"}

    child = tl.Agent(tl.FunctionModel(child_model), tools=[asking()], name="shipper")

    def answer(question: tl.Question) -> tl.Accept:
        questions.append(question)
        return tl.Accept({"city": "Lima", "copies": 5})

    root = tl.Agent(
        tl.FunctionModel(root_model), tools=[child], questions=answer, store=tmp_path / "r.db"
    )
    result = root.run("Go.", run_id="tree")
    assert result.output == "root done"
    [question] = questions
    assert question.call_id == "c1.0/c1.0"  # the child's call, by its full path
    assert question.message == "Where should Felix go?"
    assert len(child_sampled) == 1
    assert result.usage.requests == 5  # two of the root, two of the child, one sampled


def test_a_verdict_is_refused_for_a_call_that_waits_on_no_question(tmp_path: Path) -> None:
    @tl.tool(requires_approval=True)
    def pay(cents: int) -> str:
        return "paid"

    model = tl.ScriptedModel(
        [{"calls": [{"_tool": "pay", "cents": 5, "_outputPath": "†state.p"}]}, {"output": "ok"}]
    )
    store = tl.SQLiteStore(tmp_path / "runs.db")
    agent = tl.Agent(model, tools=[pay], approve=lambda call: tl.Defer(), store=store)
    assert agent.run("Pay.", run_id="p").status == "paused"
    assert store.question("p", "c1.0") is None
    with pytest.raises(tl.ResumeError, match="waits on no MCP server's question"):
        store.decide("p", "c1.0", tl.Accept({"x": 1}))
    store.decide("p", "c1.0", tl.Approve())  # a decision still answers it

"""Elicitation and sampling against the MCP project's reference server from npm
(`@modelcontextprotocol/server-everything`): its elicitation tool answered through a
`questions=` hook and through the inbox (a form built from its schema), its sampling
tool answered by the agent's `FunctionModel` and counted in the run's usage."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import tickloop as tl
from conftest import npm_installed
from test_mcp_restart import HERE, Everything

ELICIT = "trigger-elicitation-request"
SAMPLE = "trigger-sampling-request"


@pytest.fixture
def everything() -> Iterator[Everything]:
    npm_installed(HERE, "@modelcontextprotocol/server-everything")
    server = Everything()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _model(tool: str, params: dict[str, Any], sampled: list[Any] | None = None) -> Any:
    def answer(request: dict[str, Any]) -> Any:
        if request["schema"] is None:  # the server's request to the model
            assert sampled is not None
            sampled.append(request)
            return "A haiku about trio."
        if request["iteration"] == 1:
            return {"calls": [{"_tool": tool, **params, "_outputPath": "†state.r"}]}
        # The final output: what the model was shown of the call's result.
        shown = [str(m["content"]) for m in request["messages"] if "Raw result" in str(m)]
        return {"output": shown[-1] if shown else "done"}

    return tl.FunctionModel(answer)


def _text(result: Any) -> str:
    return str(result.state["r"])


def test_its_elicitation_tool_is_answered_through_a_questions_hook(
    everything: Everything,
) -> None:
    questions: list[tl.Question] = []

    def answer(question: tl.Question) -> tl.Accept:
        questions.append(question)
        return tl.Accept({"name": "Ada Lovelace", "check": True, "integer": 7})

    agent = tl.Agent(
        _model(ELICIT, {}),
        tools=[tl.MCPServer.http(everything.url, allowed=[ELICIT])],
        questions=answer,
    )
    result = agent.run("Ask me.")
    [question] = questions
    assert question.call_id == "c1.0"
    assert question.server == everything.url
    assert question.message == "Please provide inputs for the following fields:"
    assert question.schema is not None and question.schema["required"] == ["name"]
    text = _text(result)
    assert "Name: Ada Lovelace" in text
    assert "Agreed to terms: true" in text
    assert "Favorite Integer: 7" in text


def test_its_sampling_tool_is_answered_by_the_agents_model_and_counted(
    everything: Everything,
) -> None:
    sampled: list[Any] = []
    agent = tl.Agent(
        _model(SAMPLE, {"prompt": "write a haiku", "maxTokens": 40}, sampled),
        tools=[tl.MCPServer.http(everything.url, allowed=[SAMPLE])],
    )
    result = agent.run("Sample.")
    [request] = sampled
    assert request["messages"][0] == {"role": "system", "content": "You are a helpful test server."}
    assert "write a haiku" in request["messages"][1]["content"]
    assert "A haiku about trio." in _text(result)
    assert result.usage.requests == 3  # the run's two and the server's one
    assert result.usage.output_tokens > 0


def test_its_elicitation_tool_is_answered_in_the_inbox(
    everything: Everything, tmp_path: Path
) -> None:
    from tickloop._human._inbox import StoreInbox
    from tickloop._human._web import WebApp, serve

    store = tl.SQLiteStore(tmp_path / "runs.db")
    asked: list[tl.Question] = []

    def later(question: tl.Question) -> Any:
        asked.append(question)
        return tl.Defer()

    agent = tl.Agent(
        _model(ELICIT, {}),
        tools=[tl.MCPServer.http(everything.url, allowed=[ELICIT])],
        questions=later,
        store=store,
    )
    assert agent.run("Ask me.", run_id="r1").status == "paused"
    assert len(asked) == 1
    inbox = StoreInbox(store, agent, log=io.StringIO(), poll=0.05)
    app = WebApp(inbox)

    async def main() -> None:
        with trio.fail_after(60):  # a safety net only
            async with trio.open_nursery() as nursery:
                nursery.start_soon(inbox.run)
                port = await nursery.start(serve, app, "127.0.0.1", 0)
                base = f"http://127.0.0.1:{port}"
                async with httpx.AsyncClient(base_url=base) as client:
                    page = (await client.get("/", params={"token": app.token})).text
                    assert "Please provide inputs for the following fields:" in page
                    assert 'name="answer.name"' in page and "required" in page
                    assert 'type="email" name="answer.email"' in page
                    assert 'name="answer.untitledMultipleSelectEnum" multiple' in page
                    assert '<option value="hero-2">Green Lantern</option>' in page
                    denied = await client.post(
                        "/decide", data={"call": "c1.0", "run": "r1", "action": "accept"}
                    )
                    assert denied.status_code == 403  # no token
                    refused = await client.post(
                        "/decide",
                        data={
                            "token": app.token,
                            "run": "r1",
                            "call": "c1.0",
                            "action": "accept",
                            "answer.integer": "500",  # above its maximum, and no name
                        },
                        headers={"accept": "application/json"},
                    )
                    assert refused.status_code == 409
                    assert "does not match" in refused.json()["error"]
                    answered = await client.post(
                        "/decide",
                        data={
                            "token": app.token,
                            "run": "r1",
                            "call": "c1.0",
                            "action": "accept",
                            "answer.name": "<b>Ada</b>",
                            "answer.check": "true",
                            "answer.integer": "7",
                            "answer.untitledMultipleSelectEnum": ["Guitar", "Piano"],
                        },
                        headers={"accept": "application/json"},
                    )
                    assert answered.status_code == 200, answered.text
                while store.run("r1").status != "done":
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()

    trio.run(main)
    assert len(asked) == 1  # the resume answered from the store, not the hook
    text = str(store.run("r1").output)
    assert "Name: <b>Ada</b>" in text and "Favorite Integer: 7" in text


def test_the_inbox_page_escapes_what_the_server_asks(tmp_path: Path) -> None:
    from tickloop._human._page import render_index  # noqa: F401  # the page is rendered
    from tickloop._human._question_form import question_form

    question = tl.Question(
        "<script>alert(1)</script>",
        {
            "type": "object",
            "properties": {
                "x<y": {"type": "string", "title": '"><img src=x>', "default": "</select>"},
            },
        },
        server="<evil>",
    )
    form = question_form(question, "")
    assert "<script>" not in form and "<img" not in form and "<evil>" not in form
    assert re.search(r'name="answer\.x&lt;y"', form)

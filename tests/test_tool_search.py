"""Tool search (issue 43): a 300-tool catalog (four MCP servers built with the `mcp`
package's server API, plus generated Python tools) behind `search_tools`.

The figure in docs/benchmarks.md ("Tool search") is printed by
`python -m pytest tests/test_tool_search.py -k catalog -s`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import tickloop as tl
from catalog import DOMAINS, entries
from test_models_openai import ok
from tickloop._models._base import estimate_tokens

HERE = Path(__file__).resolve().parent
SERVERS = ["billing", "crm", "docs", "devops"]


def python_tools(domain: str, *, defer: bool = False) -> list[tl.Tool]:
    def make(name: str) -> Any:
        def handler(
            id: str, fields: dict[str, str] | None = None, limit: int = 10, dry_run: bool = False
        ) -> dict[str, Any]:
            return {"tool": name, "id": id, "fields": fields or {}, "limit": limit}

        return handler

    return [
        tl.tool(
            make(name), name=name, description=description, defer_loading=defer, idempotent=True
        )
        for name, description in entries(domain)
    ]


def catalog(*, defer: bool) -> list[Any]:
    servers = [
        tl.MCPServer.stdio(
            sys.executable,
            [str(HERE / "mcp_catalog_server.py"), domain],
            defer_loading=defer,
            # Several servers start at once, each importing the `mcp` package: on a
            # loaded machine that takes longer than the default allows.
            connect_timeout=120,
        )
        for domain in SERVERS
    ]
    return [*servers, *python_tools("travel", defer=defer)]


class Recorder:
    """An OpenAI-format server: answers the i-th request with the i-th solution and
    keeps every request body as sent."""

    def __init__(self, *solutions: dict[str, Any]) -> None:
        self.solutions = list(solutions)
        self.bodies: list[bytes] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.content)
        return ok([json.dumps(self.solutions.pop(0))])

    def tools_in(self, index: int) -> set[str]:
        """The tool names the i-th request's solution schema lets the model call."""
        body = json.loads(self.bodies[index])
        schema = body["response_format"]["json_schema"]["schema"]
        calls = schema["properties"]["calls"]["items"]["anyOf"]
        return {call["properties"]["_tool"]["enum"][0] for call in calls}


def model(recorder: Recorder) -> tl.OpenAIChat:
    client = httpx.AsyncClient(transport=httpx.MockTransport(recorder))
    return tl.OpenAIChat(
        "gpt-4o-mini", base_url="http://llm.test/v1", api_key="sk-t", client=client
    )


SEARCH = {"_tool": "search_tools", "query": "create a refund", "_outputPath": "†state.found"}
REFUND = {"_tool": "billing_refund_create", "id": "pay-7", "_outputPath": "†state.refund"}


def test_a_300_tool_catalog_costs_80_percent_fewer_request_tokens_with_tool_search() -> None:
    assert sum(len(entries(domain)) for domain in DOMAINS) == 300
    plain = Recorder({"calls": [REFUND], "output": None}, {"calls": [], "output": "refunded"})
    result = tl.Agent(model(plain), tools=catalog(defer=False)).run("Refund payment pay-7.")
    assert result.state["refund"]["tool"] == "billing_refund_create"
    assert len(plain.tools_in(0)) == 300

    searched = Recorder(
        # The found tool is not on this request's menu: its call is refused.
        {"calls": [SEARCH, {**REFUND, "_outputPath": "†state.early"}], "output": None},
        {"calls": [REFUND], "output": None},
        {"calls": [], "output": "refunded"},
    )
    agent = tl.Agent(model(searched), tools=catalog(defer=True), tool_search=True)
    result = agent.run("Refund payment pay-7.")
    assert result.output == "refunded"
    assert result.records["c1.1"].status == "invalid"
    assert "unknown tool 'billing_refund_create' (try search_tools)" in json.dumps(
        result.records["c1.1"].error
    )
    found = [entry["name"] for entry in result.state["found"]]
    assert found[0] == "billing_refund_create" and len(found) <= 5
    assert all(name.startswith("billing_refund_") for name in found)
    assert searched.tools_in(0) == {"search_tools"}
    assert searched.tools_in(1) == {"search_tools", *found}
    assert result.state["refund"]["tool"] == "billing_refund_create"

    without = estimate_tokens(len(plain.bodies[0]))
    with_search = [estimate_tokens(len(body)) for body in searched.bodies]
    print(
        f"\ntool search, 300 tools: first request {without} tokens without, "
        f"{with_search} with ({1 - max(with_search) / without:.1%} fewer at most)"
    )
    for tokens in with_search:
        assert tokens <= 0.2 * without, (tokens, without)


def test_tools_loaded_from_the_start_stay_on_the_menu_and_the_hook_check_covers_deferred() -> None:
    loaded = python_tools("travel")[:2]
    deferred = python_tools("docs", defer=True)
    seen: list[set[str]] = []

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        anyof = request["schema"]["properties"]["calls"]["items"]["anyOf"]
        seen.append({call["properties"]["_tool"]["enum"][0] for call in anyof})
        return {"calls": [], "output": "ok"}

    tl.Agent(tl.FunctionModel(answer), tools=[*loaded, *deferred]).run("x")
    assert seen == [{"search_tools", *(tool.name for tool in loaded)}]

    guarded = tl.tool(
        lambda id: id,
        name="secret_get",
        description="Get a secret.",
        defer_loading=True,
        requires_approval=True,
    )
    agent = tl.Agent(tl.FunctionModel(answer), tools=[guarded], tool_search=True)
    with pytest.raises(tl.ConfigurationError, match="secret_get"):
        agent.run("x")  # before anything runs, though the model cannot see it yet
    server = tl.MCPServer.stdio(
        sys.executable,
        [str(HERE / "mcp_catalog_server.py"), "docs"],
        defer_loading=True,
        requires_approval=True,
    )
    with pytest.raises(tl.ConfigurationError, match="approv"):
        tl.Agent(tl.FunctionModel(answer), tools=[server])


def test_search_is_ranked_and_deterministic() -> None:
    from tickloop._agent._tool_search import ToolIndex

    index = ToolIndex(python_tools("travel"))
    first = [tool.name for tool in index.search("archive an old hotel booking")]
    assert first[0] == "travel_hotel_archive"
    assert first == [tool.name for tool in index.search("archive an old hotel booking")]
    assert index.search("zebra") == []


def test_code_plans_find_stubs() -> None:
    answers = iter(
        [
            "```python\nfound = search_tools(query='book a flight')\n"
            "try:\n    travel_flight_create(id='f0')\n"
            "except ToolError as e:\n    print(e.type, e.message)\n```",
            "```python\nr = travel_flight_create(id='f1')\nfinal_answer(r['tool'])\n```",
        ]
    )
    requests: list[str] = []

    def answer(request: dict[str, Any]) -> str:
        requests.append(json.dumps(request["messages"]))
        return next(answers)

    agent = tl.Agent(
        tl.FunctionModel(answer), tools=python_tools("travel"), tool_search=True, protocol="code"
    )
    result = agent.run("Book flight f1.")
    assert result.output == "travel_flight_create"
    assert "def travel_flight_create(" not in requests[0]
    assert "def travel_flight_create(" in requests[1]
    assert "def search_tools(" in requests[0]
    found = result.state["found"]
    assert found[0]["name"] == "travel_flight_create"
    assert found[0]["stub"].startswith("def travel_flight_create(")
    # Called before a search found it: a structural ToolError the program can catch.
    assert result.printed[1] == [
        "structural unknown tool 'travel_flight_create' (try search_tools)"
    ]


CHILD = r"""
import os, sys, time
sys.path.insert(0, os.environ["TESTS"])
import tickloop as tl
from test_tool_search import REFUND, SEARCH, python_tools

def answer(request):
    if request["iteration"] == 1:
        return {"calls": [SEARCH], "output": None}
    return {"calls": [REFUND], "output": None}

def hang(id: str, fields: dict | None = None, limit: int = 10, dry_run: bool = False) -> dict:
    with open(os.environ["MARK"], "w") as mark:
        mark.write("running")
    time.sleep(600)

tools = python_tools("billing")
[refund] = [tool for tool in tools if tool.name == "billing_refund_create"]
tools[tools.index(refund)] = tl.tool(hang, name=refund.name, description=refund.description,
                                     idempotent=True)
tl.Agent(tl.FunctionModel(answer), tools=tools, tool_search=True, store=sys.argv[1]).run(
    "Refund pay-7.", run_id="crashy")
"""


def test_resume_after_a_crash_and_replay_see_the_same_menu(tmp_path: Path) -> None:
    db, mark = tmp_path / "runs.db", tmp_path / "mark"
    (tmp_path / "child.py").write_text(CHILD)
    env = {**os.environ, "TESTS": str(HERE), "MARK": str(mark)}
    child = subprocess.Popen([sys.executable, str(tmp_path / "child.py"), str(db)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not mark.exists():
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()

    menus: list[set[str]] = []

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        anyof = request["schema"]["properties"]["calls"]["items"]["anyOf"]
        menus.append({call["properties"]["_tool"]["enum"][0] for call in anyof})
        assert request["iteration"] == 3  # the crash left iteration 2's call running
        return {"calls": [], "output": "refunded"}

    agent = tl.Agent(
        tl.FunctionModel(answer), tools=python_tools("billing"), tool_search=True, store=db
    )
    result = agent.resume("crashy")
    assert result.output == "refunded"
    # The call of the found tool, journaled before the crash, is accepted again when the
    # journal replays (its tick's menu was journaled with it) and runs again (idempotent).
    assert result.records["c2.0"].status == "done", result.records["c2.0"].error
    assert "billing_refund_create" in menus[0]
    assert result.state["refund"]["tool"] == "billing_refund_create"
    replayed = agent.replay("crashy", store=db)
    assert replayed.output == "refunded" and replayed.state == result.state


def test_search_tools_is_a_reserved_name() -> None:
    taken = tl.tool(lambda query: query, name="search_tools", description="Mine.")
    with pytest.raises(tl.ConfigurationError, match="search_tools"):
        tl.Agent(
            tl.FunctionModel(lambda r: "x"), tools=[taken, *python_tools("docs")], tool_search=True
        )


def test_found_tools_come_from_the_records_not_the_request_text() -> None:
    # A call of a found tool works in the same run with protocol="tools" as well.
    turns = iter(
        [
            {
                "content": "",
                "tool_calls": [
                    {"id": "a", "name": "search_tools", "arguments": '{"query": "list docs pages"}'}
                ],
            },
            {
                "content": "",
                "tool_calls": [{"id": "b", "name": "docs_page_list", "arguments": '{"id": "x"}'}],
            },
            "listed",
        ]
    )
    offered: list[list[str]] = []

    def answer(request: dict[str, Any]) -> Any:
        offered.append([tool["name"] for tool in request["tools"]])
        return next(turns)

    agent = tl.Agent(
        tl.FunctionModel(answer), tools=python_tools("docs"), tool_search=True, protocol="tools"
    )
    result = agent.run("List pages.")
    assert result.output == "listed"
    assert offered[0] == ["search_tools"]
    assert "docs_page_list" in offered[1]
    assert result.records["c2.0"].status == "done"


def test_a_deferred_server_is_searched_and_plain_tools_stay_loaded() -> None:
    server = tl.MCPServer.stdio(
        sys.executable, [str(HERE / "mcp_catalog_server.py"), "docs"], defer_loading=True
    )
    loaded = python_tools("travel")[:3]
    menus: list[set[str]] = []

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        anyof = request["schema"]["properties"]["calls"]["items"]["anyOf"]
        menus.append({call["properties"]["_tool"]["enum"][0] for call in anyof})
        if request["iteration"] == 1:
            return {
                "calls": [{"_tool": "search_tools", "query": "delete a comment"}],
                "output": None,
            }
        if request["iteration"] == 2:
            call = {"_tool": "docs_comment_delete", "id": "c9", "_outputPath": "†state.d"}
            return {"calls": [call], "output": None}
        return {"calls": [], "output": "†state.d"}

    result = tl.Agent(tl.FunctionModel(answer), tools=[server, *loaded]).run("Delete c9.")
    assert menus[0] == {"search_tools", *(tool.name for tool in loaded)}
    assert "docs_comment_delete" in menus[1]
    assert result.output["tool"] == "docs_comment_delete"

"""MCP resources and prompts (issue 43): `MCPServer(resources=True)` gives a run two
tools, `list_resources` and `read_resource`, whose image results are `$media` values;
`await server.prompt(name, args)` and `tl.MCPPrompt` bring a server's prompt into an
agent's instructions. Against the MCP project's reference server and tests/mcp_server.py."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import tickloop as tl
from conftest import npm_installed
from test_mcp import SERVER, HTTPServer
from test_mcp_restart import HERE, Everything


@pytest.fixture(scope="module")
def everything() -> Iterator[Everything]:
    npm_installed(HERE, "@modelcontextprotocol/server-everything")
    server = Everything()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    server = HTTPServer()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def test_the_reference_servers_resources_are_listed_and_read_by_reference(
    everything: Everything,
) -> None:
    server = tl.MCPServer.http(everything.url, resources=True, prefix="ev", allowed=["echo"])
    result = tl.run_calls(
        [
            {"_tool": "ev_list_resources", "_outputPath": "†state.listing"},
            # The second call reads what the first listed: it starts once that is written.
            {
                "_tool": "ev_read_resource",
                "uri": "†state.listing.resources[0].uri",
                "_outputPath": "†state.first",
            },
            {
                "_tool": "ev_read_resource",
                "uri": "demo://resource/dynamic/text/7",
                "_outputPath": "†state.templated",
            },
        ],
        tools=[server],
    )
    assert result.errors == []
    listing = result.state["listing"]
    uris = [resource["uri"] for resource in listing["resources"]]
    assert "demo://resource/static/document/architecture.md" in uris
    templates = [template["uriTemplate"] for template in listing["resourceTemplates"]]
    assert "demo://resource/dynamic/text/{resourceId}" in templates
    assert isinstance(result.state["first"], str) and result.state["first"].strip()
    assert "Resource 7" in result.state["templated"]


def test_without_resources_true_there_are_no_resource_tools(everything: Everything) -> None:
    async def main() -> tuple[list[str], list[str]]:
        plain = tl.MCPServer.http(everything.url, allowed=["echo"])
        more = tl.MCPServer.http(everything.url, allowed=["echo"], resources=True)
        return (
            [tool.name for tool in await plain.list_tools()],
            [tool.name for tool in await more.list_tools()],
        )

    plain, more = trio.run(main)
    assert plain == ["echo"]
    assert more == ["echo", "list_resources", "read_resource"]


def test_the_reference_servers_prompts_are_text_and_a_wrong_name_says_the_close_one(
    everything: Everything,
) -> None:
    server = tl.MCPServer.http(everything.url, allowed=["echo"])

    async def main() -> tuple[str, str, list[str]]:
        async with server:
            simple = await server.prompt("simple-prompt")
            args = await server.prompt("args-prompt", {"city": "Paris", "state": "TX"})
            errors = []
            for name, arguments in (("simple-promt", None), ("args-prompt", {})):
                with pytest.raises(tl.ConfigurationError) as raised:
                    await server.prompt(name, arguments)
                errors.append(str(raised.value))
            return simple, args, errors

    simple, args, (unknown, missing) = trio.run(main)
    assert simple == "This is a simple prompt without arguments."
    assert "Paris, TX" in args
    assert "no prompt 'simple-promt'; did you mean 'simple-prompt'?" in unknown
    assert "'args-prompt'" in missing and "city (required)" in missing
    with pytest.raises(tl.ConfigurationError, match="argument 'n' must be a string"):
        tl.MCPPrompt(server, "args-prompt", {"n": 3})  # type: ignore[dict-item]


def test_an_mcp_prompt_in_instructions_is_fetched_as_each_run_starts(
    everything: Everything,
) -> None:
    server = tl.MCPServer.http(everything.url, allowed=["echo"])
    prompt = tl.MCPPrompt(server, "args-prompt", {"city": "Lyon"})
    model = tl.ScriptedModel([{"calls": [], "output": 1}])
    agent = tl.Agent(model, tools=[server], instructions=["Be brief.", prompt])
    assert agent.run({}).output == 1
    # The embedded resource's text is the instructions too.
    embedded = tl.MCPPrompt(server, "resource-prompt", {"resourceType": "Text", "resourceId": "3"})
    other = tl.ScriptedModel([{"calls": [], "output": 2}])
    alone = tl.Agent(other, instructions=embedded)
    assert alone.run({}).output == 2
    first = model.requests[0]["messages"][0]["content"]
    assert first.startswith("Be brief.\n\nWhat's weather in Lyon?")
    second = other.requests[0]["messages"][0]["content"]
    assert "Resource 3" in second
    with pytest.raises(
        tl.ConfigurationError, match=r"instructions must be a string, a tl\.MCPPrompt"
    ):
        tl.Agent(model, instructions=["ok", 3])  # type: ignore[list-item]


def test_an_image_resource_is_media_its_bytes_in_the_store(http_url: str, tmp_path: Path) -> None:
    server = tl.MCPServer.http(http_url, resources=True, allowed=["shout"])
    model = tl.ScriptedModel(
        [
            {
                "calls": [
                    {
                        "_tool": "read_resource",
                        "uri": "test://pixel.png",
                        "_outputPath": "†state.pixel",
                    },
                    {
                        "_tool": "read_resource",
                        "uri": "test://notes/trio",
                        "_outputPath": "†state.notes",
                    },
                ],
                "output": None,
            },
            {"calls": [], "output": "seen"},
        ]
    )
    store = tmp_path / "runs.db"
    result = tl.Agent(model, tools=[server], store=store).run({}, run_id="r1")
    assert result.output == "seen"
    pixel = result.state["pixel"]
    assert set(pixel) == {"$media", "mime", "bytes"} and pixel["mime"] == "image/png"
    assert result.state["notes"] == "notes on trio"
    connection = sqlite3.connect(store)
    rows = connection.execute("SELECT media_id, mime, data FROM media").fetchall()
    connection.close()
    assert rows == [(pixel["$media"], "image/png", b"\x89PNG\r\n\x1a\n")]
    assert pixel["bytes"] == 8


def test_resource_tools_work_over_stdio_with_a_prefix() -> None:
    server = tl.MCPServer.stdio(
        sys.executable, [str(SERVER)], resources=True, prefix="t", allowed=["shout"]
    )
    result = tl.run_calls(
        [{"_tool": "t_list_resources", "_outputPath": "†state.listing"}], tools=[server]
    )
    assert result.errors == []
    assert [r["uri"] for r in result.state["listing"]["resources"]] == ["test://pixel.png"]
    assert [t["uriTemplate"] for t in result.state["listing"]["resourceTemplates"]] == [
        "test://notes/{topic}"
    ]


def test_a_resumed_run_fetches_its_prompt_again_and_a_sub_agent_has_its_own(
    everything: Everything, tmp_path: Path
) -> None:
    server = tl.MCPServer.http(everything.url, allowed=["echo"], requires_approval=True)
    prompt = tl.MCPPrompt(server, "args-prompt", {"city": "Oslo"})
    child_model = tl.ScriptedModel([{"calls": [], "output": "from the child"}])
    child = tl.Agent(
        child_model,
        name="helper",
        description="Helps.",
        instructions=tl.MCPPrompt(server, "args-prompt", {"city": "Rome"}),
    )
    model = tl.ScriptedModel(
        [
            {
                "calls": [
                    {"_tool": "echo", "message": "hi", "_outputPath": "†state.echo"},
                    {"_tool": "helper", "task": "help", "_outputPath": "†state.helped"},
                ],
                "output": None,
            },
            {"calls": [], "output": "done"},
        ]
    )
    store = tmp_path / "runs.db"
    paused = tl.Agent(
        model, tools=[server, child], instructions=prompt, store=store, approve=lambda c: tl.Defer()
    ).run({}, run_id="r1")
    assert paused.status == "paused"
    again = tl.Agent(
        model, tools=[server, child], instructions=prompt, store=store, approve=lambda c: True
    )
    done = again.resume("r1", decisions={paused.pending[0].id: tl.Approve()})
    assert done.status == "done" and done.state["helped"] == "from the child"
    systems = [request["messages"][0]["content"] for request in model.requests]
    assert len(systems) >= 2 and all(
        system.startswith("What's weather in Oslo?") for system in systems
    )
    assert child_model.requests[0]["messages"][0]["content"].startswith("What's weather in Rome?")

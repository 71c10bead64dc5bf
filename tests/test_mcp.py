"""MCP servers as tools, against real servers written with the `mcp` package's server API.

tests/mcp_server.py runs over stdio (spawned by the client) and over streamable HTTP (one
process on 127.0.0.1 for the whole session, started and stopped by a fixture). Nothing of
the protocol is mocked. These tests run on real time (the servers are real processes), so
they assert orders of events, never durations.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import tickloop as tl
from tickloop._agent._prompt import strict_problem

HERE = Path(__file__).resolve().parent
SERVER = HERE / "mcp_server.py"
ROOT = HERE.parent
ALL_TOOLS = {
    "add",
    "fetch_page",
    "word_count",
    "shout",
    "as_json_text",
    "fail",
    "crash",
    "crash_once",
    "pid",
    "slow",
    "gather",
    "media",
    "tag",
    "whoami",
    "listings",
}


def stdio(**options: Any) -> tl.MCPServer:
    return tl.MCPServer.stdio(sys.executable, [str(SERVER)], **options)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class HTTPServer:
    """tests/mcp_server.py over streamable HTTP in a child process on a free port."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), "--http", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the MCP test server exited with {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("the MCP test server did not start listening within 30 s")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        self.process = None


@pytest.fixture(scope="session")
def http_url() -> Iterator[str]:
    server = HTTPServer()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return False


def plan_agent(server: tl.MCPServer, **options: Any) -> tuple[tl.Agent, tl.ScriptedModel]:
    """A two-iteration agent whose first plan feeds one MCP call's result to another."""
    calls = [
        {"_tool": "docs_fetch_page", "url": "https://x.test/a", "_outputPath": "†state.page"},
        {"_tool": "docs_word_count", "text": "†state.page.body", "_outputPath": "†state.words"},
        {"_tool": "docs_pid", "_outputPath": "†state.pid"},
        {
            "_tool": "docs_shout",
            "text": "done",
            "_reasoningForCall": "a long note that keeps the model writing " * 3,
        },
    ]
    model = tl.ScriptedModel(
        [{"calls": calls, "output": None}, {"calls": [], "output": "done"}],
        chunk_chars=8,
        chunk_delay=0.03,
    )
    return tl.Agent(model, tools=[server], **options), model


# -- the plan of the issue: one server's result read by the next call, while streaming --------


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_streamed_plan_feeds_one_mcp_result_into_the_next_call(
    transport: str, http_url: str
) -> None:
    server = (
        stdio(prefix="docs") if transport == "stdio" else tl.MCPServer.http(http_url, prefix="docs")
    )
    agent, model = plan_agent(server)
    events: list[tl.RunEvent] = []
    result = agent.run({"question": "how long is page a?"}, on_event=events.append)

    assert result.state["words"] == {"result": 7}  # "the page at https://x.test/a says hello world"
    assert result.state["page"]["body"].startswith("the page at https://x.test/a")
    assert result.errors == []
    # Eager dispatch: both calls ran, the second on the first's output, while the model
    # was still writing its first solution.
    stream_end = next(e.time for e in events if isinstance(e, tl.RequestFinished))
    fetched, counted = result.records["c1.0"], result.records["c1.1"]
    assert counted.started is not None and fetched.finished is not None
    assert fetched.finished <= counted.started < stream_end
    assert counted.params == {"text": result.state["page"]["body"]}
    if transport == "stdio":  # the run opened its own connection, and closed it
        assert wait_gone(result.state["pid"]["result"])
    # The model saw the server's tools under the prefix, with their schemas.
    system = model.requests[0]["messages"][0]["content"]
    assert "### docs_fetch_page" in system and "Fetch a page" in system


def test_the_same_plan_runs_with_protocol_tools(http_url: str) -> None:
    server = tl.MCPServer.http(http_url)
    model = tl.ScriptedModel(
        [
            {"tool_calls": [{"name": "fetch_page", "arguments": {"url": "https://x.test/b"}}]},
            "The page says hello world.",
        ]
    )
    result = tl.Agent(model, tools=[server], protocol="tools").run("read page b")
    assert result.output == "The page says hello world."
    assert result.records["c1.0"].output["url"] == "https://x.test/b"
    assert any(tool["name"] == "fetch_page" for tool in model.requests[0]["tools"])


def test_an_agent_streams_its_answer_with_mcp_tools(http_url: str) -> None:
    server = tl.MCPServer.http(http_url)
    model = tl.ScriptedModel(
        [
            {"tool_calls": [{"name": "shout", "arguments": {"text": "quiet"}}]},
            "It said QUIET.",
        ],
        chunk_chars=4,
    )
    agent = tl.Agent(model, tools=[server], protocol="tools")

    async def main() -> tuple[str, tl.RunResult]:
        async with agent.stream("shout it") as stream:
            text = "".join([chunk async for chunk in stream.text()])
        return text, stream.result

    text, result = trio.run(main)
    assert text == result.output == "It said QUIET."
    assert result.records["c1.0"].output == "QUIET"


def test_run_calls_and_execute_take_a_server_in_tools(http_url: str) -> None:
    server = tl.MCPServer.http(http_url)
    plan = [
        {"_tool": "fetch_page", "url": "u", "_outputPath": "†state.page"},
        {"_tool": "word_count", "text": "†state.page.body", "_outputPath": "†state.n"},
    ]
    assert tl.run_calls(plan, tools=[server]).state["n"] == {"result": 7}

    async def main() -> Any:
        return await tl.execute(plan, tools=[server])

    assert trio.run(main).state["n"] == {"result": 7}


def test_connect_timeout_none_waits_without_a_limit(http_url: str) -> None:
    """`connect_timeout=None` means no limit on connecting, not a crash on `now + None`."""
    server = tl.MCPServer.http(http_url, connect_timeout=None)
    plan = [{"_tool": "add", "a": 2, "b": 3, "_outputPath": "†state.sum"}]
    result = tl.run_calls(plan, tools=[server])
    assert result.state["sum"] == {"result": 5}


# -- one session, many calls --------------------------------------------------------------------


def test_fifty_calls_are_in_flight_at_once_on_one_session(http_url: str) -> None:
    """`gather` returns only once 50 of its calls are in flight on the server together."""
    server = tl.MCPServer.http(http_url)
    calls = [{"_tool": "gather", "n": 50, "_outputPath": f"†state.g{i}"} for i in range(50)]
    result = tl.run_calls(calls, tools=[server])
    assert result.errors == []
    assert {value["result"] for value in result.state.values()} == {50}


def test_async_with_keeps_one_connection_across_runs_and_closes_it() -> None:
    server = stdio()
    plan = [{"_tool": "pid", "_outputPath": "†state.pid"}]

    async def main() -> tuple[int, int, list[tl.Tool]]:
        async with server:
            first = await tl.execute(plan, tools=[server])
            second = await tl.execute(plan, tools=[server])
            tools = await server.list_tools()
            many = await tl.execute(
                [{"_tool": "gather", "n": 50, "_outputPath": f"†state.g{i}"} for i in range(50)],
                tools=[server],
            )
            assert many.errors == []
        return first.state["pid"]["result"], second.state["pid"]["result"], tools

    first, second, tools = trio.run(main)
    assert first == second  # the same child served both runs
    assert {tool.name for tool in tools} == ALL_TOOLS
    assert wait_gone(first)  # leaving the block ended it


# -- cancellation -------------------------------------------------------------------------------


def test_a_cancelled_agent_run_leaves_no_server_process_and_no_cancel_scope_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = stdio()
    pids: list[int] = []

    @tl.tool
    def remember(pid: dict[str, int]) -> None:
        pids.append(pid["result"])

    calls = [
        {"_tool": "pid", "_outputPath": "†state.pid"},
        {"_tool": "remember", "pid": "†state.pid"},
        {"_tool": "slow", "seconds": 60, "_outputPath": "†state.late"},
    ]
    model = tl.ScriptedModel([{"calls": calls, "output": None}])

    async def main() -> bool:
        with trio.CancelScope() as scope:

            def on_event(event: tl.RunEvent) -> None:
                if isinstance(event, tl.CallFinished) and event.tool == "remember":
                    scope.cancel()  # what Ctrl-C does to a trio program

            await tl.Agent(model, tools=[server, remember]).run_async({}, on_event=on_event)
        return scope.cancelled_caught

    assert trio.run(main)
    assert pids and wait_gone(pids[0])
    assert "cancel scope" not in caplog.text


def test_ctrl_c_ends_the_run_and_its_server(tmp_path: Path) -> None:
    script = tmp_path / "interrupted.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            import tickloop as tl

            server = tl.MCPServer.stdio(sys.executable, [{str(SERVER)!r}])

            @tl.tool
            def announce(pid: dict) -> None:
                print(pid["result"], flush=True)

            tl.run_calls(
                [
                    {{"_tool": "pid", "_outputPath": "†state.pid"}},
                    {{"_tool": "announce", "pid": "†state.pid"}},
                    {{"_tool": "slow", "seconds": 60, "_outputPath": "†state.late"}},
                ],
                tools=[server, announce],
            )
            """
        )
    )
    process = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        child = int(line)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode != 0
    assert "KeyboardInterrupt" in stderr
    assert "cancel scope" not in stderr
    assert wait_gone(child)


# -- errors from the server ---------------------------------------------------------------------


def test_is_error_is_the_calls_runtime_error_with_the_servers_text(http_url: str) -> None:
    server = tl.MCPServer.http(http_url)
    model = tl.ScriptedModel(
        [
            {"calls": [{"_tool": "fail", "message": "disk quota exceeded"}], "output": None},
            {"calls": [], "output": "gave up"},
        ]
    )
    result = tl.Agent(model, tools=[server]).run({})
    [error] = result.errors
    assert error["data"]["error"]["type"] == "runtime"
    assert "disk quota exceeded" in error["data"]["error"]["message"]
    assert result.records["c1.0"].status == "failed"
    assert "disk quota exceeded" in model.requests[1]["messages"][-1]["content"]  # fed back


def test_a_crashing_server_fails_the_call_and_the_next_call_reconnects(tmp_path: Path) -> None:
    server = stdio()

    async def main() -> tuple[Any, Any, Any]:
        async with server:
            before = await tl.execute([{"_tool": "pid", "_outputPath": "†state.p"}], tools=[server])
            crashed = await tl.execute(
                [{"_tool": "crash", "_outputPath": "†state.c"}], tools=[server]
            )
            after = await tl.execute(
                [
                    {"_tool": "pid", "_outputPath": "†state.p"},
                    # idempotent: the call that crashed the server is sent again, once
                    {
                        "_tool": "crash_once",
                        "marker": str(tmp_path / "m"),
                        "_outputPath": "†state.o",
                    },
                ],
                tools=[server],
            )
        return before, crashed, after

    before, crashed, after = trio.run(main)
    [error] = crashed.errors
    assert crashed.records["c1.0"].status == "failed"
    assert "may have taken effect" in error["data"]["error"]["message"]  # not replayed
    assert after.errors == []
    assert after.state["p"] != before.state["p"]  # a new server process
    assert after.state["o"] == {"result": "survived"}
    assert wait_gone(after.state["p"]["result"])


def test_a_server_restarted_mid_run_is_reinitialised() -> None:
    http = HTTPServer()
    http.start()
    try:
        server = tl.MCPServer.http(http.url)

        @tl.tool(depends_on=["†state.before"])
        def restart_server() -> str:
            http.stop()
            http.start()
            return "restarted"

        model = tl.ScriptedModel(
            [
                {
                    "calls": [
                        {"_tool": "pid", "_outputPath": "†state.before"},
                        {"_tool": "restart_server", "_outputPath": "†state.restart"},
                    ],
                    "output": None,
                },
                {
                    "calls": [
                        {"_tool": "pid", "_outputPath": "†state.after"},
                        {"_tool": "fetch_page", "url": "u", "_outputPath": "†state.page"},
                    ],
                    "output": "done",
                },
            ]
        )
        result = tl.Agent(model, tools=[server, restart_server]).run({})
    finally:
        http.stop()
    assert result.errors == []
    assert result.state["before"] != result.state["after"]
    assert result.state["page"]["url"] == "u"  # refused by the restarted server, sent again


def test_a_server_gone_for_good_fails_calls_with_the_reason() -> None:
    http = HTTPServer()
    http.start()
    server = tl.MCPServer.http(http.url, connect_timeout=5)

    async def main() -> tuple[Any, Any]:
        async with server:
            try:
                await tl.execute([{"_tool": "pid", "_outputPath": "†state.p"}], tools=[server])
            finally:
                http.stop()
            lost = await tl.execute(
                [
                    {"_tool": "pid", "_outputPath": "†state.p"},
                    {"_tool": "fetch_page", "url": "u", "_outputPath": "†state.f"},
                ],
                tools=[server],
            )
            with pytest.raises(tl.ConfigurationError, match="could not be used"):
                await tl.execute([], tools=[server])  # a new run cannot connect either
            return lost, None

    lost, _ = trio.run(main)
    messages = {e["data"]["call"]["_tool"]: e["data"]["error"]["message"] for e in lost.errors}
    assert "may have taken effect" in messages["fetch_page"]
    assert "could not be restored" in messages["pid"]  # idempotent: it was tried again
    assert "ConnectError" in messages["pid"] and "ExceptionGroup" not in messages["pid"]


def test_a_slow_server_past_its_timeout_fails_that_call_only(http_url: str) -> None:
    server = tl.MCPServer.http(http_url, timeout=0.5)
    result = tl.run_calls(
        [
            {"_tool": "slow", "seconds": 30, "_outputPath": "†state.late"},
            {"_tool": "slow", "seconds": 0, "_outputPath": "†state.quick"},
        ],
        tools=[server],
    )
    assert result.records["c1.0"].status == "failed"
    assert result.errors[0]["data"]["error"]["message"] == "TimeoutError: slow ran over 0.5 s"
    assert result.state == {"quick": {"result": "done"}}


def test_a_server_that_will_not_start_or_answer_is_a_configuration_error(
    tmp_path: Path,
) -> None:
    model = tl.ScriptedModel([{"calls": [], "output": 1}])
    missing = tl.MCPServer.stdio(str(tmp_path / "no-such-server"))
    with pytest.raises(tl.ConfigurationError, match="no-such-server"):
        tl.Agent(model, tools=[missing]).run({})
    assert model.requests == []  # before the run's first request

    quitter = tl.MCPServer.stdio(sys.executable, ["-c", "pass"])  # exits at once
    with pytest.raises(tl.ConfigurationError, match=r"-c pass.*could not be used"):
        tl.run_calls([], tools=[quitter])

    mute = tl.MCPServer.stdio(
        sys.executable, ["-c", "import time; time.sleep(60)"], connect_timeout=1
    )
    with pytest.raises(
        tl.ConfigurationError, match=r"time\.sleep\(60\).*did not answer within 1 s"
    ):
        tl.Agent(model, tools=[mute]).run({})

    nowhere = f"http://127.0.0.1:{_free_port()}/mcp"
    with pytest.raises(tl.ConfigurationError, match=nowhere.replace(".", r"\.")):
        tl.run_calls([], tools=[tl.MCPServer.http(nowhere, connect_timeout=5)])
    assert model.requests == []


# -- tools as the server describes them ---------------------------------------------------------


def test_the_listing_follows_every_page(http_url: str) -> None:
    server = tl.MCPServer.http(http_url)

    async def main() -> tuple[list[tl.Tool], int, int]:
        async with server:
            before = await tl.execute(
                [{"_tool": "listings", "_outputPath": "†state.n"}], tools=[server]
            )
            tools = await tl.MCPServer.http(http_url).list_tools()
            after = await tl.execute(
                [{"_tool": "listings", "_outputPath": "†state.n"}], tools=[server]
            )
        return tools, before.state["n"]["result"], after.state["n"]["result"]

    tools, before, after = trio.run(main)
    assert {tool.name for tool in tools} == ALL_TOOLS  # 15 tools, 5 to a page
    assert after - before == 3  # one listing, three pages


def test_tools_carry_the_servers_descriptions_schemas_and_hints(http_url: str) -> None:
    tools = {tool.name: tool for tool in trio.run(tl.MCPServer.http(http_url).list_tools)}
    add = tools["add"]
    assert add.description == "Add two integers."
    assert add.parameters["properties"].keys() == {"a", "b"}
    assert add.output is not None and add.output["properties"]["result"]["type"] == "integer"
    assert add.idempotent and add.annotations == {"idempotentHint": True, "readOnlyHint": True}
    assert not tools["fetch_page"].idempotent and tools["fetch_page"].annotations == {}
    # PROTOCOL §15: readOnlyHint makes the tool read-only (it may run past an input gate).
    assert add.read_only and not tools["fetch_page"].read_only
    assert tools["shout"].output is None  # no outputSchema: nothing to check
    assert not add.is_latent


def test_allowed_prefix_and_a_clash_between_servers(http_url: str) -> None:
    docs = tl.MCPServer.http(http_url, prefix="docs", allowed=["add", "shout"])
    assert sorted(t.name for t in trio.run(docs.list_tools)) == ["docs_add", "docs_shout"]

    stray = tl.MCPServer.http(http_url, allowed=["add", "nope"])
    with pytest.raises(tl.ConfigurationError, match="'nope'"):
        trio.run(stray.list_tools)

    one = tl.MCPServer.http(http_url, allowed=["add"])
    other = tl.MCPServer.http(http_url, allowed=["add", "pid"])
    with pytest.raises(tl.ConfigurationError, match=r"'add' is offered by http.* and by http"):
        tl.run_calls([], tools=[one, other])


def test_results_are_converted_from_content_blocks(http_url: str) -> None:
    server = tl.MCPServer.http(http_url)
    result = tl.run_calls(
        [
            {"_tool": "media", "_outputPath": "†state.media"},
            {"_tool": "shout", "text": "hi", "_outputPath": "†state.text"},
            {"_tool": "as_json_text", "n": 2, "_outputPath": "†state.json"},
            {"_tool": "add", "a": 2, "b": 3, "_outputPath": "†state.sum"},
        ],
        tools=[server],
    )
    assert result.errors == []
    image, audio, resource, text = result.state["media"]
    # Media are references; their bytes are kept apart (issue 43, docs/mcp.md).
    pixel = b"\x89PNG\r\n\x1a\n"  # tests/mcp_server.py's PIXEL
    assert image == {"$media": image["$media"], "mime": "image/png", "bytes": len(pixel)}
    assert audio == {"$media": audio["$media"], "mime": "audio/wav", "bytes": len(pixel)}
    assert image["$media"] != audio["$media"]  # one id names bytes and their type
    assert resource == "a note" and text == "plain words"
    assert result.state["text"] == "HI"
    assert result.state["json"] == {"n": 2, "items": [1, 2]}  # JSON text is JSON
    assert result.state["sum"] == {"result": 5}  # structuredContent first


def test_a_schema_strict_mode_rejects_goes_as_json_text_for_that_tool_only(
    http_url: str,
) -> None:
    server = tl.MCPServer.http(http_url, allowed=["tag", "fetch_page"])
    call = {
        "_tool": "tag",
        "labels": json.dumps({"team": "core", "env": "prod"}),
        "note": None,
        "_outputPath": "†state.tagged",
        "_outputMethod": None,
        "_id": None,
        "_reasoningForCall": None,
    }
    model = tl.ScriptedModel([{"calls": [call], "output": None}, {"calls": [], "output": 1}])
    result = tl.Agent(model, tools=[server]).run({})
    assert result.state["tagged"] == {"result": "env=prod,team=core"}
    schema = model.requests[0]["schema"]
    assert strict_problem(schema, schema.get("$defs")) is None  # strict mode takes it whole
    variants = {
        v["properties"]["_tool"]["enum"][0]: v
        for v in schema["properties"]["calls"]["items"]["anyOf"]
    }
    tag, fetch = variants["tag"], variants["fetch_page"]
    assert tag["properties"]["labels"]["type"] == "string"  # the map goes as JSON text
    url = fetch["properties"]["url"]["anyOf"][0]
    assert url["type"] == "string"  # other parameters keep their own schema
    import jsonschema

    jsonschema.validate({"calls": [call], "output": None}, schema)


def test_a_local_tool_with_a_free_form_map_gets_the_same_json_text_fallback() -> None:
    @tl.tool
    def label(labels: dict[str, int], name: str) -> int:
        """Sum the labels."""
        return sum(labels.values())

    @tl.tool
    def make() -> dict[str, int]:
        return {"c": 5}

    calls = [
        {"_tool": "label", "labels": '{"a": 1, "b": 2}', "name": "x", "_outputPath": "†state.s"},
        {"_tool": "make", "_outputPath": "†state.made"},
        {"_tool": "label", "labels": "†state.made", "name": "y", "_outputPath": "†state.t"},
    ]
    model = tl.ScriptedModel([{"calls": calls, "output": None}, {"calls": [], "output": 1}])
    result = tl.Agent(model, tools=[label, make]).run({})
    assert result.errors == []
    assert result.state["s"] == 3  # the JSON text was parsed back
    assert result.state["t"] == 5  # a reference stays a reference
    menu = model.requests[0]["messages"][0]["content"]
    assert "write labels as JSON text" in menu
    variant = model.requests[0]["schema"]["properties"]["calls"]["items"]["anyOf"][0]
    assert variant["properties"]["labels"]["type"] == "string"
    assert variant["properties"]["name"]["anyOf"][0] == {"type": "string"}


# -- approval, per-run options, instructions, durability -----------------------------------------


def test_the_approval_hook_sees_an_mcp_calls_resolved_parameters(http_url: str) -> None:
    asked: list[tl.PendingCall] = []

    def approve(call: tl.PendingCall) -> bool:
        asked.append(call)
        return True

    server = tl.MCPServer.http(http_url, requires_approval=lambda p: "text" in p)
    plan = [
        {"_tool": "fetch_page", "url": "https://x.test/c", "_outputPath": "†state.page"},
        {"_tool": "word_count", "text": "†state.page.body", "_outputPath": "†state.n"},
    ]
    result = tl.run_calls(plan, tools=[server], approve=approve)
    assert [call.tool for call in asked] == ["word_count"]
    assert asked[0].params == {"text": "the page at https://x.test/c says hello world"}
    assert result.state["n"] == {"result": 7}

    with pytest.raises(tl.ConfigurationError, match="no approval hook"):
        tl.Agent(tl.ScriptedModel([]), tools=[tl.MCPServer.http(http_url, requires_approval=True)])
    unreachable = tl.MCPServer.http(f"http://127.0.0.1:{_free_port()}/mcp", requires_approval=True)
    with pytest.raises(tl.ConfigurationError, match="no approval hook"):  # before connecting
        tl.run_calls([], tools=[unreachable])


def test_per_run_headers_and_meta_ride_along_without_a_new_server(http_url: str) -> None:
    server = tl.MCPServer.http(http_url, headers={"X-User": "ann"})
    plan = [{"_tool": "whoami", "_outputPath": "†state.who"}]

    async def as_user(token: str, results: dict[str, Any]) -> None:
        with server.call_options(headers={"Authorization": token}, meta={"tenant": token}):
            results[token] = (await tl.execute(plan, tools=[server])).state["who"]

    async def main() -> dict[str, Any]:
        results: dict[str, Any] = {}
        async with server:  # one connection; two runs at once, each with its own token
            async with trio.open_nursery() as nursery:
                nursery.start_soon(as_user, "Bearer a", results)
                nursery.start_soon(as_user, "Bearer b", results)
            results["none"] = (await tl.execute(plan, tools=[server])).state["who"]
        return results

    results = trio.run(main)
    assert results["Bearer a"] == {
        "user": "ann",
        "token": "Bearer a",
        "meta": {"tenant": "Bearer a"},
    }
    assert results["Bearer b"]["token"] == "Bearer b"
    assert results["none"] == {"user": "ann", "token": None, "meta": {}}


def test_include_instructions_adds_the_servers_instructions(http_url: str) -> None:
    for include in (True, False):
        model = tl.ScriptedModel([{"calls": [], "output": 1}])
        server = tl.MCPServer.http(http_url, include_instructions=include)
        tl.Agent(model, tools=[server], instructions="Be brief.").run({})
        system = model.requests[0]["messages"][0]["content"]
        assert system.startswith("Be brief.")
        assert ("Pages are fetched with fetch_page" in system) is include


def test_a_durable_run_journals_mcp_calls_and_resume_reconnects(
    http_url: str, tmp_path: Path
) -> None:
    server = tl.MCPServer.http(http_url, requires_approval=lambda p: "text" in p)
    model = tl.ScriptedModel(
        [
            {
                "calls": [
                    {"_tool": "fetch_page", "url": "u", "_outputPath": "†state.page"},
                    {"_tool": "word_count", "text": "†state.page.body", "_outputPath": "†state.n"},
                ],
                "output": None,
            },
            {"calls": [], "output": 4},
        ]
    )
    store = tmp_path / "runs.db"
    agent = tl.Agent(model, tools=[server], approve=lambda call: tl.Defer(), store=store)
    paused = agent.run({}, run_id="r1")
    assert paused.status == "paused" and [p.tool for p in paused.pending] == ["word_count"]
    assert paused.state["page"]["url"] == "u"

    again = tl.Agent(model, tools=[server], approve=lambda call: True, store=store)
    done = again.resume("r1", decisions={paused.pending[0].id: tl.Approve()})
    assert done.status == "done" and done.state["n"] == {"result": 7}


# -- packaging ----------------------------------------------------------------------------------


def test_import_tickloop_does_not_import_mcp() -> None:
    code = (
        "import sys, tickloop; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'anyio', 'httpx2')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_missing_mcp_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else real(name, *a)
    )
    with pytest.raises(tl.ConfigurationError, match=r"tickloop\[mcp\]"):
        tl.MCPServer.stdio("python", ["server.py"])


def test_bad_options_are_configuration_errors() -> None:
    with pytest.raises(tl.ConfigurationError, match="args must be a list"):
        tl.MCPServer.stdio("python", "server.py")  # type: ignore[arg-type]
    with pytest.raises(tl.ConfigurationError, match="http"):
        tl.MCPServer.http("127.0.0.1:8000/mcp")
    with pytest.raises(tl.ConfigurationError, match="timeout"):
        tl.MCPServer.http("http://127.0.0.1:1/mcp", timeout=0)
    from tickloop._core._tools import ToolSet

    with pytest.raises(tl.ConfigurationError, match="must be opened"):
        ToolSet([tl.MCPServer.http("http://127.0.0.1:1/mcp")])

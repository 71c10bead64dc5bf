"""Issue 30: clear answers for a new user (event loops, tools=, references, FunctionModel,
OpenTelemetry, ids, the trace's clock, missing descriptions, the docs).

Each test names the item of the issue it covers; each failed before its fix.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import tickloop as tl
from tickloop._cli._main import main


@tl.tool
async def echo(text: str) -> str:
    """Return the text."""
    return text


@tl.tool
async def slow_echo(text: str) -> str:
    """Return the text after half a second."""
    await trio.sleep(0.5)
    return text


def _answer(calls: list[dict[str, Any]] | None = None, output: Any = "ok") -> dict[str, Any]:
    return {"calls": calls or [], "output": output}


# -- item 1: the right call for the event loop at hand ------------------------------------


def test_run_async_awaited_from_asyncio_names_run_asyncio() -> None:
    agent = tl.Agent(tl.ScriptedModel([_answer()]), tools=[echo])

    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"await agent\.run_asyncio\("):
            await agent.run_async({"q": 1})
        with pytest.raises(RuntimeError, match=r"agent\.resume_async runs inside trio"):
            await agent.resume_async("r1")
        with pytest.raises(RuntimeError, match=r"tl\.execute runs inside trio"):
            await tl.execute([], tools=[echo])

    asyncio.run(main())


def test_run_inside_trio_names_run_async() -> None:
    agent = tl.Agent(tl.ScriptedModel([_answer()]), tools=[echo])

    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"await agent\.run_async\("):
            agent.run({"q": 1})
        with pytest.raises(RuntimeError, match=r"await agent\.resume_async\("):
            agent.resume("r1")

    trio.run(main)


# -- item 3: tools={...} -------------------------------------------------------------------


def test_a_tools_mapping_whose_key_is_not_the_tools_name_is_refused() -> None:
    message = r"tools= maps 'say' to tool 'echo'.*tools=\[echo, \.\.\.\].*name='say'"
    with pytest.raises(tl.ConfigurationError, match=message):
        tl.Agent(tl.ScriptedModel([_answer()]), tools={"say": echo})
    with pytest.raises(tl.ConfigurationError, match=message):
        tl.run_calls([{"_tool": "say", "text": "hi"}], tools={"say": echo})
    with pytest.raises(tl.ConfigurationError, match=r"maps 'x' to 'echo', which is not a"):
        tl.run_calls([], tools={"x": "echo"})


def test_a_tools_mapping_keyed_by_the_tools_names_is_the_same_as_a_list() -> None:
    calls = [{"_tool": "echo", "text": "hi", "_outputPath": "†state.said"}]
    assert tl.run_calls(calls, tools={"echo": echo}).state == {"said": "hi"}


# -- item 4: what an unresolved reference misses, and what is there ------------------------


@tl.tool
def load_user() -> dict[str, str]:
    """The signed-in user."""
    return {"name": "Ann", "email": "ann@example.org"}


STATE = {"user": {"name": "Ann", "email": "ann@example.org"}, "items": [1, 2, 3]}


def _unresolved(reference: str, input: Any = None, state: Any = None) -> str:
    result = tl.run_calls(
        [{"_tool": "echo", "text": reference, "_outputPath": "†state.said"}],
        tools=[echo],
        input=input,
        state=STATE if state is None else state,
    )
    record = result.records["c1.0"]
    assert record.status == "invalid"
    message: str = record.error["message"]
    assert message.startswith(f"unresolved reference {reference} in parameter text: ")
    return message.split(": ", 1)[1]


def test_a_missing_key_of_a_value_a_call_wrote_is_named_with_the_keys_there() -> None:
    result = tl.run_calls(
        [
            {"_tool": "load_user", "_outputPath": "†state.user"},
            {"_tool": "echo", "text": "†state.user.nme", "_outputPath": "†state.said"},
        ],
        tools=[echo, load_user],
    )
    assert result.records["c1.1"].error["message"] == (
        "unresolved reference †state.user.nme in parameter text: †state.user has no key "
        "'nme' (did you mean 'name'? its keys: 'name', 'email'), and no call will write it"
    )


@pytest.mark.parametrize(
    ("reference", "reason"),
    [
        (
            "†state.user.nme",
            "†state.user has no key 'nme' (did you mean 'name'? its keys: 'name', 'email'), "
            "and no call will write it",
        ),
        (
            "†state.user.phone",
            "†state.user has no key 'phone' (its keys: 'name', 'email'), and no call will write it",
        ),
        (
            "†state.items[5]",
            "†state.items has 3 items (indexes 0 to 2), so no index 5, and no call will write it",
        ),
        (
            "†state.items.first",
            "†state.items is a list (3 items), which has no key 'first', and no call will write it",
        ),
        (
            "†state.items.1",
            "†state.items is a list (3 items), which has no key '1' "
            "(an index is written †state.items[1]), and no call will write it",
        ),
        (
            "†state.user.name.first",
            "†state.user.name is a string, which has no key 'first', and no call will write it",
        ),
        # What else the state holds depends on which calls have finished: not described.
        ("†state.usr", "no call wrote it, and none will"),
        ("†input.x", "the input has no field 'x' (its fields: 'q', 'y')"),
    ],
)
def test_an_unresolved_reference_says_what_is_missing_and_what_is_there(
    reference: str, reason: str
) -> None:
    assert _unresolved(reference, input={"q": 1, "y": 2}) == reason


def test_an_unresolved_input_reference_without_input_says_there_is_none() -> None:
    assert _unresolved("†input.x") == "the run has no input"
    assert _unresolved("†input.x", input="hello") == (
        "the input is a string, which has no field 'x'"
    )


# -- item 8: a repeated _id, the trace's clock, a tool without a description ---------------


def test_a_repeated_id_names_the_id_its_call_is_recorded_under() -> None:
    result = tl.run_calls(
        [
            {"_tool": "echo", "text": "a", "_id": "x", "_outputPath": "†state.a"},
            {"_tool": "echo", "text": "b", "_id": "x", "_outputPath": "†state.b"},
        ],
        tools=[echo],
    )
    [error] = result.errors
    message = error["data"]["error"]["message"]
    recorded_as = re.search(r"recorded as '([^']+)'", message)
    assert recorded_as is not None, message
    record = result.records[recorded_as.group(1)]
    assert record.status == "invalid" and record.params == {"text": "b"}
    assert result.records["x"].status == "done"


def test_the_trace_table_and_the_timeline_count_time_from_the_same_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The model thinks for 2 s before it writes anything: both views start the run's
    # clock when the request went out, not when the first call arrived.
    db = tmp_path / "runs.db"
    calls = [{"_tool": "slow_echo", "text": "hi", "_outputPath": "†state.said"}]
    model = tl.ScriptedModel([_answer(calls), _answer()], first_token_delay=2.0)
    agent = tl.Agent(model, tools=[slow_echo], store=db)
    trio.run(
        lambda: agent.run_async(run_id="r1"),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    assert main(["trace", "r1", "--store", str(db)]) == 0
    _, row = capsys.readouterr().out.splitlines()
    call_id, _, status, started, ran = row.split()
    assert (call_id, status, ran) == ("c1.0", "done", "0.500s")
    page = tl.timeline_html(db, "r1")
    shown = re.search(r"c1\.0 slow_echo: done\nstarted: ([\d.]+s) after the run began", page)
    assert shown is not None
    assert started == shown.group(1)
    assert float(started[:-1]) >= 2.0


def test_a_tool_without_a_description_warns_once_naming_it() -> None:
    def lookup(key: str) -> str:
        return key

    with pytest.warns(UserWarning, match=r"tool 'lookup' has no description") as caught:
        made = tl.tool(lookup)
    assert made.description == ""
    assert len(caught) == 1 and caught[0].filename == __file__  # points at the definition
    with pytest.warns(UserWarning, match=r"tool 'find' has no description"):
        tl.tool(name="find")(lookup)


def test_a_tool_with_a_docstring_or_a_description_does_not_warn() -> None:
    def lookup(key: str) -> str:
        return key

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tl.tool(lookup, description="Look a key up.")
        assert tl.tool(echo.handler).description == "Return the text."


# -- item 7: OpenTelemetry: one trace per run, the run's span its root ----------------------


def test_a_run_is_one_trace_whose_root_is_the_runs_span() -> None:
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    export = pytest.importorskip("opentelemetry.sdk.trace.export")
    in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))

    @tl.tool
    async def fails(text: str) -> str:
        """Always fails."""
        raise ValueError("no")

    calls = [
        {"_tool": "echo", "text": "hi", "_outputPath": "†state.said"},
        {"_tool": "fails", "text": "†state.said", "_outputPath": "†state.lost"},
    ]
    model = tl.ScriptedModel([_answer(calls, None), _answer(calls[:1], None), _answer()])
    agent = tl.Agent(model, tools=[echo, fails], tracer_provider=provider)
    result = agent.run(run_id="traced")
    assert result.status == "done" and result.iterations == 3
    spans = exporter.get_finished_spans()
    [root] = [span for span in spans if span.parent is None]
    assert root.name == "invoke_agent"
    assert {span.context.trace_id for span in spans} == {root.context.trace_id}
    turns = [span for span in spans if span.name == "turn"]
    assert len(turns) == 3 and all(turn.parent.span_id == root.context.span_id for turn in turns)
    assert root.attributes["tickloop.run_id"] == "traced"
    assert root.attributes["tickloop.status"] == "done"
    assert root.attributes["tickloop.iterations"] == 3
    statuses = [
        span.attributes["tickloop.call.status"] for span in spans if span.name == "execute_tool"
    ]
    assert sorted(statuses) == ["done", "done", "failed"]
    # Plain strings, not the str enum the engine uses inside: exporters see "done".
    assert all(type(status) is str for status in statuses)
    assert type(root.attributes["tickloop.status"]) is str


def test_a_failed_run_marks_its_root_span_as_an_error() -> None:
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    export = pytest.importorskip("opentelemetry.sdk.trace.export")
    in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    agent = tl.Agent(
        tl.ScriptedModel([_answer(output=None)]),
        tools=[echo],
        tracer_provider=provider,
        max_iterations=1,
    )
    with pytest.raises(tl.MaxIterationsError):
        agent.run(run_id="stuck")
    [root] = [span for span in exporter.get_finished_spans() if span.parent is None]
    assert root.name == "invoke_agent"
    assert root.attributes["tickloop.status"] == "failed"
    assert root.status.status_code.name == "ERROR"


# -- item 5: FunctionModel, a test model that answers from the request ----------------------


def test_a_function_model_answers_each_request_from_what_it_holds() -> None:
    seen: list[dict[str, Any]] = []

    def reply(request: dict[str, Any]) -> dict[str, Any]:
        seen.append(request)
        if request["iteration"] == 1:
            return _answer([{"_tool": "echo", "text": "hi", "_outputPath": "†state.said"}], None)
        # The second request shows what the first plan wrote: answer from it.
        last = request["messages"][-1]["content"]
        return _answer(output="heard " + ("hi" if '"said": "hi"' in last else "nothing"))

    model = tl.FunctionModel(reply)
    assert model.model == "function"
    result = tl.Agent(model, tools=[echo]).run({"q": 1})
    assert result.output == "heard hi"
    assert [request["iteration"] for request in seen] == [1, 2]
    assert all(request["path"] == () for request in seen)
    first = seen[0]
    assert set(first) == {"messages", "schema", "iteration", "path"}
    assert first["schema"]["type"] == "object"
    assert {message["role"] for message in first["messages"]} <= {"system", "user", "assistant"}
    scripted = tl.ScriptedModel([_answer()])
    tl.Agent(scripted, tools=[echo]).run({"q": 1})
    # messages and schema exactly as ScriptedModel records them
    assert {key: first[key] for key in ("messages", "schema")} == scripted.requests[0]


def test_a_function_model_may_be_async_and_speaks_the_tools_protocol() -> None:
    seen: list[dict[str, Any]] = []

    async def reply(request: dict[str, Any]) -> dict[str, Any] | str:
        await trio.sleep(0)
        seen.append(request)
        if request["iteration"] == 1:
            return {"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]}
        return "the tool said " + request["messages"][-1]["content"]

    model = tl.FunctionModel(reply, model="mine")
    result = tl.Agent(model, tools=[echo], protocol="tools").run({"q": 1})
    assert result.output == "the tool said hi"
    assert model.model == "mine"
    assert set(seen[0]) == {"system", "messages", "tools", "iteration", "path"}
    assert [spec["name"] for spec in seen[0]["tools"]] == ["echo"]
    assert seen[0]["tools"][0]["description"] == "Return the text."


def test_what_a_function_model_returns_is_checked_and_its_errors_reach_the_loop() -> None:
    with pytest.raises(tl.ConfigurationError, match="fn must be a function"):
        tl.FunctionModel("not a function")  # type: ignore[arg-type]
    agent = tl.Agent(tl.FunctionModel(lambda request: 42), tools=[echo])
    with pytest.raises(tl.ExecuteError, match=r"must return a dict or a str, not int"):
        agent.run()
    calls = 0

    def flaky(request: dict[str, Any]) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:  # a ModelError passes through as it is: retried like a server's 503
            raise tl.ModelError("busy", status=503)
        return _answer()

    agent = tl.Agent(tl.FunctionModel(flaky), tools=[echo])
    clock = trio.testing.MockClock(autojump_threshold=0)
    assert trio.run(agent.run_async, clock=clock).output == "ok"
    assert calls == 2


def _python_block_after(page: str, heading: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    section = text.split(f"\n{heading}\n", 1)[1]
    return re.findall(r"```python\n(.*?)```", section, re.S)[0]


DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_model_client_docs_example_is_a_working_client() -> None:
    code = _python_block_after("models.md", "## Writing a client: `tl.ModelClient`")
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/models.md", "exec"), namespace)
    assert namespace["agent"].run({"q": 2}).output == "hello"


def test_the_function_model_docs_example_answers_from_the_state() -> None:
    code = _python_block_after("models.md", "## A model that reacts: `tl.FunctionModel`")
    namespace: dict[str, Any] = {"tl": tl}
    exec(compile(code, "docs/models.md", "exec"), namespace)

    @tl.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    agent = tl.Agent(namespace["model"], tools=[add])
    assert agent.run().output == {"answer": 3}


# -- item 9: the docs a new user looks for ---------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def _section(page: str, heading: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    assert f"\n{heading}\n" in text, f"{page} has no section {heading!r}"
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_lists_the_tools_page_and_every_relative_link_resolves() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "[docs/tools.md](docs/tools.md)" in readme
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            assert (page.parent / target).exists(), f"{page.name} links {target}"


def test_no_page_names_a_protocol_file_outside_the_repository() -> None:
    for page in PAGES:
        assert "PROTOCOL.md" not in page.read_text(encoding="utf-8"), page.name
    assert "[protocol.md](protocol.md)" in (DOCS / "concepts.md").read_text(encoding="utf-8")


def test_the_latent_tools_example_for_users_runs_as_written() -> None:
    code = re.findall(
        r"```python\n(.*?)```",
        _section("tools.md", "## Latent tools: the model answers itself"),
        re.S,
    )[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/tools.md", "exec"), namespace)
    result = namespace["result"]
    assert result.state["receipt"] == "posted: It runs calls as a graph."
    assert result.records["c1.1"].status == "done"
    assert result.records["c1.1"].started is None  # no function ran: the model answered


def test_a_timed_out_sync_tool_fails_at_once_and_its_thread_runs_on_as_documented() -> None:
    page = _section("tools.md", "## Timeouts")
    assert "keeps running in its worker thread until it returns" in page
    release, finished = threading.Event(), threading.Event()

    @tl.tool(timeout=5)
    def stuck(text: str) -> str:
        """Waits for the test to let it go."""
        release.wait()
        finished.set()
        return text

    calls = [{"_tool": "stuck", "text": "late", "_outputPath": "†state.late"}]
    result = trio.run(
        lambda: tl.execute(calls, tools=[stuck]),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    # The run is over while the function still runs: nothing it returns will be written.
    assert not finished.is_set()
    assert result.records["c1.0"].status == "failed"
    assert result.records["c1.0"].error["message"] == "TimeoutError: stuck ran over 5 s"
    assert result.state == {}
    release.set()
    assert finished.wait(10)
    assert result.state == {}


@pytest.mark.parametrize(
    ("page", "kind"), [("durability.md", tl.RunInfo), ("durability.md", tl.CallInfo)]
)
def test_every_field_of_the_stored_run_records_is_documented(page: str, kind: type) -> None:
    section = _section(page, "## Reading stored runs: `tl.RunInfo` and `tl.CallInfo`")
    table = section.split(f"A `tl.{kind.__name__}` has:", 1)[1].split("\n\n", 2)[1]
    documented = [
        name for row in table.splitlines()[2:] for name in re.findall(r"`(\w+)`", row.split("|")[1])
    ]
    assert documented == [field.name for field in dataclasses.fields(kind)]


def test_an_mcp_servers_plain_exception_text_is_hidden_and_tool_error_passes_it() -> None:
    pytest.importorskip("mcp")
    assert "`ToolError`" in _section("mcp.md", "## Results")
    server = tl.MCPServer.stdio(sys.executable, [str(ROOT / "tests" / "mcp_errors_server.py")])
    result = tl.run_calls(
        [
            {"_tool": "plain", "message": "disk quota exceeded"},
            {"_tool": "told", "message": "disk quota exceeded"},
        ],
        tools=[server],
    )
    plain, told = (result.records[f"c1.{i}"].error["message"] for i in (0, 1))
    assert "disk quota exceeded" not in plain and "Error executing tool plain" in plain
    assert "Error executing tool told: disk quota exceeded" in told


def test_the_readme_says_how_long_the_tests_take_and_keeps_its_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = readme.split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)```", setup, re.S)
    assert [command.strip().rsplit("&& ", 1)[1] for command in commands] == [
        "tickloop demo",
        "python -m pytest",
    ]
    assert re.search(r"whole suite takes\s+about \d+ minutes", setup)

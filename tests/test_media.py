"""Images and audio as media (issue 43): a tool's image is a `$media` reference in the
state, the journal, events and records, its bytes kept once (the store's media table, or
memory), and a request shows it as the provider's own content part."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import tickloop as tl
from conftest import npm_installed
from test_mcp_restart import HERE, Everything
from test_tool_calling import (
    PROVIDERS,
    AnthropicProvider,
    OpenAIChatProvider,
    ResponsesProvider,
    Server,
)

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@tl.tool
def snapshot(page: str) -> tl.Image:
    """A screenshot of a page."""
    return tl.Image(PNG, "image/png")


def _agent(provider: Any, server: Server, tools: list[Any], **options: Any) -> tl.Agent:
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    return tl.Agent(provider.model(client), tools=tools, protocol="tools", **options)


def _plan_server(answers: list[dict[str, Any]], bodies: list[dict[str, Any]]) -> tl.OpenAIChat:
    """An OpenAI-format client whose fake server answers `answers` in turn and keeps each
    request's body in `bodies`."""
    from test_models_openai import ok

    def server(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return ok([json.dumps(answers.pop(0))])

    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    return tl.OpenAIChat("gpt-4o-mini", base_url="http://llm.test/v1", api_key="k", client=client)


def _all_text(store_path: Path) -> str:
    """Every text the store holds outside the media table: journal, calls, runs."""
    connection = sqlite3.connect(store_path)
    try:
        parts = []
        for table in ("journal", "calls", "runs"):
            for row in connection.execute(f"SELECT * FROM {table}"):
                parts.extend(str(value) for value in row)
        return "\n".join(parts)
    finally:
        connection.close()


def test_an_image_from_the_reference_mcp_server_reaches_openai_chat_as_an_image_part(
    tmp_path: Path,
) -> None:
    npm_installed(HERE, "@modelcontextprotocol/server-everything")
    everything = Everything()
    everything.start()
    provider = OpenAIChatProvider()
    server = Server(
        provider.tool_turn([("call_a", "get-tiny-image", "{}")]),
        provider.text_turn("A tiny image."),
    )
    mcp = tl.MCPServer.http(everything.url, allowed=["get-tiny-image"])
    events: list[tl.RunEvent] = []
    store_path = tmp_path / "runs.db"
    agent = _agent(provider, server, [mcp], store=store_path, on_event=events.append)
    try:
        result = agent.run("Show me the tiny image.", run_id="r1")
    finally:
        everything.stop()
    assert result.output == "A tiny image."
    # The result holds a reference, whatever else the server sent with it.
    output = result.records["c1.0"].output
    refs = [
        item
        for item in (output if isinstance(output, list) else [output])
        if isinstance(item, dict) and "$media" in item
    ]
    assert len(refs) == 1 and refs[0]["mime"] == "image/png"
    ref = refs[0]
    # The second request: the tool message, then a user message with the image part.
    messages = server.bodies[1]["messages"]
    tool_message = next(m for m in messages if m["role"] == "tool")
    assert "$media" in tool_message["content"] and "base64" not in tool_message["content"]
    image_message = messages[messages.index(tool_message) + 1]
    assert image_message["role"] == "user"
    [image] = [part for part in image_message["content"] if part["type"] == "image_url"]
    url = image["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    data = base64.b64decode(url.split(",", 1)[1])
    assert len(data) == ref["bytes"]
    # The store holds the bytes once; the journal, rows and events only the reference.
    connection = sqlite3.connect(store_path)
    rows = connection.execute("SELECT media_id, mime, data FROM media").fetchall()
    connection.close()
    assert rows == [(ref["$media"], "image/png", data)]
    encoded = base64.b64encode(data).decode()
    assert encoded[:40] not in _all_text(store_path)
    assert ref["$media"] in _all_text(store_path)
    shown = json.dumps([repr(event) for event in events])
    assert encoded[:40] not in shown and ref["$media"] in shown


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_a_python_tools_image_is_the_providers_own_part(provider: Any) -> None:
    server = Server(
        provider.tool_turn([("call_a", "snapshot", '{"page": "home"}')]),
        provider.text_turn("Done."),
    )
    agent = _agent(provider, server, [snapshot])
    result = agent.run("Look at the home page.")
    ref = result.records["c1.0"].output
    assert ref == {"$media": ref["$media"], "mime": "image/png", "bytes": len(PNG)}
    assert result.media(ref) == tl.Image(PNG, "image/png")
    body = json.dumps(server.bodies[1])
    encoded = base64.b64encode(PNG).decode()
    assert encoded in body
    if isinstance(provider, OpenAIChatProvider):
        last = server.bodies[1]["messages"][-1]
        assert last["role"] == "user"
        assert {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}} in (
            last["content"]
        )
    elif isinstance(provider, AnthropicProvider):
        [block] = server.bodies[1]["messages"][-1]["content"]
        assert block["type"] == "tool_result"
        assert {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": encoded},
        } in block["content"]
    else:
        assert isinstance(provider, ResponsesProvider)
        [output] = [
            item["output"]
            for item in server.bodies[1]["input"]
            if item.get("type") == "function_call_output"
        ]
        assert {"type": "input_image", "image_url": f"data:image/png;base64,{encoded}"} in output


def test_run_calls_keeps_the_bytes_apart_and_the_state_holds_the_reference() -> None:
    result = tl.run_calls(
        [{"_tool": "snapshot", "page": "a", "_outputPath": "†state.shot"}], tools=[snapshot]
    )
    shot = result.state["shot"]
    assert shot["mime"] == "image/png" and shot["bytes"] == len(PNG)
    assert shot["$media"].startswith("m-")
    assert "iVBOR" not in json.dumps(result.messages)
    assert result.media(shot) == tl.Image(PNG, "image/png")  # the bytes, kept in memory
    assert result.media("m-unknown") is None


def test_image_and_audio_check_what_they_are_given() -> None:
    with pytest.raises(ValueError, match="image/"):
        tl.Image(PNG, "audio/wav")
    with pytest.raises(TypeError, match="bytes"):
        tl.Image(123, "image/png")  # type: ignore[arg-type]
    assert tl.Audio(b"RIFF", "audio/wav").ref()["bytes"] == 4
    assert tl.Image(base64.b64encode(PNG).decode(), "image/png") == tl.Image(PNG, "image/png")


def test_resume_replay_and_fork_see_the_same_image(tmp_path: Path) -> None:
    provider = OpenAIChatProvider()
    store = tmp_path / "runs.db"

    class Crash(Server):  # the process dies as the second request goes out
        def __call__(self, request: httpx.Request) -> httpx.Response:
            if self.bodies:
                raise KeyboardInterrupt
            return super().__call__(request)

    crashing = Crash(provider.tool_turn([("call_a", "snapshot", '{"page": "home"}')]))
    with pytest.raises(KeyboardInterrupt):
        _agent(provider, crashing, [snapshot], store=store).run("Look.", run_id="r1")
    # A new agent (no memory of the first): the request it sends reads the bytes back
    # from the store.
    resumed_server = Server(provider.text_turn("Done."))
    resumed = _agent(provider, resumed_server, [snapshot], store=store).resume("r1")
    assert resumed.output == "Done."
    encoded = base64.b64encode(PNG).decode()
    assert f"data:image/png;base64,{encoded}" in json.dumps(resumed_server.bodies[0])
    ref = resumed.records["c1.0"].output

    replayed = _agent(provider, Server(), [snapshot]).replay("r1", store=store)
    assert replayed.output == "Done." and replayed.records["c1.0"].output == ref
    assert replayed.media(ref) == tl.Image(PNG, "image/png")

    async def fork() -> tl.RunResult:
        return await _agent(provider, Server(), [snapshot]).fork_async(
            "r1", "r2", store=store, rerun_tools=["snapshot"]
        )

    forked = trio.run(fork)
    assert forked.records["c1.0"].output == ref  # the tool ran again: the same id
    assert forked.media(ref) == tl.Image(PNG, "image/png")
    connection = sqlite3.connect(store)
    assert connection.execute("SELECT count(*) FROM media").fetchone() == (1,)
    connection.close()


def test_a_plan_shows_the_image_it_wrote_to_the_state_as_an_image_part() -> None:

    bodies: list[dict[str, Any]] = []
    answers = [
        {
            "calls": [{"_tool": "snapshot", "page": "home", "_outputPath": "†state.shot"}],
            "output": None,
        },
        {"calls": [], "output": "seen"},
    ]
    model = _plan_server(answers, bodies)
    result = tl.Agent(model, tools=[snapshot]).run("Look.")
    assert result.output == "seen"
    ref = result.state["shot"]
    encoded = base64.b64encode(PNG).decode()
    assert encoded not in json.dumps(bodies[0])
    context = bodies[1]["messages"][-1]["content"]
    assert context[0]["type"] == "text" and ref["$media"] in context[0]["text"]
    assert {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}} in (
        context
    )


def test_a_code_plan_sees_the_image_by_reference_and_the_part_beside_it() -> None:
    seen: list[Any] = []
    answers = iter(
        ["```python\nshot = snapshot(page='home')\n```", "```python\nfinal_answer('ok')\n```"]
    )

    def answer(request: dict[str, Any]) -> str:
        seen.append(request["messages"][-1]["content"])
        return next(answers)

    result = tl.Agent(tl.FunctionModel(answer), tools=[snapshot], protocol="code").run("Look.")
    assert result.output == "ok"
    ref = result.state["shot"]
    assert isinstance(seen[0], str)
    parts = seen[1]
    assert {"type": "media", **ref} in parts  # the client makes its own part of it


def test_each_wire_format_makes_its_own_part_of_a_media_part() -> None:
    from tickloop._models._base import solution_messages

    ref = tl.Image(PNG, "image/png").ref()
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "media", **ref}]}
    ]

    def lookup(media_id: str) -> tuple[str, bytes] | None:
        return ("image/png", PNG) if media_id == ref["$media"] else None

    encoded = base64.b64encode(PNG).decode()
    anthropic = solution_messages(messages, "anthropic", lookup)[0]["content"]
    assert anthropic == [
        {"type": "text", "text": "x"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": encoded}},
    ]
    responses = solution_messages(messages, "openai-responses", lookup)[0]["content"]
    assert responses == [
        {"type": "input_text", "text": "x"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{encoded}"},
    ]
    with pytest.raises(tl.ModelError, match="not kept"):
        solution_messages(messages, "openai-chat", lambda media_id: None)


def test_the_timeline_shows_the_image_and_agui_carries_the_reference(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    provider = OpenAIChatProvider()
    server = Server(
        provider.tool_turn([("call_a", "snapshot", '{"page": "<script>x</script>"}')]),
        provider.text_turn("Done."),
    )
    result = _agent(provider, server, [snapshot], store=store).run("Look.", run_id="r1")
    ref = result.records["c1.0"].output
    page = tl.timeline_html(store, "r1")
    encoded = base64.b64encode(PNG).decode()
    assert f'<img src="data:image/png;base64,{encoded}"' in page
    assert f"c1.0 · {ref['$media']} · image/png · {len(PNG)} bytes" in page
    assert "<script>x</script>" not in page


def test_agui_carries_the_reference_not_the_bytes() -> None:
    from tickloop._observe._events import WriteListener
    from tickloop.agui._translate import Translation

    events: list[tl.RunEvent] = []

    class Keep(WriteListener):  # as the AG-UI app listens: the writes too
        def __call__(self, event: tl.RunEvent) -> None:
            events.append(event)

    result = tl.Agent(
        tl.ScriptedModel(
            [
                {
                    "calls": [{"_tool": "snapshot", "page": "a", "_outputPath": "†state.s"}],
                    "output": None,
                },
                {"calls": [], "output": "ok"},
            ]
        ),
        tools=[snapshot],
        on_event=Keep(),
    ).run("x")
    translation = Translation("t", "r")
    wire = [item.model_dump_json() for item in translation.started() + translation.snapshot(None)]
    for event in events:
        wire += [item.model_dump_json() for item in translation.event(event)]
    text = "\n".join(wire)
    ref = result.state["s"]
    assert translation.state["s"] == ref  # STATE_DELTA carried the reference
    assert ref["$media"].startswith("m-") and ref["$media"] in text
    assert base64.b64encode(PNG).decode()[:20] not in text


def test_a_sub_agents_image_is_kept_in_the_roots_store_and_shown_to_the_root(
    tmp_path: Path,
) -> None:

    child = tl.Agent(
        tl.ScriptedModel(
            [
                {
                    "calls": [{"_tool": "snapshot", "page": "a", "_outputPath": "†state.s"}],
                    "output": None,
                },
                {"calls": [], "output": "†state.s"},
            ]
        ),
        tools=[snapshot],
        name="looker",
        description="Looks at a page.",
    )
    bodies: list[dict[str, Any]] = []
    answers = [
        {
            "calls": [{"_tool": "looker", "task": "look", "_outputPath": "†state.seen"}],
            "output": None,
        },
        {"calls": [], "output": "seen"},
    ]
    model = _plan_server(answers, bodies)
    store = tmp_path / "runs.db"
    result = tl.Agent(model, tools=[child], store=store).run("Look.", run_id="r1")
    assert result.output == "seen", result.errors
    encoded = base64.b64encode(PNG).decode()
    assert f"data:image/png;base64,{encoded}" in json.dumps(bodies[1])
    connection = sqlite3.connect(store)
    assert connection.execute("SELECT count(*) FROM media").fetchone() == (1,)
    connection.close()

"""Web threads are sessions (PROTOCOL §16 "Web threads"): two AG-UI requests with one
`threadId`, read by the AG-UI project's own client, and two A2A messages with one
`contextId`, sent by a2a-sdk's client: the second run sees the first's answer."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.testing
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import new_text_part
from a2a.types import Message, Role, SendMessageRequest, StreamResponse

import tickloop as tl
from conftest import npm_installed
from tickloop import a2a, agui
from tickloop._human._guard import TokenGuard, serve_asyncio, serve_trio

CLIENT = Path(__file__).parent / "agui_client"


def _remembering_agent(store: Path) -> tl.Agent[Any]:
    """Answers each task, quoting every earlier answer its request shows."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        text = "\n".join(str(m["content"]) for m in request["messages"])
        task = re.findall(r'"task": ?"([^"]*)"', text.split("## input")[1])[0]
        earlier = re.findall(r"answered <([^>]*)>", text.split("## input")[0])
        return {"calls": [], "output": f"answered <{task}> after {earlier}"}

    return tl.Agent(tl.FunctionModel(answer), store=store)


def test_two_agui_requests_with_one_thread_id_share_its_history(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node is not None, "Node.js is needed for the AG-UI client test (.ci/run)"
    npm_installed(CLIENT, "@ag-ui/client")
    guard = TokenGuard(agui.app(_remembering_agent(tmp_path / "runs.db")))

    async def main() -> Any:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_trio, guard, "127.0.0.1", 0)
            command = [node, str(CLIENT / "two_runs.mjs"), f"http://127.0.0.1:{port}/"]
            done = await trio.run_process(
                [*command, guard.token, "Oslo", "window seat"], capture_stdout=True, check=False
            )
            nursery.cancel_scope.cancel()
        return done

    done = trio.run(main)
    seen = json.loads(done.stdout)
    assert done.returncode == 0, seen.get("error")
    first, second = seen["results"]
    assert first == "answered <Oslo> after []"
    assert second == "answered <window seat> after ['Oslo']"
    session = tl.SQLiteStore(tmp_path / "runs.db").session("thread-1")
    assert [run.run_id for run in session.runs] == ["run-1", "run-2"]


async def _send(client: Any, text: str, context_id: str | None) -> list[StreamResponse]:
    message = Message(role=Role.ROLE_USER, message_id=f"m-{text}", parts=[new_text_part(text)])
    if context_id is not None:
        message.context_id = context_id
    return [item async for item in client.send_message(SendMessageRequest(message=message))]


def _answer_and_context(seen: list[StreamResponse]) -> tuple[str, str]:
    [update] = [item.artifact_update for item in seen if item.HasField("artifact_update")]
    return update.artifact.parts[0].text, update.context_id


def test_two_a2a_messages_with_one_context_id_share_its_history(tmp_path: Path) -> None:
    agent = _remembering_agent(tmp_path / "runs.db")

    async def main() -> tuple[tuple[str, str], tuple[str, str]]:
        bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        guard = TokenGuard(agui.app(agent))

        def started(port: int) -> None:
            guard.app = a2a.app(agent, url=f"http://127.0.0.1:{port}/")
            bound.set_result(port)

        server = asyncio.ensure_future(
            serve_asyncio(guard, "127.0.0.1", 0, started=started, shutdown=stop.wait)
        )
        port = await asyncio.wait_for(bound, 10)
        try:
            headers = {"Authorization": f"Bearer {guard.token}"}
            async with httpx.AsyncClient(headers=headers) as http:
                config = ClientConfig(httpx_client=http)
                client = await create_client(f"http://127.0.0.1:{port}/", client_config=config)
                first = _answer_and_context(await _send(client, "Oslo", None))
                second = _answer_and_context(await _send(client, "window seat", first[1]))
                await client.close()
        finally:
            stop.set()
            await server
        return first, second

    (first, context), (second, again) = asyncio.run(main())
    assert first == "answered <Oslo> after []"
    assert second == "answered <window seat> after ['Oslo']"
    assert again == context
    session = tl.SQLiteStore(tmp_path / "runs.db").session(context)
    assert len(session.runs) == 2


GATE: dict[str, trio.Event] = {}


@tl.tool
async def visit(name: str) -> str:
    """Visit; the visit named in GATE waits for its gate."""
    if name in GATE:
        await GATE[name].wait()
    return name


async def _agui_events(app: Any, thread: str, run: str, text: str) -> list[dict[str, Any]]:
    """One AG-UI request straight through the ASGI app: the events it streams."""
    body = {
        "threadId": thread,
        "runId": run,
        "messages": [{"id": f"m-{run}", "role": "user", "content": text}],
    }
    raw = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent = False
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await trio.sleep_forever()  # the client stays till the stream ends
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    text_sent = b"".join(chunks).decode()
    return [json.loads(line[6:]) for line in text_sent.splitlines() if line.startswith("data: ")]


def _state_seen(events: list[dict[str, Any]]) -> tuple[Any, Any]:
    """The snapshot a client is sent, and the state it holds after applying the deltas."""
    import jsonpatch  # an RFC 6902 implementation that is not ours

    [snapshot] = [e["snapshot"] for e in events if e["type"] == "STATE_SNAPSHOT"]
    held = snapshot
    for event in events:
        if event["type"] == "STATE_DELTA":
            held = jsonpatch.apply_patch(held, event["delta"])
    return snapshot, held


def test_an_agui_run_queued_on_its_thread_starts_from_the_state_the_run_before_left(
    tmp_path: Path,
) -> None:
    """NOTE4: the app read the thread's state before the run held the session, so a run
    queued behind another started (and its snapshot showed) the state from before."""
    plan = {
        "calls": [
            {
                "_tool": "visit",
                "name": "†input.task",
                "_outputPath": "†state.visits",
                "_outputMethod": "push",
            }
        ]
    }
    agent = tl.Agent(
        tl.ScriptedModel([plan, {"calls": [], "output": "†state.visits"}]),
        tools=[visit],
        store=tmp_path / "runs.db",
        keep_state=True,
    )
    app = agui.app(agent)
    GATE.clear()
    GATE["one"] = trio.Event()
    seen: dict[str, list[dict[str, Any]]] = {}

    async def post(run: str, text: str) -> None:
        seen[run] = await _agui_events(app, "thread-1", run, text)

    async def main() -> None:
        await post("run-0", "zero")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(post, "run-1", "one")
            await trio.sleep(1)  # run-1 holds the thread, at its gate
            nursery.start_soon(post, "run-2", "two")
            await trio.sleep(1)  # run-2 waits for it, in the session's queue
            assert "run-2" not in seen
            GATE["one"].set()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    finished = {run: events[-1] for run, events in seen.items()}
    assert all(event["type"] == "RUN_FINISHED" for event in finished.values()), finished
    assert finished["run-2"]["result"] == ["zero", "one", "two"]
    assert _state_seen(seen["run-1"]) == ({"visits": ["zero"]}, {"visits": ["zero", "one"]})
    assert _state_seen(seen["run-2"]) == (
        {"visits": ["zero", "one"]},
        {"visits": ["zero", "one", "two"]},
    )
    kinds = [event["type"] for event in seen["run-2"]]
    assert kinds[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"]

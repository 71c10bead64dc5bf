"""`tickloop serve --agui` / `--a2a` (docs/web.md): the printed URL carries the token; a
request without it gets no answer; with it as `Authorization: Bearer`, the agent runs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import new_text_part
from a2a.types import Message, Role, SendMessageRequest
from google.protobuf.json_format import MessageToDict

ROOT = Path(__file__).parent.parent


@contextmanager
def _serving(*options: str) -> Iterator[tuple[str, str]]:
    """`tickloop serve` in a child process: its base URL and token, from its first line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    command = [sys.executable, "-m", "tickloop", "serve", "--port", "0", *options]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("tickloop serve: http://127.0.0.1:"), line
        url = urlsplit(line.split(": ", 1)[1].strip())
        yield f"{url.scheme}://{url.netloc}/", parse_qs(url.query)["token"][0]
    finally:
        process.terminate()
        process.wait(10)


def test_serve_agui_needs_the_token_and_streams_the_run_with_it() -> None:
    body = {"threadId": "t", "runId": "r", "messages": [], "forwardedProps": {"input": {}}}
    with _serving("--agui", "web_agents:agent") as (url, token):
        refused = httpx.post(url, json=body)
        foreign = httpx.post(
            url, json=body, headers={"Authorization": f"Bearer {token}", "Origin": "http://x.test"}
        )
        answered = httpx.post(url, json=body, headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 401 and "RUN" not in refused.text
    assert foreign.status_code == 403
    events = [json.loads(line[6:]) for line in answered.text.splitlines() if line]
    assert events[-1] == {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "result": 42}


def test_serve_a2a_needs_the_token_and_answers_the_a2a_client_with_it() -> None:
    async def ask(url: str, token: str) -> list[object]:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(headers=headers) as http:
            client = await create_client(url, client_config=ClientConfig(httpx_client=http))
            message = Message(role=Role.ROLE_USER, message_id="m", parts=[new_text_part("go")])
            seen = [item async for item in client.send_message(SendMessageRequest(message=message))]
            await client.close()
        return [
            MessageToDict(part.data)
            for item in seen
            if item.HasField("artifact_update")
            for part in item.artifact_update.artifact.parts
        ]

    with _serving("--a2a", "web_agents:agent") as (url, token):
        refused = httpx.get(url + ".well-known/agent-card.json")
        card = httpx.get(
            url + ".well-known/agent-card.json", headers={"Authorization": f"Bearer {token}"}
        ).json()
        outputs = asyncio.run(ask(url, token))
    assert refused.status_code == 401 and "doubler" not in refused.text
    assert card["name"] == "doubler"
    assert card["supportedInterfaces"][0]["url"] == url
    assert outputs == [42]


def test_a_busy_port_is_one_line_and_exit_2_in_every_serve(tmp_path: Path) -> None:
    """Issue 44: `serve --agui` printed a 75-line traceback and exited 1."""
    import socket

    import tickloop as tl

    store = tmp_path / "runs.db"
    agent = tl.Agent(tl.ScriptedModel([{"calls": [], "output": 1}]), store=store)
    agent.run({})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for options in (["--agui", "web_agents:agent"], ["--a2a", "web_agents:agent"],
                        ["--store", str(store)]):  # fmt: skip
            command = [sys.executable, "-m", "tickloop", "serve", "--port", port, *options]
            done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
            assert done.returncode == 2, (options, done.stderr)
            assert done.stderr == (
                f"tickloop serve: cannot listen on 127.0.0.1:{port}: "
                "[Errno 98] Address already in use\n"
            ), options

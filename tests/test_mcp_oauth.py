"""OAuth 2.1 for HTTP MCP servers (issue 43): `MCPServer.http(url, auth=tl.OAuth(...))`
against tests/mcp_oauth_server.py, an MCP server protected by the `mcp` package's
server-side auth. The test plays the browser: `open_url` follows the authorization
address with httpx, through the server's /authorize to tickloop's 127.0.0.1 redirect."""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import tickloop as tl
from test_mcp import _free_port

HERE = Path(__file__).resolve().parent
OAUTH_SERVER = HERE / "mcp_oauth_server.py"
#: Seconds an access token of the test server lasts: short, so the tests see refreshes.
EXPIRES = 2


class OAuthServer:
    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process = subprocess.Popen(
            [sys.executable, str(OAUTH_SERVER), str(self.port), str(EXPIRES)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the OAuth test server exited with {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the OAuth test server did not listen within 30 s")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture
def oauth_server() -> Iterator[OAuthServer]:
    server = OAuthServer()
    try:
        yield server
    finally:
        server.stop()


class Browser:
    """Follows the authorization address as a browser would, redirects and all."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.opened: list[str] = []
        self.pages: list[str] = []

    def __call__(self, address: str) -> None:
        self.opened.append(address)
        time.sleep(self.delay)  # a person reading the page (in the hook's own thread)
        response = httpx.get(address, follow_redirects=True, timeout=10)
        self.pages.append(response.text)


def _tokens(token_file: Path) -> set[str]:
    record = next(iter(json.loads(token_file.read_text()).values()))
    tokens = record["tokens"]
    return {tokens["access_token"], tokens["refresh_token"]}


def _plan(tool: str, **params: Any) -> tl.ScriptedModel:
    return tl.ScriptedModel(
        [
            {"calls": [{"_tool": tool, **params, "_outputPath": "†state.out"}], "output": None},
            {"calls": [], "output": "done"},
        ]
    )


def test_the_full_flow_runs_headless_refreshes_and_keeps_tokens_out_of_the_record(
    oauth_server: OAuthServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    browser = Browser()
    token_file = tmp_path / "oauth" / "tokens.json"
    store = tmp_path / "runs.db"
    events: list[tl.RunEvent] = []
    seen: set[str] = set()

    def agent(auth: tl.OAuth, server: tl.MCPServer | None = None) -> tl.Agent:
        server = server or tl.MCPServer.http(oauth_server.url, auth=auth)
        return tl.Agent(_plan("add", a=2, b=3), tools=[server], store=store, on_event=events.append)

    async def one_process() -> list[tl.RunResult[Any]]:
        auth = tl.OAuth(open_url=browser, token_file=token_file)
        server = tl.MCPServer.http(oauth_server.url, auth=auth)
        async with server:  # one connection for both runs
            first = await agent(auth, server).run_async({}, run_id="r1")
            seen.update(_tokens(token_file))
            await trio.sleep(EXPIRES + 0.5)  # the access token expires
            second = await agent(auth, server).run_async({}, run_id="r2")
            seen.update(_tokens(token_file))
        return [first, second]

    results = trio.run(one_process)
    # Another process: the 0600 file holds the refresh token; nobody is asked again.
    time.sleep(EXPIRES + 0.5)
    later = tl.OAuth(open_url=browser, token_file=token_file)
    results.append(agent(later).run({}, run_id="r3"))
    seen.update(_tokens(token_file))
    counts = tl.run_calls(
        [{"_tool": "oauth_counts", "_outputPath": "†state.counts"}],
        tools=[tl.MCPServer.http(oauth_server.url, auth=later)],
    ).state["counts"]

    assert [result.output for result in results] == ["done"] * 3
    assert [result.state["out"] for result in results] == [{"result": 5}] * 3
    assert len(browser.opened) == 1  # one person, one authorization
    opened = urllib.parse.parse_qs(urllib.parse.urlsplit(browser.opened[0]).query)
    assert opened["code_challenge_method"] == ["S256"] and opened["redirect_uri"][0].startswith(
        "http://127.0.0.1:"
    )
    assert "received the authorization" in browser.pages[0]
    assert counts["registrations"] == 1 and counts["codes"] == 1
    assert counts["refreshes"] >= 2  # on the open connection, and in the later "process"
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    # No token in the store (every file of it), the events, the pages or the logs.
    assert len(seen) >= 4
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("runs.db*"))
    shown = repr(events) + "".join(tl.timeline_html(store, f"r{n}") for n in (1, 2, 3))
    shown += "".join(browser.pages) + caplog.text
    for token in seen:
        assert token.encode() not in stored
        assert token not in shown
    assert "OAuth(token_file=" in repr(later) and "access-" not in repr(later)


def test_a_person_slower_than_the_connect_timeout_is_waited_for(
    oauth_server: OAuthServer,
) -> None:
    browser = Browser(delay=6)
    auth = tl.OAuth(open_url=browser)
    server = tl.MCPServer.http(oauth_server.url, auth=auth, connect_timeout=4)
    result = tl.run_calls(
        [{"_tool": "add", "a": 1, "b": 1, "_outputPath": "†state.out"}], tools=[server]
    )
    assert result.errors == [] and result.state["out"] == {"result": 2}
    assert len(browser.opened) == 1


def test_a_refusal_or_nobody_answering_is_a_clear_error(oauth_server: OAuthServer) -> None:
    def refuse(address: str) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(address).query)
        redirect = query["redirect_uri"][0]
        state = query["state"][0]
        httpx.get(f"{redirect}?error=access_denied&error_description=no+thanks&state={state}")

    refused = tl.MCPServer.http(oauth_server.url, auth=tl.OAuth(open_url=refuse))
    with pytest.raises(tl.ConfigurationError, match="refused: access_denied \\(no thanks\\)"):
        tl.run_calls([{"_tool": "add", "a": 1, "b": 1}], tools=[refused])

    ignored = tl.MCPServer.http(
        oauth_server.url, auth=tl.OAuth(open_url=lambda address: None, timeout=0.5)
    )
    with pytest.raises(tl.ConfigurationError, match=r"nobody authorized tickloop .* within 0\.5 s"):
        tl.run_calls([{"_tool": "add", "a": 1, "b": 1}], tools=[ignored])


def test_bad_oauth_options_are_refused_before_anything_runs() -> None:
    with pytest.raises(tl.ConfigurationError, match="scopes must be a list"):
        tl.OAuth(scopes="tools")  # type: ignore[arg-type]
    with pytest.raises(tl.ConfigurationError, match="redirect_port must be a port"):
        tl.OAuth(redirect_port=70000)
    with pytest.raises(tl.ConfigurationError, match=r"auth must be a tl\.OAuth"):
        tl.MCPServer.http("http://127.0.0.1:9/mcp", auth="token")  # type: ignore[arg-type]

"""MCP over streamable HTTP across a server restart (issue 29, item 7): calls made while
the server is down wait for it (reconnecting with backoff) and go through once it is
back; an unknown session (404, or the reference server's 400 "No valid session ID") is a
lost session. Against tests/mcp_server.py (the `mcp` package's server) and the MCP
project's reference server from npm (`@modelcontextprotocol/server-everything`)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import trio

import tickloop as tl
from conftest import npm_installed
from test_mcp import HTTPServer, _free_port

HERE = Path(__file__).resolve().parent
EVERYTHING = HERE / "node_modules" / "@modelcontextprotocol" / "server-everything"


def restart_later(http: Any, seconds: float) -> threading.Thread:
    def later() -> None:
        time.sleep(seconds)
        http.start()

    thread = threading.Thread(target=later)
    thread.start()
    return thread


def test_calls_made_while_the_server_is_down_go_through_once_it_is_back() -> None:
    http = HTTPServer()
    http.start()
    server = tl.MCPServer.http(http.url)

    async def main() -> tuple[Any, Any, Any]:
        async with server:
            first = await tl.execute([{"_tool": "pid", "_outputPath": "†state.p"}], tools=[server])
            http.stop()
            thread = restart_later(http, 1.5)
            try:
                # Idempotent: it may be sent again whatever became of the first try.
                during = await tl.execute(
                    [{"_tool": "pid", "_outputPath": "†state.p"}], tools=[server]
                )
            finally:
                await trio.to_thread.run_sync(thread.join)
            after = await tl.execute(
                [{"_tool": "fetch_page", "url": "v", "_outputPath": "†state.f"}], tools=[server]
            )
            return first, during, after

    try:
        first, during, after = trio.run(main)
    finally:
        http.stop()
    assert during.errors == [], during.errors
    assert during.state["p"] != first.state["p"]  # a new server process
    assert after.errors == [] and after.state["f"]["url"] == "v"


class Everything:
    """The MCP project's reference server, streamable HTTP, on a free port."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        entry = EVERYTHING / "dist" / "index.js"
        self.process = subprocess.Popen(
            ["node", str(entry), "streamableHttp"],
            env={**os.environ, "PORT": str(self.port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server-everything exited with {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server-everything did not listen within 30 s")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


def test_the_reference_server_forgetting_the_session_is_a_lost_session() -> None:
    npm_installed(HERE, "@modelcontextprotocol/server-everything")
    everything = Everything()
    everything.start()
    server = tl.MCPServer.http(everything.url, allowed=["echo"])

    async def main() -> tuple[Any, Any]:
        async with server:
            first = await tl.execute(
                [{"_tool": "echo", "message": "one", "_outputPath": "†state.a"}], tools=[server]
            )
            everything.stop()
            thread = restart_later(everything, 1.0)
            try:
                second = await tl.execute(
                    [{"_tool": "echo", "message": "two", "_outputPath": "†state.a"}],
                    tools=[server],
                )
            finally:
                await trio.to_thread.run_sync(thread.join)
            return first, second

    try:
        first, second = trio.run(main)
    finally:
        everything.stop()
    assert first.errors == [] and second.errors == [], second.errors
    assert "two" in str(second.state["a"])

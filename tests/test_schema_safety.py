"""A schema can neither reach the network nor stall the run (issue 29, items 2 and 9).

A `$ref` to anything outside the schema is refused: a ConfigurationError for a tool made
here, that call's Error Message for an MCP tool whose listed schema has one. A `pattern`
is run by a linear-time engine, so no pattern and no string stall the loop; a pattern that
engine cannot run in bounded time is refused the same way.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tickloop as tl

HERE = Path(__file__).resolve().parent
HOSTILE = HERE / "mcp_hostile_server.py"
BOUND = 30.0  # seconds a hostile case may take before the test calls it a hang


class Listener:
    """A TCP listener on 127.0.0.1 that records whether anyone connected; never answers."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen()
        self.contacted = threading.Event()
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.socket.getsockname()[1]}/schema.json"

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.accepted.append(connection)
            self.contacted.set()

    def close(self) -> None:
        self.socket.close()
        for connection in self.accepted:
            connection.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    try:
        yield server
    finally:
        server.close()


def bounded(work: Callable[[], Any]) -> Any:
    """Run `work` on a thread and give up on it (failing the test) after BOUND seconds."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), "the run hung on a schema"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def hostile_server(tmp_path: Path, script: dict[str, Any], **options: Any) -> tl.MCPServer:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return tl.MCPServer.stdio(sys.executable, [str(HOSTILE), str(path)], **options)


def probe_handler(x: Any = None) -> Any:
    return {"x": x}


# -- item 2: no schema fetches anything ---------------------------------------------------


@pytest.mark.parametrize("where", ["parameters", "output"])
def test_a_remote_ref_in_a_local_tool_is_a_configuration_error(
    listener: Listener, where: str
) -> None:
    remote = {"type": "object", "properties": {"x": {"$ref": listener.url}}}
    schemas = {"parameters": remote} if where == "parameters" else {"output": remote}
    with pytest.raises(tl.ConfigurationError, match=r"refers to .*schema\.json") as raised:
        tl.Tool("probe", handler=probe_handler, **schemas)
    assert "never fetch" in str(raised.value)
    assert not listener.contacted.is_set()


def test_a_ref_to_nowhere_inside_the_schema_is_a_configuration_error() -> None:
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}
    with pytest.raises(tl.ConfigurationError, match="#/\\$defs/missing"):
        tl.Tool("probe", handler=probe_handler, parameters=schema)


def test_local_refs_and_the_meta_schema_still_resolve() -> None:
    schema = {
        "$id": "https://example.invalid/root.json",
        "type": "object",
        "$defs": {
            "n": {"type": "integer"},
            "other": {"$id": "other.json", "type": "string"},
        },
        "properties": {
            "n": {"$ref": "#/$defs/n"},
            "s": {"$ref": "other.json"},
            "any": {"$ref": "https://json-schema.org/draft/2020-12/schema"},
        },
    }

    def count(n: int, s: str, any: Any = None) -> int:
        return n

    probe = tl.Tool("probe", handler=count, parameters=schema)
    result = tl.run_calls(
        [
            {"_tool": "probe", "n": 1, "s": "a", "_outputPath": "†state.good"},
            {"_tool": "probe", "n": "1", "s": "a", "_outputPath": "†state.bad"},
        ],
        tools=[probe],
    )
    assert result.state == {"good": 1}
    assert result.records["c1.1"].error["type"] == "structural"


def test_an_mcp_tool_whose_schema_refers_to_the_network_fails_its_call_only(
    listener: Listener, tmp_path: Path
) -> None:
    server = hostile_server(
        tmp_path,
        {
            "tools": [
                {
                    "name": "remote",
                    "inputSchema": {"type": "object", "properties": {"x": {"$ref": listener.url}}},
                },
                {"name": "plain", "inputSchema": {"type": "object"}},
            ]
        },
    )
    result = bounded(
        lambda: tl.run_calls(
            [
                {"_tool": "remote", "x": 1, "_outputPath": "†state.remote"},
                {"_tool": "plain", "_outputPath": "†state.plain"},
            ],
            tools=[server],
        )
    )
    assert not listener.contacted.is_set()
    assert result.state == {"plain": "ok"}
    error = result.records["c1.0"].error
    assert error["type"] == "structural"
    assert listener.url in error["message"] and "never fetch" in error["message"]


# -- item 9: no pattern stalls the loop ---------------------------------------------------

CATASTROPHIC = "^(a+)+$"  # backtracking engines take 2^n steps on "aaa…a!"


def test_a_catastrophic_pattern_ends_the_call_invalid_without_stalling() -> None:
    def echo(text: str) -> str:
        return text

    tool = tl.Tool(
        "echo",
        handler=echo,
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string", "pattern": CATASTROPHIC}},
            "required": ["text"],
        },
    )
    attack = "a" * 64 + "!"
    result = bounded(
        lambda: tl.run_calls(
            [
                {"_tool": "echo", "text": attack, "_outputPath": "†state.attack"},
                {"_tool": "echo", "text": "aaa", "_outputPath": "†state.fine"},
            ],
            tools=[tool],
        )
    )
    assert result.state == {"fine": "aaa"}
    error = result.records["c1.0"].error
    assert error["type"] == "structural"
    assert "does not match" in error["message"] and CATASTROPHIC in error["message"]


def test_a_catastrophic_pattern_property_name_is_checked_in_bounded_time() -> None:
    schema = {"type": "object", "patternProperties": {CATASTROPHIC: {"type": "integer"}}}
    tool = tl.Tool("keys", parameters=schema)  # latent: only its schema matters here
    assert tool.parameter_validator.is_valid({"a" * 64 + "!": "not checked", "aa": 1})
    assert not tool.parameter_validator.is_valid({"aa": "x"})


@pytest.mark.parametrize("pattern", ["^(?=a)a+$", "^(a)\\1$"])
def test_a_pattern_that_cannot_run_in_bounded_time_is_refused(pattern: str) -> None:
    schema = {"type": "object", "properties": {"text": {"type": "string", "pattern": pattern}}}
    with pytest.raises(tl.ConfigurationError, match="cannot be checked in bounded time"):
        tl.Tool("probe", handler=probe_handler, parameters=schema)


def test_an_mcp_tool_with_such_a_pattern_fails_its_calls_with_the_reason(
    tmp_path: Path,
) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "(?=a)a"}}}
    server = hostile_server(tmp_path, {"tools": [{"name": "look", "inputSchema": schema}]})
    result = bounded(
        lambda: tl.run_calls(
            [{"_tool": "look", "x": "a", "_outputPath": "†state.a"}], tools=[server]
        )
    )
    assert "cannot be checked in bounded time" in result.records["c1.0"].error["message"]

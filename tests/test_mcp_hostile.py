"""MCP servers that answer what the client cannot parse, or list clashing names (issue 29,
items 8 and 12), against tests/mcp_hostile_server.py (the protocol by hand, over stdio)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import tickloop as tl
from test_schema_safety import bounded

HERE = Path(__file__).resolve().parent
HOSTILE = HERE / "mcp_hostile_server.py"
OBJECT = {"type": "object"}


def hostile_server(tmp_path: Path, script: dict[str, Any], **options: Any) -> tl.MCPServer:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return tl.MCPServer.stdio(sys.executable, [str(HOSTILE), str(path)], **options)


DEEP = (  # written as text: Python's own decoder could not hold it either
    '{"content": [{"type": "text", "text": "deep"}], "structuredContent": '
    + '{"a": ' * 2000
    + "1"
    + "}" * 2000
    + "}"
)
LONE = '{"content": [{"type": "text", "text": "a\\ud800"}]}'


@pytest.mark.parametrize(
    ("answer", "said"),
    [(DEEP, "recursion limit"), (LONE, "hex escape")],
    ids=["2000-deep", "escaped-lone-surrogate"],
)
def test_an_answer_the_client_cannot_parse_is_that_calls_error(
    tmp_path: Path, answer: str, said: str
) -> None:
    server = hostile_server(
        tmp_path,
        {"tools": [{"name": "odd", "inputSchema": OBJECT}], "answers": {"odd": answer}},
    )
    result = bounded(
        lambda: tl.run_calls([{"_tool": "odd", "_outputPath": "†state.odd"}], tools=[server])
    )
    error = result.records["c1.0"].error
    assert result.records["c1.0"].status == "failed"
    assert "cannot parse" in error["message"] and said in error["message"]
    assert "ran over" not in error["message"]  # it answered: not a timeout


def test_mcp_calls_have_a_default_timeout() -> None:
    assert tl.MCPServer.stdio("true").timeout == 300.0
    assert tl.MCPServer.stdio("true", timeout=None).timeout is None


def test_a_call_that_is_never_answered_ends_at_its_timeout(tmp_path: Path) -> None:
    server = hostile_server(
        tmp_path,
        {
            "tools": [
                {"name": "mute", "inputSchema": OBJECT},
                {"name": "fine", "inputSchema": OBJECT},
            ],
            "answers": {"mute": "never"},
        },
        timeout=1,
    )
    result = bounded(
        lambda: tl.run_calls(
            [
                {"_tool": "mute", "_outputPath": "†state.a"},
                {"_tool": "fine", "_outputPath": "†state.b"},
            ],
            tools=[server],
        )
    )
    assert result.state == {"b": "ok"}
    assert result.records["c1.0"].status == "failed"


def test_two_tools_of_one_server_that_clash_after_cleaning_are_both_named(
    tmp_path: Path,
) -> None:
    server = hostile_server(
        tmp_path,
        {
            "tools": [
                {"name": "get.page", "inputSchema": OBJECT},
                {"name": "get_page", "inputSchema": OBJECT},
            ]
        },
    )
    with pytest.raises(tl.ConfigurationError) as raised:
        bounded(lambda: tl.run_calls([{"_tool": "get_page"}], tools=[server]))
    message = str(raised.value)
    assert "'get.page'" in message and "'get_page'" in message

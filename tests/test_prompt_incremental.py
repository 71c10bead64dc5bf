"""Rendering a request reads only the log messages appended since the previous one (issue 15).

A long run's requests must not cost more per iteration as its log grows, so the loop's
`PromptRenderer` keeps what each request needs from the history up to date. It must still
render exactly what a fresh rendering of the whole log renders.
"""

from __future__ import annotations

from typing import Any

import tickloop as tl
from tickloop._agent._prompt import PromptRenderer, render_messages
from tickloop._core._log import ContextLog
from tickloop._core._tools import ToolSet


@tl.tool
async def echo(text: str) -> str:
    """Return the text."""
    return text


TOOLS = ToolSet([echo])


def history() -> list[dict[str, Any]]:
    return [
        {"type": "text", "role": "system", "text": "be brief"},
        {"type": "text", "role": "user", "text": "hello"},
        {"type": "data", "kind": "state", "data": {"a": 1}, "description": "the state"},
        {"type": "data", "kind": "notes", "data": ["x"], "schema": {"type": "array"}},
        {"type": "solution", "iteration": 0, "text": "{}"},
        {"type": "plan", "iteration": 0, "calls": [{"_tool": "echo", "text": "hi"}]},
        {"type": "data", "kind": "error", "data": {"message": "boom"}},
        {"type": "data", "kind": "state", "data": {"b": 2}, "_outputMethod": "merge"},
        {"type": "text", "role": "assistant", "text": "ok"},
        {"type": "solution", "iteration": 1, "text": "{}"},
        {"type": "data", "kind": "notes", "data": ["y"], "description": "later notes"},
        {"type": "data", "kind": "error", "data": {"message": "again"}},
    ]


def test_an_incremental_rendering_equals_a_fresh_one_at_every_step() -> None:
    log = ContextLog()
    renderer = PromptRenderer()
    for message in history():
        log.append(message)
        incremental = renderer.render(log, TOOLS, "Do it.", {"type": "string"}, 4000)
        assert incremental == render_messages(log, TOOLS, "Do it.", {"type": "string"}, 4000)


def test_old_messages_are_not_read_again() -> None:
    log = ContextLog()
    for message in history():
        log.append(message)
    renderer = PromptRenderer()
    renderer.render(log, TOOLS, None, None)
    log.messages[1]["text"] = "changed behind the renderer's back"  # already read once
    log.append({"type": "text", "role": "user", "text": "new"})
    chat = [m["content"] for m in renderer.render(log, TOOLS, None, None)[1:-1]]
    assert chat == ["hello", "ok", "new"]


def test_another_log_is_read_from_the_start() -> None:
    renderer = PromptRenderer()
    first, second = ContextLog(), ContextLog()
    first.append({"type": "text", "role": "user", "text": "one"})
    second.append({"type": "text", "role": "user", "text": "two"})
    assert renderer.render(first, TOOLS, None, None)[1]["content"] == "one"
    assert renderer.render(second, TOOLS, None, None)[1]["content"] == "two"


def test_the_returned_messages_are_the_callers_to_change() -> None:
    log = ContextLog()
    log.append({"type": "text", "role": "user", "text": "hello"})
    renderer = PromptRenderer()
    renderer.render(log, TOOLS, None, None)[1]["content"] = "mutated"
    assert renderer.render(log, TOOLS, None, None)[1]["content"] == "hello"

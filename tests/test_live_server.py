"""A real OpenAI-compatible server, when one is configured; skipped otherwise.

Set TICKLOOP_LIVE_BASE_URL (including /v1) and optionally TICKLOOP_LIVE_MODEL and
TICKLOOP_LIVE_STRUCTURED (json_schema / json_object / none). docs/models.md shows how to
run a small llama.cpp server offline on this machine.
"""

from __future__ import annotations

import os

import pytest

import tickloop as tl

BASE_URL = os.environ.get("TICKLOOP_LIVE_BASE_URL")
pytestmark = pytest.mark.skipif(not BASE_URL, reason="TICKLOOP_LIVE_BASE_URL is not set")


@tl.tool
def add(a: int, b: int) -> int:
    """Add two integers and return the sum."""
    return a + b


def test_a_real_server_drives_the_loop_to_an_end_without_crashing() -> None:
    model = tl.OpenAIChat(
        os.environ.get("TICKLOOP_LIVE_MODEL", "local"),
        base_url=BASE_URL,
        api_key=os.environ.get("TICKLOOP_LIVE_API_KEY", "none"),
        structured=os.environ.get("TICKLOOP_LIVE_STRUCTURED", "json_schema"),  # type: ignore[arg-type]
    )
    agent = tl.Agent(
        model,
        tools=[add],
        output={"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]},
        instructions="Use the add tool to add 2 and 3, then answer with the sum.",
        max_iterations=4,
    )
    try:
        result = agent.run({"a": 2, "b": 3})
    except tl.MaxIterationsError as error:
        # A tiny model may never answer correctly: the loop must still end cleanly, with
        # its mistakes turned into Error Messages rather than exceptions.
        assert any(m.get("type") == "solution" for m in error.messages)
        return
    assert isinstance(result.output, dict) and "sum" in result.output

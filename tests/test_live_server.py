"""A real OpenAI-compatible server, when one is up; skipped otherwise.

The server is TICKLOOP_LIVE_BASE_URL (including /v1) when it is set; else the llama.cpp
server of docs/models.md on its documented port, http://127.0.0.1:8765/v1, when something
there answers `GET /v1/models`. Options: TICKLOOP_LIVE_MODEL, TICKLOOP_LIVE_API_KEY and
TICKLOOP_LIVE_STRUCTURED (json_schema / json_object / none). CI starts no model server:
its runs against one are the recordings tests/test_recorded_live.py replays.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest
from tests.recordings import record

import tickloop as tl

DEFAULT_BASE_URL = "http://127.0.0.1:8765/v1"


def _live_base_url() -> str | None:
    configured = os.environ.get("TICKLOOP_LIVE_BASE_URL")
    if configured:
        return configured
    try:
        answer = httpx.get(f"{DEFAULT_BASE_URL}/models", timeout=2.0)
    except httpx.HTTPError:
        return None
    return DEFAULT_BASE_URL if answer.status_code == 200 else None


BASE_URL = _live_base_url()
pytestmark = pytest.mark.skipif(
    BASE_URL is None,
    reason=f"no model server: TICKLOOP_LIVE_BASE_URL is not set and {DEFAULT_BASE_URL} "
    "does not answer",
)


def _model() -> tl.OpenAIChat:
    return tl.OpenAIChat(
        os.environ.get("TICKLOOP_LIVE_MODEL", "local"),
        base_url=BASE_URL,
        api_key=os.environ.get("TICKLOOP_LIVE_API_KEY", "none"),
        structured=os.environ.get("TICKLOOP_LIVE_STRUCTURED", "json_schema"),  # type: ignore[arg-type]
        temperature=0.0,
        extra_body={"max_tokens": record.MAX_TOKENS},  # a small model may write on and on
    )


@tl.tool
def add(a: int, b: int) -> int:
    """Add two integers and return the sum."""
    return a + b


def test_a_real_server_drives_the_loop_to_an_end_without_crashing() -> None:
    agent = tl.Agent(
        _model(),
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


@pytest.mark.parametrize("run_id", sorted(record.RUNS))
def test_the_recorded_agents_run_against_the_real_server_and_replay_from_its_store(
    run_id: str, tmp_path: Any
) -> None:
    """What tests/recordings/record.py records, end to end: a real run of each protocol
    ends (with an output, or a clean error a weak model earned), and its store replays it."""
    make, task = record.RUNS[run_id]
    store = tl.SQLiteStore(tmp_path / "runs.db")
    try:
        first = make(_model(), store).run(task, run_id=run_id)
    except tl.RunStopped as error:
        assert error.messages  # the conversation so far, for a resume
        return
    again = make(_model()).replay(run_id, store=store)
    assert again.output == first.output
    strict = make(tl.ReplayModel(store, run_id, strict=True)).run(task)
    assert strict.output == first.output

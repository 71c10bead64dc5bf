"""Runs recorded against a real model server replay offline (docs/replay.md).

tests/recordings/live.db holds one real run per protocol of the agents in
tests/recordings/record.py, made with `tl.OpenAIChat` against llama.cpp's server and a
270M-parameter Gemma 3 model (docs/replay.md says how to record them again). No server
and no model are needed here: `agent.replay` answers from the record with no model call,
and a strict `tl.ReplayModel` checks that today's agents send the very requests the real
server got, so a change to a prompt, a tool or a schema fails here, naming what changed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.recordings import record

import tickloop as tl

RUN_IDS = sorted(record.RUNS)


@pytest.fixture
def store(tmp_path: Path) -> tl.SQLiteStore:
    """A copy of the committed recording: opening a store must not touch the repo's."""
    copy = tmp_path / "live.db"
    shutil.copyfile(record.RECORDING, copy)
    return tl.SQLiteStore(copy)


class Unreachable:
    """An `OpenAIChat` transport that counts the requests it is sent and fails each one."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(503, json={"error": "no model server in this test"})

    def model(self) -> tl.OpenAIChat:
        client = httpx.AsyncClient(transport=httpx.MockTransport(self))
        return tl.OpenAIChat("local", base_url="http://127.0.0.1:9/v1", client=client)


def test_the_committed_recording_holds_a_finished_real_run_of_each_protocol(
    store: tl.SQLiteStore,
) -> None:
    assert {run.run_id: run.status for run in store.runs()} == dict.fromkeys(RUN_IDS, "done")
    assert store.protocol("solution") == "solution" and store.protocol("tools") == "tools"
    # Made by the chat-completions client, not by a scripted stand-in; the solution run
    # called its tool.
    assert tl.ReplayModel(store, "tools").turn_format == "openai-chat"
    assert any(c.tool == "capital_of" and c.status == "done" for c in store.calls("solution"))
    assert record.RECORDING.stat().st_size < 200_000


@pytest.mark.parametrize("run_id", RUN_IDS)
def test_a_recorded_run_replays_its_output_with_no_model_call_and_no_handler(
    store: tl.SQLiteStore, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(record, "CAPITALS", _Counting(record.CAPITALS, ran))
    make, _task = record.RUNS[run_id]
    server = Unreachable()
    replayed = make(server.model()).replay(run_id, store=store)
    assert replayed.output == store.run(run_id).output
    assert replayed.output is not None
    assert server.requests == [] and ran == []
    assert [run.run_id for run in store.runs()] == RUN_IDS  # nothing written


@pytest.mark.parametrize("run_id", RUN_IDS)
def test_todays_agent_sends_the_recorded_requests_and_reaches_the_recorded_output(
    store: tl.SQLiteStore, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(record, "CAPITALS", _Counting(record.CAPITALS, ran))
    make, task = record.RUNS[run_id]
    result = make(tl.ReplayModel(store, run_id, strict=True)).run(task)
    assert result.output == store.run(run_id).output
    # The tools ran for real, against the model's recorded answers, and every call ended
    # as it did against the server (the solution run's include failed and invalid ones).
    recorded_calls = store.calls(run_id)
    assert {key: r.status for key, r in result.records.items()} == {
        c.id: c.status for c in recorded_calls
    }
    assert len(ran) >= sum(c.status == "done" for c in recorded_calls)


def test_a_changed_prompt_fails_the_strict_replay_naming_the_difference(
    store: tl.SQLiteStore,
) -> None:
    make, task = record.RUNS["solution"]
    agent = make(tl.ReplayModel(store, "solution", strict=True))
    agent.instructions = (agent.instructions or "") + " Be brief."
    with pytest.raises(tl.ExecuteError, match=r"request 1 differs .*'solution'.*Be brief"):
        agent.run(task)


class _Counting(dict[str, str]):
    """The capitals table, noting each lookup (the tool's handler reads it)."""

    def __init__(self, table: dict[str, str], ran: list[str]) -> None:
        super().__init__(table)
        self.ran = ran

    def get(self, key: str, default: Any = None) -> Any:
        self.ran.append(key)
        return super().get(key, default)

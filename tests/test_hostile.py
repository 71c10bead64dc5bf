"""Hostile inputs and broken disks (issue 17): each fault is a clear error, a store is
never lost, no secret leaks."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

import tickloop as tl


def statuses(result: Any) -> dict[str, str]:
    return {call_id: record.status for call_id, record in result.records.items()}


@tl.tool
def add(a: int, b: int) -> int:
    return a + b


# -- 3, 5: what a tool or hook raises is that call's error ---------------------------------


class Custom(BaseException):
    pass


@pytest.mark.parametrize(
    "raised",
    [asyncio.CancelledError(), Custom("boom"), "foreign-cancel"],
    ids=["asyncio-cancelled", "custom-base-exception", "foreign-trio-cancelled"],
)
def test_a_tool_raising_a_base_exception_fails_only_its_call(raised: Any) -> None:
    @tl.tool
    async def bad() -> int:
        if raised == "foreign-cancel":
            with trio.CancelScope() as scope:
                scope.cancel()
                try:
                    await trio.sleep(1)
                except trio.Cancelled as cancelled:
                    error = cancelled
            raise error  # re-raised outside the scope it belongs to
        raise raised

    @tl.tool
    async def slow() -> int:
        await trio.sleep(0.01)
        return 7

    result = tl.run_calls(
        [
            {"_tool": "bad", "_outputPath": "†state.a"},
            {"_tool": "slow", "_outputPath": "†state.b"},
            {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.c"},
        ],
        tools=[bad, slow, add],
    )
    assert statuses(result) == {"c1.0": "failed", "c1.1": "done", "c1.2": "done"}
    assert result.state == {"b": 7, "c": 3}
    assert result.records["c1.0"].error["type"] == "runtime"


@pytest.mark.parametrize("raised", [asyncio.CancelledError(), Custom("boom")])
def test_a_hook_raising_a_base_exception_denies_its_call(raised: BaseException) -> None:
    def hook(call: tl.PendingCall) -> tl.Decision:
        raise raised

    @tl.tool(requires_approval=True)
    def pay(cents: int) -> int:
        return cents

    result = tl.run_calls(
        [
            {"_tool": "pay", "cents": 5, "_outputPath": "†state.p"},
            {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.c"},
        ],
        tools=[pay, add],
        approve=hook,
    )
    assert statuses(result) == {"c1.0": "denied", "c1.1": "done"}


def test_a_tool_that_cancels_the_engine_is_never_reported_as_a_finished_tick() -> None:
    @tl.tool
    async def rogue() -> int:
        trio.lowlevel.current_task().parent_nursery.cancel_scope.cancel()
        await trio.sleep(0)
        return 1

    @tl.tool
    async def slow() -> int:
        await trio.sleep(1)
        return 7

    with pytest.raises(RuntimeError, match="cancelled the engine"):
        tl.run_calls(
            [{"_tool": "rogue", "_outputPath": "†state.a"}, {"_tool": "slow"}],
            tools=[rogue, slow],
        )


def test_a_durable_run_whose_tool_cancels_the_engine_is_not_stored_done(tmp_path: Path) -> None:
    @tl.tool
    async def rogue() -> int:
        trio.lowlevel.current_task().parent_nursery.cancel_scope.cancel()
        await trio.sleep(0)
        return 1

    model = tl.ScriptedModel(
        [{"calls": [{"_tool": "rogue", "_outputPath": "†state.a"}], "output": None}]
        + [{"calls": [], "output": "ok"}]
    )
    store = tl.SQLiteStore(tmp_path / "runs.db")
    agent = tl.Agent(model, tools=[rogue], store=store)
    with pytest.raises(RuntimeError):
        agent.run("go", run_id="r1")
    assert store.run("r1").status == "failed"

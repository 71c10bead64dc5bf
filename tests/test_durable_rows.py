"""The `calls` table agrees with the journal after every commit.

A call's row is written in the same transaction as the journal entry that changed it
(docs/durability.md): inserted when the call first appears, rewritten in place by later
commits, and for most calls last changed by their end alone, which rewrites only the
columns an end changes. Whatever the path, what a reader of the store sees after a commit
must be exactly what the journal says, including after a resume in another process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

import tickloop as tl
from tickloop._durable._resume import DurableRun, dumps_entry
from tickloop._durable._store import CALL_COLUMNS


@tl.tool
async def slow(n: int, api_key: str = "") -> int:
    # Two checkpoints: the call ends in a later trio batch, so a later commit than its
    # start, and its row's last write is its end alone.
    await trio.sleep(0)
    await trio.sleep(0)
    return n + 1


@tl.tool
async def boom(n: int) -> int:
    raise RuntimeError(f"boom {n}")


@tl.tool(requires_approval=True)
async def pay(cents: int) -> int:
    return cents


PLAN = [
    {"_tool": "slow", "n": 1, "_outputPath": "†state.a"},
    {"_tool": "slow", "n": "†state.a", "_outputPath": "†state.b"},
    {"_tool": "boom", "n": 2, "_outputPath": "†state.c"},
    {"_tool": "slow", "n": "†state.c", "_outputPath": "†state.d"},  # invalid: c failed
    {"_tool": "pay", "cents": 500, "_outputPath": "†state.p1"},  # denied
    {"_tool": "pay", "cents": 7, "_outputPath": "†state.p2"},  # edited to 8
    {"_tool": "pay", "cents": 50, "_outputPath": "†state.p3"},  # deferred: the run pauses
    {"_tool": "slow", "n": "†state.p3", "_outputPath": "†state.e"},  # waits on p3
    {"_tool": "slow", "n": 3, "api_key": "s3cret", "_outputPath": "†state.f"},
]


def _hook(call: tl.PendingCall) -> tl.Decision:
    cents = call.params["cents"]
    if cents == 500:
        return tl.Deny("too much")
    if cents == 7:
        return tl.Edit(cents=8)
    if cents == 50:
        return tl.Defer()
    return tl.Approve()


def _agent(store: tl.SQLiteStore) -> tl.Agent:
    model = tl.ScriptedModel(
        [{"calls": PLAN, "output": None}, {"calls": [], "output": "ok"}], chunk_chars=40
    )
    return tl.Agent(model, tools=[slow, boom, pay], approve=_hook, store=store)


def _stored(store: tl.SQLiteStore, run_id: str) -> dict[str, tuple[Any, ...]]:
    return {
        info.id: tuple(getattr(info, "id" if name == "call_id" else name) for name in CALL_COLUMNS)
        for info in store.calls(run_id)
    }


def _in_memory(durable: DurableRun) -> dict[str, tuple[Any, ...]]:
    """The rows the journal's events made, read back as the store's reader reads them."""
    rows = {}
    for call_id, row in durable.rows.items():
        values = dict(zip(CALL_COLUMNS, row.values("")[1:], strict=True))
        for name in ("call", "params", "deps", "decision", "error"):
            text = values[name]
            values[name] = None if text is None else json.loads(text)
        values["deps"] = values["deps"] or []
        rows[call_id] = tuple(values[name] for name in CALL_COLUMNS)
    return rows


def test_the_calls_table_equals_the_journals_rows_after_every_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    compared: list[int] = []
    commit = DurableRun.commit

    def checked_commit(self: DurableRun, call_id: str | None = None) -> None:
        commit(self, call_id)
        if not self._pending:  # everything recorded so far is committed
            assert _stored(store, self.writer.run_id) == _in_memory(self)
            compared.append(len(self.rows))

    monkeypatch.setattr(DurableRun, "commit", checked_commit)

    paused = _agent(store).run({"go": 1}, run_id="r")
    assert paused.status == "paused"
    (deferred,) = paused.pending
    first = len(compared)
    done = _agent(store).resume("r", decisions={deferred.id: tl.Approve()})
    assert done.status == "done"
    assert len(compared) > first > 5  # many commits on both sides of the resume

    final = {info.id: info for info in store.calls("r")}
    statuses = {info.call["_outputPath"]: info.status for info in final.values()}
    assert statuses == {
        "†state.a": "done",
        "†state.b": "done",
        "†state.c": "failed",
        "†state.d": "invalid",
        "†state.p1": "denied",
        "†state.p2": "done",
        "†state.p3": "done",
        "†state.e": "done",
        "†state.f": "done",
    }
    rows = {info.call["_outputPath"]: info for info in final.values()}
    assert rows["†state.d"].deps == [rows["†state.c"].id]  # drawn although never ready
    assert rows["†state.e"].deps == [rows["†state.p3"].id]
    assert rows["†state.p2"].params == {"cents": 8}  # the edit, not the call as sent
    assert rows["†state.f"].params["api_key"] == "[redacted]"
    assert all(info.finished is not None for info in final.values())


def test_a_value_that_is_not_json_data_is_a_store_error() -> None:
    loop: list[Any] = []
    loop.append(loop)  # a cycle: no JSON text for it
    with pytest.raises(tl.StoreError, match="cannot be stored as JSON"):
        dumps_entry({"value": loop})
    with pytest.raises(tl.StoreError, match="cannot be stored as JSON"):
        dumps_entry({"value": object()})
    # A lone surrogate is kept as its escape (SQLite has no UTF-8 for it); other text as is.
    assert dumps_entry({"n": "\ud800†"}) == '{"n":"\\ud800\\u2020"}'
    assert dumps_entry({"n": "†"}) == '{"n":"†"}'

"""Runs join a session in the order they started (PROTOCOL §16 "Busy", docs/sessions.md).

Runs waiting for a running run of their session take its lease in the order they
started waiting, whenever each happens to look: a waiter that gives up or is cancelled
leaves the queue and holds no one up. On trio's MockClock: each waiter looks every 0.1 s
from when it started, so the start times below are chosen for a later waiter to look
first once the session frees.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import tickloop as tl

GATES: dict[str, trio.Event] = {}


@tl.tool
async def slow(gate: str) -> str:
    """Wait for the gate."""
    await GATES[gate].wait()
    return gate


def _gated_agent(store: Path) -> tl.Agent[Any]:
    """A run of input {"say": x} calls `slow` with gate x, then answers "did x"."""

    def model(request: dict[str, Any]) -> dict[str, Any]:
        text = "\n".join(
            m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
            for m in request["messages"]
        )
        said = re.findall(r'"say": ?"([^"]*)"', text)[-1]
        if '"done"' in text:
            return {"calls": [], "output": f"did {said}"}
        call = {"_tool": "slow", "_id": "w", "_outputPath": "†state.done", "gate": said}
        return {"calls": [call], "output": None}

    return tl.Agent(tl.FunctionModel(model), tools=[slow], store=store)


def _history_ids(result: tl.RunResult[Any]) -> list[str]:
    (history,) = [m["data"] for m in result.messages if m.get("kind") == "history"]
    return [entry["run_id"] for entry in history]


def test_waiting_runs_join_in_the_order_they_started(tmp_path: Path) -> None:
    """Two rounds: each time one run holds the session and three wait, started in order
    at the given offsets; the holder ends at `release` after a whole number of tenths,
    so the order in which they would next look (polling luck) is another one."""
    agent = _gated_agent(tmp_path / "runs.db")
    rounds = [
        # holder, waiters in start order with their start offsets, when the holder ends
        ("a", [("b", 0.00), ("c", 0.03), ("d", 0.06)], 0.05),  # next looks: d, b, c
        ("e", [("f", 0.00), ("g", 0.05), ("h", 0.08)], 0.04),  # next looks: g, h, f
    ]
    GATES.update({name: trio.Event() for name in "abcdefgh"})
    results: dict[str, tl.RunResult[Any]] = {}
    joined: list[str] = []

    async def run(name: str) -> None:
        result = await agent.run_async({"say": name}, session="s", run_id=name)
        joined.append(name)
        results[name] = result

    async def main() -> None:
        for holder, waiters, release in rounds:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, holder)
                await trio.sleep(1)  # the holder holds the session, at its gate
                begin = trio.current_time()
                for name, offset in waiters:
                    GATES[name].set()  # each runs through at once when it gets in
                    await trio.sleep_until(begin + offset)
                    nursery.start_soon(run, name)
                await trio.sleep_until(begin + 5 + release)
                assert not {name for name, _ in waiters} & set(joined)  # all still wait
                GATES[holder].set()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    order = ["a", "b", "c", "d", "e", "f", "g", "h"]
    assert joined == order
    session = tl.SQLiteStore(tmp_path / "runs.db").session("s")
    assert [run.run_id for run in session.runs] == order
    for index, name in enumerate(order):
        assert results[name].output == f"did {name}"
        if index:  # each run's history holds every run before it, in order
            assert _history_ids(results[name]) == order[:index]


def test_a_waiter_that_gives_up_or_is_cancelled_holds_no_one_up(tmp_path: Path) -> None:
    """Of four runs waiting behind "a", the first gives up (session_timeout) and the
    second is cancelled by its caller; the two behind them still go in order as soon
    as "a" ends, though the last would look first."""
    agent = _gated_agent(tmp_path / "runs.db")
    GATES.update({name: trio.Event() for name in "abcde"})
    joined: list[str] = []
    results: dict[str, tl.RunResult[Any]] = {}
    stopped: dict[str, float] = {}

    async def run(name: str, timeout: float = 60) -> None:
        results[name] = await agent.run_async(
            {"say": name}, session="s", run_id=name, session_timeout=timeout
        )
        joined.append(name)

    async def gives_up() -> None:
        with pytest.raises(tl.SessionBusy, match="session_timeout") as busy:
            await run("b", timeout=2)
        assert (busy.value.run_id, busy.value.reason) == ("a", "running")
        stopped["b"] = trio.current_time()

    async def is_cancelled() -> None:
        with trio.move_on_after(3) as scope:
            await run("x")
        assert scope.cancelled_caught
        stopped["x"] = trio.current_time()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "a")
            await trio.sleep(1)
            begin = trio.current_time()
            GATES["c"].set()
            GATES["d"].set()
            nursery.start_soon(gives_up)
            await trio.sleep_until(begin + 0.01)
            nursery.start_soon(is_cancelled)
            await trio.sleep_until(begin + 0.02)
            nursery.start_soon(run, "c")  # next looks at x.02
            await trio.sleep_until(begin + 0.06)
            nursery.start_soon(run, "d")  # next looks at x.06: first after the release
            await trio.sleep_until(begin + 5.04)
            assert set(stopped) == {"b", "x"} and joined == []
            GATES["a"].set()
            ended = trio.current_time()
        # "c" got in at its first look after "a" ended: nobody held it up.
        assert trio.current_time() - ended < 0.2

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert joined == ["a", "c", "d"]
    session = tl.SQLiteStore(tmp_path / "runs.db").session("s")
    assert [run.run_id for run in session.runs] == ["a", "c", "d"]
    assert _history_ids(results["c"]) == ["a"]
    assert _history_ids(results["d"]) == ["a", "c"]


def test_a_session_with_runs_waiting_to_join_is_busy_between_two_runs(tmp_path: Path) -> None:
    """Between a run's end and its first waiter's next look the session has no run, but
    it is not free: `status` says so and `delete()` is refused (the waiter would find
    its history gone)."""
    store = tl.SQLiteStore(tmp_path / "runs.db")
    agent = _gated_agent(tmp_path / "runs.db")
    GATES.update({name: trio.Event() for name in "ab"})
    GATES["b"].set()
    joined: list[str] = []
    seen: list[str] = []

    async def run(name: str) -> None:
        await agent.run_async({"say": name}, session="s", run_id=name)
        joined.append(name)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "a")
            await trio.sleep(1)
            nursery.start_soon(run, "b")  # looks at 1.0, 1.1, ...
            await trio.sleep(0.55)
            GATES["a"].set()
            while "a" not in joined:
                await trio.sleep(0)  # the clock stands still: "b" does not look meanwhile
            session = store.session("s")
            seen.append(session.status)
            with pytest.raises(tl.SessionBusy, match="1 run wait"):
                session.delete()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert seen == ["running"]
    assert joined == ["a", "b"]
    assert [run.run_id for run in store.session("s").runs] == ["a", "b"]

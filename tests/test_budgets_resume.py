"""Budgets where trees, resumes and misbehaving servers meet (PROTOCOL §10-§12).

A SIGKILL during a child's fan-out, then a resume, must not overshoot the root's limits
(a call counts from its journaled start, at every depth); a resumed tree counts each
agent call once; a child's call parked by the budget hook runs once a resume brings room;
a limit running out in a tree ends in refusals, never a hang; a server's usage that is
not a count of tokens never lowers what was spent, nor fails the run.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

import tickloop as tl

# -- a SIGKILL inside a budgeted tree --------------------------------------------------------

TREE = r'''
"""A budgeted tree whose children fan out non-idempotent charges; each start is counted
in DIR/counts. `KILL_PLAN` (JSON) says how many charges each child's iterations ask for."""
import json
import os
import sys

import trio

import tickloop as tl

DIR = os.environ["CRASH_DIR"]
PLAN = json.loads(os.environ.get("KILL_PLAN", "[[6, 6], [6, 6]]"))


def count(name):
    fd = os.open(os.path.join(DIR, "counts"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (name + "\n").encode())
    os.close(fd)


@tl.tool
async def charge(n: int) -> int:
    """Charge a card: never twice (not idempotent)."""
    count(f"charge:{n}")
    await trio.sleep(float(os.environ.get("CRASH_SLOW", "0")))
    return n


class Buyer:
    """Iteration k asks for PLAN[child][k - 1] charges, then answers."""

    def __init__(self, index, plan):
        self.index = index
        self.plan = plan

    async def stream_solution(self, request):
        k = request.iteration
        if k <= len(self.plan):
            first = 10000 * self.index + 100 * k
            calls = [
                {"_tool": "charge", "n": first + i, "_outputPath": f"†state.c{k}_{i}"}
                for i in range(self.plan[k - 1])
            ]
            yield tl.TextDelta(json.dumps({"calls": calls}))
        else:
            yield tl.TextDelta(json.dumps({"calls": [], "output": "bought"}))


def buyer_tools():
    """The buyers' tools: `charge`, and with MCP_SERVER set an MCP server too (whose
    tools a resume knows only once it is open)."""
    server = os.environ.get("MCP_SERVER")
    if not server:
        return [charge]
    return [charge, tl.MCPServer.stdio(sys.executable, [server], prefix="docs")]


def make_agent(store):
    buyers = [
        tl.Agent(Buyer(index, plan), tools=buyer_tools(), name=f"buyer{index}",
                 description="Buy.")
        for index, plan in enumerate(PLAN)
    ]
    root = tl.ScriptedModel(
        [
            {"calls": [{"_tool": b.name, "task": "buy", "_outputPath": f"†state.{b.name}"}
                       for b in buyers]},
            {"calls": [{"_tool": "charge", "n": 999, "_outputPath": "†state.z"}]},
            {"calls": [], "output": "done"},
        ]
    )
    return tl.Agent(
        root,
        tools=[*buyers, charge],
        store=store,
        budget=tl.Budget(per_tool={"charge": 10}, tool_calls=12),
    )


if __name__ == "__main__":
    make_agent(sys.argv[1]).run({"task": "buy"}, run_id="tree")
'''


def _charges(directory: Path) -> Counter[str]:
    path = directory / "counts"
    return Counter(path.read_text().split()) if path.exists() else Counter()


def _kill_after(directory: Path, charges: int, plan: list[list[int]]) -> Any:
    """Run the tree in a process, SIGKILL it once `charges` charges have started (or
    it ended), and load its module here for the resume."""
    (directory / "budgettree.py").write_text(TREE, encoding="utf-8")
    db = directory / "runs.db"
    env = {
        **os.environ,
        "CRASH_DIR": str(directory),
        "CRASH_SLOW": "600",
        "KILL_PLAN": json.dumps(plan),
    }
    process = subprocess.Popen(
        [sys.executable, str(directory / "budgettree.py"), str(db)],
        env=env,
        cwd=directory,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while sum(_charges(directory).values()) < charges:
            assert time.monotonic() < deadline, "the charges never started"
            if process.poll() is not None:
                assert process.stderr is not None
                raise AssertionError(f"the tree exited early: {process.stderr.read().decode()}")
            time.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
        assert process.stderr is not None
        process.stderr.close()
    return db


def _resume(directory: Path, db: Path, plan: list[list[int]], monkeypatch: Any) -> Any:
    monkeypatch.setenv("CRASH_DIR", str(directory))
    monkeypatch.setenv("CRASH_SLOW", "0")
    monkeypatch.setenv("KILL_PLAN", json.dumps(plan))
    monkeypatch.syspath_prepend(str(directory))
    sys.modules.pop("budgettree", None)
    import budgettree  # type: ignore[import-not-found]

    return budgettree.make_agent(tl.SQLiteStore(db)).resume("tree")


@pytest.mark.parametrize("mcp", [False, True], ids=["python-tools", "mcp-sourced-children"])
def test_a_sigkill_during_a_childs_fan_out_never_lets_the_resume_overshoot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mcp: bool
) -> None:
    # Two children ask for 6 charges each; 10 start (per_tool={"charge": 10}), and the
    # process dies while they run. Every later charge (each child's second fan-out,
    # the root's own) has no room: the 10 that started count, though none runs again.
    # Children with an MCP server among their tools are rebuilt with it opened first.
    if mcp:
        monkeypatch.setenv("MCP_SERVER", str(Path(__file__).parent / "mcp_server.py"))
    plan = [[6, 6], [6, 6]]
    db = _kill_after(tmp_path, 10, plan)
    assert sum(_charges(tmp_path).values()) == 10
    result = _resume(tmp_path, db, plan, monkeypatch)

    counts = _charges(tmp_path)
    assert sum(counts.values()) == 10  # not one more, and none twice
    assert max(counts.values()) == 1
    assert result.status == "done"
    assert result.usage.per_tool == {"buyer0": 1, "buyer1": 1, "charge": 10}
    assert result.usage.tool_calls == 12
    statuses = Counter(
        (record.status, (record.error or {}).get("type"))
        for record in result.records.values()
        if record.tool == "charge"
    )
    # The 10 that ran when the process died are interrupted; every other is refused.
    assert statuses == {("failed", "runtime"): 10, ("failed", "budget"): 15}


@pytest.mark.parametrize("seed", range(6))
def test_randomized_kills_of_a_budgeted_tree_never_overshoot_nor_charge_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    # Seeded trials: children with random fan-outs, killed after a random number of
    # charges. However the kill falls, the tree never starts more than 10 charges (nor
    # 12 calls) and never starts one twice; the usage reports every journaled start.
    rng = random.Random(seed)
    plan = [[rng.randint(1, 7) for _ in range(2)] for _ in range(rng.randint(2, 3))]
    wanted = min(10, 12 - len(plan), sum(fan[0] for fan in plan))
    db = _kill_after(tmp_path, rng.randint(1, wanted), plan)
    result = _resume(tmp_path, db, plan, monkeypatch)

    counts = _charges(tmp_path)
    assert sum(counts.values()) <= 10
    assert max(counts.values()) == 1
    # A call counts from its journaled start: one killed before its handler wrote its
    # count counts too (it may have charged), so the usage is at least what was seen.
    assert sum(counts.values()) <= result.usage.per_tool["charge"] <= 10
    assert result.usage.tool_calls <= 12
    assert result.usage.tool_calls == sum(result.usage.per_tool.values())


# -- a resumed tree counts each agent call once ----------------------------------------------


@tl.tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish a post."""
    return f"published {text}"


def _blogging_tree(store: tl.SQLiteStore) -> tl.Agent:
    blogger = tl.Agent(
        tl.ScriptedModel(
            [
                {"calls": [{"_tool": "publish", "text": "†input.task", "_outputPath": "†state.p"}]},
                {"calls": [], "output": "†state.p"},
            ]
        ),
        tools=[publish],
        name="blogger",
        description="Blog.",
    )
    return tl.Agent(
        tl.ScriptedModel(
            [
                {"calls": [{"_tool": "blogger", "task": "post", "_outputPath": "†state.b"}]},
                {"calls": [], "output": "†state.b"},
            ]
        ),
        tools=[blogger],
        approve=lambda call: tl.Defer(),
        store=store,
        budget=tl.Budget(per_tool={"blogger": 1}),
    )


def test_a_resumed_tree_counts_its_agent_call_once_and_runs_the_approved_action(
    tmp_path: Path,
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    first = _blogging_tree(store).run({}, run_id="blog")
    assert first.status == "paused" and [p.id for p in first.pending] == ["c1.0/c1.0"]
    assert first.usage.per_tool == {"blogger": 1}

    result = _blogging_tree(store).resume("blog", decisions={"c1.0/c1.0": tl.Approve()})
    assert result.status == "done"
    assert result.output == "published post"
    assert result.records["c1.0/c1.0"].status == "done"
    assert result.usage.per_tool == {"blogger": 1, "publish": 1}


# -- a child's call parked by the budget hook runs after a resume brings room ----------------

bought: list[int] = []


@tl.tool
async def buy(n: int) -> int:
    """Buy something."""
    bought.append(n)
    return n


def _shopping_tree(store: tl.SQLiteStore) -> tl.Agent:
    shopper = tl.Agent(
        tl.ScriptedModel(
            [
                {
                    "calls": [
                        {"_tool": "buy", "n": n, "_outputPath": f"†state.b{n}"} for n in range(3)
                    ]
                },
                {"calls": [], "output": "bought"},
            ]
        ),
        tools=[buy],
        name="shopper",
        description="Shop.",
    )
    return tl.Agent(
        tl.ScriptedModel(
            [
                {"calls": [{"_tool": "shopper", "task": "shop", "_outputPath": "†state.s"}]},
                {"calls": [], "output": "†state.s"},
            ]
        ),
        tools=[shopper],
        on_budget=lambda request: tl.Defer(),
        store=store,
        budget=tl.Budget(per_tool={"buy": 1}),
    )


def test_a_childs_call_parked_for_room_runs_when_a_resume_adds_it(tmp_path: Path) -> None:
    bought.clear()
    store = tl.SQLiteStore(tmp_path / "runs.db")
    first = _shopping_tree(store).run({}, run_id="shop")
    assert first.status == "paused" and bought == [0]
    assert [first.records[f"c1.0/c1.{n}"].status for n in (1, 2)] == ["deferred", "deferred"]

    result = _shopping_tree(store).resume("shop", budget=tl.Budget(per_tool={"buy": 5}))
    assert result.status == "done" and result.output == "bought"
    assert sorted(bought) == [0, 1, 2]  # each once: the parked ones ran, nothing twice
    assert {result.records[f"c1.0/c1.{n}"].status for n in range(3)} == {"done"}
    assert result.usage.per_tool == {"shopper": 1, "buy": 3}


# -- no hang when a limit runs out in a tree -------------------------------------------------


class SlowToClose:
    """Writes its answer, then keeps the stream open a while (as a server still sending
    its last chunk would)."""

    def __init__(self, answers: list[Any], pause: float = 5.0) -> None:
        self.answers = answers
        self.pause = pause

    async def stream_solution(self, request: tl.SolutionRequest) -> Any:
        text = json.dumps(self.answers[request.iteration - 1])
        yield tl.TextDelta(text[:-1])
        await trio.sleep(self.pause)
        yield tl.TextDelta(text[-1])


@tl.tool
async def look(n: int) -> int:
    """Look something up."""
    return n


def _child(name: str, pause: float = 5.0) -> tl.Agent:
    return tl.Agent(
        SlowToClose(
            [
                {"calls": [{"_tool": "look", "n": 1, "_outputPath": "†state.a"}]},
                {"calls": [], "output": "†state.a"},
            ],
            pause,
        ),
        tools=[look],
        name=name,
        description="Look.",
    )


def _in_time(agent: tl.Agent) -> Any:
    async def main() -> Any:
        with trio.fail_after(3600):  # virtual time: a hang fails at once
            try:
                return await agent.run_async({})
            except tl.BudgetExceeded as stopped:
                return stopped

    return trio.run(main, clock=MockClock(autojump_threshold=0))


@pytest.mark.parametrize("limit", [10**6, 50_000])
def test_a_total_tokens_limit_on_a_run_with_a_sub_agent_finishes(limit: int) -> None:
    # The root's request reserves what its answer may write (all that is left); its
    # child's request waits for it to land, and is told when it does.
    child = _child("child")
    plan = {"calls": [{"_tool": "child", "task": "t", "_outputPath": "†state.c"}]}
    root = tl.Agent(
        SlowToClose([plan, {"calls": [], "output": "†state.c"}]),
        tools=[child],
        budget=tl.Budget(total_tokens=limit),
    )
    result = _in_time(root)
    assert isinstance(result, tl.RunResult) and result.output == 1
    assert result.usage.requests == 4


def test_a_requests_limit_running_out_while_siblings_wait_ends_in_budget_exceeded() -> None:
    # requests=3: the root's and one of each child's. The quick child's second request
    # waits while the slow one's is in flight, then finds no room: it and its sibling
    # fail their agent calls, and the root's next request stops the run.
    kids = [_child("quick", 1.0), _child("slow", 5.0)]
    calls = [{"_tool": k.name, "task": "t", "_outputPath": f"†state.{k.name}"} for k in kids]
    root = tl.Agent(
        SlowToClose([{"calls": calls}, {"calls": [], "output": "done"}]),
        tools=kids,
        budget=tl.Budget(requests=3),
    )
    stopped = _in_time(root)
    assert isinstance(stopped, tl.BudgetExceeded) and stopped.limit == "requests"
    assert stopped.usage.requests == 3


def test_a_tokens_limit_running_out_while_siblings_wait_ends_after_the_hook_refuses() -> None:
    asked: list[str] = []

    async def hook(request: tl.BudgetRequest) -> None:  # async: no thread on a MockClock
        asked.append(request.limit)
        return None

    kids = [_child("quick", 1.0), _child("slow", 5.0)]
    calls = [{"_tool": k.name, "task": "t", "_outputPath": f"†state.{k.name}"} for k in kids]
    root = tl.Agent(
        SlowToClose([{"calls": calls}, {"calls": [], "output": "done"}]),
        tools=kids,
        budget=tl.Budget(input_tokens=2_700),
        on_budget=hook,
    )
    stopped = _in_time(root)
    assert isinstance(stopped, tl.BudgetExceeded) and stopped.limit == "input_tokens"
    assert asked and set(asked) == {"input_tokens"}


# -- a server's usage that is not a count ----------------------------------------------------

PLAN = {"calls": [{"_tool": "look", "n": 1}]}
DONE = {"calls": [], "output": "done"}


class Reporting:
    """Answers from a script and reports `usage` (whatever it is) with each answer."""

    model = "reporting"

    def __init__(self, responses: list[Any], usage: tuple[Any, Any]) -> None:
        self.responses = responses
        self.usage = usage

    async def stream_solution(self, request: tl.SolutionRequest) -> Any:
        yield tl.TextDelta(json.dumps(self.responses[request.iteration - 1]))
        yield tl.Usage(*self.usage)


@pytest.mark.parametrize(
    "usage",
    [(-1000, -1000), (-(10**9), 5), (True, 3), (1.5, 2), ("many", 2), (10**30, 1), (None, 1)],
)
def test_a_usage_that_is_not_a_count_counts_the_estimate(
    usage: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # Under total_tokens=6000, answers whose usage would lower (or blow up) the count
    # are counted by their estimate: the run stops when the estimates use the room up,
    # and what it spent never goes down.
    agent = tl.Agent(
        Reporting([PLAN] * 60 + [DONE], usage),
        tools=[look],
        output={"type": "string"},
        budget=tl.Budget(total_tokens=6000),
    )
    with (
        caplog.at_level(logging.WARNING, logger="tickloop"),
        pytest.raises(tl.BudgetExceeded) as caught,
    ):
        agent.run("go")
    spent = caught.value.usage
    assert 0 < spent.input_tokens <= 6000 and spent.output_tokens > 0
    assert spent.requests < 10  # each prompt alone is estimated at hundreds of tokens
    assert "not a count of tokens" in caplog.text


def test_a_good_usage_still_counts_as_reported() -> None:
    agent = tl.Agent(Reporting([DONE], (70, 7)), tools=[look], output={"type": "string"})
    result = agent.run("go")
    assert (result.usage.input_tokens, result.usage.output_tokens) == (70, 7)
    agent = tl.Agent(Reporting([DONE], (70.0, 7)), tools=[look], output={"type": "string"})
    assert agent.run("go").usage.input_tokens == 70  # a whole number, written as a float


def _chat_server(usage: dict[str, Any]) -> httpx.AsyncClient:
    """An OpenAI-compatible server whose stream answers DONE and reports `usage`."""

    def answer(request: httpx.Request) -> httpx.Response:
        chunks = [
            {"choices": [{"index": 0, "delta": {"content": json.dumps(DONE)}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage},
        ]
        body = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": "lots", "completion_tokens": 3},
        {"prompt_tokens": 12.5, "completion_tokens": 3},
        {"prompt_tokens": 1e400, "completion_tokens": 3},
        {"prompt_tokens": -40, "completion_tokens": -2},
    ],
)
def test_a_servers_usage_field_that_is_not_a_count_keeps_the_answer(
    usage: dict[str, Any],
) -> None:
    model = tl.OpenAIChat("gpt-x", api_key="k", client=_chat_server(usage))
    agent = tl.Agent(model, output={"type": "string"}, budget=tl.Budget(total_tokens=100_000))
    result = agent.run("go")
    assert result.output == "done"  # the answer that arrived is the run's
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0  # estimated

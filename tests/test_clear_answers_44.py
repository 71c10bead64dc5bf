"""Issue 44, item 12 and the low list: a typo never switches a control off silently, an
agent is a tool wherever tools are taken, bad values and bad bytes get clear answers.

Each test names the item of the issue it covers; each failed before its fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tickloop as tl
from tickloop._cli._main import main

RAN: list[str] = []


@tl.tool
def research(topic: str) -> str:
    """Notes on a topic."""
    RAN.append("research")
    return f"notes on {topic}"


@tl.tool
def summarize(text: str) -> str:
    """A summary of a text."""
    RAN.append("summarize")
    return text[:10]


PLAN = {
    "calls": [
        {"_tool": "research", "topic": "trio", "_outputPath": "†state.notes"},
        {"_tool": "summarize", "text": "†state.notes", "_outputPath": "†state.summary"},
    ]
}
DONE = {"calls": [], "output": "†state.summary"}


def _writer(**options: Any) -> tl.Agent:
    return tl.Agent(tl.ScriptedModel([PLAN, DONE]), tools=[research, summarize], **options)


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


# -- item 12: a per_tool limit on a tool the agent does not have ----------------------------


def test_a_per_tool_limit_on_an_unknown_tool_is_refused_naming_the_close_match() -> None:
    agent = _writer(budget=tl.Budget(per_tool={"reserch": 1}))
    with pytest.raises(tl.ConfigurationError, match=r"per_tool 'reserch'.*did you mean 'research'"):
        agent.run({})
    with pytest.raises(tl.ConfigurationError, match=r"per_tool 'summarise'.*'summarize'"):
        _writer().run({}, budget=tl.Budget(per_tool={"summarise": 0}))
    assert RAN == []  # refused before anything ran


def test_a_grant_on_resume_for_an_unknown_tool_is_refused_before_anything(
    tmp_path: Path,
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    _writer(store=store, budget=tl.Budget(per_tool={"research": 1})).run({}, run_id="r")
    RAN.clear()
    agent = _writer(store=store)
    with pytest.raises(tl.ConfigurationError, match=r"per_tool 'reserch'.*did you mean 'research'"):
        agent.resume("r", budget=tl.Budget(per_tool={"reserch": 1}))
    # A grant naming a real tool gets as far as the run itself (finished: ResumeError).
    with pytest.raises(tl.ResumeError):
        agent.resume("r", budget=tl.Budget(per_tool={"research": 1}))
    assert RAN == []


def test_a_per_tool_limit_is_checked_over_the_whole_tree() -> None:
    child = tl.Agent(tl.ScriptedModel([PLAN, DONE] * 2), tools=[research, summarize], name="writer")
    # The root's limit may name a sub-agent's tool, or the sub-agent itself: it holds.
    calls = {"calls": [{"_tool": "writer", "task": "x", "_outputPath": "†state.s"}]}
    root = tl.Agent(
        tl.ScriptedModel([calls, {"calls": [], "output": "†state.s"}]),
        tools=[child],
        budget=tl.Budget(per_tool={"research": 1, "writer": 1}),
    )
    assert root.run({}).output == "notes on t"
    # A sub-agent's own budget is checked over its own tools, when the root starts.
    typo = tl.Agent(
        tl.ScriptedModel([]),
        tools=[research],
        name="typo",
        budget=tl.Budget(per_tool={"serach": 1}),
    )
    RAN.clear()
    with pytest.raises(tl.ConfigurationError, match=r"sub-agent 'typo' limits per_tool 'serach'"):
        tl.Agent(tl.ScriptedModel([calls]), tools=[typo]).run({})
    with pytest.raises(tl.ConfigurationError, match=r"per_tool 'writr'.*did you mean 'writer'"):
        tl.Agent(tl.ScriptedModel([]), tools=[child], budget=tl.Budget(per_tool={"writr": 1})).run()
    assert RAN == []


# -- item 12: tickloop budget --add per_tool.TYPO -------------------------------------------


def test_tickloop_budget_refuses_a_per_tool_grant_on_a_tool_without_a_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "runs.db")
    agent = _writer(
        budget=tl.Budget(per_tool={"research": 0}), on_budget=lambda r: tl.Defer(), store=store
    )
    assert agent.run({}, run_id="r1").status == "paused"
    capsys.readouterr()
    assert main(["budget", "r1", "--add", "per_tool.reserch=1", "--store", store]) == 2
    error = capsys.readouterr().err
    assert "no per_tool limit on 'reserch' (did you mean 'research'?)" in error
    assert main(["budget", "r1", "--add", "per_tool.research=1", "--store", store]) == 0
    # Only the grant that names a limit was recorded: the resume runs research once.
    resumed = _writer(store=store).resume("r1")
    assert resumed.status == "done" and RAN == ["research", "summarize"]


# -- item 12: fork(rerun_tools=[TYPO]) ------------------------------------------------------


def test_a_fork_rerunning_an_unknown_tool_is_refused_naming_the_close_match(
    tmp_path: Path,
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    _writer(store=store).run({}, run_id="first")
    RAN.clear()
    with pytest.raises(tl.ConfigurationError, match=r"'summarise'.*did you mean 'summarize'"):
        _writer().fork("first", "second", store=store, rerun_tools=["summarise"])
    assert RAN == [] and [run.run_id for run in store.runs()] == ["first"]
    # A tool of the agent that the run never called is no typo: nothing to re-run.
    forked = _writer().fork("first", "third", store=store, rerun_tools=["summarize"])
    assert forked.status == "done" and RAN == ["summarize"]


# -- low: an agent in run_calls' tools --------------------------------------------------------


def test_run_calls_takes_an_agent_as_a_tool_as_an_agent_does() -> None:
    child = tl.Agent(tl.ScriptedModel([PLAN, DONE] * 2), tools=[research, summarize], name="writer")
    calls = [{"_tool": "writer", "task": "x", "_outputPath": "†state.s"}]
    assert tl.run_calls(calls, tools=[child]).state == {"s": "notes on t"}
    assert tl.run_calls(calls, tools={"writer": child}).state == {"s": "notes on t"}
    assert RAN == ["research", "summarize"] * 2


# -- low: huge values are a ConfigurationError (or plain room), never an OverflowError --------


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: tl.tool(expected_duration=10**400, name="t")(summarize.handler), "expected_dur"),
        (lambda: tl.tool(timeout=10**400, name="t")(summarize.handler), "timeout must be a finite"),
        (lambda: tl.Price(input=10**400, output=1), "input must be a finite number"),
        (lambda: tl.Budget(cost=10**400), "cost must be a finite number"),
        (lambda: tl.Budget(wall_time=10**5000), "wall_time must be a finite number"),
    ],
)
def test_a_value_too_large_for_a_float_is_a_configuration_error(make: Any, words: str) -> None:
    with pytest.raises(tl.ConfigurationError, match=words):
        make()


def test_a_huge_cost_limit_or_price_is_room_or_none_never_an_overflow() -> None:
    def run(cost: float, price: tl.Price) -> tl.RunResult:
        model = tl.ScriptedModel([{"calls": [], "output": 1}])
        agent = tl.Agent(model, budget=tl.Budget(cost=cost), pricing={"scripted": price})
        return agent.run({})

    assert run(1e308, tl.Price(input=1, output=1)).output == 1  # room for any answer
    with pytest.raises(tl.BudgetExceeded, match="cost limit"):  # the prompt costs too much
        run(1e308, tl.Price(input=1e308, output=1e308))


# -- low: a lone surrogate in what a provider sent (protocol "tools") -----------------------


@tl.tool
def echo(x: str) -> str:
    """Return x."""
    return x


@pytest.mark.parametrize(
    ("turn", "error"),
    [
        ({"tool_calls": [{"name": "echo", "arguments": '{"x": "\ud800"}'}]}, "lone surrogate"),
        (
            {"tool_calls": [{"name": "echo\udc00", "arguments": "{}"}]},
            "unknown tool 'echo\\\\udc00'",
        ),
        ({"tool_calls": [{"id": "a\ud800", "name": "echo", "arguments": '{"x": "y"}'}]}, None),
        ({"content": "hm\ud800", "tool_calls": []}, "the final answer holds a lone surrogate"),
    ],
    ids=["arguments", "name", "provider id", "final text"],
)
def test_a_lone_surrogate_from_the_provider_is_that_calls_error_not_a_crash(
    tmp_path: Path, turn: dict[str, Any], error: str | None
) -> None:
    """Issue 44: the first crashed the run with WriteError (a store or not)."""
    store = tl.SQLiteStore(tmp_path / "runs.db")
    model = tl.ScriptedModel([{"content": "", **turn}, "end"])
    result = tl.Agent(model, tools=[echo], protocol="tools", store=store).run({}, run_id="s")
    assert result.status == "done" and result.output == "end"
    messages = [m["data"]["error"]["message"] for m in result.errors]
    messages += [m["text"] for m in result.messages if m["type"] == "text"]
    if error is not None:
        assert any(error in message for message in messages), messages
    assert store.run("s").status == "done"

"""PROTOCOL §16 "Compaction" for the plan protocol and native tool calling: the same
mechanism the code protocol uses, through the public API, on models that measure their
own prompts."""

from __future__ import annotations

import json
import re
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import tickloop as tl

WINDOW = 3000
ROOM = 750  # the answer's room: a quarter of the window (no client output limit)
FACT = "the vault code is 4417"
FACT_LINE = re.compile(r"FACT: [a-z0-9 ]+")


def tokens(text: str) -> int:
    return -(-len(text) // 4)


def is_compaction(request: dict[str, Any]) -> bool:
    system = request.get("system")
    if system is None and request.get("messages"):
        system = request["messages"][0].get("content")
    return str(system).startswith("You compact")


def summarise(request: dict[str, Any]) -> str:
    """What a good summary keeps: every stated fact (lines "FACT: ...")."""
    text = json.dumps(request["messages"], ensure_ascii=False)
    return "\n".join(dict.fromkeys(FACT_LINE.findall(text)))


# ---------------------------------------------------------------------------------------
# Native tool calling: a long run whose conversation grows by a turn and its results.


class NativeModel:
    """Calls `chatter` every turn (a 400-character result), `remember` in turn 3, and at
    `turns` answers with the fact it finds in its own prompt."""

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.largest = 0
        self.compactions = 0
        self.requests = 0
        self.last_prompt = ""

    def __call__(self, request: dict[str, Any]) -> Any:
        prompt = json.dumps(
            {key: request[key] for key in ("system", "messages", "tools")}, ensure_ascii=False
        )
        self.largest = max(self.largest, tokens(prompt))
        if is_compaction(request):
            self.compactions += 1
            return summarise(request)
        self.requests += 1
        self.last_prompt = prompt
        turn = self.requests
        if turn == 3:
            return {"tool_calls": [{"name": "remember", "arguments": {"fact": FACT}}]}
        if turn >= self.turns:
            found = FACT_LINE.findall(prompt)
            return found[0].removeprefix("FACT: ") if found else "forgotten"
        return {"tool_calls": [{"name": "chatter", "arguments": {"turn": turn}}]}


@tl.tool(output_path="†state.fact")
def remember(fact: str) -> str:
    """Keep a fact."""
    return f"FACT: {fact}"


@tl.tool
def chatter(turn: int) -> str:
    """Say something long."""
    return f"turn {turn}: " + "x" * 400


def native_agent(model: Any, turns: int, **options: Any) -> tl.Agent:
    return tl.Agent(
        tl.FunctionModel(model),
        tools=[remember, chatter],
        protocol="tools",
        max_iterations=turns + 5,
        context_window=WINDOW,
        **options,
    )


def test_a_long_native_run_stays_within_the_window_and_keeps_its_facts() -> None:
    model = NativeModel(120)
    result = trio.run(
        partial(native_agent(model, 120).run_async, "chat"),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    assert result.output == FACT  # said in turn 3, found in the prompt of turn 120
    assert result.state["fact"] == f"FACT: {FACT}"
    assert model.largest + ROOM <= WINDOW
    assert model.compactions >= 2
    assert result.usage.requests == model.requests + model.compactions
    compactions = [m for m in result.messages if m["type"] == "compaction"]
    assert len(compactions) == model.compactions
    covers = compactions[-1]["covers"]
    assert covers[:3] == ["iteration 1", "iteration 2", "iteration 3"]
    assert f"iteration {model.requests - 1}" not in covers  # the last turn stays


def test_native_compaction_never_splits_a_call_from_its_result() -> None:
    model = NativeModel(60)
    seen: list[list[dict[str, Any]]] = []

    def checking(request: dict[str, Any]) -> Any:
        if not is_compaction(request):
            seen.append(request["messages"])
        return model(request)

    result = native_agent(checking, 60).run("chat")
    assert result.output == FACT and model.compactions >= 1
    for messages in seen:
        assert messages[0]["role"] == "user"  # the input, never compacted
        assert messages[0]["content"].startswith("chat")
        asked = [
            c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()
        ]
        answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
        assert asked == answered  # every call shown with its result, in order
        roles = [m["role"] for m in messages]
        assert ("user", "user") not in pairwise(roles)  # summary: merged


def test_native_compact_function_replaces_the_models_summary() -> None:
    seen: list[list[dict[str, Any]]] = []

    def compact(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return "\n".join(dict.fromkeys(FACT_LINE.findall(json.dumps(messages))))

    model = NativeModel(60)
    result = native_agent(model, 60, compact=compact).run("chat")
    assert result.output == FACT
    assert seen and model.compactions == 0
    assert result.usage.requests == model.requests


def test_native_replay_shows_the_recorded_compactions(tmp_path: Path) -> None:
    model = NativeModel(60)
    store = tmp_path / "runs.db"
    recorded = native_agent(model, 60, store=store).run("chat", run_id="long")
    made = [m for m in recorded.messages if m["type"] == "compaction"]
    assert made and model.compactions == len(made)

    def no_model(request: dict[str, Any]) -> Any:
        raise AssertionError("a replay asked the model")

    replayed = native_agent(no_model, 60).replay("long", store=store)
    assert replayed.output == FACT
    assert [m for m in replayed.messages if m["type"] == "compaction"] == made


# ---------------------------------------------------------------------------------------
# The plan protocol: a request shows the chat's text messages, the input, the state and
# the previous plan; a conversation carried in the log grows by its text messages.


class PlanModel:
    """Answers each turn of a chat; in turn 3 it writes the fact the user stated to the
    state; at `turns` it answers with the fact it finds in its prompt's state."""

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.largest = 0
        self.compactions = 0
        self.requests = 0
        self.last_prompt: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> Any:
        messages = request["messages"]
        prompt = sum(len(str(m["content"])) for m in messages) + len(json.dumps(request["schema"]))
        self.largest = max(self.largest, -(-prompt // 4))
        if is_compaction(request):
            self.compactions += 1
            return summarise(request)
        self.requests += 1
        self.last_prompt = messages
        asked = str(messages[-2]["content"])  # the newest chat message: this turn's
        if asked.startswith("turn 3:"):
            return {
                "calls": [{"_tool": "remember", "fact": FACT, "_outputPath": "†state.fact"}],
                "output": "noted",
            }
        if asked.startswith(f"turn {self.turns}:"):
            state = str(messages[-1]["content"])
            found = FACT_LINE.findall(state)
            return {"calls": [], "output": found[0] if found else "forgotten"}
        return {"calls": [], "output": "y" * 300}


def plan_agent(model: Any, **options: Any) -> tl.Agent:
    return tl.Agent(
        tl.FunctionModel(model),
        tools=[remember],
        max_iterations=1000,
        context_window=WINDOW,
        **options,
    )


def said(turn: int) -> dict[str, Any]:
    text = f"turn {turn}: " + (f"FACT: {FACT}" if turn == 3 else "z" * 300)
    return {"type": "text", "role": "user", "text": text}


def chat(agent: tl.Agent, turns: int) -> tuple[list[Any], list[dict[str, Any]]]:
    """A conversation carried in the log by hand: each turn appends what the user says,
    runs, and appends the answer."""
    log: list[dict[str, Any]] = [{"type": "data", "kind": "input", "data": {"task": "chat"}}]
    results = []
    for turn in range(1, turns + 1):
        result = agent.run(messages=[*log, said(turn)])
        results.append(result)
        log = [*result.messages, {"type": "text", "role": "assistant", "text": str(result.output)}]
    return results, log


def test_a_long_plan_conversation_stays_within_the_window_and_keeps_its_facts() -> None:
    model = PlanModel(60)
    results, log = chat(plan_agent(model), 60)
    assert results[-1].output == f"FACT: {FACT}"  # written to the state in turn 3
    assert results[-1].state["fact"] == f"FACT: {FACT}"
    assert model.largest + ROOM <= WINDOW
    assert model.compactions >= 2
    assert sum(r.usage.requests for r in results) == model.requests + model.compactions
    compactions = [m for m in log if m["type"] == "compaction"]
    assert len(compactions) == model.compactions
    # The summary kept the fact the user stated, shown before the chat's newer messages.
    assert FACT in str(model.last_prompt[1]["content"])
    assert "compacted" in str(model.last_prompt[1]["content"])
    assert not any(str(m["content"]).startswith("turn 3:") for m in model.last_prompt)


def test_plan_compact_function_replaces_the_models_summary() -> None:
    seen: list[list[dict[str, Any]]] = []

    def compact(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return "(the earlier turns)"

    model = PlanModel(30)
    results, _ = chat(plan_agent(model, compact=compact), 30)
    assert results[-1].output == f"FACT: {FACT}"
    assert seen and model.compactions == 0
    assert sum(r.usage.requests for r in results) == model.requests


# ---------------------------------------------------------------------------------------
# What cannot be compacted does not fit: the run stops before anything is sent.


@pytest.mark.parametrize("protocol", ["solution", "tools"])
def test_what_cannot_be_compacted_overflows(protocol: str) -> None:
    asked: list[Any] = []
    agent = tl.Agent(
        tl.FunctionModel(lambda request: asked.append(request) or "x"),
        protocol=protocol,  # type: ignore[arg-type]
        instructions="y" * 4 * WINDOW,
        context_window=WINDOW,
    )
    with pytest.raises(tl.ContextOverflow) as stopped:
        agent.run({"task": "chat"})
    assert isinstance(stopped.value, tl.RunStopped)
    assert stopped.value.window == WINDOW and not asked
    assert stopped.value.messages  # the log to continue from


def test_a_client_that_knows_its_window_serves_every_protocol() -> None:
    client = tl.OpenAIChat(
        "some-model", base_url="http://127.0.0.1:9/v1", api_key="k", context_window=WINDOW
    )
    for protocol in ("solution", "tools"):
        agent = tl.Agent(client, protocol=protocol, instructions="y" * 4 * WINDOW)  # type: ignore[arg-type]
        with pytest.raises(tl.ContextOverflow):  # before anything is sent
            agent.run({"task": "chat"})


def test_plan_replay_shows_the_recorded_compaction(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    model = PlanModel(99)
    log: list[dict[str, Any]] = [{"type": "data", "kind": "input", "data": {"task": "chat"}}]
    log += [said(turn) | {"role": ("user", "assistant")[turn % 2]} for turn in range(1, 30)]
    recorded = plan_agent(model, store=store).run(messages=log, run_id="chat")
    made = [m for m in recorded.messages if m["type"] == "compaction"]
    assert made and model.compactions == len(made)

    def no_model(request: dict[str, Any]) -> Any:
        raise AssertionError("a replay asked the model")

    replayed = plan_agent(no_model).replay("chat", store=store)
    assert replayed.output == recorded.output
    assert [m for m in replayed.messages if m["type"] == "compaction"] == made


def test_a_native_conversation_carried_in_the_log_compacts_all_but_its_input() -> None:
    """What a log says before the first assistant turn (an earlier conversation, as a
    session gives it) is compactable; the newest text, the input, is not."""
    asked: list[list[dict[str, Any]]] = []

    def model(request: dict[str, Any]) -> Any:
        if is_compaction(request):
            return summarise(request)
        asked.append(request["messages"])
        found = FACT_LINE.findall(json.dumps(request["messages"]))
        return found[0].removeprefix("FACT: ") if found else "forgotten"

    log: list[dict[str, Any]] = [{"type": "data", "kind": "input", "data": "chat"}]
    log += [said(turn) | {"role": ("user", "assistant")[turn % 2]} for turn in range(1, 40)]
    log.append({"type": "text", "role": "user", "text": "What is the vault code?"})
    agent = native_agent(model, 1)
    result = agent.run(messages=log)
    assert result.output == FACT  # said in the third message, kept by the summary
    messages = asked[-1]
    assert messages[-1] == {"role": "user", "content": "What is the vault code?"}
    assert "compacted" in messages[0]["content"] and len(messages) < 40
    assert -(-len(json.dumps(messages)) // 4) + ROOM <= WINDOW
    covers = next(m for m in result.messages if m["type"] == "compaction")["covers"]
    assert covers[0] == "message 1" and all(key.startswith("message ") for key in covers)


@pytest.mark.parametrize("protocol", ["solution", "tools"])
def test_compaction_requests_count_against_the_budget(protocol: str) -> None:
    """A compaction request is reserved like any request (PROTOCOL §12): a budget that
    holds the run's own requests but not its compactions stops it."""

    def run(budget: tl.Budget | None) -> tuple[Any, Any]:
        if protocol == "tools":
            model: Any = NativeModel(40)
            return model, native_agent(model, 40).run("chat", budget=budget)
        model = PlanModel(99)
        log: list[dict[str, Any]] = [{"type": "data", "kind": "input", "data": {"task": "x"}}]
        log += [said(turn) | {"role": ("user", "assistant")[turn % 2]} for turn in range(1, 30)]
        return model, plan_agent(model).run(messages=log, budget=budget)

    model, result = run(None)
    assert model.compactions >= 1
    assert result.usage.requests == model.requests + model.compactions
    model, result = run(tl.Budget(requests=result.usage.requests))
    assert result.output is not None
    with pytest.raises(tl.BudgetExceeded) as stopped:
        run(tl.Budget(requests=model.requests))  # room for the run's own requests only
    assert stopped.value.limit == "requests"


def test_a_sub_agent_compacts_its_own_run_counted_in_the_trees_usage() -> None:
    child_model = NativeModel(40)
    researcher = tl.Agent(
        tl.FunctionModel(child_model),
        tools=[remember, chatter],
        protocol="tools",
        name="researcher",
        max_iterations=45,
        context_window=WINDOW,
    )
    parent_requests: list[int] = []

    def parent(request: dict[str, Any]) -> Any:
        parent_requests.append(request["iteration"])
        if request["iteration"] == 1:
            call = {"_tool": "researcher", "task": "find it", "_outputPath": "†state.found"}
            return {"calls": [call], "output": None}
        return {"calls": [], "output": "†state.found"}

    agent = tl.Agent(tl.FunctionModel(parent), tools=[researcher], context_window=WINDOW)
    result = agent.run({"task": "chat"})
    assert result.output == FACT  # the child kept it through its compactions
    assert child_model.compactions >= 1
    assert child_model.largest + ROOM <= WINDOW
    assert result.usage.requests == (
        len(parent_requests) + child_model.requests + child_model.compactions
    )


def history_log(first: int, last: int, given: dict[str, Any] | None = None) -> list[Any]:
    """A log that opens with a session's history (PROTOCOL §16): runs r<first>..r<last>,
    after the compaction it was given, if any; the fact is said in run r3."""
    runs = [
        {
            "run_id": f"r{n}",
            "input": {"task": f"FACT: {FACT}" if n == 3 else f"said {n} " + "z" * 300},
            "output": f"answer {n}",
        }
        for n in range(first, last + 1)
    ]
    history = [given, *runs] if given is not None else runs
    return [
        {"type": "data", "kind": "history", "data": history},
        {"type": "data", "kind": "input", "data": {"task": "What is the vault code?"}},
    ]


def history_model(requests: list[list[dict[str, Any]]]) -> Any:
    def model(request: dict[str, Any]) -> Any:
        if is_compaction(request):
            return summarise(request)
        requests.append(request["messages"])
        found = FACT_LINE.findall(json.dumps(request["messages"]))
        return {"calls": [], "output": found[0] if found else "forgotten"}

    return model


def test_a_plan_requests_session_history_is_compacted_oldest_runs_first() -> None:
    requests: list[list[dict[str, Any]]] = []
    agent = plan_agent(history_model(requests), context_budget=None)  # the history shown whole
    result = agent.run(messages=history_log(1, 40))
    assert result.output == f"FACT: {FACT}"  # said in run r3, kept by the summary
    shown = json.dumps(requests[-1])
    assert -(-len(shown) // 4) + ROOM <= WINDOW
    covers = next(m for m in result.messages if m["type"] == "compaction")["covers"]
    assert covers == [f"r{n}" for n in range(1, len(covers) + 1)]  # the oldest runs
    assert "earliest entries are in the summary" in str(requests[-1][-1]["content"])
    assert "answer 40" in str(requests[-1][-1]["content"])  # the newest run is kept


def test_a_compaction_of_a_given_summary_covers_the_runs_it_covered() -> None:
    given = {"type": "compaction", "covers": ["r1", "r2", "r3"], "summary": f"FACT: {FACT}"}
    requests: list[list[dict[str, Any]]] = []
    agent = plan_agent(history_model(requests), context_budget=None)
    result = agent.run(messages=history_log(4, 40, given))
    assert result.output == f"FACT: {FACT}"
    covers = next(m for m in result.messages if m["type"] == "compaction")["covers"]
    assert covers[:4] == ["r1", "r2", "r3", "r4"]  # a prefix of the session's runs

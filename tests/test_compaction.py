"""PROTOCOL §16 "Compaction": what a request compacts, decided by a pure function.

The decision's invariants (the module docstring of `tickloop._agent._compaction`), checked
one by one and then over many random requests.
"""

from __future__ import annotations

import random
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import tickloop as tl
from tickloop._agent._compaction import (
    Compact,
    Fits,
    Overflow,
    Turn,
    default_max_output,
    estimate_prompt,
    plan_compaction,
    reusable_compaction,
)


def turns(*sizes: int) -> list[Turn]:
    return [Turn(f"t{index}", size) for index, size in enumerate(sizes)]


def test_a_request_that_fits_is_not_compacted() -> None:
    decision = plan_compaction(100, turns(100, 100), window=1000, max_output=700)
    assert decision == Fits(300)


def test_one_token_over_the_window_compacts_the_oldest_turns_to_the_target() -> None:
    # 100 fixed + 5 x 100 turns + 401 output = 1001 > 1000: compact until prompt <= 600.
    decision = plan_compaction(
        100, turns(100, 100, 100, 100, 100), window=1000, max_output=401, summary_tokens=50
    )
    assert isinstance(decision, Compact)
    # Keeping t1..t4 gives 100 + 50 + 400 = 550 <= 600, so only the oldest goes.
    assert decision.covers == ("t0",)
    assert decision.prompt_after == 550


def test_the_shortest_prefix_that_reaches_the_target() -> None:
    decision = plan_compaction(
        200, turns(300, 200, 100, 100), window=1000, max_output=400, summary_tokens=50
    )
    assert isinstance(decision, Compact)
    # Without t0 alone: 200 + 50 + 400 = 650 > 600; without t0 and t1: 450.
    assert decision.covers == ("t0", "t1")
    assert decision.prompt_after == 450


def test_a_target_that_leaves_no_room_for_the_answer_gives_way_to_the_window() -> None:
    # Without t0 the prompt is 750: within target 0.9 (900), but the answer needs 300.
    decision = plan_compaction(
        100, turns(400, 400, 200), window=1000, max_output=300, target=0.9, summary_tokens=50
    )
    assert isinstance(decision, Compact)
    assert decision.covers == ("t0", "t1")
    assert decision.prompt_after + 300 <= 1000


def test_everything_compacted_when_no_prefix_reaches_the_target() -> None:
    # The fixed part alone is over the target, but the answer still has room.
    decision = plan_compaction(700, turns(100, 100), window=1000, max_output=150, summary_tokens=50)
    assert isinstance(decision, Compact)
    assert decision.covers == ("t0", "t1")
    assert decision.prompt_after == 750


def test_overflow_when_what_cannot_be_compacted_leaves_no_room() -> None:
    assert plan_compaction(900, turns(100), window=1000, max_output=200) == Overflow(900, 200, 1000)
    assert plan_compaction(990, [], window=1000, max_output=20) == Overflow(990, 20, 1000)


def test_bad_options_are_named() -> None:
    with pytest.raises(ValueError, match="context window"):
        plan_compaction(1, [], window=0, max_output=1)
    with pytest.raises(ValueError, match="compact_target"):
        plan_compaction(1, [], window=10, max_output=1, target=1.5)


def test_measured_usage_wins_over_the_estimate() -> None:
    assert estimate_prompt(4001) == 1001  # about four characters a token, rounded up
    assert estimate_prompt(4001, measured=700) == 700


def test_context_overflow_is_a_run_stopped_naming_its_figures() -> None:
    error = tl.ContextOverflow(900, 200, 1000, messages=[{"type": "text", "text": "hi"}])
    assert isinstance(error, tl.RunStopped)
    assert "context_window" in str(error) and "1,000" in str(error)
    assert error.messages == [{"type": "text", "text": "hi"}]


def test_invariants_hold_over_random_requests() -> None:
    rng = random.Random(42)
    for _ in range(2000):
        window = rng.randint(100, 10_000)
        fixed = rng.randint(0, window)
        sizes = [rng.randint(0, window // 4) for _ in range(rng.randint(0, 12))]
        max_output = rng.randint(0, window // 2)
        target = rng.choice([0.3, 0.6, 0.9, 1.0])
        summary = rng.randint(1, window // 5)
        given = turns(*sizes)
        decision = plan_compaction(
            fixed,
            given,
            window=window,
            max_output=max_output,
            target=target,
            summary_tokens=summary,
        )
        if fixed + sum(sizes) + max_output <= window:
            assert decision == Fits(fixed + sum(sizes))
        elif isinstance(decision, Overflow):
            assert not given or fixed + summary + max_output > window
        else:
            assert isinstance(decision, Compact)
            count = len(decision.covers)
            assert count >= 1
            assert decision.covers == tuple(turn.key for turn in given[:count])  # a prefix
            after = fixed + summary + sum(sizes[count:])
            assert decision.prompt_after == after
            assert after + max_output <= window  # never a request over the window
            goal = min(int(target * window), window - max_output)
            if count < len(given) or after <= goal:
                assert after <= goal
                # and no shorter prefix would have reached it
                assert fixed + summary + sum(sizes[count - 1 :]) > goal or count == 1


# ---------------------------------------------------------------------------------------
# Through an agent (protocol="code"): a long run on a model that measures its own prompt.

WINDOW = 3000
FACT = "the vault code is 4417"


def fenced(program: str) -> str:
    return f"```python\n{program}\n```"


def prompt_tokens(request: dict[str, Any]) -> int:
    return -(-sum(len(str(m.get("content", ""))) for m in request["messages"]) // 4)


class Measuring:
    """A model that checks every request against the window and summarises by keeping
    the lines that state facts (what a good summary would keep)."""

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.largest = 0
        self.compactions = 0
        self.programs = 0
        self.last_prompt = ""

    def __call__(self, request: dict[str, Any]) -> str:
        tokens = prompt_tokens(request)
        self.largest = max(self.largest, tokens)
        system = str(request["messages"][0]["content"])
        if system.startswith("You compact"):
            self.compactions += 1
            text = "\n".join(str(m["content"]) for m in request["messages"][1:])
            return "\n".join(line for line in text.splitlines() if "FACT" in line)
        self.programs += 1
        self.last_prompt = "\n".join(str(m["content"]) for m in request["messages"])
        turn = self.programs
        if turn == 3:
            return fenced(f'print("FACT: {FACT}")\nfact = "{FACT}"')
        if turn == self.turns:
            return fenced("final_answer(fact)")
        return fenced(f'print("turn {turn}: " + "{"x" * 400}")')


def long_run(turns: int, **options: Any) -> tuple[Measuring, Any]:
    model = Measuring(turns)
    agent = tl.Agent(
        tl.FunctionModel(model),
        protocol="code",
        max_iterations=turns,
        context_window=WINDOW,
        **options,
    )
    return model, agent


def test_a_200_turn_run_stays_within_the_window_and_keeps_its_facts() -> None:
    model, agent = long_run(200)
    result = trio.run(
        partial(agent.run_async, {"task": "chat"}),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    assert result.output == FACT  # written to the state in turn 3, read in turn 200
    # The answer's room (a quarter of the window, no client limit) plus the prompt.
    assert model.largest + default_max_output(WINDOW) <= WINDOW
    assert model.compactions >= 2  # it had to compact, more than once
    assert FACT in model.last_prompt.split("## Variables")[0]  # stated: kept by the summary
    assert result.usage.requests == model.programs + model.compactions
    compactions = [m for m in result.messages if m["type"] == "compaction"]
    assert len(compactions) == model.compactions
    covers = compactions[-1]["covers"]
    assert covers[:3] == ["iteration 1", "iteration 2", "iteration 3"]
    assert f"iteration {model.programs - 1}" not in covers  # the previous program stays


def test_a_compact_function_replaces_the_models_summary() -> None:
    seen: list[list[dict[str, Any]]] = []

    def compact(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return "(earlier turns elided)"

    model, agent = long_run(40, compact=compact)
    result = agent.run({"task": "chat"})
    assert result.output == FACT
    assert seen and model.compactions == 0
    assert result.usage.requests == model.programs
    assert "(earlier turns elided)" in model.last_prompt


def test_what_cannot_be_compacted_overflows() -> None:
    agent = tl.Agent(
        tl.FunctionModel(lambda request: fenced('final_answer("x")')),
        protocol="code",
        instructions="y" * 4 * WINDOW,
        context_window=WINDOW,
    )
    with pytest.raises(tl.RunStopped) as stopped:
        agent.run({"task": "chat"})
    assert isinstance(stopped.value, tl.ContextOverflow)
    assert stopped.value.window == WINDOW


def test_context_window_options_are_checked() -> None:
    model = tl.FunctionModel(lambda request: "")
    with pytest.raises(tl.ConfigurationError, match="compact_target"):
        tl.Agent(model, protocol="code", context_window=100, compact_target=0)
    with pytest.raises(tl.ConfigurationError, match="context_window"):
        tl.Agent(model, protocol="code", context_window=-1)


def test_replay_shows_the_recorded_compactions_without_asking_the_model(
    tmp_path: Path,
) -> None:
    model, agent = long_run(60, store=tmp_path / "runs.db")
    recorded = agent.run({"task": "chat"}, run_id="long")
    made = [m for m in recorded.messages if m["type"] == "compaction"]
    assert made and model.compactions == len(made)

    def no_model(request: dict[str, Any]) -> str:
        raise AssertionError("a replay asked the model")

    replayer = tl.Agent(
        tl.FunctionModel(no_model), protocol="code", max_iterations=60, context_window=WINDOW
    )
    replayed = replayer.replay("long", store=tmp_path / "runs.db")
    assert replayed.output == FACT
    assert [m for m in replayed.messages if m["type"] == "compaction"] == made


def test_a_client_that_knows_its_window_is_compacted_to_it() -> None:
    client = tl.OpenAIChat(
        "some-model", base_url="http://127.0.0.1:9/v1", api_key="k", context_window=WINDOW
    )
    agent = tl.Agent(client, protocol="code", instructions="y" * 4 * WINDOW)
    with pytest.raises(tl.ContextOverflow):  # before anything is sent
        agent.run({"task": "chat"})


def test_a_sessions_next_run_reuses_the_newest_compaction_of_its_history() -> None:
    first = {"type": "compaction", "covers": ["r1"], "summary": "one"}
    second = {"type": "compaction", "covers": ["r1", "r2", "r3"], "summary": "three"}
    assert reusable_compaction([first, second], ["r1", "r2", "r3", "r4"]) is second
    # A session forked at r2 keeps only the compactions that cover its runs.
    assert reusable_compaction([first, second], ["r1", "r2"]) is first
    assert reusable_compaction([first, second], ["r9"]) is None


def test_a_fork_reuses_compactions_only_before_its_first_changed_request(
    tmp_path: Path,
) -> None:
    store = tmp_path / "runs.db"
    _model, agent = long_run(60, store=store)
    recorded = agent.run({"task": "chat"}, run_id="long")
    made = [m for m in recorded.messages if m["type"] == "compaction"]

    def no_model(request: dict[str, Any]) -> str:
        raise AssertionError("an unchanged fork asked the model")

    same = agent.fork("long", "same", store=store, model=tl.FunctionModel(no_model))
    assert same.output == FACT
    assert [m for m in same.messages if m["type"] == "compaction"] == made

    # Other instructions change the first request: every compaction is made anew.
    live = Measuring(60)
    changed = tl.Agent(
        tl.FunctionModel(live),
        protocol="code",
        max_iterations=60,
        context_window=WINDOW,
        instructions="Be brief.",
        store=store,
    ).fork("long", "changed", store=store)
    assert changed.output == FACT
    assert live.compactions == len([m for m in changed.messages if m["type"] == "compaction"])
    assert live.compactions >= 1

"""A session's later runs reuse its compactions (PROTOCOL §16 "Ownership"): a code-plan
session that outgrows its window compacts its oldest runs once, and each later run is
given that compaction in its history instead of compacting the same runs again."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import tickloop as tl
from tickloop._agent._compaction import default_max_output

WINDOW = 3000
PAD = "x" * 600


class Measuring:
    """Answers each run at once; measures every request; summarises by keeping the
    lines that state a fact."""

    def __init__(self) -> None:
        self.largest = 0
        self.compactions = 0
        self.last_prompt = ""

    def __call__(self, request: dict[str, Any]) -> str:
        text = "\n".join(str(m["content"]) for m in request["messages"])
        if text.startswith("You compact"):
            self.compactions += 1
            return "\n".join(line for line in text.splitlines() if "FACT" in line)
        self.largest = max(self.largest, -(-len(text) // 4))
        self.last_prompt = text
        said = re.findall(r"message (\d+)", text.split("## task_input")[1])[0]
        if "FACT: my name is Ada" in text and said == "20":
            return '```python\nfinal_answer("you are Ada")\n```'
        return f'```python\nfinal_answer("reply {said} {PAD}")\n```'


def test_later_runs_of_a_session_reuse_its_compaction(tmp_path: Path) -> None:
    model = Measuring()
    agent = tl.Agent(
        tl.FunctionModel(model), protocol="code", store=tmp_path / "runs.db", context_window=WINDOW
    )
    made: list[int] = []
    given: list[list[str] | None] = []
    for n in range(1, 21):
        task = f"message {n} {PAD}" + (" FACT: my name is Ada" if n == 1 else "")
        before = model.compactions
        result = agent.run({"task": task}, session="s", run_id=f"r{n}")
        made.append(model.compactions - before)
        history = [m["data"] for m in result.messages if m.get("kind") == "history"]
        first = history[0][0] if history else {}
        given.append(first.get("covers") if "summary" in first else None)

    assert result.output == "you are Ada"  # stated in run 1, kept by the summaries
    assert model.largest + default_max_output(WINDOW) <= WINDOW  # never over the window
    first_made = next(n for n, count in enumerate(made) if count)
    # Every run after the first compaction is given one, covering the oldest runs...
    for covers in given[first_made + 1 :]:
        assert covers is not None and covers == [f"r{i}" for i in range(1, len(covers) + 1)]
    # ... so it compacts far less often than it runs: the same runs are never compacted
    # twice, only the summary with the runs that came since.
    assert sum(made) <= len(made[first_made:]) // 2
    assert made[first_made + 1] == 0


class TwoHundred:
    """A code-plan model for a 200-turn session: turn 3 states a fact and its program
    writes it to the state; every request is measured; a compaction request keeps the
    lines that state a fact."""

    def __init__(self) -> None:
        self.largest = 0
        self.compactions = 0
        self.requests = 0

    def __call__(self, request: dict[str, Any]) -> str:
        text = "\n".join(str(m["content"]) for m in request["messages"])
        self.largest = max(self.largest, -(-len(text) // 4))  # compaction requests too
        if text.startswith("You compact"):
            self.compactions += 1
            return "\n".join(line for line in text.splitlines() if "FACT" in line)
        self.requests += 1
        said = int(re.findall(r"turn (\d+)", text.split("## task_input")[1])[0])
        if said == 3:
            return '```python\nname = "Ada"\nfinal_answer("noted")\n```'
        if said == 200:
            kept = "FACT: my name is Ada" in text and ("'Ada'" in text or '"Ada"' in text)
            return f"```python\nfinal_answer({'you are ' + 'Ada' if kept else 'who?'!r})\n```"
        return f'```python\nfinal_answer("reply {said} {PAD[:200]}")\n```'


def test_a_200_turn_session_stays_in_its_window_and_keeps_turn_3s_fact(tmp_path: Path) -> None:
    """Issue 42's measure: 200 runs of one session on a model that measures its own
    prompt: no request over the window, the fact stated in turn 3 (and written to the
    state by its program) reaches turn 200, and compaction requests count in RunUsage."""
    model = TwoHundred()
    agent = tl.Agent(
        tl.FunctionModel(model), protocol="code", store=tmp_path / "runs.db", context_window=WINDOW
    )
    requests = 0
    for n in range(1, 201):
        task = f"turn {n} {PAD[:200]}" + (" FACT: my name is Ada" if n == 3 else "")
        result = agent.run({"task": task}, session="long")
        requests += result.usage.requests

    assert result.output == "you are Ada"
    assert model.largest + default_max_output(WINDOW) <= WINDOW
    assert tl.SQLiteStore(tmp_path / "runs.db").session("long").state == {"name": "Ada"}
    assert model.compactions > 0
    assert requests == model.requests + model.compactions  # every compaction is counted

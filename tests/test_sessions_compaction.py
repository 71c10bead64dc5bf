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

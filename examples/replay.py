"""Record a run once, replay it offline, and fork it after changing one tool.

The first run stands for a run against a real model (swap `tl.ScriptedModel` for
`tl.OpenAIChat("gpt-4.1-mini")`): it is stored, and everything after it needs neither
the model nor, for the replay, the tools. See docs/replay.md.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import tickloop as tl

ran: Counter[str] = Counter()
STYLE = {"summary": "short"}


@tl.tool
def fetch(url: str) -> str:
    """Fetch a page."""
    ran["fetch"] += 1
    return f"the text of {url}, " * 3


@tl.tool
def summarize(text: str) -> str:
    """Summarize a text."""
    ran["summarize"] += 1
    words = text.split()
    return " ".join(words[:4] if STYLE["summary"] == "short" else words[:8])


PLAN = [
    {
        "calls": [
            {"_tool": "fetch", "url": "https://a.example", "_outputPath": "†state.a"},
            {"_tool": "fetch", "url": "https://b.example", "_outputPath": "†state.b"},
            {"_tool": "summarize", "text": "†state.a", "_outputPath": "†state.summary"},
        ],
        "output": None,
    },
    {"calls": [], "output": {"summary": "†state.summary", "source": "†state.b"}},
]


def main() -> None:
    store = tl.SQLiteStore(Path(tempfile.mkdtemp()) / "runs.db")
    agent = tl.Agent(tl.ScriptedModel(PLAN), tools=[fetch, summarize], store=store)
    first = agent.run({"topic": "trio"}, run_id="order-42")
    print("recorded:", first.output["summary"], dict(ran))

    ran.clear()
    offline = tl.Agent(tl.ScriptedModel([]), tools=[fetch, summarize])  # no model needed
    again = offline.replay("order-42", store=store)
    assert again.output == first.output and not ran  # no tool ran
    print("replayed: same output, tools run:", dict(ran))

    STYLE["summary"] = "long"  # summarize changed: fork, re-running only it
    fixed = agent.fork("order-42", "order-42b", store=store, rerun_tools=["summarize"])
    print("forked:  ", fixed.output["summary"], "tools run:", dict(ran))
    assert ran == Counter(summarize=1)


if __name__ == "__main__":
    main()

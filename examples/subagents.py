"""Sub-agents: a writer whose tool is a researcher agent (docs/subagents.md).

The writer's plan calls the researcher twice, and both child runs go in parallel; the
`publish` call reads both results, so it starts when both are written. A researcher's
`fetch` of an unknown site needs approval: the question reaches the writer's (the
root's) hook with its path, "c1.0/c1.1", while everything else goes on.

Runs offline on scripted models; swap them for `tl.OpenAIChat("gpt-4.1-mini")` (or any
client, docs/models.md) to run the same tree on real models.
"""

from __future__ import annotations

from typing import Any

import pydantic
import trio

import tickloop as tl

PAGES = {
    "https://trio.readthedocs.io": "Trio: structured concurrency for Python.",
    "https://docs.python.org/3/library/asyncio.html": "asyncio: Python's event loop.",
}
KNOWN_SITES = ("https://docs.python.org",)


@tl.tool
async def search(query: str) -> list[str]:
    """Search the web; the addresses of the best pages."""
    await trio.sleep(0.05)
    return [url for url in PAGES if query in url]


@tl.tool(requires_approval=lambda params: not params["url"].startswith(KNOWN_SITES))
async def fetch(url: str) -> str:
    """Fetch a page's text."""
    await trio.sleep(0.05)
    return PAGES[url]


class Topic(pydantic.BaseModel):
    topic: str


class Notes(pydantic.BaseModel):
    topic: str
    summary: str
    source: str


RESEARCH: list[dict[str, Any]] = [
    {
        "calls": [
            {"_tool": "search", "query": "†input.topic", "_outputPath": "†state.hits"},
            {"_tool": "fetch", "url": "†state.hits[0]", "_outputPath": "†state.page"},
        ],
        "output": None,
    },
    {
        "calls": [],
        "output": {"topic": "†input.topic", "summary": "†state.page", "source": "†state.hits[0]"},
    },
]

posted: list[dict[str, object]] = []


@tl.tool
def publish(title: str, sections: list[Notes]) -> str:
    """Publish a post made of the research notes; its address."""
    posted.append({"title": title, "sections": [notes.topic for notes in sections]})
    return "https://blog.example/async-in-python"


WRITING: list[dict[str, Any]] = [
    {
        "calls": [
            {"_tool": "researcher", "topic": "trio", "_outputPath": "†state.trio"},
            {"_tool": "researcher", "topic": "asyncio", "_outputPath": "†state.asyncio"},
            {
                "_tool": "publish",
                "title": "Async in Python",
                "sections": ["†state.trio", "†state.asyncio"],
                "_outputPath": "†state.url",
            },
        ],
        "output": None,
    },
    {"calls": [], "output": "†state.url"},
]


def approve(call: tl.PendingCall) -> tl.Decision:
    """The root's hook serves the whole tree: a child's call comes with its path."""
    print(f"approve? {call.id} (agent {call.agent}, path {call.path}): {call.tool} {call.params}")
    return tl.Approve()


def main() -> None:
    researcher = tl.Agent(
        tl.ScriptedModel(RESEARCH, chunk_chars=24, chunk_delay=0.01),
        tools=[search, fetch],
        name="researcher",
        input=Topic,
        output=Notes,
        instructions="Research the topic; cite the page you used.",
    )
    writer = tl.Agent(
        tl.ScriptedModel(WRITING, chunk_chars=24, chunk_delay=0.01),
        tools=[researcher, publish],
        approve=approve,  # no hook on the researcher: the root's serves it
        instructions="Write a post from the researcher's notes.",
    )
    result = writer.run({"brief": "a post on async Python"})
    for call_id, record in result.records.items():
        print(f"{'  ' * call_id.count('/')}{call_id:<12} {record.tool:<10} {record.status}")
    print("output:", result.output)
    assert result.output == "https://blog.example/async-in-python"
    assert posted == [{"title": "Async in Python", "sections": ["trio", "asyncio"]}]
    assert result.records["c1.0/c1.1"].status == "done"  # approved through the root
    assert result.records["c1.1/c1.1"].status == "done"  # a known site: not asked
    first, second, third = (result.records[i] for i in ("c1.0", "c1.1", "c1.2"))
    assert first.finished is not None and second.finished is not None
    assert third.started is not None and third.started >= max(first.finished, second.finished)


if __name__ == "__main__":
    main()

"""Read the final answer as it streams, while tool-call turns stay buffered.

Runs on the scripted model (no network): the first turn calls a tool, the second
streams its answer a few characters at a time, and the reader prints each chunk as it
arrives. Any model client with `protocol="tools"` works the same way.
"""

from __future__ import annotations

import trio

import tickloop as tl


@tl.tool
async def lookup(term: str) -> str:
    """Look a term up in the glossary."""
    await trio.sleep(0.05)
    return {"tick": "one request's inner loop: calls arrive, run and finish"}[term]


SCRIPT = [
    {"tool_calls": [{"name": "lookup", "arguments": {"term": "tick"}}]},
    "A tick is one request's inner loop: its calls arrive, run in parallel and finish.",
]


async def main() -> None:
    model = tl.ScriptedModel(SCRIPT, chunk_chars=12, chunk_delay=0.02)
    agent = tl.Agent(model, tools=[lookup], protocol="tools")
    chunks = []
    async with agent.stream("What is a tick?") as stream:
        async for chunk in stream.text():
            print(chunk, end="", flush=True)
            chunks.append(chunk)
    print()
    result = stream.result
    assert "".join(chunks) == result.output == SCRIPT[1]
    assert len(chunks) > 1 and result.iterations == 2


if __name__ == "__main__":
    trio.run(main)

"""A code plan: the model writes Python, tickloop runs every call in it as a plan.

The scripted model answers with a program (PROTOCOL §14, docs/code.md). tickloop never
executes it as Python: it parses each statement as it streams and evaluates it itself, so
the three searches start together while the model is still writing, the fetches of every
result start the moment the searches answer (no `gather` in the program), and the one
call with a side effect (`publish`) is shown to the approval hook with its resolved
arguments, only once every earlier call has succeeded.

Run: python examples/code_plan.py
"""

from __future__ import annotations

import trio
import trio.testing

import tickloop as tl


@tl.tool(read_only=True)
async def search(query: str) -> list[str]:
    """Search the docs; returns page names."""
    await trio.sleep(0.3)
    return [f"{query}-intro", f"{query}-guide"]


@tl.tool(read_only=True)
async def fetch(page: str) -> str:
    """Fetch a page's text."""
    await trio.sleep(0.2)
    return f"text of {page} " * 10


@tl.tool(requires_approval=True)
async def publish(title: str, words: int) -> dict[str, str]:
    """Publish a digest. A person approves it."""
    return {"url": f"https://example.org/{title}", "words": str(words)}


PROGRAM = """\
```python
topics = ["nurseries", "cancellation", "channels"]
found = [search(query=t) for t in topics]
pages = [fetch(page=name) for names in found for name in names]
words = sum(len(text.split()) for text in pages)
print(f"{len(pages)} pages, {words} words")
post = publish(title="trio-digest", words=words)
final_answer({"url": post["url"], "pages": len(pages), "words": words})
```
"""


async def approve(call: tl.PendingCall) -> tl.Decision:
    print(f"  approve? line {call.line}: {call.tool}({call.params})")
    return tl.Approve()


def on_event(event: tl.RunEvent) -> None:
    if isinstance(event, tl.CallStarted):
        print(f"  {trio.current_time() - START:5.2f}s start {event.call_id} {event.tool}")
    elif isinstance(event, tl.ProgramPrinted):
        print(f"  printed (line {event.line}): {event.text}")


START = 0.0


async def main() -> None:
    global START
    START = trio.current_time()
    model = tl.ScriptedModel([PROGRAM], chunk_chars=20, chunk_delay=0.05)
    agent = tl.Agent(
        model, tools=[search, fetch, publish], protocol="code", approve=approve, on_event=on_event
    )
    result = await agent.run_async()
    print("output:", result.output)
    print("variables:", sorted(result.state))
    print("printed:", result.printed)
    assert result.output["pages"] == 6
    assert {record.line for record in result.records.values()} == {2, 3, 6}


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

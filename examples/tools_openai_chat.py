"""Native tool calling on an OpenAI-compatible chat-completions server, replayed offline.

The transport below answers with recorded-looking event streams instead of a network, so
this runs anywhere. Against a real server, drop `client=`, point `base_url=` at it (or
drop it for OpenAI and set OPENAI_API_KEY), and drop the asserts, which check the
replayed conversation.
"""

from __future__ import annotations

import json

import httpx
import trio

import tickloop as tl


@tl.tool
async def weather(city: str) -> str:
    """The current weather of a city."""
    await trio.sleep(0.05)  # a slow lookup: the two calls below run side by side
    return {"Paris": "18°C, light rain", "Oslo": "4°C, clear"}[city]


def chunk(delta: dict, finish: str | None = None) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def stream(*events: dict) -> httpx.Response:
    body = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)


def call(index: int, id: str, city: str) -> list[dict]:
    """A tool call as servers stream it: id and name first, then argument pieces."""
    start = {"index": index, "id": id, "type": "function"}
    arguments = json.dumps({"city": city})
    return [
        chunk({"tool_calls": [{**start, "function": {"name": "weather", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[:9]}}]}),
        chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[9:]}}]}),
    ]


def replies() -> list[httpx.Response]:
    """Two turns: both calls at once, then the answer."""
    return [
        stream(
            chunk({"role": "assistant", "content": None}),
            *call(0, "call_a", "Paris"),
            *call(1, "call_b", "Oslo"),
            chunk({}, "tool_calls"),
        ),
        stream(
            *(chunk({"content": p}) for p in ["Paris: 18°C and rain; ", "Oslo: 4°C, clear."]),
            chunk({}, "stop"),
        ),
    ]


def main() -> None:
    answers, sent = replies(), []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return answers.pop(0)

    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    model = tl.OpenAIChat("gpt-4o-mini", base_url="http://llm.invalid/v1", client=client)
    agent = tl.Agent(model, tools=[weather], protocol="tools", instructions="Be brief.")
    result = agent.run("Weather in Paris and Oslo?")
    print("output:", result.output)
    print("second request:", json.dumps(sent[1]["messages"][2:], ensure_ascii=False, indent=1))
    assert result.output == "Paris: 18°C and rain; Oslo: 4°C, clear."
    assert [m["tool_call_id"] for m in sent[1]["messages"][-2:]] == ["call_a", "call_b"]


if __name__ == "__main__":
    main()

"""Native tool calling on Anthropic's Messages API, replayed offline, with thinking.

Claude thinks, then calls two tools at once; tickloop runs them in parallel and sends back
the assistant turn with every original block (the signed thinking block included, as
the API requires on a tool-call turn) and both results in one user message. Against the
real API, drop `client=` and `base_url=`, set ANTHROPIC_API_KEY, and drop the asserts,
which check the replayed conversation.
"""

from __future__ import annotations

import json

import httpx
import trio

import tickloop as tl


@tl.tool(bind={"unit": "unit"})
async def temperature(city: str, unit: str) -> str:
    """The temperature of a city."""
    await trio.sleep(0.05)
    celsius = {"Lima": 19, "Quito": 14}[city]
    return f"{celsius} °C" if unit == "celsius" else f"{celsius * 9 / 5 + 32:.0f} °F"


def event(payload: dict) -> str:
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n"


def block(index: int, start: dict, *deltas: dict) -> str:
    return (
        event({"type": "content_block_start", "index": index, "content_block": start})
        + "".join(
            event({"type": "content_block_delta", "index": index, "delta": delta})
            for delta in deltas
        )
        + event({"type": "content_block_stop", "index": index})
    )


def message(stop_reason: str, *blocks: str) -> httpx.Response:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "role": "assistant",
            "content": [],
            "usage": {"input_tokens": 310},
        },
    }
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason},
        "usage": {"output_tokens": 60},
    }
    body = event(start) + "".join(blocks) + event(end) + event({"type": "message_stop"})
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)


def tool_use(index: int, id: str, city: str) -> str:
    # The model's value for the bound `unit` is dropped: the run's input decides.
    arguments = json.dumps({"city": city, "unit": "kelvin"})
    return block(
        index,
        {"type": "tool_use", "id": id, "name": "temperature", "input": {}},
        {"type": "input_json_delta", "partial_json": arguments[:10]},
        {"type": "input_json_delta", "partial_json": arguments[10:]},
    )


def replies() -> list[httpx.Response]:
    thinking = block(
        0,
        {"type": "thinking", "thinking": "", "signature": ""},
        {"type": "thinking_delta", "thinking": "Two cities, so two lookups."},
        {"type": "signature_delta", "signature": "EqQBCgIYAhIM"},
    )
    answer = block(
        0,
        {"type": "text", "text": ""},
        {"type": "text_delta", "text": "Lima is 19 °C, "},
        {"type": "text_delta", "text": "Quito 14 °C."},
    )
    return [
        message(
            "tool_use", thinking, tool_use(1, "toolu_01", "Lima"), tool_use(2, "toolu_02", "Quito")
        ),
        message("end_turn", answer),
    ]


def main() -> None:
    answers, sent = replies(), []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return answers.pop(0)

    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    model = tl.Anthropic("claude-sonnet-4-5", base_url="http://claude.invalid", client=client)
    agent = tl.Agent(model, tools=[temperature], protocol="tools")
    result = agent.run({"question": "How warm are Lima and Quito?", "unit": "celsius"})
    print("output:", result.output)
    assistant, results = sent[1]["messages"][1:]
    print("blocks sent back:", [b["type"] for b in assistant["content"]])
    print("results:", [b["content"] for b in results["content"]])
    assert result.output == "Lima is 19 °C, Quito 14 °C."
    assert [b["type"] for b in assistant["content"]] == ["thinking", "tool_use", "tool_use"]
    assert [b["content"] for b in results["content"]] == ["19 °C", "14 °C"]
    assert "unit" not in sent[0]["tools"][0]["input_schema"]["properties"]


if __name__ == "__main__":
    main()

"""Native tool calling on the OpenAI Responses API, replayed offline.

The Responses API keeps a turn's items (reasoning, function calls) in the next request's
`input`, followed by one `function_call_output` per call. Against the real API, drop
`client=` and `base_url=`, set OPENAI_API_KEY and drop the asserts, which check the
replayed conversation; for reasoning models without server-side storage pass
`store=False, include=["reasoning.encrypted_content"]`.
"""

from __future__ import annotations

import json

import httpx

import tickloop as tl


@tl.tool
def convert(amount: float, currency: str) -> dict:
    """Convert an amount of euros to another currency."""
    rates = {"USD": 1.08, "JPY": 162.4}
    return {"amount": round(amount * rates[currency], 2), "currency": currency}


def event(payload: dict) -> str:
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n"


def response(*items: dict, text: str = "") -> httpx.Response:
    body = event(
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}
    )
    for index, item in enumerate(items):
        added = {**item, "arguments": ""} if item["type"] == "function_call" else item
        body += event({"type": "response.output_item.added", "output_index": index, "item": added})
        if item["type"] == "message":
            body += event(
                {"type": "response.output_text.delta", "output_index": index, "delta": text}
            )
        body += event({"type": "response.output_item.done", "output_index": index, "item": item})
    usage = {"input_tokens": 95, "output_tokens": 24}
    body += event(
        {"type": "response.completed", "response": {"status": "completed", "usage": usage}}
    )
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)


def function_call(n: int, currency: str) -> dict:
    arguments = json.dumps({"amount": 250, "currency": currency})
    return {
        "type": "function_call",
        "id": f"fc_{n}",
        "call_id": f"call_{n}",
        "name": "convert",
        "arguments": arguments,
        "status": "completed",
    }


ANSWER = "250 € is 270.0 USD or 40600.0 JPY."


def replies() -> list[httpx.Response]:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA..."}
    final = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": ANSWER, "annotations": []}],
    }
    return [
        response(reasoning, function_call(1, "USD"), function_call(2, "JPY")),
        response(final, text=ANSWER),
    ]


def main() -> None:
    answers, sent = replies(), []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return answers.pop(0)

    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    model = tl.OpenAIResponses("gpt-5-mini", base_url="http://llm.invalid/v1", client=client)
    agent = tl.Agent(model, tools=[convert], protocol="tools")
    result = agent.run("What are 250 euros in dollars and yen?")
    print("output:", result.output)
    print("second input:", [item.get("type", "message") for item in sent[1]["input"]])
    assert result.output == ANSWER
    assert [item.get("type", "message") for item in sent[1]["input"]] == [
        "message",
        "reasoning",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    assert sent[1]["input"][-2]["output"] == '{"amount": 270.0, "currency": "USD"}'


if __name__ == "__main__":
    main()

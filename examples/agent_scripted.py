"""An agent on the scripted model: two requests, a fan-out, typed output.

Swap `tl.ScriptedModel([...])` for `tl.OpenAIChat("gpt-4.1-mini")` (or any
OpenAI-compatible server, see docs/models.md) to run the same agent on a real model.
"""

from __future__ import annotations

import pydantic
import trio

import tickloop as tl

PRICES = {"apples": 120, "pears": 95, "plums": 210}


@tl.tool
async def price(item: str) -> int:
    """Price of one kilo of an item, in cents."""
    await trio.sleep(0.05)  # a slow lookup
    return PRICES[item]


@tl.tool
def total(prices: list[int], kilos: int) -> int:
    """Total cost in cents for `kilos` of each item."""
    return sum(prices) * kilos


class Answer(pydantic.BaseModel):
    cents: int
    cheapest: str


SCRIPT = [
    {
        "calls": [
            *(
                {
                    "_tool": "price",
                    "item": item,
                    "_outputPath": "†state.prices",
                    "_outputMethod": "push",
                }
                for item in PRICES
            ),
            {"_tool": "price", "item": "apples", "_outputPath": "†state.by_item.apples"},
            {"_tool": "price", "item": "pears", "_outputPath": "†state.by_item.pears"},
            {"_tool": "price", "item": "plums", "_outputPath": "†state.by_item.plums"},
        ],
        "output": None,
    },
    {
        "calls": [
            {"_tool": "total", "prices": "†state.prices", "kilos": 2, "_outputPath": "†state.total"}
        ],
        "output": None,
    },
    {"calls": [], "output": {"cents": 850, "cheapest": "pears"}},
]


def main() -> None:
    model = tl.ScriptedModel(SCRIPT, chunk_chars=32, chunk_delay=0.01)
    agent = tl.Agent(
        model,
        tools=[price, total],
        output=Answer,
        instructions="Work out what two kilos of each fruit cost.",
    )
    result = agent.run({"kilos": 2})
    print("output:", result.output)
    print("state:", result.state)
    print(
        "requests:", result.iterations, "calls:", len(result.records), "errors:", len(result.errors)
    )
    assert result.output == Answer(cents=850, cheapest="pears")
    assert result.state["total"] == 850


if __name__ == "__main__":
    main()

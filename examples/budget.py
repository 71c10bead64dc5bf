"""A budget that holds across a fan-out, and a person asked for more (docs/budgets.md).

The model fans out 20 lookups; the budget allows 8 tool calls and a few cents of model
time. The 9th call has no room: the budget hook is asked once, grants 4 more, and the
rest are refused with an Error Message of type `budget` that the model reads. Swap the
scripted model for `tl.OpenAIChat("gpt-4.1-mini")` (and its price) to run it for real.
"""

from __future__ import annotations

from typing import Any

import trio

import tickloop as tl


@tl.tool
async def lookup(city: str) -> int:
    """Today's temperature in a city, in °C."""
    await trio.sleep(0.01)
    return len(city) * 3


CITIES = [f"city-{i}" for i in range(20)]
SCRIPT: list[dict[str, Any]] = [
    {
        "calls": [
            {"_tool": "lookup", "city": city, "_outputPath": f"†state.temps.{i}"}
            for i, city in enumerate(CITIES)
        ]
    },
    {"calls": [], "output": "done: some cities were looked up, the budget stopped the rest"},
]

asked: list[tl.BudgetRequest] = []


def ask_for_more(request: tl.BudgetRequest) -> tl.Budget | None:
    """A person (here: a rule) decides. Once: four more calls; after that, no."""
    asked.append(request)
    print(f"budget hook: {request.limit} is used up ({request.usage.tool_calls} calls so far)")
    return tl.Budget(tool_calls=4) if len(asked) == 1 else None


agent = tl.Agent(
    tl.ScriptedModel(SCRIPT, model="scripted"),
    tools=[lookup],
    output={"type": "string"},
    budget=tl.Budget(tool_calls=8, cost=0.01, requests=5),
    pricing={"scripted": tl.Price(input=0.40, output=1.60)},  # $ per 1M tokens
    on_budget=ask_for_more,
)

result = agent.run("How warm is it?")
usage = result.usage
refused = [e for e in result.errors if e["data"]["error"]["type"] == "budget"]
print(result.output)
print(f"calls started: {usage.tool_calls}, refused: {len(refused)}, cost: ${usage.cost:.5f}")
assert usage.tool_calls == 12 and len(refused) == 8
assert usage.requests == 2 and usage.cost <= 0.01

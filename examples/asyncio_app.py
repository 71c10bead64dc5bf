"""Awaiting an agent from an asyncio program (a web handler, say) without blocking it.

`Agent.run_asyncio` runs tickloop's trio loop as a guest of the running asyncio loop, in
the same thread, so the asyncio side keeps serving while the agent works.
"""

from __future__ import annotations

import asyncio

import trio

import tickloop as tl


@tl.tool
async def lookup(city: str) -> str:
    """Population of a city (pretend)."""
    await trio.sleep(0.05)
    return {"oslo": "709k", "bergen": "291k"}[city]


async def handler(request_city: str) -> str:
    model = tl.ScriptedModel(
        [
            {
                "calls": [
                    {"_tool": "lookup", "city": request_city, "_outputPath": "†state.population"}
                ],
                "output": None,
            },
            {"calls": [], "output": f"{request_city} is a fine city"},
        ]
    )
    agent = tl.Agent(model, tools=[lookup])
    result = await agent.run_asyncio({"city": request_city})
    return f"{result.output} (population {result.state['population']})"


async def main() -> None:
    served = 0

    async def other_requests() -> None:  # the event loop stays responsive meanwhile
        nonlocal served
        while True:
            served += 1
            await asyncio.sleep(0.005)

    background = asyncio.create_task(other_requests())
    answers = await asyncio.gather(handler("oslo"), handler("bergen"))
    background.cancel()
    print(*answers, sep="\n")
    print(f"the asyncio loop ran {served} other steps meanwhile")
    assert served > 1


if __name__ == "__main__":
    asyncio.run(main())

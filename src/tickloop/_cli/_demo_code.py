"""`tickloop demo --code`: the offsite planner as a code plan (PROTOCOL §14).

The same tools as the plan demo (`_demo`), but the scripted model answers with a Python
program. Shown live: each call starts as soon as its statement is complete, while the
model still writes; the lookups of both cities run together though the program asks for
them one comprehension after another; the booking waits for every earlier call and for
the approval hook, which sees the resolved city and cost; the program's printed line
and its variables come back with the answer.
"""

from __future__ import annotations

import sys
from typing import TextIO

from .._agent._agent import Agent, RunResult
from .._models._scripted import ScriptedModel
from .._observe._events import ProgramPrinted, RunEvent
from ._demo import (
    BUDGET,
    OffsitePlan,
    _AnnouncedModel,
    _approve_automatically,
    _LiveView,
    ask_for_more_budget,
    book_venue,
    flight_price,
    forecast,
    hotel_price,
    render_timeline,
    trip_cost,
)

__all__ = ["PROGRAM", "build_code_demo_agent", "run_code_demo"]

PROGRAM = """\
```python
cities = ["lisbon", "porto"]
flights = {c: flight_price(city=c) for c in cities}
hotels = {c: hotel_price(city=c, nights=3) for c in cities}
weather = {c: forecast(city=c) for c in cities}
people = len(task_input["team"])
costs = {c: trip_cost(flight=flights[c], hotel=hotels[c], people=people) for c in cities}
best = min(cities, key=lambda c: costs[c])
print(f"cheapest: {best} at {costs[best]} euros")
if costs[best] <= task_input["budget"]:
    booking = book_venue(city=best, cost=costs[best])
    final_answer({"city": best, "cost": costs[best],
                  "confirmation": booking["confirmation"], "forecast": weather[best]})
else:
    ask_for_more_budget(city=best, cost=costs[best])
```
"""


def build_code_demo_agent(*, chunk_delay: float = 0.012, out: TextIO | None = None) -> Agent:
    """The code-plan demo agent; `chunk_delay` paces the scripted model like a real one."""
    model = _AnnouncedModel(ScriptedModel([PROGRAM], chunk_chars=12, chunk_delay=chunk_delay), out)
    return Agent(
        model,
        tools=[forecast, flight_price, hotel_price, trip_cost, book_venue, ask_for_more_budget],
        output=OffsitePlan,
        instructions="Plan the team offsite: the cheaper city within budget, booked.",
        approve=_approve_automatically,
        protocol="code",
    )


class _CodeLiveView(_LiveView):
    """The live view, with the program's line for each call and its printed lines."""

    id_width = 8

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, ProgramPrinted):
            self.out.write(f"{self.now():6.2f}s  {'print':<8} line {event.line}: {event.text}\n")
            return
        super().__call__(event)


async def run_code_demo(out: TextIO = sys.stdout, *, chunk_delay: float = 0.012) -> RunResult:
    agent = build_code_demo_agent(chunk_delay=chunk_delay, out=out)
    out.write("tickloop demo --code: the offsite planner as a Python program (no network)\n")
    out.write("The model's program:\n\n" + PROGRAM + "\n")
    out.write("Each call starts once its statement is complete, while the model writes.\n\n")
    live = _CodeLiveView(out)
    result = await agent.run_async({"team": ["ana", "bo", "cy"], "budget": BUDGET}, on_event=live)
    out.write("\nOutput:\n")
    out.write(f"  {result.output!r}\n\nVariables:\n")
    for name, value in result.state.items():
        out.write(f"  {name} = {value!r}\n")
    out.write("\nTimeline (trio clock):\n" + render_timeline(result, id_width=8) + "\n")
    lines = ", ".join(f"{r.id}:{r.line}" for r in result.records.values())
    out.write(f"\nCalls and their lines: {lines}\n")
    return result

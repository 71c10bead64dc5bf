"""The bundled demo: an offsite planner on the scripted model, shown live.

It exercises what tickloop is for: six lookups fanned out while the model is still
writing, a fan-in comparison, a branch on the budget (the untaken side is skipped, not an
error), a booking that needs approval (answered automatically here), and a second request
that reads the results and answers.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any, TextIO

import pydantic
import trio

from .._agent._agent import Agent, RunResult
from .._core._decisions import Approve, PendingCall
from .._core._scheduler import CallRecord
from .._core._tools import Branch, Tool, tool
from .._models._base import SolutionRequest, TextDelta, Usage
from .._models._scripted import ScriptedModel
from .._observe._events import (
    CallAwaitingApproval,
    CallDecided,
    CallFinished,
    CallReceived,
    CallStarted,
    RunEvent,
    TickEnded,
)

__all__ = ["build_demo_agent", "run_demo"]

CITIES: dict[str, dict[str, Any]] = {
    "lisbon": {"flight": 420, "hotel": 180, "forecast": "sunny, 24°C", "delay": 0.9},
    "porto": {"flight": 380, "hotel": 150, "forecast": "cloudy, 19°C", "delay": 1.2},
}
BUDGET = 2_500


@tool(read_only=True)
async def forecast(city: str) -> str:
    """The weather forecast for a city during the offsite week."""
    await trio.sleep(CITIES[city]["delay"] * 0.8)
    return str(CITIES[city]["forecast"])


@tool(read_only=True)
async def flight_price(city: str) -> int:
    """Return ticket price in euros, per person."""
    await trio.sleep(CITIES[city]["delay"])
    return int(CITIES[city]["flight"])


@tool(read_only=True)
async def hotel_price(city: str, nights: int = 3) -> int:
    """Hotel price in euros per person for the stay."""
    await trio.sleep(CITIES[city]["delay"] * 0.6)
    return int(CITIES[city]["hotel"]) * nights


@tool(read_only=True)
async def trip_cost(flight: int, hotel: int, people: int) -> int:
    """Total cost of the trip in euros for the whole team."""
    await trio.sleep(0.2)
    return (flight + hotel) * people


@tool(output_path="†state.within_budget || †state.over_budget")
async def check_budget(costs: dict[str, int], budget: int) -> Branch:
    """Pick the cheapest city; the result goes to one branch depending on the budget."""
    await trio.sleep(0.3)
    city = min(costs, key=lambda name: costs[name])
    chosen = {"city": city, "cost": costs[city]}
    branch = "†state.within_budget" if costs[city] <= budget else "†state.over_budget"
    return Branch(branch, chosen)


@tool(requires_approval=True)
async def book_venue(city: str, cost: int) -> dict[str, Any]:
    """Book the offsite venue. A person must approve it: it spends money."""
    await trio.sleep(0.5)
    return {"confirmation": f"OFF-{city[:3].upper()}-2027", "city": city, "cost": cost}


@tool
async def ask_for_more_budget(city: str, cost: int) -> str:
    """Write to finance for a larger budget."""
    await trio.sleep(0.4)
    return f"asked finance for {cost} euros"


summarize = Tool(
    name="note",
    description="A short note you write yourself (latent tool).",
    parameters={"type": "object", "properties": {"about": {"type": "string"}}},
    output={"type": "string"},
)


class OffsitePlan(pydantic.BaseModel):
    city: str
    cost: int
    confirmation: str
    forecast: str


def _script(people: int) -> list[Any]:
    calls: list[dict[str, Any]] = [
        {
            "_tool": "note",
            "about": "plan",
            "_output": "Compare both cities, then book the cheaper one.",
        },
    ]
    for city in CITIES:
        calls += [
            {"_tool": "forecast", "city": city, "_outputPath": f"†state.{city}.forecast"},
            {"_tool": "flight_price", "city": city, "_outputPath": f"†state.{city}.flight"},
            {
                "_tool": "hotel_price",
                "city": city,
                "nights": 3,
                "_outputPath": f"†state.{city}.hotel",
            },
        ]
    for city in CITIES:
        calls.append(
            {
                "_tool": "trip_cost",
                "flight": f"†state.{city}.flight",
                "hotel": f"†state.{city}.hotel",
                "people": people,
                "_outputPath": f"†state.costs.{city}",
            }
        )
    calls += [
        {
            "_tool": "check_budget",
            "costs": "†state.costs.lisbon && †state.costs.porto && †state.costs",
            "budget": BUDGET,
        },
        {
            "_tool": "book_venue",
            "city": "†state.within_budget.city",
            "cost": "†state.within_budget.cost",
            "_outputPath": "†state.booking",
        },
        {
            "_tool": "ask_for_more_budget",
            "city": "†state.over_budget.city",
            "cost": "†state.over_budget.cost",
            "_outputPath": "†state.finance",
        },
    ]
    cheapest = min(CITIES, key=lambda c: CITIES[c]["flight"] + CITIES[c]["hotel"] * 3)
    cost = (CITIES[cheapest]["flight"] + CITIES[cheapest]["hotel"] * 3) * people
    answer = {
        "city": cheapest,
        "cost": cost,
        "confirmation": f"OFF-{cheapest[:3].upper()}-2027",
        "forecast": CITIES[cheapest]["forecast"],
    }
    return [{"calls": calls, "output": None}, {"calls": [], "output": answer}]


class _AnnouncedModel:
    """Wraps the scripted model to show when the model starts and stops writing."""

    def __init__(self, model: ScriptedModel, out: TextIO | None) -> None:
        self.model = model
        self.out = out

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        self._say(f"-- request {request.iteration}: the model starts writing")
        async for item in self.model.stream_solution(request):
            yield item
        self._say(f"-- request {request.iteration}: the model finished writing")

    def _say(self, text: str) -> None:
        if self.out is not None:
            self.out.write(f"{_elapsed():6.2f}s  {text}\n")


_ORIGIN = [0.0]


def _elapsed() -> float:
    return trio.current_time() - _ORIGIN[0]


def build_demo_agent(
    *, people: int = 3, chunk_delay: float = 0.012, out: TextIO | None = None
) -> Agent:
    """The demo agent; `chunk_delay` paces the scripted model like a real one."""
    model = _AnnouncedModel(
        ScriptedModel(_script(people), chunk_chars=12, chunk_delay=chunk_delay), out
    )
    return Agent(
        model,
        tools=[
            forecast,
            flight_price,
            hotel_price,
            trip_cost,
            check_budget,
            book_venue,
            ask_for_more_budget,
            summarize,
        ],
        output=OffsitePlan,
        instructions="Plan the team offsite: the cheaper city within budget, booked.",
        approve=_approve_automatically,
    )


async def _approve_automatically(call: PendingCall) -> Approve:
    # Async: answered in the run's own task, so the demo's virtual timings stay exact
    # (a sync hook would run in a worker thread, during which virtual time may jump).
    return Approve()


class _LiveView:
    """Prints each call's transitions as they happen, with trio-clock timestamps."""

    id_width = 6  # a plan's call ids (`c1.12`); a code plan's call paths are longer

    def __init__(self, out: TextIO) -> None:
        self.out = out
        _ORIGIN[0] = trio.current_time()
        self.tools: dict[str, str] = {}
        self.started: dict[str, float] = {}

    def now(self) -> float:
        return _elapsed()

    def line(self, call_id: str, text: str) -> None:
        self.out.write(f"{self.now():6.2f}s  {call_id:<{self.id_width}} {text}\n")
        self.out.flush()

    def __call__(self, event: RunEvent) -> None:
        call_id = event.call_id or ""
        if isinstance(event, CallReceived):
            self.tools[call_id] = event.tool or ""
            self.line(call_id, f"{event.tool or '':<20} received")
        elif isinstance(event, CallAwaitingApproval):
            self.line(call_id, f"{event.tool or '':<20} awaiting approval {_short(event.params)}")
        elif isinstance(event, CallDecided):
            self.line(call_id, f"{self.tools.get(call_id, ''):<20} {event.decision}d automatically")
        elif isinstance(event, CallStarted):
            self.started[call_id] = self.now()
            self.line(call_id, f"{event.tool or '':<20} running {_short(event.params)}")
        elif isinstance(event, CallFinished):
            took = self.now() - self.started.get(call_id, self.now())
            detail = f" ({took:.2f}s)" if call_id in self.started else ""
            self.line(call_id, f"{self.tools.get(call_id, ''):<20} {event.status}{detail}")
        elif isinstance(event, TickEnded):
            self.out.write(
                f"{self.now():6.2f}s  -- request {event.iteration} done, "
                f"{len(event.errors)} errors\n"
            )


def _short(params: dict[str, Any]) -> str:
    text = ", ".join(f"{key}={value!r}" for key, value in params.items())
    return text if len(text) <= 60 else text[:57] + "..."


def render_timeline(result: RunResult, width: int = 50, id_width: int = 6) -> str:
    """A compact text timeline: one bar per call that ran, on the trio clock."""
    ran = [r for r in result.records.values() if r.started is not None and r.finished is not None]
    if not ran:
        return "(no call ran)"
    origin = min(r.started for r in ran if r.started is not None)
    end = max(r.finished for r in ran if r.finished is not None)
    scale = width / max(end - origin, 1e-9)
    lines = []
    for record in sorted(ran, key=_start_of):
        assert record.started is not None and record.finished is not None
        left = int((record.started - origin) * scale)
        length = max(1, int((record.finished - record.started) * scale))
        bar = " " * left + "█" * length
        lines.append(
            f"  {record.id:<{id_width}} {record.tool or '':<20} |{bar:<{width}}| {record.status}"
        )
    lines.append(f"  {'':<{id_width}} {'':<20} 0{'':<{width - 8}}{end - origin:6.2f}s")
    return "\n".join(lines)


def _start_of(record: CallRecord) -> float:
    return record.started or 0.0


async def run_demo(out: TextIO = sys.stdout, *, chunk_delay: float = 0.012) -> RunResult:
    agent = build_demo_agent(chunk_delay=chunk_delay, out=out)
    out.write("tickloop demo: planning a team offsite (scripted model, no network)\n")
    out.write("Calls start while the model is still writing its plan.\n\n")
    live = _LiveView(out)
    result = await agent.run_async({"team": ["ana", "bo", "cy"], "budget": BUDGET}, on_event=live)
    out.write("\nOutput:\n")
    out.write(f"  {result.output!r}\n\nTimeline (trio clock):\n")
    out.write(render_timeline(result) + "\n")
    statuses: dict[str, int] = {}
    for record in result.records.values():
        statuses[record.status] = statuses.get(record.status, 0) + 1
    summary = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    out.write(f"\n{len(result.records)} calls ({summary}) in {result.iterations} requests.\n")
    return result

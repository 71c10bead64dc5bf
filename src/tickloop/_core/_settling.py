"""Settling calls that can never run: those whose reference nothing will write (skipped
or unresolved), and those that wait on each other when nothing in flight can free them.

networkx is imported here, inside the functions, and only when a tick has such calls:
most runs never load it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from . import _few
from ._call import Call
from ._expressions import Expression, Reference, format_location
from ._log import ContextLog
from ._missing import describe_missing
from ._path_index import PathIndex
from ._plan_order import PlanOrder, Slot

__all__ = [
    "Deadlock",
    "LostWriters",
    "awaits_fire_and_forget",
    "cycles",
    "deadlocks",
    "describe_cycle",
    "unresolved",
]


@dataclass(frozen=True, slots=True)
class Deadlock:
    """Calls that wait on each other, in arrival order. When the cycle runs through a held
    write (`held`, the earliest), that write is applied rather than the calls settled: only
    forward references point to later calls, and plan order cannot hold there (PROTOCOL
    §4, "forward references aside"). Otherwise every call of it is invalid (`cycle`)."""

    calls: list[str]
    held: str | None
    cycle: str


def deadlocks(
    waiting: Iterable[Call],
    plan: PlanOrder,
    writers: PathIndex,
    log: ContextLog,
    seq_of: Callable[[str], int],
) -> list[Deadlock]:
    """The wait-for cycles among the waiting calls and the held writes, earliest first.

    Only meaningful once nothing in flight can unblock a waiting call: the caller checks
    that; this only reads, so asking changes nothing."""
    edges = [(call.id, list(_blockers(call, plan, writers, log, seq_of))) for call in waiting]
    for call_id in plan.held:
        edges.append((call_id, sorted(plan.held_blockers(call_id), key=seq_of)))
    graph, found = cycles(edges, seq_of)
    found_deadlocks = []
    for component in found:
        held = next((call_id for call_id in component if plan.is_held(call_id)), None)
        cycle = "" if held is not None else describe_cycle(graph, component)
        found_deadlocks.append(Deadlock(component, held, cycle))
    return found_deadlocks


def _blockers(
    call: Call, plan: PlanOrder, writers: PathIndex, log: ContextLog, seq_of: Callable[[str], int]
) -> Iterator[str]:
    """The unfinished calls this waiting call waits on (deferred ones included)."""
    yield from sorted(call.tool_waits or (), key=seq_of)
    for slot in plan.slots(call.id):
        if slot.pending:  # earlier writers, in plan order (PROTOCOL §3)
            yield from sorted(_few.members(slot.pending), key=seq_of)
            continue
        if not slot.forward or log.lookup(slot.term)[0]:
            continue
        for writer in sorted(writers.ids_overlapping(slot.term), key=seq_of):
            if writer != call.id:
                yield writer


def awaits_fire_and_forget(
    tool_dependents: Mapping[str, Collection[str]],
    running: Collection[str],
    calls: Mapping[str, Call],
    waiting: Collection[str],
) -> bool:
    """Whether a running fire-and-forget call has a waiting call waiting for it.

    Only a `depends_on` tool name waits for a call that writes nothing, and only for calls
    of its own request (`tool_dependents` maps each unfinished call to the calls that wait
    for it that way). A tick never ends while one of its calls waits like this, so a
    fire-and-forget call an earlier tick left running never counts here: the tick does not
    wait for it (PROTOCOL §4).
    """
    for call_id, dependents in tool_dependents.items():
        if call_id in running and calls[call_id].fire_and_forget:
            if any(dependent in waiting for dependent in dependents):
                return True
    return False


def cycles(
    edges: Iterable[tuple[str, Iterable[str]]], seq_of: Callable[[str], int]
) -> tuple[Any, list[list[str]]]:
    """The wait-for graph of (call, the calls it waits on), and its cycles: each the ids of
    one strongly connected part of more than one call, in arrival order, earliest first."""
    import networkx as nx

    graph: Any = nx.DiGraph()
    for call_id, blockers in edges:
        graph.add_node(call_id)
        for blocker in blockers:
            graph.add_edge(call_id, blocker)
    components = sorted(
        (sorted(component, key=seq_of) for component in nx.strongly_connected_components(graph)),
        key=lambda component: seq_of(component[0]),
    )
    return graph, [component for component in components if len(component) >= 2]


def describe_cycle(graph: Any, component: list[str]) -> str:
    """One cycle through the component, from its earliest call: "a -> b -> a"."""
    import networkx as nx

    edges = nx.find_cycle(graph.subgraph(component), source=component[0])
    ids = [edges[0][0], *(edge[1] for edge in edges)]
    return " -> ".join(ids)


class LostWriters(PathIndex):
    """The output terms of calls that ended in an error status without writing them, and
    how each ended: the scheduler keeps no ended call, and the error of a reader names the
    tool the writer ran as (a failed replacement's record names the replacement's)."""

    __slots__ = ("ended",)

    def __init__(self) -> None:
        super().__init__()
        self.ended: dict[str, tuple[str, str]] = {}  # call id -> (tool name, status)

    def lose(self, call: Call, status: str) -> None:
        for term in call.writes:
            self.add(term, call.id)
        self.ended[call.id] = (call.tool.name, status)


def unresolved(
    call: Call,
    reference: Reference | None,
    expression: Expression,
    dead: list[Slot],
    lost_writers: LostWriters,
    skip_sources: PathIndex,
    seq_of: Callable[[str], int],
    view: Callable[[str], Any],
) -> dict[str, Any] | None:
    """Why a call's expression can never be read: None when every dead term was only
    skipped (an if/else plan: the call is skipped too), else the structural error, naming
    the call that should have written it, if one ended without doing so, or else what is
    missing of a lone term and what its kind's `view` holds there (PROTOCOL §5)."""
    where = (
        f"parameter {format_location(reference.location)}"
        if reference is not None
        else f"depends_on of tool {call.tool.name!r}"
    )

    def read_from(other: str, slot: Slot) -> bool:
        # Plan order (§3): a term an earlier call writes reads only what the calls before
        # the reader leave, whatever a later one does; a forward term, any call's write.
        return slot.forward or seq_of(other) < call.seq

    lost: list[str] = []
    skipped_only = True
    for slot in dead:
        writers = sorted(
            (w for w in lost_writers.ids_overlapping(slot.term) if read_from(w, slot)),
            key=seq_of,
        )
        if writers:
            lost.extend(writers)
            skipped_only = False
        elif not any(read_from(s, slot) for s in skip_sources.ids_overlapping(slot.term)):
            skipped_only = False
    if skipped_only:
        return None
    terms = " || ".join(str(slot.term) for slot in dead)
    if lost:
        tool, status = lost_writers.ended[lost[0]]
        reason = f"call {lost[0]} ({tool}), which should have written it, ended {status}"
    elif len(dead) == 1:
        reason = describe_missing(dead[0].term, view(dead[0].term.kind))
    else:
        reason = "no call wrote it, and none will"
    return {
        "type": "structural",
        "message": f"unresolved reference {terms} in {where}: {reason}",
        "reference": str(expression),
        **({"writer": lost[0]} if lost else {}),
    }

"""Settling calls that can never run: those whose reference nothing will write (skipped
or unresolved), and those that wait on each other when nothing in flight can free them.

networkx is imported here, inside the functions, and only when a tick has such calls:
most runs never load it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._call import Call
from ._expressions import Expression, Reference, Term, format_location
from ._path_index import PathIndex

__all__ = ["cycles", "describe_cycle", "unresolved"]


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


def unresolved(
    call: Call,
    reference: Reference | None,
    expression: Expression,
    dead: list[Term],
    lost_writers: PathIndex,
    skip_sources: PathIndex,
    calls: Mapping[str, Call],
) -> dict[str, Any] | None:
    """Why a call's expression can never be read: None when every dead term was only
    skipped (an if/else plan: the call is skipped too), else the structural error, naming
    the call that should have written it, if one ended without doing so (PROTOCOL §5)."""
    where = (
        f"parameter {format_location(reference.location)}"
        if reference is not None
        else f"depends_on of tool {call.tool.name!r}"
    )

    def seq_of(call_id: str) -> int:
        return calls[call_id].seq

    lost: list[str] = []
    skipped_only = True
    for term in dead:
        writers = sorted(lost_writers.ids_overlapping(term), key=seq_of)
        if writers:
            lost.extend(writers)
            skipped_only = False
        elif not skip_sources.count_overlapping(term):
            skipped_only = False
    if skipped_only:
        return None
    terms = " || ".join(str(term) for term in dead)
    if lost:
        culprit = calls[lost[0]]
        reason = (
            f"call {culprit.id} ({culprit.tool.name}), which should have written it, "
            f"ended {culprit.status}"
        )
    else:
        reason = "no call wrote it, and none will"
    return {
        "type": "structural",
        "message": f"unresolved reference {terms} in {where}: {reason}",
        "reference": str(expression),
        **({"writer": lost[0]} if lost else {}),
    }

"""Plan review (PROTOCOL §15): the plan a reviewer is shown when a request's stream
closes, and which of its decisions may be given before a call's parameters are known.

Pure, like the scheduler that calls it: it reads the scheduler's graph (the writers each
waiting call reads, `PathIndex`) and returns values; the scheduler acts on them.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ._call import Call
from ._decisions import Approve, Decision, Defer, Deny, PendingCall, Plan
from ._path_index import PathIndex

__all__ = ["ADVANCE_DECISIONS", "allowed_in_advance", "build_plan", "site_of", "site_pattern"]

ADVANCE_DECISIONS = (Approve, Deny, Defer)
"""The decisions a call may get before its parameters are known: the others (edit,
replace, respond) need what would run, so a reviewer gives them to the hook later."""

_INDEX = re.compile(r"\[\d+\]")


def site_of(call_id: str) -> str:
    """A code plan's call site: its id with every loop index made `[*]` (`c2.4[*]`)."""
    return _INDEX.sub("[*]", call_id)


def site_pattern(key: str) -> re.Pattern[str] | None:
    """What a decision keyed by a site (`c2.4[*]`) matches; None for a plain call id."""
    if "[*]" not in key:
        return None
    return re.compile(re.escape(key).replace(r"\[\*\]", r"(?:\[\d+\])+"))


def build_plan(
    gated: list[Call],
    pending: Callable[[Call], PendingCall],
    calls: dict[str, Call],
    waiters: PathIndex,
    tool_dependents: dict[str, set[str]],
    iteration: int,
    run_id: str | None,
    *,
    program: str | None = None,
    sites: dict[str, str] | None = None,
) -> Plan:
    """The plan of the request: its gated calls, and the arrows between them (a reader
    reads what a writer writes, directly or through calls that need no approval). A code
    plan's (`program` given) also has its gated sites: those of the calls known, and
    `sites`, the program's own (which may not have made a call yet)."""
    shown = {call.id for call in gated}
    arrows: list[tuple[str, str]] = []
    for writer in gated:
        seen = {writer.id}
        frontier = [writer]
        while frontier:
            current = frontier.pop()
            readers = set(tool_dependents.get(current.id, ()))
            for term in current.writes:
                readers.update(waiters.ids_overlapping(term))
            for reader_id in sorted(readers - seen):
                seen.add(reader_id)
                if reader_id in shown:
                    arrows.append((writer.id, reader_id))
                elif reader_id in calls:  # needs no approval: look through it
                    frontier.append(calls[reader_id])
    site_tools: dict[str, str] = {}
    if program is not None:
        site_tools = dict(sites or {})
        for call in gated:
            site_tools.setdefault(site_of(call.id), call.tool.name)
    return Plan(
        calls=[pending(call) for call in gated],
        arrows=sorted(arrows),
        iteration=iteration,
        run_id=run_id,
        program=program,
        sites=sorted(site_tools, key=_in_source_order),
        site_tools=site_tools,
    )


def _in_source_order(site: str) -> list[int]:
    return [int(number) for number in re.findall(r"\d+", site)]


def allowed_in_advance(decision: Decision) -> bool:
    return isinstance(decision, ADVANCE_DECISIONS)

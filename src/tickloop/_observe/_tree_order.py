"""The calls of a tree of runs in reading order (PROTOCOL §11), for traces and timelines.

A sub-agent's calls are stored under full paths ("c1.2/c1.0"), and each child's call
right after the call that started it reads best: the root's calls in their stored
order, each followed by its child's calls in arrival order, depth first.
"""

from __future__ import annotations

from .._core._paths import RunPath
from ._records import CallInfo

__all__ = ["depth_of", "in_tree_order"]


def depth_of(call_id: str) -> int:
    """How many agent calls are above this call (0 at the root)."""
    return RunPath.parse(call_id).depth - 1


def in_tree_order(calls: list[CallInfo]) -> list[CallInfo]:
    """`calls` with each sub-agent's calls right after the call that started it."""
    paths = {call.id: RunPath.parse(call.id) for call in calls}
    if all(path.depth == 1 for path in paths.values()):
        return calls
    children: dict[RunPath, list[CallInfo]] = {}
    top: list[CallInfo] = []
    for call in calls:
        run = paths[call.id].parent
        if run and str(run) in paths:
            children.setdefault(run, []).append(call)
        else:
            top.append(call)
    for group in children.values():
        group.sort(key=lambda call: (call.received is None, call.received or 0.0, call.seq))
    ordered: list[CallInfo] = []
    stack = list(reversed(top))
    while stack:
        call = stack.pop()
        ordered.append(call)
        stack.extend(reversed(children.get(paths[call.id], ())))
    return ordered

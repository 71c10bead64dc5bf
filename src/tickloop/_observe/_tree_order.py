"""The calls of a tree of runs in reading order (PROTOCOL §11), for traces and timelines.

A sub-agent's calls are stored under full paths ("c1.2/c1.0"), and each child's call
right after the call that started it reads best: the root's calls in their stored
order, each followed by its child's calls in arrival order, depth first.
"""

from __future__ import annotations

from ._records import CallInfo

__all__ = ["depth_of", "in_tree_order"]


def depth_of(call_id: str) -> int:
    """How many agent calls are above this call (0 at the root)."""
    return call_id.count("/")


def in_tree_order(calls: list[CallInfo]) -> list[CallInfo]:
    """`calls` with each sub-agent's calls right after the call that started it."""
    if not any("/" in call.id for call in calls):
        return calls
    known = {call.id for call in calls}
    children: dict[str, list[CallInfo]] = {}
    top: list[CallInfo] = []
    for call in calls:
        parent, slash, _ = call.id.rpartition("/")
        if slash and parent in known:
            children.setdefault(parent, []).append(call)
        else:
            top.append(call)
    for group in children.values():
        group.sort(key=lambda call: (call.received is None, call.received or 0.0, call.seq))
    ordered: list[CallInfo] = []
    stack = list(reversed(top))
    while stack:
        call = stack.pop()
        ordered.append(call)
        stack.extend(reversed(children.get(call.id, ())))
    return ordered

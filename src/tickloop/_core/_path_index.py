"""Call ids filed under paths, queried by overlap (PROTOCOL §5: "through an index from
paths to waiting calls, never by rescanning every pending call")."""

from __future__ import annotations

from ._expressions import Term

__all__ = ["PathIndex"]


class _Node:
    __slots__ = ("children", "entries", "subtree")

    def __init__(self) -> None:
        self.children: dict[str | int, _Node] = {}
        self.entries: dict[str, int] = {}
        self.subtree = 0


class PathIndex:
    """Call ids filed under terms, queried by overlap (either term a prefix of the other).

    Overlap is what matters for both questions the scheduler asks: a write at `state.a`
    makes `state.a.b` present and `state.a.b` makes `state.a` present.
    """

    def __init__(self) -> None:
        self._root = _Node()

    def add(self, term: Term, call_id: str) -> None:
        node = self._root
        node.subtree += 1
        for step in (term.kind, *term.path):
            # Looked up before made: `setdefault(step, _Node())` would build a node per step.
            child = node.children.get(step)
            if child is None:
                child = node.children[step] = _Node()
            node = child
            node.subtree += 1
        entries = node.entries
        entries[call_id] = entries.get(call_id, 0) + 1

    def remove(self, term: Term, call_id: str) -> None:
        node = self._root
        path = [node]
        for step in (term.kind, *term.path):
            node = node.children[step]
            path.append(node)
        count = node.entries[call_id] - 1
        if count:
            node.entries[call_id] = count
        else:
            del node.entries[call_id]
        for visited in path:
            visited.subtree -= 1

    def count_overlapping(self, term: Term) -> int:
        node = self._root
        if not node.subtree:
            return 0
        total = 0
        for step in (term.kind, *term.path):
            child = node.children.get(step)
            if child is None or child.subtree == 0:
                return total
            node = child
            total += sum(node.entries.values())
        # `node` is the term's own node: everything below it overlaps too.
        return total - sum(node.entries.values()) + node.subtree

    def ids_overlapping(self, term: Term) -> set[str]:
        found: set[str] = set()
        node = self._root
        if not node.subtree:  # an empty index, as most are for a plan without reads
            return found
        for step in (term.kind, *term.path):
            child = node.children.get(step)
            if child is None or child.subtree == 0:
                return found
            node = child
            found.update(node.entries)
        stack = list(node.children.values())
        while stack:
            below = stack.pop()
            if below.subtree:
                found.update(below.entries)
                stack.extend(below.children.values())
        return found

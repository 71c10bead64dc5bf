"""Call ids filed under paths, queried by overlap (PROTOCOL §5: "through an index from
paths to waiting calls, never by rescanning every pending call")."""

from __future__ import annotations

from collections.abc import Set

from ._expressions import Step, Term

__all__ = ["PathIndex"]

_NOTHING: frozenset[str] = frozenset()


class _Node:
    """One step of the trie. Its dicts are made only when first needed: most nodes are
    leaves (no children) or inner steps (no entries), and a plan of 100,000 calls makes a
    node per call in several indexes."""

    __slots__ = ("children", "entries", "subtree")

    def __init__(self) -> None:
        self.children: dict[Step, _Node] | None = None
        self.entries: dict[str, int] | None = None
        self.subtree = 0  # entries here and below: a subtree of 0 holds nothing


class PathIndex:
    """Call ids filed under terms, queried by overlap (either term a prefix of the other).

    Overlap is what matters for both questions the scheduler asks: a write at `state.a`
    makes `state.a.b` present and `state.a.b` makes `state.a` present.

    Removing the last entry under a node prunes it, so an index whose entries come and go
    (the calls not yet ended) stays as small as what it holds. A `deferred` index files
    its entries in the trie only when it is first asked something: several indexes are
    asked only when a plan reads or a person approves, and most plans never pay for them.
    """

    __slots__ = ("_backlog", "_root")

    def __init__(self, *, deferred: bool = False) -> None:
        self._root = _Node()
        self._backlog: list[tuple[Term, str]] | None = [] if deferred else None

    def __bool__(self) -> bool:
        return bool(self._root.subtree or self._backlog)

    def add(self, term: Term, call_id: str) -> None:
        backlog = self._backlog
        if backlog is not None:
            backlog.append((term, call_id))
            return
        self._file(term, call_id)

    def _file(self, term: Term, call_id: str) -> None:
        node = self._root
        node.subtree += 1
        for step in (term.kind, *term.path) if term.path else (term.kind,):
            children = node.children
            if children is None:
                children = node.children = {}
                child = None
            else:
                child = children.get(step)
            if child is None:
                child = children[step] = _Node()
            node = child
            node.subtree += 1
        entries = node.entries
        if entries is None:
            node.entries = {call_id: 1}
        else:
            entries[call_id] = entries.get(call_id, 0) + 1

    def _catch_up(self) -> None:
        backlog = self._backlog
        if backlog:
            self._backlog = []
            for term, call_id in backlog:
                self._file(term, call_id)

    def remove(self, term: Term, call_id: str) -> None:
        if self._backlog:
            self._catch_up()
        node = self._root
        path = [node]
        for step in (term.kind, *term.path) if term.path else (term.kind,):
            node = node.children[step]  # type: ignore[index]  # filed: the steps exist
            path.append(node)
        entries = node.entries
        assert entries is not None
        count = entries[call_id] - 1
        if count:
            entries[call_id] = count
        elif len(entries) == 1:
            node.entries = None
        else:
            del entries[call_id]
        for visited in path:
            visited.subtree -= 1
        # Prune from the top: the first node left empty takes everything below it along.
        steps = (term.kind, *term.path)
        for depth in range(1, len(path)):
            if not path[depth].subtree:
                parent = path[depth - 1]
                children = parent.children
                assert children is not None
                if len(children) == 1:
                    parent.children = None
                else:
                    del children[steps[depth - 1]]
                return

    def count_overlapping(self, term: Term) -> int:
        if self._backlog:
            self._catch_up()
        node = self._root
        if not node.subtree:
            return 0
        total = 0
        for step in (term.kind, *term.path) if term.path else (term.kind,):
            children = node.children
            child = None if children is None else children.get(step)
            if child is None:
                return total
            node = child
            if node.entries:
                total += sum(node.entries.values())
        # `node` is the term's own node: everything below it overlaps too.
        return total - (sum(node.entries.values()) if node.entries else 0) + node.subtree

    def ids_overlapping(self, term: Term) -> Set[str]:
        """The ids filed at a prefix of `term`, at `term` or below it (a set to read only:
        an empty answer is shared)."""
        if self._backlog:
            self._catch_up()
        node = self._root
        if not node.subtree:  # an empty index, as most are for a plan without reads
            return _NOTHING
        found: set[str] | None = None
        for step in (term.kind, *term.path) if term.path else (term.kind,):
            children = node.children
            child = None if children is None else children.get(step)
            if child is None:
                return _NOTHING if found is None else found
            node = child
            if node.entries:
                if found is None:
                    found = set(node.entries)
                else:
                    found.update(node.entries)
        if node.children is None:
            return _NOTHING if found is None else found
        if found is None:
            found = set()
        stack = list(node.children.values())
        while stack:
            below = stack.pop()
            if below.entries:
                found.update(below.entries)
            if below.children:
                stack.extend(below.children.values())
        return found

"""Call ids filed under paths, queried by overlap (PROTOCOL §5: "through an index from
paths to waiting calls, never by rescanning every pending call")."""

from __future__ import annotations

from collections.abc import Collection, Set
from typing import Any

from ._expressions import Step, Term, parse_expression
from ._few import count_add, count_ids, count_remove, count_total

__all__ = ["PathIndex"]

_NOTHING: frozenset[str] = frozenset()


class _Node:
    """One step of the trie. Its dicts are made only when first needed: most nodes are
    leaves (no children) or inner steps (no entries), and a plan of 100,000 calls makes a
    node per call in several indexes. `entries` is a counted holder of `_few`: most leaves
    hold one id once, kept bare."""

    __slots__ = ("children", "entries", "subtree")

    def __init__(self) -> None:
        self.children: dict[Step, Any] | None = None  # a _Node, or a bare leaf (an id)
        self.entries: str | tuple[str, ...] | dict[str, int] | None = None
        self.subtree = 0  # entries here and below: a subtree of 0 holds nothing


def _leaf(call_id: str) -> _Node:
    """A bare leaf made a node, to file a second entry at it or a path below it."""
    node = _Node()
    node.entries = call_id
    node.subtree = 1
    return node


class _Kind:
    """The entries of one kind: how many, how many at each depth, and those not filed in
    the trie by path. Kinds are apart in the trie too (its first step), so each is filed
    on its own, when a question about it needs the trie."""

    __slots__ = ("depths", "filed", "size", "unfiled")

    def __init__(self) -> None:
        self.size = 0  # entries, filed or not
        self.filed = 0  # entries filed in the trie: none, and the exact terms answer
        # depth (the steps of a path) -> entries at it, filed or not; a depth stays at 0
        # (depths are few). Asked by `all_at`.
        self.depths: dict[int, int] = {}
        # path -> the ids not filed in the trie at the term of this kind and path, a
        # counted `_few` holder (a bare id mostly). Every entry is here or in the trie, once.
        self.unfiled: dict[tuple[Step, ...], Any] = {}

    def all_at(self, depth: int) -> bool:
        """Every entry of the kind is at `depth`: none is at a prefix of a term of that
        depth or below it, only at the term itself."""
        return self.depths.get(depth, 0) == self.size


class PathIndex:
    """Call ids filed under terms, queried by overlap (either term a prefix of the other).

    Overlap is what matters for both questions the scheduler asks: a write at `state.a`
    makes `state.a.b` present and `state.a.b` makes `state.a` present.

    An entry is kept by its exact term until a question needs the trie: most plans write
    and read paths of one depth (`†state.rK`), where two terms overlap only when equal and
    every question is a lookup of the term itself. So the entries of a kind are filed in
    the trie only when a question about the kind spans depths (a term with entries of its
    kind at another depth), and then as the kind is asked again; most entries come and go
    without a walk. Removing the last entry under a trie node prunes it, so the trie stays
    as small as what it holds.

    Entries added as the text of an expression (`add_spelled`) are kept as text until the
    index is first asked or changed otherwise: several indexes are asked only when a plan
    reads an absent path or a person approves, and most plans never pay for parsing.
    """

    __slots__ = ("_kinds", "_root", "_text_ids", "_texts", "size")

    def __init__(self) -> None:
        self._root = _Node()
        self._root.children = {}  # kinds: pruned when empty; `subtree` counts what is filed
        # The entries of each kind an entry ever had: kinds are few, so never dropped.
        self._kinds: dict[str, _Kind] = {}
        # Not yet parsed, as two lists (a tuple per entry would be an object per call): the
        # text of an expression, each of whose terms is an entry, and its id.
        self._texts: list[str] = []
        self._text_ids: list[str] = []
        self.size = 0  # entries held (filed, unfiled or text): `if index.size` costs no call

    def __bool__(self) -> bool:
        return self.size > 0

    def add(self, term: Term, call_id: str) -> None:
        self.size += 1
        kind = self._kinds.get(term.kind)
        if kind is None:
            kind = self._kinds[term.kind] = _Kind()
        kind.size += 1
        path = term.path
        depths = kind.depths
        depths[len(path)] = depths.get(len(path), 0) + 1
        unfiled = kind.unfiled
        here = unfiled.get(path)
        unfiled[path] = call_id if here is None else count_add(here, call_id)

    def add_spelled(self, text: str, call_id: str, count: int) -> None:
        """`add` each of the `count` terms of the expression `text` spells.

        The text is kept until the index is asked: the text is kept anyway (by the call,
        or its data message), and the parsed terms would be objects kept per call for a
        question most runs never ask.
        """
        self.size += count
        self._texts.append(text)
        self._text_ids.append(call_id)

    def remove(self, term: Term, call_id: str) -> None:
        if self._texts:
            self._parse_texts()
        self.size -= 1
        kind = self._kinds[term.kind]
        kind.size -= 1
        path = term.path
        kind.depths[len(path)] -= 1
        unfiled = kind.unfiled
        here = unfiled.pop(path, None)
        if here == call_id:  # the one entry at the term (most terms hold one)
            return
        if here is not None:
            if call_id in count_ids(here):  # more than one was here
                unfiled[path] = count_remove(here, call_id)
                return
            unfiled[path] = here  # filed, while later entries at the term are not
        kind.filed -= 1
        self._unfile(term, call_id)

    def _parse_texts(self) -> None:
        texts, ids = self._texts, self._text_ids
        self._texts, self._text_ids = [], []
        for text, call_id in zip(texts, ids, strict=True):
            terms = parse_expression(text).terms
            self.size -= len(terms)  # counted when the text came: `add` counts each again
            for term in terms:
                self.add(term, call_id)

    def _file_kind(self, name: str, kind: _Kind) -> None:
        """File the kind's unfiled entries in the trie: a question about it that the
        exact terms cannot answer."""
        if not kind.unfiled:
            return
        unfiled, kind.unfiled = kind.unfiled, {}
        kind.filed = kind.size
        for path, here in unfiled.items():
            if type(here) is dict:
                for call_id, times in here.items():
                    for _ in range(times):
                        self._file(name, path, call_id)
            else:
                for call_id in (here,) if type(here) is str else here:
                    self._file(name, path, call_id)

    def _file(self, kind: str, path: tuple[Step, ...], call_id: str) -> None:
        root = self._root
        root.subtree += 1
        # A leaf holding one id once is kept as the bare id in its parent's children: most
        # paths have one call filed under them, and a node each would cost it 56 bytes.
        step: Step
        node, step, at = root, kind, 0
        while True:
            children = node.children
            if children is None:
                children = node.children = {}
            child = children.get(step)
            if at == len(path):  # `step` is the term's own
                if child is None:
                    children[step] = call_id
                    return
                if type(child) is str:
                    child = children[step] = _leaf(child)
                child.subtree += 1
                child.entries = count_add(child.entries, call_id)
                return
            if child is None:
                child = children[step] = _Node()
            elif type(child) is str:
                child = children[step] = _leaf(child)
            child.subtree += 1
            node, step, at = child, path[at], at + 1

    def _unfile(self, term: Term, call_id: str) -> None:
        """Take a filed entry out of the trie."""
        root = self._root
        root.subtree -= 1
        # Filed, so every step exists. The highest node left empty is pruned, and takes
        # everything below it along.
        empty_parent: _Node | None = None
        empty_step: Step = ""
        step: Step
        parent, step, path, at = root, term.kind, term.path, 0
        while True:
            node = parent.children[step]  # type: ignore[index]
            if type(node) is str:  # a bare leaf: the term's own, holding this id once
                assert node == call_id and at == len(path)
                if empty_parent is None:
                    empty_parent, empty_step = parent, step
                break
            node.subtree -= 1
            if empty_parent is None and not node.subtree:
                empty_parent, empty_step = parent, step
            if at == len(path):
                node.entries = count_remove(node.entries, call_id)
                break
            parent, step, at = node, path[at], at + 1
        if empty_parent is not None:
            children = empty_parent.children
            assert children is not None
            if len(children) == 1 and empty_parent is not root:
                empty_parent.children = None
            else:
                del children[empty_step]

    def count_overlapping(self, term: Term) -> int:
        if not self.size:
            return 0
        if self._texts:
            self._parse_texts()
        kind = self._kinds.get(term.kind)
        if kind is None:
            return 0
        if not kind.filed and kind.all_at(len(term.path)):
            return count_total(kind.unfiled.get(term.path))  # at the term itself, or none
        self._file_kind(term.kind, kind)
        node = self._root.children.get(term.kind)  # type: ignore[union-attr]
        if node is None:
            return 0
        if type(node) is str:  # a bare leaf: one id at the kind itself
            return 1
        total = count_total(node.entries)
        for step in term.path:
            children = node.children
            child = None if children is None else children.get(step)
            if child is None:
                return total
            if type(child) is str:  # a bare leaf, at a prefix of the term or at the term
                return total + 1
            node = child
            if node.entries:
                total += count_total(node.entries)
        # `node` is the term's own node: everything below it overlaps too.
        overlapping: int = total - count_total(node.entries) + node.subtree
        return overlapping

    def holds_around(self, term: Term) -> bool:
        """Whether anything is held at a prefix of `term` or below it (not at `term`
        itself): nothing when every entry of its kind is at its depth, else one step per
        step of the term, however many ids are held at it."""
        if self._texts:
            self._parse_texts()
        kind = self._kinds.get(term.kind)
        if kind is None or kind.all_at(len(term.path)):
            return False  # every entry of the kind is at the term's depth
        self._file_kind(term.kind, kind)
        node = self._root.children.get(term.kind)  # type: ignore[union-attr]
        for step in term.path:
            if node is None:
                return False
            if type(node) is str:  # a bare leaf at a prefix of the term
                return True
            if node.entries:
                return True
            children = node.children
            node = None if children is None else children.get(step)
        if node is None or type(node) is str:  # nothing, or the term's own bare leaf
            return False
        return bool(node.children)  # pruned when empty: children hold something

    def ids_at(self, term: Term) -> Collection[str]:
        """The ids held exactly at `term` (not at a prefix of it, nor below it)."""
        if self._texts:
            self._parse_texts()
        kind = self._kinds.get(term.kind)
        if kind is None:
            return _NOTHING
        if not kind.filed:  # every entry of the kind is held by its term
            return count_ids(kind.unfiled.get(term.path))
        self._file_kind(term.kind, kind)
        node: Any = self._root.children.get(term.kind)  # type: ignore[union-attr]
        for step in term.path:
            if node is None or type(node) is str:  # nothing, or a bare leaf above the term
                return _NOTHING
            children = node.children
            node = None if children is None else children.get(step)
        if node is None:
            return _NOTHING
        if type(node) is str:  # a bare leaf: one id at the term
            return (node,)
        return count_ids(node.entries)

    def others_overlapping(self, term: Term, call_id: str) -> Set[str]:
        """`ids_overlapping` without `call_id`: a writer's question about the others, which
        for most writes are none (then no set is made)."""
        found = self.ids_overlapping(term, call_id)
        if call_id in found:
            assert isinstance(found, set)  # a set made for this answer: ours to change
            found.discard(call_id)
        return found

    def ids_overlapping(self, term: Term, _only: str | None = None) -> Set[str]:
        """The ids held at a prefix of `term`, at `term` or below it (a set to read only:
        an empty answer is shared). With `_only`, an answer of that id alone may be empty
        (see `others_overlapping`)."""
        if not self.size:  # an empty index, as most are for a plan without reads
            return _NOTHING
        if self._texts:
            self._parse_texts()
        kind = self._kinds.get(term.kind)
        if kind is None:
            return _NOTHING
        if not kind.filed and kind.all_at(len(term.path)):
            here = kind.unfiled.get(term.path)  # at the term itself: the only overlap
            if here is None or here == _only:
                return _NOTHING
            return {here} if type(here) is str else set(count_ids(here))
        self._file_kind(term.kind, kind)
        node = self._root.children.get(term.kind)  # type: ignore[union-attr]
        if node is None:
            return _NOTHING
        if type(node) is str:  # a bare leaf: one id at the kind itself
            return _NOTHING if node == _only else {node}
        entries = node.entries
        found: set[str] | None = None
        if (
            entries
            and entries != _only
            and (type(entries) is str or len(entries) > 1 or _only not in entries)
        ):
            found = set(count_ids(entries))
        for step in term.path:
            children = node.children
            child = None if children is None else children.get(step)
            if child is None:
                return _NOTHING if found is None else found
            if type(child) is str:  # a bare leaf: nothing below it
                if child != _only:
                    if found is None:
                        found = {child}
                    else:
                        found.add(child)
                return _NOTHING if found is None else found
            node = child
            entries = node.entries
            if entries and entries != _only:
                if type(entries) is str:
                    if found is None:
                        found = {entries}
                    else:
                        found.add(entries)
                elif len(entries) > 1 or _only not in entries:
                    if found is None:
                        found = set(entries)
                    else:
                        found.update(entries)
        if node.children is None:
            return _NOTHING if found is None else found
        if found is None:
            found = set()
        stack = list(node.children.values())
        while stack:
            below = stack.pop()
            if type(below) is str:  # a bare leaf
                found.add(below)
                continue
            entries = below.entries
            if entries:  # `_only` too: the caller takes it out
                if type(entries) is str:
                    found.add(entries)
                else:
                    found.update(entries)
            if below.children:
                stack.extend(below.children.values())
        return found

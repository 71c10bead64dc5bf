"""Small sets and multisets kept as the bare member while there is one, a tuple while
there are a few.

A plan of 100,000 calls that all wait at once (a chain) holds several one-member sets per
call: the writers a slot waits for, the slots a writer holds back, the ids filed at a path.
An empty set costs 216 bytes and a one-entry dict about 180; the member alone costs nothing
more, and a tuple of two 56. So each such holder is `None` (empty), the member itself
(one), a `tuple` (up to `SMALL` members, or filings of a counted holder), or a `set`/`dict`
(more); members are never tuples, sets or dicts themselves, and are truthy (call ids are
non-empty strings, slots are objects), so `if holder` still asks "is anything here". Only
the functions below read or change a holder.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from typing import Any, TypeVar

__all__ = ["add", "count_add", "count_ids", "count_remove", "count_total", "discard", "members"]

T = TypeVar("T", bound=Hashable)

_EMPTY: tuple[()] = ()
SMALL = 8  # the most members (or filings) a tuple holds before a set (or dict) does


def add(holder: Any, item: T) -> Any:
    """The holder with `item` in it (the same set when it already was one)."""
    if holder is None:
        return item
    kind = type(holder)
    if kind is tuple:
        if item in holder:
            return holder
        return (*holder, item) if len(holder) < SMALL else {*holder, item}
    if kind is set:
        holder.add(item)
        return holder
    if holder is item or holder == item:
        return holder
    return (holder, item)


def discard(holder: Any, item: T) -> Any:
    """The holder without `item` (None once empty). A set that drops to one member stays a
    set: it was made for many, and demoting it would cost an allocation on every removal."""
    if holder is None:
        return None
    kind = type(holder)
    if kind is tuple:
        if item not in holder:
            return holder
        rest = tuple(member for member in holder if member is not item and member != item)
        return rest[0] if len(rest) == 1 else rest
    if kind is set:
        holder.discard(item)
        return holder or None
    return None if holder is item or holder == item else holder


def members(holder: Any) -> Collection[Any]:
    """The members, to iterate or size (not to change)."""
    if holder is None:
        return _EMPTY
    kind = type(holder)
    if kind is set or kind is tuple:
        many: Collection[Any] = holder
        return many
    return (holder,)


# -- counted: an id filed more than once (a call reading one path twice) -------------------


def count_add(holder: Any, item: str) -> Any:
    """`item` counted once more: a bare id stands for a count of one, a tuple for one
    filing per member."""
    if holder is None:
        return item
    kind = type(holder)
    if kind is tuple:
        if len(holder) < SMALL:
            return (*holder, item)
        counted: dict[str, int] = {}
        for member in (*holder, item):
            counted[member] = counted.get(member, 0) + 1
        return counted
    if kind is dict:
        holder[item] = holder.get(item, 0) + 1
        return holder
    return (holder, item)


def count_remove(holder: Any, item: str) -> Any:
    """`item` counted once less (it must be there); None once nothing is left."""
    kind = type(holder)
    if kind is tuple:
        at = holder.index(item)
        rest = holder[:at] + holder[at + 1 :]
        return rest[0] if len(rest) == 1 else rest
    if kind is not dict:
        assert holder == item
        return None
    count = holder[item] - 1
    if count:
        holder[item] = count
    elif len(holder) == 1:
        return None
    else:
        del holder[item]
    return holder


def count_total(holder: Any) -> int:
    if holder is None:
        return 0
    kind = type(holder)
    if kind is dict:
        return sum(holder.values())
    return len(holder) if kind is tuple else 1


def count_ids(holder: Any) -> Collection[str]:
    """The distinct ids (not to change)."""
    if holder is None:
        return _EMPTY
    kind = type(holder)
    if kind is dict:
        ids: Collection[str] = holder.keys()
        return ids
    return set(holder) if kind is tuple else (holder,)

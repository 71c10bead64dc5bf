"""Small sets and multisets kept as the bare member while there is one.

A plan of 100,000 calls that all wait at once (a chain) holds several one-member sets per
call: the writers a slot waits for, the slots a writer holds back, the ids filed at a path.
An empty set costs 216 bytes and a one-entry dict about 180; the member alone costs nothing
more. So each such holder is `None` (empty), the member itself (one), or a `set`/`dict`
(two or more, or a count above one); members are never sets or dicts themselves, and are
truthy (call ids are non-empty strings, slots are objects), so `if holder` still asks
"is anything here". Only the functions below read or change a holder.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from typing import Any, TypeVar

__all__ = ["add", "count_add", "count_ids", "count_remove", "count_total", "discard", "members"]

T = TypeVar("T", bound=Hashable)

_EMPTY: tuple[()] = ()


def add(holder: Any, item: T) -> Any:
    """The holder with `item` in it (the same set when it already was one)."""
    if holder is None:
        return item
    if type(holder) is set:
        holder.add(item)
        return holder
    if holder is item or holder == item:
        return holder
    return {holder, item}


def discard(holder: Any, item: T) -> Any:
    """The holder without `item` (None once empty). A set that drops to one member stays a
    set: it was made for two, and demoting it would cost an allocation on every removal."""
    if holder is None:
        return None
    if type(holder) is set:
        holder.discard(item)
        return holder or None
    return None if holder is item or holder == item else holder


def members(holder: Any) -> Collection[Any]:
    """The members, to iterate or size (not to change)."""
    if holder is None:
        return _EMPTY
    if type(holder) is set:
        return holder
    return (holder,)


# -- counted: an id filed more than once (a call reading one path twice) -------------------


def count_add(holder: Any, item: str) -> Any:
    """`item` counted once more: a bare id stands for a count of one."""
    if holder is None:
        return item
    if type(holder) is dict:
        holder[item] = holder.get(item, 0) + 1
        return holder
    return {holder: 2} if holder == item else {holder: 1, item: 1}


def count_remove(holder: Any, item: str) -> Any:
    """`item` counted once less (it must be there); None once nothing is left."""
    if type(holder) is not dict:
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
    if type(holder) is dict:
        return sum(holder.values())
    return 1


def count_ids(holder: Any) -> Collection[str]:
    """The distinct ids (not to change)."""
    if holder is None:
        return _EMPTY
    if type(holder) is dict:
        return holder.keys()
    return (holder,)

"""The one-or-many holders of `_few` (kept bare while they hold one member and a tuple
while they hold a few, to keep a waiting call's bookkeeping small) behave exactly as the
plain set and counter they replace, whatever the sequence of additions and removals."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tickloop._core import _few

# More members than a tuple holds (`_few.SMALL`), so every form a holder takes is met.
_IDS = [chr(ord("a") + index) for index in range(_few.SMALL + 4)]
_OPS = st.lists(st.tuples(st.booleans(), st.sampled_from(_IDS)), max_size=80)


def _check_against_a_set(ops: list[tuple[bool, Any]]) -> None:
    holder = None
    plain: set[Any] = set()
    for adding, item in ops:
        if adding:
            holder = _few.add(holder, item)
            plain.add(item)
        else:
            holder = _few.discard(holder, item)
            plain.discard(item)
        assert set(_few.members(holder)) == plain
        assert len(_few.members(holder)) == len(plain)
        assert bool(holder) == bool(plain)
        assert (holder is None) == (not plain)


@given(_OPS)
def test_holder_matches_a_set(ops: list[tuple[bool, str]]) -> None:
    _check_against_a_set(ops)


class _Slot:
    """Members compared by identity, like the scheduler's slots."""


@given(st.lists(st.tuples(st.booleans(), st.integers(0, len(_IDS) - 1)), max_size=80))
def test_holder_of_objects_matches_a_set(ops: list[tuple[bool, int]]) -> None:
    objects = [_Slot() for _ in _IDS]
    _check_against_a_set([(adding, objects[index]) for adding, index in ops])


@given(_OPS)
def test_counted_holder_matches_a_counter(ops: list[tuple[bool, str]]) -> None:
    holder = None
    plain: Counter[str] = Counter()
    for adding, item in ops:
        if adding:
            holder = _few.count_add(holder, item)
            plain[item] += 1
        elif plain[item]:  # a removal is only ever of an id that was filed
            holder = _few.count_remove(holder, item)
            plain[item] -= 1
        plain += Counter()  # drop zero counts
        assert _few.count_total(holder) == sum(plain.values())
        assert set(_few.count_ids(holder)) == set(plain)
        assert (holder is None) == (not plain)

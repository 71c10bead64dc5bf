"""What a tree of runs is given apart from what changes while it runs (issue 39)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import tickloop as tl
from tickloop._agent._tree import TreeServices
from tickloop._core._paths import RunPath
from tickloop._observe._events import Redactor


def tree(**given: Any) -> TreeServices:
    return TreeServices(
        run_id="run-1", approve=None, listeners=(), redact=Redactor(), max_depth=5, **given
    )


def test_what_a_tree_is_given_is_frozen() -> None:
    services = tree()
    with pytest.raises(dataclasses.FrozenInstanceError):
        services.max_depth = 9  # type: ignore[misc]
    services.state.parked[RunPath.parse("c1.2")] = []  # what changes lives apart
    assert RunPath.parse("c1.2") in services.state.parked


def test_a_childs_journal_is_read_as_often_as_asked() -> None:
    journal = [
        (1, 0.0, "message", {"type": "input"}),
        (2, 0.1, "message@c1.2", {"type": "input", "data": 1}),
        (3, 0.2, "event@c1.2/c1.0", {"type": "TickOpened"}),
        (4, 0.3, "event@c1.2", {"type": "TickOpened"}),
    ]
    services = tree(journal=journal)
    first = services.journal_of(RunPath.parse("c1.2"))
    assert [(n, kind) for n, _, kind, _ in first] == [(2, "message"), (4, "event")]
    assert services.journal_of(RunPath.parse("c1.2")) == first  # not emptied by a read
    assert [n for n, *_ in services.journal_of(RunPath.parse("c1.2/c1.0"))] == [3]
    assert services.journal_of(RunPath.parse("c9.9")) == ()


def test_decisions_below_a_run_are_keyed_by_its_own_ids() -> None:
    approve, deny = tl.Approve(), tl.Deny("no")
    decisions = TreeServices.keyed_decisions(
        {"c1.0": approve, "c1.2/c1.0": deny, "c1.2/c2.1/c1.0": approve, "c1.20/c1.0": deny}
    )
    services = tree(decisions=decisions)
    assert services.decisions_under(RunPath.parse("c1.2")) == {"c1.0": deny, "c2.1/c1.0": approve}

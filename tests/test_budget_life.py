"""One owner for a budget limit's life (PROTOCOL §12; docs/architecture.md, "Budgets"):
`_core/_budget_life.py` alone changes what happens at a limit without room — the open
question, the refused and deferred limits, the parked calls, the requests in flight."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tickloop as tl
from tickloop._core._budget import Ledger

SOURCE = Path(__file__).resolve().parent.parent / "src" / "tickloop"
OWNER = SOURCE / "_core" / "_budget_life.py"
FIELDS = ("asks", "run_id", "flights", "refused", "deferred", "question", "parked", "waiters")


def test_no_module_but_the_budget_life_touches_the_fields_of_a_limits_life() -> None:
    # The fields are private to the module; a write (or a read) of them elsewhere is a
    # second owner. `Ledger.life` is the way in: its methods and read-only properties.
    private = re.compile(r"\b(life|tree|limits)\._(" + "|".join(FIELDS) + r")\b")
    # A ledger's (or its root's) life, written from outside: an assignment, an item
    # set, or a set or dict changed in place.
    written = re.compile(
        r"\b(ledger|root|life|life\.tree)\.(" + "|".join(FIELDS) + r")"
        r"\s*(=(?!=)|\+=|-=|\[|\.(add|discard|pop|clear|update|difference_update)\()"
    )
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        if path == OWNER:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if private.search(line) or written.search(line):
                found.append(f"{path.relative_to(SOURCE)}:{number}: {line.strip()}")
    assert found == []


def test_a_limits_life_is_read_only_outside_its_module() -> None:
    ledger = Ledger(tl.Budget(tool_calls=1))
    life = ledger.life
    with pytest.raises(AttributeError):
        life.question = None  # type: ignore[misc]
    for name in ("asks", "run_id", "flights"):
        with pytest.raises(AttributeError):
            setattr(life.tree, name, None)
    # A child's ledger shares its root's limits' life: one tree, one state.
    child = ledger.child(tl.Budget(tool_calls=1))
    assert child.life.tree is ledger.life.tree and child.life is not ledger.life

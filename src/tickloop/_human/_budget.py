"""Budget questions a stored run paused on (PROTOCOL §12), as the inbox shows them.

A budget hook that answered `tl.Defer()` paused its run; the journal holds that answer
(`BudgetAnswered` with grant "defer", under the path of the run of the tree that asked).
A question stays open until a grant comes after it: any grant answers every deferral of
the tree (the ledger's rule), and a resume journals one (empty when it brings no room),
after which a question still unanswered is asked, and journaled, again.

The inbox shows each open question like a call waiting for a decision (a `CallView`
whose `budget` names the limit), and a person grants more there: the amount is added
with `SQLiteStore.add_budget`, exactly as `tickloop budget RUN --add LIMIT=AMOUNT` does.
"""

from __future__ import annotations

import math
from typing import Any

from .._core._budget import LIMIT_NAMES, Budget
from .._durable._store import SQLiteStore
from .._errors import ConfigurationError
from ._common import CallView, Refused

__all__ = ["BUDGET_PREFIX", "budget_views", "grant_for", "open_budget_questions"]

BUDGET_PREFIX = "budget:"  # a budget question's id on the page: "budget:cost"
_PER_TOOL = "per_tool."


def open_budget_questions(store: SQLiteStore, run_id: str) -> list[str]:
    """The limits a stored run's budget questions were deferred on and still wait for
    room, in the order they were asked. Reads the run's journal (a paused run's only)."""
    waiting: list[str] = []
    for _, _, kind, body in store.journal(run_id):
        if not kind.startswith("event") or not isinstance(body, dict):
            continue
        if body.get("type") != "BudgetAnswered":
            continue
        grant, limit = body.get("grant"), body.get("limit")
        if grant == "defer" and isinstance(limit, str) and limit not in waiting:
            waiting.append(limit)
        elif isinstance(grant, dict):
            waiting.clear()  # room was given: every deferral of the tree is answered
    return waiting


def budget_views(store: SQLiteStore, run_id: str) -> list[CallView]:
    """A paused run's open budget questions, shown like calls waiting for a decision."""
    return [
        CallView(
            run_id=run_id,
            id=BUDGET_PREFIX + limit,
            tool="budget",
            params={"limit": limit, "waits for": "more room; the amount is added"},
            known_tool=False,
            budget=limit,
        )
        for limit in open_budget_questions(store, run_id)
    ]


def grant_for(limit: str, text: str) -> Budget:
    """The grant a person typed for `limit` ("0.50" more cost); `Refused` when it is not
    an amount that limit takes."""
    try:
        amount = float(text.strip())
    except ValueError:
        raise Refused(f"the amount for {limit} must be a number, not {text!r}") from None
    if not math.isfinite(amount) or amount <= 0:
        raise Refused(f"the amount for {limit} must be more than 0, not {text!r}")
    fields: dict[str, Any] = {}
    whole = limit not in ("cost", "wall_time")
    if whole and not amount.is_integer():
        raise Refused(f"the amount for {limit} must be a whole number, not {text!r}")
    value: float = int(amount) if whole else amount
    if limit.startswith(_PER_TOOL):
        fields["per_tool"] = {limit[len(_PER_TOOL) :]: value}
    elif limit in LIMIT_NAMES:
        fields[limit] = value
    else:
        raise Refused(f"no limit is called {limit!r}")
    try:
        return Budget(**fields)
    except ConfigurationError as error:
        raise Refused(str(error)) from error

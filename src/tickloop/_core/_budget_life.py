"""The life of a budget limit (PROTOCOL §12), and the only code that changes it.

A `Ledger` (`_budget`) counts: limits, spending, reservations. What happens when a limit
has no room left is this module's: whether the budget hook is asked, what its answer
does, which calls wait parked for a resume, how many model requests are in flight. The
driver, the gate (`_budget_gate`), the agent loop and the engine call the methods below;
none of them writes these fields (tests/test_budget_life.py keeps that true).

Each limit of a tree is in one of four states, kept on the tree (`TreeLimits`, shared by
every ledger of one tree of runs); the work that found no room waits in its run
(`RunLimits`: the run's open question, its parked calls):

    state      what happens                               next       what it does
    ---------  -----------------------------------------  ---------  ------------------------
    open       work finds no room; a hook answers          asked      the work waits; one
                                                                      question (`ask`)
    open       work finds no room; no hook answers         open       the work is refused
    asked      answer: a Budget (`answer`)                 open       room added (the root's
                                                                      limits); the work again
    asked      answer: None                                refused    waiting work refused
    asked      answer: defer (a stored run)                deferred   waiting calls parked
    refused    work finds no room                          refused    refused, nobody asked
    refused    a grant that names it (`granted`)           open
    deferred   work finds no room                          deferred   parked, nobody asked
    deferred   any grant (a resume's `budget=`)            open       parked calls reserve
                                                                      again when decided

A run without a hook asks nothing (`asks` False) unless it is stored: then its driver
refuses, journaled, so that a resume's replay makes the same refusals. Model requests
in flight (`flights`) are counted on the tree: a request that finds no room waits only
while another is in flight (it gives its room back when it lands), and is told when
room comes back anywhere in the tree (`on_room`).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Protocol

__all__ = ["NoRoom", "Question", "RunLimits", "TreeLimits"]


class Question(Protocol):
    """A question to the budget hook, as a limit's life needs it (`BudgetRequest`)."""

    @property
    def limit(self) -> str: ...


class NoRoom(Enum):
    """What becomes of work that found no room for a limit (the table's first column)."""

    ASK = "ask"  # it waits for the hook's answer (asked now, or after the open question)
    REFUSE = "refuse"  # it ends `failed` with a `budget` error
    PARK = "park"  # it waits, deferred, for a resume that adds room


class TreeLimits:
    """The states of a tree's limits, its hook and its requests in flight; see above.

    Its fields are read through properties and queries, and changed only by its own
    methods (and `RunLimits`'): nothing outside this module writes them.
    """

    __slots__ = ("_asks", "_deferred", "_flights", "_refused", "_run_id", "_waiters")

    def __init__(self) -> None:
        self._asks = False  # a budget hook (or a stored run's driver) answers for the tree
        self._run_id: str | None = None  # shown to the hook (`BudgetRequest.run_id`)
        # Model requests under way in the tree: their room comes back when they land.
        self._flights = 0
        self._refused: set[str] = set()  # limits in state "refused"
        self._deferred: set[str] = set()  # limits in state "deferred"
        # Told whenever room comes back anywhere in the tree (a request waiting for it).
        self._waiters: list[Callable[[], None]] = []

    @property
    def asks(self) -> bool:
        return self._asks

    @property
    def run_id(self) -> str | None:
        return self._run_id

    @property
    def flights(self) -> int:
        return self._flights

    # -- the hook --------------------------------------------------------------------

    def answered_by(self, run_id: str | None, *, hook: bool) -> None:
        """A run of the tree is driven with a hook (or a journal) that answers, or not."""
        self._asks = self._asks or hook
        self._run_id = self._run_id or run_id

    def state(self, limit: str) -> str:
        """ "refused", "deferred" or "open" (asked is the open question of a run)."""
        if limit in self._refused:
            return "refused"
        if limit in self._deferred:
            return "deferred"
        return "open"

    def deferring(self) -> bool:
        """Whether a limit is deferred: the run pauses until a resume brings room."""
        return bool(self._deferred)

    def refuse(self, limit: str) -> None:
        self._refused.add(limit)

    def defer(self, limit: str) -> None:
        self._deferred.add(limit)

    def granted(self, limits: list[str]) -> None:
        """Room was given: the limits it names are asked again, every deferral ends."""
        self._refused.difference_update(limits)
        self._deferred.clear()

    # -- requests in flight and room coming back ---------------------------------------

    def request_sent(self) -> None:
        self._flights += 1

    def request_landed(self) -> None:
        self._flights -= 1

    def on_room(self, waiter: Callable[[], None]) -> None:
        """Call `waiter` whenever room comes back anywhere in the tree."""
        self._waiters.append(waiter)

    def room_came_back(self) -> None:
        for waiter in self._waiters:
            waiter()


class RunLimits:
    """One run's side of its tree's limits: its open question and its parked calls."""

    __slots__ = ("_parked", "_question", "tree")

    def __init__(self, tree: TreeLimits) -> None:
        self.tree = tree
        # The question this run's scheduler asked the hook and has no answer to: asked
        # again when a resume finds it open (a crash, or a stop, came first).
        self._question: Question | None = None
        # This run's calls parked after a deferral (call id -> limit): deferred in its
        # scheduler, decided again (reserving anew) on resume.
        self._parked: dict[str, str] = {}

    @property
    def question(self) -> Question | None:
        return self._question

    def has_parked(self) -> bool:
        return bool(self._parked)

    def is_parked(self, call_id: str) -> bool:
        """Whether the call waits, deferred, for room (not for a person's decision)."""
        return call_id in self._parked

    def no_room(self, limit: str, *, can_park: bool) -> NoRoom:
        """What becomes of a call that found no room for `limit` (the table)."""
        state = self.tree.state(limit)
        if state == "deferred" and can_park:
            return NoRoom.PARK
        if not self.tree.asks or state == "refused":
            return NoRoom.REFUSE
        return NoRoom.ASK

    def ask(self, request: Question) -> None:
        """The hook is asked `request` (open → asked)."""
        self._question = request

    def asking(self) -> str | None:
        """The limit of this run's open question, if it has one."""
        return None if self._question is None else self._question.limit

    def answer(self, limit: str, grant: object, *, can_park: bool) -> NoRoom | None:
        """The hook's answer about `limit` (asked → open, refused or deferred): None when
        it gave room (a `Budget`, which the ledger adds: `Ledger.grant`) and the waiting
        work looks for room again, else what becomes of that work."""
        if self._question is not None and self._question.limit == limit:
            self._question = None
        if grant is None:
            self.tree.refuse(limit)
            return NoRoom.REFUSE
        if grant == "defer":
            self.tree.defer(limit)
            return NoRoom.PARK if can_park else NoRoom.REFUSE
        return None

    def park(self, call_id: str, limit: str) -> None:
        """A call waits, deferred, for room for `limit` (→ parked)."""
        self._parked[call_id] = limit

    def unpark(self, call_id: str) -> None:
        """A parked call was decided on a resume: it reserves room again (→ resumed)."""
        self._parked.pop(call_id, None)

"""Budgets in an agent run (PROTOCOL §12): which ledger a run uses, and model requests.

`run_ledger` is the one place that says which ledger a run draws from: a root run's
own (its budget and pricing), or a child run's under its parent's (one tree, one count).
`RequestMeter` reserves room for each model request before it is sent and replaces the
reservation by what the request used when it ends; what was used is fed to the engine
(`SpendBudget`), so a durable run journals it and a resume never counts it twice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import trio

from .._core._budget import (
    Budget,
    BudgetRequest,
    Ledger,
    Price,
    RunUsage,
    request_reservation,
    used_amount,
)
from .._core._driver import SchedulerDriver
from .._engine._budgeting import ask_budget
from .._engine._engine import Engine
from .._errors import BudgetExceeded, ConfigurationError
from .._models._base import (
    SolutionRequest,
    TextDelta,
    TurnRequest,
    Usage,
    checked_usage,
    estimate_tokens,
)

__all__ = [
    "RequestMeter",
    "Reservation",
    "WallClock",
    "check_budget",
    "check_pricing",
    "model_name",
    "run_ledger",
]


def run_ledger(
    budget: Budget | None, pricing: Mapping[str, Price], parent: Ledger | None = None
) -> Ledger:
    """The ledger a run draws from: its own at the root, a child of its parent's below
    (a child's budget can only make it tighter; the root's pricing prices the tree)."""
    if parent is not None:
        return parent.child(budget)
    return Ledger(budget, pricing=pricing)


def model_name(model: Any) -> str | None:
    """The name `pricing` knows a model client by: its `model` (`OpenAIChat("gpt-4.1")`
    is "gpt-4.1", a `ScriptedModel` "scripted" unless named)."""
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else None


def check_budget(budget: Any, name: str = "budget") -> Budget | None:
    if budget is not None and not isinstance(budget, Budget):
        raise ConfigurationError(f"{name} must be a tl.Budget or None, not {budget!r}")
    return budget


def check_pricing(pricing: Any, budget: Budget | None, model: Any) -> dict[str, Price]:
    """`pricing` as a dict; a `cost` limit without a price for the model is refused."""
    if pricing is None:
        pricing = {}
    if not isinstance(pricing, Mapping) or not all(
        isinstance(key, str) and isinstance(value, Price) for key, value in pricing.items()
    ):
        raise ConfigurationError(
            f"pricing must be a dict from model name to tl.Price, not {pricing!r}"
        )
    if budget is not None and budget.cost is not None:
        name = model_name(model)
        if name not in pricing:
            raise ConfigurationError(
                f"the budget limits cost, but pricing has no price for the model {name!r} "
                f"({model!r}): pass pricing={{{name!r}: tl.Price(input=..., output=...)}}"
            )
    return dict(pricing)


def _prompt_chars(request: SolutionRequest | TurnRequest, schema_chars: int) -> int:
    """Characters of the prompt: a solution request's messages and its schema (the
    run's, whose JSON length is given), or a turn request as JSON."""
    if isinstance(request, SolutionRequest):
        text = sum(len(str(message.get("content", ""))) for message in request.messages)
        return text + schema_chars
    return len(json.dumps(request.to_dict(), ensure_ascii=False))


@dataclass
class Reservation:
    """A request's room in flight: what was reserved, and the prompt's estimate."""

    amount: dict[str, float]
    estimate: int
    cap: int | None


class RequestMeter:
    """Room for one run's model requests (PROTOCOL §12); see the module docstring."""

    def __init__(
        self,
        ledger: Ledger,
        engine: Any,
        model: Any,
        on_budget: Callable[[BudgetRequest], Any] | None,
        *,
        durable: bool,
        run_id: str | None,
        schema: Any = None,
    ) -> None:
        self.ledger = ledger
        # The run's driver, whose scheduler keeps this ledger: what a request spends and
        # the hook's answers are its inputs (journaled by a durable run).
        self.engine = engine
        self.model = model_name(model)
        self.max_output = _client_max_output(model)
        self.on_budget = on_budget
        self.schema_chars = len(json.dumps(schema)) if schema is not None else 0
        self.durable = durable
        self.run_id = run_id
        self._room: trio.Event | None = None
        self.open: Reservation | None = None  # the request in flight, if any
        ledger.life.tree.on_room(self._room_came_back)

    def _room_came_back(self) -> None:
        if self._room is not None:
            self._room.set()

    async def reserve(
        self, request: SolutionRequest | TurnRequest, messages: Callable[[], list[Any]]
    ) -> Reservation | None:
        """Reserve room for `request` (setting its output limit), waiting while others
        hold room; None when the hook deferred (the run pauses). Raises
        `BudgetExceeded` when no room comes and none is granted."""
        tree = self.ledger.life.tree
        if tree.deferring() and self.durable:
            return None  # a call's limit was deferred: pause until more room is given
        estimate = estimate_tokens(_prompt_chars(request, self.schema_chars))
        while True:
            found = request_reservation(self.ledger, self.model, estimate, self.max_output)
            if not isinstance(found, str):
                amount, cap = found
                # Counted whole now, and journaled before the request is sent: a process
                # that dies mid-request leaves it counted (a request cut off, §12).
                self._spend(amount, commit=True)
                tree.request_sent()
                request.max_output_tokens = cap
                self.open = Reservation(amount, estimate, cap)
                return self.open
            limit = found
            if self.ledger.in_flight:  # room may come back: wait for it (PROTOCOL §12)
                self._room = trio.Event()
                await self._room.wait()
                self._room = None
                continue
            root = self.ledger.root
            # Only a driver that asks the hook (`asks`: trio's engine with one) is asked
            # through; in a Temporal workflow an exhausted limit stops the run.
            if self.on_budget is None or not tree.asks or tree.state(limit) == "refused":
                raise self._exceeded(limit, messages())
            asked = BudgetRequest(
                limit, _asked(limit, estimate), root.usage, root.limits, self.run_id
            )
            # One question at a time (the engine's lock); a person's time is not the run's
            # while nothing else of it goes on (`Engine.question_open`, docs/decisions.md).
            async with self.engine.budget_questions:
                with self.engine.question_open():
                    answer = await ask_budget(self.on_budget, asked, durable=self.durable)
            self._answer(limit, answer)
            if answer == "defer":
                return None
            if answer is None:
                raise self._exceeded(limit, messages())

    def settle(
        self, reservation: Reservation, reported: Usage | None, text: str, cut_off: bool
    ) -> None:
        """Replace the reservation by what the request used: the server's usage; else,
        for a request cut off, its whole reservation; else the estimate."""
        self.open = None
        # Counts only (`checked_usage`), never below nothing: what was spent before the
        # request is the floor of what is spent after it.
        given = max(reported.input_tokens, 0) if reported is not None else 0
        wrote = max(reported.output_tokens, 0) if reported is not None else 0
        if cut_off:  # what it reported so far (Anthropic: the prompt first), else the whole
            output = reservation.cap if reservation.cap is not None else estimate_tokens(len(text))
            used = (given or reservation.estimate, max(wrote, output))
        elif given or wrote:
            used = (given, wrote)
        else:
            used = (reservation.estimate, estimate_tokens(len(text)))
        amount = used_amount(self.ledger, self.model, *used)
        reserved = reservation.amount
        self._spend({name: amount.get(name, 0) - reserved.get(name, 0) for name in reserved})
        self._landed()

    async def answer(self, reservation: Reservation, model: Any, request: SolutionRequest) -> str:
        """The whole text of a one-shot request reserved on this meter (a guardrail's, a
        latent tool's, an MCP server's sampling), streamed from `model`, then settled:
        counted as used; as cut off with what arrived when the stream fails or is
        cancelled; released when it fails before anything arrived (it used nothing)."""
        parts: list[str] = []
        reported: Usage | None = None
        try:
            async for item in model.stream_solution(request):
                if isinstance(item, TextDelta):
                    parts.append(item.text)
                elif isinstance(item, Usage):
                    counted = checked_usage(item, model)
                    if counted is not None:
                        reported = counted if reported is None else reported + counted
        except BaseException as error:
            text = "".join(parts)
            if isinstance(error, Exception) and not text and reported is None:
                self.release(reservation)
            else:
                self.settle(reservation, reported, text, cut_off=True)
            raise
        text = "".join(parts)
        self.settle(reservation, reported, text, cut_off=False)
        return text

    def grant(self, budget: Budget) -> None:
        """More room from outside the hook (a resume's `budget=`), journaled."""
        self._answer("", budget)

    def _answer(self, limit: str, answer: Any) -> None:
        self.engine.answer_budget(limit, answer)  # a scheduler input, journaled

    def release(self, reservation: Reservation) -> None:
        """A request that failed before anything arrived: it used nothing."""
        self.open = None
        self._spend({name: -value for name, value in reservation.amount.items()})
        self._landed()

    def _landed(self) -> None:
        self.ledger.life.tree.request_landed()
        self.ledger.wake()  # room may have come back for a request that waits

    def _spend(self, amount: dict[str, float], *, commit: bool = False) -> None:
        """Count `amount` (negative: give back): a scheduler input, journaled, so a
        resume never counts it twice."""
        self.engine.spend(amount, commit=commit)

    def out_of_time(self) -> BudgetExceeded:
        """The run's wall time ran out: a request cut off by it counts whole."""
        if self.open is not None:
            self.settle(self.open, None, "", cut_off=True)
        return BudgetExceeded(
            "the run's wall_time budget ran out; running calls ended as timed out; "
            "continue from .messages and .usage with more budget",
            limit="wall_time",
        )

    def carry(self, usage: RunUsage) -> None:
        """Count what the run this one continues already used (PROTOCOL §12: a run
        continued from a budget error's log goes on from what is left)."""
        amounts = usage.to_amounts()
        if amounts:
            self._spend(amounts)

    def spend_time(self, seconds: float) -> None:
        """The run's time on its clock, journaled so a resume goes on from what is left."""
        self._spend({"wall_time": seconds})

    def _exceeded(self, limit: str, messages: list[Any]) -> BudgetExceeded:
        return BudgetExceeded(
            f"no room left in the budget for the next model request: "
            f"{self.ledger.describe(limit)}; continue from .messages and .usage with more budget",
            messages,
            limit=limit,
            usage=self.ledger.root.usage,
        )


def check_carried(usage: Any, messages: Any) -> RunUsage | None:
    """A caller's `usage=` (what the run a `messages=` log continues already used),
    checked before anything runs: a `tl.RunUsage`, and only beside `messages`."""
    if usage is None:
        return None
    if not isinstance(usage, RunUsage):
        raise ConfigurationError(
            f"usage must be a tl.RunUsage (a BudgetExceeded's .usage), not {usage!r}"
        )
    if not messages:
        raise ConfigurationError(
            "usage= counts what an earlier run used: pass it with that run's messages= "
            "(continue from a BudgetExceeded with messages=e.messages, usage=e.usage)"
        )
    return usage


def _asked(limit: str, estimate: int) -> float:
    """What the next request needs of `limit` at the least."""
    return {"requests": 1, "input_tokens": estimate, "total_tokens": estimate + 1}.get(limit, 1)


def _client_max_output(model: Any) -> int | None:
    """A client's own cap on a request's output, when it has one (Anthropic's)."""
    for name in ("max_tokens", "max_output_tokens"):
        value = getattr(model, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class WallClock:
    """A run's `wall_time` budget on its own clock (trio's): the deadline of this process's
    part of the run, from what earlier parts left (journaled), and the time it took.

    Time the run spends paused between processes is not counted, nor time it waits only
    for people: the engine says when (`pause` / `go_on`, docs/decisions.md). Without a
    wall_time limit, or on a driver other than trio's `Engine` (a Temporal workflow's
    clock is not the run's; docs/budgets.md), nothing reads the clock.
    """

    def __init__(self, ledger: Ledger, engine: SchedulerDriver) -> None:
        left = ledger.room("wall_time") if isinstance(engine, Engine) else None
        self.started = trio.current_time() if left is not None else 0.0
        self._deadline: float | None = None if left is None else self.started + max(left, 0.0)
        self._scope: trio.CancelScope | None = None
        self._since: float | None = None  # paused (waiting only for people) since
        if self._deadline is not None:
            assert isinstance(engine, Engine)
            engine.keep_time(self)  # running calls end as timed out at the deadline

    @property
    def deadline(self) -> float:
        """When the run's time runs out, on trio's clock (never, without a limit)."""
        return math.inf if self._deadline is None else self._deadline

    @contextmanager
    def scope(self) -> Iterator[trio.CancelScope | None]:
        """Cancels what is inside at the deadline (nothing without one)."""
        if self._deadline is None:
            yield None
            return
        with trio.move_on_at(self._deadline) as scope:
            self._scope = scope
            try:
                yield scope
            finally:
                self.go_on()
                self._scope = None

    def pause(self) -> None:
        """The run waits only for people from now: its clock stops (no call runs, so
        none has a deadline to move)."""
        if self._since is None and self._scope is not None:
            self._since = trio.current_time()
            self._scope.deadline = math.inf

    def go_on(self) -> None:
        """Something of the run goes on again: the deadline moves by the pause."""
        since, scope = self._since, self._scope
        if since is None or scope is None or self._deadline is None:
            return
        self._since = None
        waited = trio.current_time() - since
        self._deadline += waited
        self.started += waited
        scope.deadline = self._deadline

    def spent(self, meter: RequestMeter) -> None:
        if self._deadline is not None:
            meter.spend_time(max(0.0, trio.current_time() - self.started))

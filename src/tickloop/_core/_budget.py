"""Budgets (PROTOCOL §12): limits, prices, usage, and the ledger that enforces them.

Everything here is pure: no clock, no I/O, no trio. A `Ledger` holds one run's limits,
what it has spent and what is reserved (in flight); room is *reserved* before anything is
dispatched and replaced by what was used when it ends, so parallel work never overshoots a
count. A child run's ledger has the root's as its `parent`: a reservation must fit in
every ledger up the chain and is booked in all of them (one tree, one count), and a
child's own limits can only make it tighter.

Amounts are dicts from a limit's name to a number: "requests", "input_tokens",
"output_tokens", "total_tokens", "tool_calls", "per_tool.<tool>", "cost", "wall_time".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigurationError
from ._budget_life import RunLimits, TreeLimits

__all__ = [
    "LIMIT_NAMES",
    "Budget",
    "BudgetRequest",
    "Ledger",
    "Price",
    "RunUsage",
    "call_amount",
    "per_tool_limit",
    "request_reservation",
    "used_amount",
]

#: The limits of a `Budget` other than `per_tool` (whose limits are "per_tool.<name>").
LIMIT_NAMES = (
    "requests",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "tool_calls",
    "cost",
    "wall_time",
)
_COUNTS = ("requests", "input_tokens", "output_tokens", "total_tokens", "tool_calls")
_PER_TOOL = "per_tool."


def per_tool_limit(tool: str) -> str:
    """The name of a tool's own call limit, as errors and `BudgetExceeded.limit` say it."""
    return _PER_TOOL + tool


def _count(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(
            f"{name} must be a whole number of at least 0 or None, not {value!r}"
        )
    return value


def _amount(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigurationError(
            f"{name} must be a finite number of at least 0 or None, not {value!r}"
        )
    try:
        finite = math.isfinite(value)  # an int too large for a float overflows here
    except OverflowError:
        finite = False
    if not finite:
        raise ConfigurationError(
            f"{name} must be a finite number of at least 0 or None, not "
            + (repr(value) if isinstance(value, float) else "an integer too large for a float")
        )
    return value


@dataclass(frozen=True)
class Budget:
    """Limits of a run and everything it starts; every field optional (None: no limit).

    `cost` is money in the unit of the prices (`Price`); `wall_time` is seconds on the
    run's clock. Added to another (`a + b`), a budget adds room to the limits `a` has:
    a limit `a` does not have stays unlimited.
    """

    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    tool_calls: int | None = None
    per_tool: Mapping[str, int] = field(default_factory=dict)
    cost: float | None = None
    wall_time: float | None = None

    def __post_init__(self) -> None:
        for name in _COUNTS:
            _count(getattr(self, name), name)
        _amount(self.cost, "cost")
        _amount(self.wall_time, "wall_time")
        if not isinstance(self.per_tool, Mapping):
            raise ConfigurationError(
                "per_tool must be a dict from tool name to a number of calls, "
                f"not {self.per_tool!r}"
            )
        for tool, limit in self.per_tool.items():
            if not isinstance(tool, str):
                raise ConfigurationError(f"per_tool keys must be tool names, not {tool!r}")
            _count(limit, f"per_tool[{tool!r}]")
        object.__setattr__(self, "per_tool", dict(self.per_tool))

    def limit(self, name: str) -> float | None:
        """The limit called `name` ("tool_calls", "per_tool.charge", ...), or None."""
        if name.startswith(_PER_TOOL):
            return self.per_tool.get(name[len(_PER_TOOL) :])
        value: float | None = getattr(self, name)
        return value

    def limits(self) -> Iterator[tuple[str, float]]:
        """Every limit this budget sets, by name."""
        for name in LIMIT_NAMES:
            value = getattr(self, name)
            if value is not None:
                yield name, value
        for tool, value in self.per_tool.items():
            yield per_tool_limit(tool), value

    def __add__(self, other: Budget) -> Budget:
        if not isinstance(other, Budget):
            return NotImplemented
        fields: dict[str, Any] = {}
        for name in LIMIT_NAMES:
            mine, more = getattr(self, name), getattr(other, name)
            fields[name] = mine if mine is None or more is None else mine + more
        per_tool = dict(self.per_tool)
        for tool, more in other.per_tool.items():
            if tool in per_tool:
                per_tool[tool] += more
        return Budget(per_tool=per_tool, **fields)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {name: getattr(self, name) for name in LIMIT_NAMES}
        data = {name: value for name, value in data.items() if value is not None}
        if self.per_tool:
            data["per_tool"] = dict(self.per_tool)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Budget:
        return cls(**dict(data))


@dataclass(frozen=True)
class Price:
    """What a model's tokens cost, per million: `Price(input=0.40, output=1.60)`."""

    input: float
    output: float

    def __post_init__(self) -> None:
        for name in ("input", "output"):
            if _amount(getattr(self, name), name) is None:
                raise ConfigurationError(f"Price.{name} must be a number, not None")

    def cost(self, input_tokens: float, output_tokens: float) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


@dataclass
class RunUsage:
    """What a run (its whole tree, across resumes) used: `result.usage`.

    `tl.Usage` is one request's token counts, as a model client reports them.
    """

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    per_tool: dict[str, int] = field(default_factory=dict)
    cost: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: RunUsage) -> RunUsage:
        if not isinstance(other, RunUsage):
            return NotImplemented
        per_tool = dict(self.per_tool)
        for tool, count in other.per_tool.items():
            per_tool[tool] = per_tool.get(tool, 0) + count
        return RunUsage(
            self.requests + other.requests,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.tool_calls + other.tool_calls,
            per_tool,
            self.cost + other.cost,
        )

    def to_amounts(self) -> dict[str, float]:
        """The ledger's amounts this usage spends (the inverse of `from_amounts`)."""
        amounts: dict[str, float] = {
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "tool_calls": self.tool_calls,
            "cost": self.cost,
        }
        for tool, count in self.per_tool.items():
            amounts[_PER_TOOL + tool] = count
        return {name: value for name, value in amounts.items() if value}

    @classmethod
    def from_amounts(cls, amounts: Mapping[str, float]) -> RunUsage:
        per_tool = {
            name[len(_PER_TOOL) :]: int(count)
            for name, count in amounts.items()
            if name.startswith(_PER_TOOL)
        }
        return cls(
            int(amounts.get("requests", 0)),
            int(amounts.get("input_tokens", 0)),
            int(amounts.get("output_tokens", 0)),
            int(amounts.get("tool_calls", 0)),
            per_tool,
            float(amounts.get("cost", 0.0)),
        )


@dataclass(frozen=True)
class BudgetRequest:
    """What the budget hook (`on_budget`) is asked: `limit` is exhausted.

    `asked` is the room that what waits needs (a call, or a request's reservation),
    `usage` what the run's tree has used so far, `limits` the root's limits now.
    Answer with a `tl.Budget` (added to the root's room), None (refuse) or `tl.Defer()`.
    """

    limit: str
    asked: float
    usage: RunUsage
    limits: Budget
    run_id: str | None = None


def call_amount(tool: str) -> dict[str, float]:
    """The room one tool call takes."""
    return {"tool_calls": 1, _PER_TOOL + tool: 1}


def _add_into(target: dict[str, float], amount: Mapping[str, float], sign: int = 1) -> None:
    for name, value in amount.items():
        target[name] = target.get(name, 0) + sign * value
    if "input_tokens" in amount or "output_tokens" in amount:
        tokens = amount.get("input_tokens", 0) + amount.get("output_tokens", 0)
        target["total_tokens"] = target.get("total_tokens", 0) + sign * tokens


class Ledger:
    """One run's limits, spending and reservations; see the module docstring.

    `budget` None means no limits of its own (a child then has only its root's).
    Grants (`grant`) add room to the root's limits. Whoever waits for room is told when
    it comes back (a reservation released or replaced by less): `TreeLimits.on_room`.
    """

    def __init__(
        self,
        budget: Budget | None = None,
        *,
        parent: Ledger | None = None,
        pricing: Mapping[str, Price] | None = None,
    ) -> None:
        self.limits = budget if budget is not None else Budget()
        self.parent = parent
        self.pricing: dict[str, Price] = dict(pricing or {})
        self.spent: dict[str, float] = {}
        self.reserved: dict[str, float] = {}
        # What happens at a limit without room (asked, refused, deferred, parked): the
        # limit's life, kept and changed by `_budget_life` alone; one `TreeLimits` for
        # the tree, on every ledger of it.
        tree = parent.life.tree if parent is not None else TreeLimits()
        self.life: RunLimits = RunLimits(tree)
        # Calls started per tool in runs of the tree without a call limit (counted there,
        # not booked here per call: see `tally`).
        self._tallies: list[Callable[[], Mapping[str, int]]] = []

    # -- the tree ---------------------------------------------------------------------------

    @property
    def root(self) -> Ledger:
        ledger = self
        while ledger.parent is not None:
            ledger = ledger.parent
        return ledger

    def chain(self) -> Iterator[Ledger]:
        ledger: Ledger | None = self
        while ledger is not None:
            yield ledger
            ledger = ledger.parent

    def child(self, budget: Budget | None = None) -> Ledger:
        """The ledger of a run this one starts: it draws from this one (and its root)."""
        return Ledger(budget, parent=self)

    # -- room -------------------------------------------------------------------------------

    def tally(self, counts: Callable[[], Mapping[str, int]]) -> None:
        """Count the calls a run whose chain limits none starts (per tool, as `counts`
        tells when asked) in the usage of every ledger of the chain. No room is ever
        asked of them: a grant adds only to limits there are, so none can appear."""
        for ledger in self.chain():
            ledger._tallies.append(counts)

    @property
    def usage(self) -> RunUsage:
        if not self._tallies:
            return RunUsage.from_amounts(self.spent)
        spent = dict(self.spent)
        for counts in self._tallies:
            for tool, count in counts().items():
                spent["tool_calls"] = spent.get("tool_calls", 0) + count
                spent[_PER_TOOL + tool] = spent.get(_PER_TOOL + tool, 0) + count
        return RunUsage.from_amounts(spent)

    def room(self, name: str) -> float | None:
        """What is left of limit `name` in the tightest ledger of the chain (None: no limit)."""
        left: float | None = None
        for ledger in self.chain():
            limit = ledger.limits.limit(name)
            if limit is not None:
                here = limit - ledger.spent.get(name, 0) - ledger.reserved.get(name, 0)
                left = here if left is None else min(left, here)
        return left

    def lacking(self, amount: Mapping[str, float]) -> str | None:
        """The first limit (in `Budget` order) that has no room for `amount`, or None."""
        total = amount.get("input_tokens", 0) + amount.get("output_tokens", 0)
        for name, value in (*amount.items(), ("total_tokens", total)):
            if not value:
                continue
            left = self.room(name)
            if left is not None and value > left + 1e-12:
                return name
        return None

    def reserve(self, amount: Mapping[str, float], *, force: bool = False) -> str | None:
        """Book `amount` as in flight in every ledger of the chain, if it fits; else the
        name of the limit without room (nothing is booked). `force` books it whatever is
        left: a call a replayed record started, whose room was the record's."""
        missing = None if force else self.lacking(amount)
        if missing is None:
            for ledger in self.chain():
                _add_into(ledger.reserved, amount)
        return missing

    def release(self, amount: Mapping[str, float]) -> None:
        """A reservation that will not be used (or is about to be replaced by `spend`)."""
        for ledger in self.chain():
            _add_into(ledger.reserved, amount, -1)
        self._room_came_back()

    def spend(self, amount: Mapping[str, float]) -> None:
        """Count what was used, in every ledger of the chain."""
        for ledger in self.chain():
            _add_into(ledger.spent, amount)

    def settle(self, reserved: Mapping[str, float], used: Mapping[str, float]) -> None:
        """A reservation replaced by what was used."""
        for ledger in self.chain():
            _add_into(ledger.reserved, reserved, -1)
            _add_into(ledger.spent, used)
        self._room_came_back()

    @property
    def in_flight(self) -> bool:
        """Whether a model request is under way anywhere in the tree: room for a request
        may come back when it lands (its whole reservation is counted as spent while it
        runs, and replaced by what it used). A tool call's reservation holds no room a
        request needs, and may wait, through its child run, for that very request."""
        return self.life.tree.flights > 0

    def wake(self) -> None:
        """Tell whoever waits for room to look again."""
        self._room_came_back()

    def grant(self, budget: Budget) -> None:
        """More room, added to the root's limits; a limit the grant names is asked again,
        and the deferrals are answered (someone gave room)."""
        root = self.root
        root.limits = root.limits + budget
        self.life.tree.granted([name for name, _ in budget.limits()])
        self._room_came_back()

    def _room_came_back(self) -> None:
        self.life.tree.room_came_back()  # anywhere in the tree: a request may wait there

    # -- prices -----------------------------------------------------------------------------

    def price_of(self, model: str | None) -> Price | None:
        """A model's price: the root's `pricing` prices every request of the tree."""
        for ledger in self.chain():
            if model in ledger.pricing:
                return ledger.pricing[model]
        return None

    def needs_price(self) -> bool:
        """Whether a `cost` limit holds anywhere up the chain."""
        return any(ledger.limits.cost is not None for ledger in self.chain())

    def limit_value(self, name: str) -> float | None:
        """The tightest `name` limit of the chain (for messages)."""
        values = [
            value for ledger in self.chain() if (value := ledger.limits.limit(name)) is not None
        ]
        return min(values) if values else None

    def describe(self, name: str) -> str:
        """'the tool_calls limit of 9 is used up' (or 'has only 0.02 left'), for errors."""
        left = self.room(name)
        limit = f"the {name} limit of {_number(self.limit_value(name))}"
        if left is None or left < 1e-9:
            return f"{limit} is used up"
        return f"{limit} has only {_number(left)} left"


def _number(value: float | None) -> str:
    if value is None:
        return "none"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6g}"


def request_reservation(
    ledger: Ledger, model: str | None, estimate: int, max_output: int | None = None
) -> tuple[dict[str, float], int | None] | str:
    """The room a model request reserves (PROTOCOL §12), or the limit that has none.

    The reservation is the prompt's `estimate` of input tokens and the most the answer
    may write: `max_output` (the client's own, None: no cap) further capped by what the
    output, total and cost limits leave after the input. That cap, also returned, is
    what the client sends as the request's output limit (None: send none).
    """
    price = ledger.price_of(model)
    caps: list[tuple[float, str]] = []
    if max_output is not None:
        caps.append((max_output, "output_tokens"))
    left = ledger.room("output_tokens")
    if left is not None:
        caps.append((left, "output_tokens"))
    left = ledger.room("total_tokens")
    if left is not None:
        caps.append((left - estimate, "total_tokens"))
    left = ledger.room("cost")
    if left is not None and price is not None and price.output > 0:
        caps.append(((left - price.cost(estimate, 0)) * 1_000_000 / price.output, "cost"))
    cap: int | None = None
    if caps:
        room, name = min(caps)
        # Huge (finite) prices and limits reach infinities: a cost limit of 1e308 over a
        # small price leaves room for any answer (inf: no cap); a price of 1e308 makes
        # the prompt alone cost more than any limit (-inf: no room).
        if room != math.inf:
            cap = math.floor(room + 1e-9) if room != -math.inf else 0
            if cap < 1:
                return name
    output = cap or 0
    amount: dict[str, float] = {"requests": 1, "input_tokens": estimate, "output_tokens": output}
    if price is not None:
        amount["cost"] = price.cost(estimate, output)
    missing = ledger.lacking(amount)
    return missing if missing is not None else (amount, cap)


def used_amount(
    ledger: Ledger, model: str | None, input_tokens: int, output_tokens: int
) -> dict[str, float]:
    """What one request used, priced by the model that made it."""
    amount: dict[str, float] = {
        "requests": 1,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
    }
    price = ledger.price_of(model)
    if price is not None:
        amount["cost"] = price.cost(input_tokens, output_tokens)
    return amount

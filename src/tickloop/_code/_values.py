"""The values of the language and what happens to them at its edges (PROTOCOL §14).

Owns the value model: plain Python `None`, `bool`, `int`, `float`, `str`, `list`, `dict`
and `tuple`, plus `PSet` (a set that iterates in insertion order), `Lazy` (the value of
a call that may not have ended: forced only where an operation needs it), and the
evaluator's callables and modules. Owns copying (§14 "Values, not references": a store is
a copy), leaving the program (`leave`: JSON only, tuples and sets as lists, datetimes as
ISO strings, integers within 2**63), and the value-size limit, estimated before building.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from ._exceptions import LimitExceeded, ProgramRaise, ToolError

__all__ = [
    "MAX_INT",
    "MAX_VALUE_BYTES",
    "Builtin",
    "CallState",
    "Lazy",
    "Meter",
    "Module",
    "PSet",
    "check_size",
    "copy_value",
    "leave",
    "size_of",
]

MAX_VALUE_BYTES: Final = 10_000_000  # §14: values of at most 10 MB
MAX_INT: Final = 2**63  # §14: integers at most 2**63 in magnitude when they leave
_PAUSE_EVERY: Final = 1_000  # §14: the evaluator yields at least every 1,000 steps


class Meter:
    """Steps a program has used (§14 "Limits": an operation on a value of size n counts n).

    Invariant: `steps <= max_steps` while evaluation goes on; passing it raises
    `LimitExceeded`, which no `try` catches. `due` says the evaluator should yield.
    """

    def __init__(self, max_steps: int) -> None:
        self.max_steps = max_steps
        self.steps = 0
        self._since_pause = 0

    def charge(self, n: int = 1) -> None:
        self.steps += n
        self._since_pause += n
        if self.steps > self.max_steps:
            raise LimitExceeded(
                "max_steps", f"the program used more than max_steps={self.max_steps:,} steps"
            )

    @property
    def due(self) -> bool:
        return self._since_pause >= _PAUSE_EVERY

    def paused(self) -> None:
        self._since_pause = 0


@dataclass(eq=False)
class CallState:
    """One call a program made: its id (the call path), tool, parameters, and its end.

    `status` is "running" until `call_finished`, then "ok" or "failed"; `value` is its
    JSON result (never mutated: every `Lazy` forcing it takes a copy), `error` the
    `ToolError` a failure raises. `owner` is the statement whose pass made it.
    """

    id: str
    tool: str
    params: dict[str, Any]
    line: int
    read_only: bool
    owner: int
    status: str = "running"
    value: Any = None
    error: ToolError | None = None

    @property
    def ended(self) -> bool:
        return self.status != "running"


class Lazy:
    """A stored call value, forced only where an operation needs it (§14, implementation
    note). Each stored copy is its own `Lazy` over the same call: `cache`, once forced, is
    this copy's own value, so `append` on it never reaches another copy."""

    __slots__ = ("cache", "call", "forced")

    def __init__(self, call: CallState) -> None:
        self.call = call
        self.forced = False
        self.cache: Any = None

    def copy(self) -> Lazy:
        other = Lazy(self.call)
        if self.forced:
            other.forced, other.cache = True, copy_value(self.cache)
        return other


class PSet:
    """A program's set: insertion-ordered (§14), of hashable values."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[Any] = ()) -> None:
        self.items: dict[Any, None] = dict.fromkeys(items)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self.items))

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, item: object) -> bool:
        return item in self.items

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PSet) and self.items.keys() == other.items.keys()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "{" + ", ".join(repr(x) for x in self.items) + "}" if self.items else "set()"

    def __or__(self, other: PSet) -> PSet:
        return PSet([*self.items, *_set_items(other)])

    def __and__(self, other: PSet) -> PSet:
        keep = _set_items(other)
        return PSet(x for x in self.items if x in keep)

    def __sub__(self, other: PSet) -> PSet:
        drop = _set_items(other)
        return PSet(x for x in self.items if x not in drop)

    def __xor__(self, other: PSet) -> PSet:
        theirs = _set_items(other)
        return PSet([*(x for x in self.items if x not in theirs),
                     *(x for x in theirs if x not in self.items)])  # fmt: skip

    def __le__(self, other: PSet) -> bool:
        return self.items.keys() <= _set_items(other).keys()

    def __lt__(self, other: PSet) -> bool:
        return self.items.keys() < _set_items(other).keys()

    def __ge__(self, other: PSet) -> bool:
        return self.items.keys() >= _set_items(other).keys()

    def __gt__(self, other: PSet) -> bool:
        return self.items.keys() > _set_items(other).keys()


def _set_items(other: Any) -> dict[Any, None]:
    if isinstance(other, PSet):
        return other.items
    raise TypeError(f"unsupported operand: set and {type_name(other)}")


@dataclass(frozen=True, eq=False)
class Builtin:
    """A built-in function of the language (`len`, `sorted`, `json.dumps`, ...).

    `run(evaluator, args, kwargs, site)` may await (to force values or call helpers);
    `type_` is the class `isinstance` tests for the type names (`int`, `list`, `set`).
    """

    name: str
    run: Callable[..., Any]
    type_: Any = None
    members: dict[str, Any] = field(default_factory=dict)  # `datetime.timezone.utc`

    def __repr__(self) -> str:
        return f"<built-in function {self.name}>"


@dataclass(frozen=True, eq=False)
class Module:
    """An imported module of the language: its name and what `module.name` gives."""

    name: str
    members: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"<module {self.name!r}>"


def type_name(value: Any) -> str:
    """The program's name for a value's type, for error messages."""
    if isinstance(value, PSet):
        return "set"
    if isinstance(value, Lazy):
        return "call value"
    return type(value).__name__


def copy_value(value: Any, meter: Meter | None = None) -> Any:
    """A copy of `value` that shares no mutable part with it (§14 "Values, not
    references"). Lazy values stay lazy; immutable values are shared."""
    if isinstance(value, list):
        if meter is not None:
            meter.charge(1 + len(value) // 4)
        return [copy_value(item, meter) for item in value]
    if isinstance(value, dict):
        if meter is not None:
            meter.charge(1 + len(value) // 4)
        return {key: copy_value(item, meter) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(copy_value(item, meter) for item in value)
    if isinstance(value, PSet):
        return PSet(value.items)
    if isinstance(value, Lazy):
        return value.copy()
    return value


# -- sizes: estimated before building (§14 "Limits") -----------------------------------------


def size_of(value: Any, limit: int = MAX_VALUE_BYTES) -> int:
    """An estimate of a value's size in bytes, counting no further than just past `limit`.

    Strings count their length, integers their bytes, containers their items plus 8
    bytes each. Lazy values count as small: a call's result was checked when it arrived.
    """
    total = 0
    stack = [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 8
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() // 8 + 8
        elif isinstance(item, list | tuple):
            total += 8 + 8 * len(item)
            stack.extend(item)
        elif isinstance(item, dict):
            total += 8 + 8 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, PSet):
            total += 8 + 8 * len(item)
            stack.extend(item.items)
        elif isinstance(item, Lazy) and item.forced:
            stack.append(item.cache)
        else:
            total += 8
    return total


def check_size(estimate: float, what: str) -> None:
    """Refuse, before building it, a value whose estimated size passes 10 MB."""
    if estimate > MAX_VALUE_BYTES:
        raise LimitExceeded(
            "value size",
            f"{what} would make a value of about {_human(estimate)}, over the 10 MB limit",
        )


def _human(size: float) -> str:
    if size >= 1e15 or not math.isfinite(size):
        return "10**" + str(int(math.log10(size))) + " bytes" if math.isfinite(size) else "∞"
    return f"{size / 1e6:,.0f} MB"


# -- leaving the program -----------------------------------------------------------------------


def leave(value: Any, what: str = "a value") -> Any:
    """`value` as JSON for outside the program (a call's parameters, a variable, the
    output): tuples and sets as lists, datetimes as ISO strings, a `ToolError` as a
    dict. Every `Lazy` inside must have been forced. Raises `ProgramRaise` (a
    `ValueError` or `TypeError` the program may catch) for what cannot leave."""
    check_size(size_of(value), what)
    return _leave(value, what, depth=0)


def _leave(value: Any, what: str, depth: int) -> Any:
    if depth > 200:
        raise ProgramRaise(ValueError(f"{what} nests deeper than 200 levels"))
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if abs(value) > MAX_INT:
            raise ProgramRaise(
                ValueError(f"{what} holds an integer over 2**63 in magnitude ({_digits(value)})")
            )
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ProgramRaise(ValueError(f"{what} holds a float that is not finite ({value})"))
        return value
    if isinstance(value, list | tuple | PSet):
        return [_leave(item, what, depth + 1) for item in value]
    if isinstance(value, dict):
        return {_key(key, what): _leave(item, what, depth + 1) for key, item in value.items()}
    if isinstance(value, Lazy):
        if not value.forced:
            raise AssertionError("a lazy value leaves the program unforced")  # a bug here
        return _leave(value.cache, what, depth)
    if isinstance(value, _dt.date | _dt.time):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, _dt.tzinfo):
        return str(value)  # "UTC", "UTC+02:00"
    if isinstance(value, ToolError):
        return {"type": value.type, "message": value.message, "call_id": value.call_id}
    if isinstance(value, Exception):
        return f"{type(value).__name__}: {value}" if str(value) else type(value).__name__
    raise ProgramRaise(TypeError(f"{what} holds a {type_name(value)}, which is not JSON"))


def _key(key: Any, what: str) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float):
        return _json_key(key)
    raise ProgramRaise(TypeError(f"{what} has a {type_name(key)} key; JSON keys are strings"))


def _json_key(key: Any) -> str:
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _digits(value: int) -> str:
    return f"about {value.bit_length() * 0.30103:.0f} digits"

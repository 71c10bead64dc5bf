"""What a driver feeds the scheduler (inputs) and what it gets back (actions).

The names are chosen so they cannot be mistaken for the public run events of
`tickloop._observe` (`tl.CallReceived`, `tl.CallFinished`, ...), which report what
happened to a watcher:

* Inputs are imperatives addressed to the scheduler: `OpenTick`, `ReceiveCall`,
  `CloseStream`, `ReportFault`, `Decide`, `FinishCall`, `Flush`.
* Actions are imperatives addressed to the driver: `StartCall` and `AskApproval` are work
  it must do; every `Note...` action is a fact it must record or report (a log message,
  a call accepted, ready, decided or settled, a tick ended).

The durable journal stores inputs under the names they had before these ones
(`_durable` keeps that mapping), so journals written earlier replay unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any, TypeVar

from ._budget import Budget, BudgetRequest
from ._decisions import Decision, PendingCall

__all__ = [
    "Action",
    "AnswerBudget",
    "AskApproval",
    "AskBudget",
    "CloseStream",
    "Decide",
    "Event",
    "FinishCall",
    "Flush",
    "NoteAccepted",
    "NoteDecided",
    "NoteMessage",
    "NoteReady",
    "NoteSettled",
    "NoteTickEnded",
    "OpenTick",
    "ReceiveCall",
    "ReportFault",
    "SpendBudget",
    "StartCall",
]


_Frozen = TypeVar("_Frozen")


def _quick_init(cls: type[_Frozen]) -> type[_Frozen]:
    """Give a frozen, slotted dataclass made once or more per call a cheaper `__init__`.

    The generated one sets each field through `object.__setattr__` looked up per field
    (about 0.8 us for five fields); this one stores through the slots' own descriptors
    (about 0.35 us). The class stays frozen (assignment still raises), with the same
    fields, defaults, equality and hash: only construction is cheaper.
    """
    specs = fields(cls)  # type: ignore[arg-type]
    names = [spec.name for spec in specs]
    params: list[str] = []
    namespace: dict[str, Any] = {}
    for spec in specs:
        # Only plain defaults: a factory or __post_init__ would need the dataclass's own.
        assert spec.default_factory is MISSING and spec.init
        if spec.default is MISSING:
            params.append(spec.name)
        else:
            namespace[f"_d_{spec.name}"] = spec.default
            params.append(f"{spec.name}=_d_{spec.name}")
        namespace[f"_s_{spec.name}"] = cls.__dict__[spec.name].__set__
    assert not hasattr(cls, "__post_init__")
    body = "".join(f"    _s_{name}(self, {name})\n" for name in names)
    source = f"def __init__(self, {', '.join(params)}):\n{body}"
    exec(source, namespace)  # built from the class's own field names
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    setattr(cls, "__init__", init)  # noqa: B010 - mypy refuses assigning to a method
    return cls


# --------------------------------------------------------------------------------------
# Inputs (the driver tells the scheduler)


@dataclass(frozen=True, slots=True)
class OpenTick:
    """A new request's stream opened: calls that arrive now belong to `iteration`."""

    iteration: int
    date: str = ""
    # Ticks journaled before plan order (PROTOCOL §3, §4) replay with the old rule: every
    # read live, no write held. Every tick opened now keeps plan order.
    plan_order: bool = True


@_quick_init
@dataclass(frozen=True, slots=True)
class ReceiveCall:
    """One call, as the model wrote it (any JSON value: the scheduler checks it)."""

    call: Any
    date: str = ""


@dataclass(frozen=True, slots=True)
class CloseStream:
    """No more calls will arrive for this request: settling may begin."""

    date: str = ""


@dataclass(frozen=True, slots=True)
class ReportFault:
    """A structural fault of the iteration itself (unparseable solution, bad output)."""

    error: dict[str, Any]
    call: Any = None
    date: str = ""


@dataclass(frozen=True, slots=True)
class Decide:
    """The answer to an `AskApproval` (or a later one for a deferred call)."""

    call_id: str
    decision: Decision
    date: str = ""


@_quick_init
@dataclass(frozen=True, slots=True)
class FinishCall:
    """A started call returned (`value`, maybe on `branch`) or failed (`error`)."""

    call_id: str
    value: Any = None
    branch: str | None = None
    error: dict[str, Any] | None = None
    date: str = ""


@dataclass(frozen=True, slots=True)
class Flush:
    """The run is ending: append the errors that came after the last tick ended."""

    date: str = ""


@dataclass(frozen=True, slots=True)
class AnswerBudget:
    """The budget hook's answer to an `AskBudget` about `limit` (PROTOCOL §12): more room
    (a `Budget`, added to the root's), None (refuse what waits on it) or "defer"."""

    limit: str
    grant: Budget | str | None
    date: str = ""


@dataclass(frozen=True, slots=True)
class SpendBudget:
    """Room the driver spent outside the scheduler (a model request: its tokens, cost),
    as a dict from limit name to amount; fed so that a journal replays it."""

    amount: dict[str, float]
    date: str = ""


Event = (
    OpenTick
    | ReceiveCall
    | CloseStream
    | ReportFault
    | Decide
    | FinishCall
    | Flush
    | AnswerBudget
    | SpendBudget
)


# --------------------------------------------------------------------------------------
# Actions (the scheduler tells the driver)


@_quick_init
@dataclass(frozen=True, slots=True)
class NoteAccepted:
    """A call passed its arrival checks and waits for its inputs."""

    id: str
    tool: str
    call: dict[str, Any]


@_quick_init
@dataclass(frozen=True, slots=True)
class NoteReady:
    """A call's inputs exist: these are its resolved, checked parameters. `waits_on`: the
    calls whose writes (or end, for a tool's `depends_on`) it waited on, in arrival order,
    from a scheduler made with `arrows=True` (empty otherwise)."""

    id: str
    params: dict[str, Any]
    waits_on: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class AskApproval:
    """Ask the approval hook about this call; answer with `Decide`."""

    pending: PendingCall


@dataclass(frozen=True, slots=True)
class NoteDecided:
    id: str
    decision: Decision


@_quick_init
@dataclass(frozen=True, slots=True)
class StartCall:
    """Run this explicit call's handler with these (resolved, checked) parameters; answer
    with `FinishCall`."""

    id: str
    tool: str
    params: dict[str, Any]
    call: dict[str, Any]


@_quick_init
@dataclass(frozen=True, slots=True)
class NoteMessage:
    """A message the scheduler appended to the log."""

    message: dict[str, Any]


@_quick_init
@dataclass(frozen=True, slots=True)
class NoteSettled:
    """A call reached its final status."""

    id: str
    status: str
    error: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class NoteTickEnded:
    """The tick is over; `paused` lists deferred calls it could not finish without."""

    iteration: int
    errors: list[dict[str, Any]]
    paused: list[str]


@dataclass(frozen=True, slots=True)
class AskBudget:
    """Ask the budget hook about an exhausted limit; answer with `AnswerBudget`."""

    request: BudgetRequest


Action = (
    AskBudget
    | NoteAccepted
    | NoteReady
    | AskApproval
    | NoteDecided
    | StartCall
    | NoteMessage
    | NoteSettled
    | NoteTickEnded
)

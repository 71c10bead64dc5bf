"""What a driver feeds the scheduler (inputs) and what it gets back (actions).

The names are chosen so they cannot be mistaken for the public run events of
`tickloop._observe` (`tl.CallReceived`, `tl.CallFinished`, ...), which report what
happened to a watcher:

* Inputs are imperatives addressed to the scheduler: `OpenTick`, `ReceiveCall`,
  `CloseText`, `CloseStream`, `ReportFault`, `Decide`, `FinishCall`, `Flush`.
* Actions are imperatives addressed to the driver: `StartCall` and `AskApproval` are work
  it must do; every `Note...` action is a fact it must record or report (a log message,
  a call accepted, ready, decided or settled, a tick ended).

The durable journal stores inputs under the names they had before these ones
(`_durable` keeps that mapping), so journals written earlier replay unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._budget import Budget, BudgetRequest
from ._decisions import Decision, Deny, PendingCall, Plan

__all__ = [
    "Action",
    "AnswerBudget",
    "AskApproval",
    "AskBudget",
    "AskReview",
    "CloseGate",
    "CloseStream",
    "CloseText",
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
    "OpenGate",
    "OpenTick",
    "ParkCall",
    "ReceiveCall",
    "ReportFault",
    "Review",
    "ScreenCall",
    "Screened",
    "SpendBudget",
    "StartCall",
]


# --------------------------------------------------------------------------------------
# Inputs (the driver tells the scheduler)


@dataclass(slots=True)
class OpenTick:
    """A new request's stream opened: calls that arrive now belong to `iteration`."""

    iteration: int
    date: str = ""
    # Ticks journaled before plan order (PROTOCOL §3, §4) replay with the old rule: every
    # read live, no write held. Every tick opened now keeps plan order.
    plan_order: bool = True
    # A code plan's tick (PROTOCOL §14): its calls come from tickloop's program driver,
    # never from the model's own JSON, so they may carry call paths as ids (`c2.7[3]>1`)
    # and the `_line` they were written on; any other tick refuses both.
    code: bool = False
    # Tool search: the deferred tools found by `search_tools` calls of earlier requests,
    # all of them (journaled, so a resume or replay refuses and accepts the same calls).
    found: tuple[str, ...] = ()


@dataclass(slots=True)
class ReceiveCall:
    """One call, as the model wrote it (any JSON value: the scheduler checks it)."""

    call: Any
    date: str = ""


@dataclass(slots=True)
class CloseStream:
    """No more calls will arrive for this request: settling may begin."""

    date: str = ""


@dataclass(slots=True)
class CloseText:
    """A code plan's program text is complete (PROTOCOL §14): the model has finished
    writing, though the program goes on running and making calls until `CloseStream`.
    The plan review is asked now (§15), about `program` and the calls known so far;
    `sites` are the program's call sites of tools that may require approval, each with
    its tool (`{"c2.4[*]": "charge"}`), whether or not they have made a call yet."""

    program: str
    sites: dict[str, str]
    date: str = ""


@dataclass(slots=True)
class ReportFault:
    """A structural fault of the iteration itself (unparseable solution, bad output)."""

    error: dict[str, Any]
    call: Any = None
    date: str = ""


@dataclass(slots=True)
class Decide:
    """The answer to an `AskApproval` (or a later one for a deferred call)."""

    call_id: str
    decision: Decision
    date: str = ""


@dataclass(slots=True)
class Review:
    """The answer to an `AskReview`: decisions by call id or code-plan site (§15)."""

    decisions: dict[str, Decision]
    date: str = ""


@dataclass(slots=True)
class Screened:
    """The answer to a `ScreenCall` (PROTOCOL §15): `denial` is the tool guardrail's
    `Deny`, or None when every tool guardrail passed the call."""

    call_id: str
    denial: Deny | None = None
    date: str = ""


@dataclass(slots=True)
class OpenGate:
    """Every input guardrail passed (PROTOCOL §15): calls held at the gate go on."""

    date: str = ""


@dataclass(slots=True)
class CloseGate:
    """Input guardrails are pending: ready calls of tools that are not `read_only` wait."""

    date: str = ""


@dataclass(slots=True)
class FinishCall:
    """A started call returned (`value`, maybe on `branch`) or failed (`error`)."""

    call_id: str
    value: Any = None
    branch: str | None = None
    error: dict[str, Any] | None = None
    date: str = ""


@dataclass(slots=True)
class ParkCall:
    """A started call cannot go on until decisions are made elsewhere: a sub-agent's
    call whose child run paused (PROTOCOL §11). It waits like a deferred call, holding no
    slot, and a later `Decide` (any decision but `Defer`) starts it again."""

    call_id: str
    date: str = ""


@dataclass(slots=True)
class Flush:
    """The run is ending: append the errors that came after the last tick ended."""

    date: str = ""


@dataclass(slots=True)
class AnswerBudget:
    """The budget hook's answer to an `AskBudget` about `limit` (PROTOCOL §12): more room
    (a `Budget`, added to the root's), None (refuse what waits on it) or "defer"."""

    limit: str
    grant: Budget | str | None
    date: str = ""


@dataclass(slots=True)
class SpendBudget:
    """Room the driver spent outside the scheduler (a model request: its tokens, cost),
    as a dict from limit name to amount; fed so that a journal replays it."""

    amount: dict[str, float]
    date: str = ""


Event = (
    OpenTick
    | ReceiveCall
    | CloseStream
    | CloseText
    | ReportFault
    | Decide
    | Review
    | FinishCall
    | ParkCall
    | Flush
    | AnswerBudget
    | SpendBudget
    | Screened
    | OpenGate
    | CloseGate
)


# --------------------------------------------------------------------------------------
# Actions (the scheduler tells the driver)


@dataclass(slots=True)
class NoteAccepted:
    """A call passed its arrival checks and waits for its inputs."""

    id: str
    tool: str
    call: dict[str, Any]
    read_only: bool = False  # its tool's `read_only` (PROTOCOL §14), for records and events


@dataclass(slots=True)
class NoteReady:
    """A call's inputs exist: these are its resolved, checked parameters. `waits_on`: the
    calls whose writes (or end, for a tool's `depends_on`) it waited on, in arrival order,
    from a scheduler made with `arrows=True` (empty otherwise)."""

    id: str
    params: dict[str, Any]
    waits_on: Sequence[str] = ()


@dataclass(slots=True)
class AskApproval:
    """Ask the approval hook about this call; answer with `Decide`."""

    pending: PendingCall


@dataclass(slots=True)
class AskReview:
    """Ask the plan-review hook about the request's gated calls; answer with `Review`."""

    plan: Plan


@dataclass(slots=True)
class ScreenCall:
    """Ask the tool guardrails about this ready call; answer with `Screened`."""

    pending: PendingCall


@dataclass(slots=True)
class NoteDecided:
    id: str
    decision: Decision


@dataclass(slots=True)
class StartCall:
    """Run this explicit call's handler with these (resolved, checked) parameters; answer
    with `FinishCall`."""

    id: str
    tool: str
    params: dict[str, Any]
    call: dict[str, Any]


@dataclass(slots=True)
class NoteMessage:
    """A message the scheduler appended to the log."""

    message: dict[str, Any]


@dataclass(slots=True)
class NoteSettled:
    """A call reached its final status."""

    id: str
    status: str
    error: dict[str, Any] | None
    # The value of a done call that wrote nothing (a code plan's call, a fire-and-forget
    # one), which no `NoteMessage` carries; None otherwise.
    output: Any = None
    # A call that settles without ever being ready (its writer was denied, failed...):
    # the calls that said they would write what it reads, and for a tool's `depends_on`
    # the earlier calls of that tool, in arrival order, from a scheduler made with
    # `arrows=True` (empty otherwise, and for a call that was ready: `NoteReady.waits_on`).
    waited_on: Sequence[str] = ()


@dataclass(slots=True)
class NoteTickEnded:
    """The tick is over; `paused` lists deferred calls it could not finish without."""

    iteration: int
    errors: list[dict[str, Any]]
    paused: list[str]


@dataclass(slots=True)
class AskBudget:
    """Ask the budget hook about an exhausted limit; answer with `AnswerBudget`."""

    request: BudgetRequest


Action = (
    AskBudget
    | NoteAccepted
    | NoteReady
    | AskApproval
    | AskReview
    | ScreenCall
    | NoteDecided
    | StartCall
    | NoteMessage
    | NoteSettled
    | NoteTickEnded
)

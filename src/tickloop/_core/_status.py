"""The states of one call and the moves between them (PROTOCOL §5), h11 style.

Every status change of a call goes through `move`, which checks `TRANSITIONS`: a move the
table does not list is a bug in the scheduler or its driver, reported at once with the
call, its status and what was being done, instead of a call silently in two states.

`CallStatus` is a `str` enum: a status compares equal to, formats and serializes as the
same string as before (`"done"`), so stored journals, call rows and `CallRecord.status`
read exactly as they did.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from .._errors import SchedulerUsageError

__all__ = [
    "ERROR_STATUSES",
    "FINAL_STATUSES",
    "TRANSITIONS",
    "CallStatus",
    "describe",
    "move",
    "not_awaiting_decision",
    "usage_error",
]


class CallStatus(StrEnum):
    """Where a call is: its value is the string stored and shown everywhere."""

    WAITING = "waiting"  # for what its references read, or for earlier calls
    APPROVING = "approving"  # ready; a person (or hook) is or will be asked
    DEFERRED = "deferred"  # the answer was "later": parked until a decision arrives
    QUEUED = "queued"  # approved, waiting for a concurrency slot
    RUNNING = "running"  # its handler runs
    HELD = "held"  # its result waits for an earlier call in plan order (§4)
    DONE = "done"
    FAILED = "failed"
    DENIED = "denied"
    SKIPPED = "skipped"
    INVALID = "invalid"


S = CallStatus

FINAL_STATUSES: frozenset[CallStatus] = frozenset(
    {S.DONE, S.FAILED, S.DENIED, S.SKIPPED, S.INVALID}
)
ERROR_STATUSES: frozenset[CallStatus] = frozenset({S.FAILED, S.DENIED, S.INVALID})

# What a value in hand does next: written (done), held for plan order, or refused (failed).
_WITH_VALUE = frozenset({S.DONE, S.HELD, S.FAILED})
# A decided call: run (queued), a latent or responded value, denied, edited badly
# (invalid), replaced (waiting again), or deferred (again).
_DECIDED = _WITH_VALUE | {S.QUEUED, S.DENIED, S.INVALID, S.WAITING, S.DEFERRED}

TRANSITIONS: dict[CallStatus, frozenset[CallStatus]] = {
    S.WAITING: _WITH_VALUE | {S.APPROVING, S.QUEUED, S.INVALID, S.SKIPPED},
    S.APPROVING: _DECIDED,
    S.DEFERRED: _DECIDED | {S.APPROVING},  # approving: an edit screened again (§15)
    # Failed: no room in its budget; deferred: no room, the question deferred (§12).
    S.QUEUED: frozenset({S.RUNNING, S.FAILED, S.DEFERRED}),
    S.RUNNING: _WITH_VALUE | {S.INVALID, S.DEFERRED},  # deferred: parked (a sub-agent)
    S.HELD: frozenset({S.DONE, S.FAILED, S.INVALID}),
    **{final: frozenset() for final in FINAL_STATUSES},
}


def usage_error(event: object, problem: str) -> SchedulerUsageError:
    """The one form of a driver's mistake: the input it fed, and what was wrong with it."""
    return SchedulerUsageError(f"{type(event).__name__}: {problem}")


def describe(call_id: str, status: str | None) -> str:
    """A call as a usage error names it: its id and its status, or that it is unknown."""
    return f"unknown call {call_id!r}" if status is None else f"call {call_id!r} ({status})"


def not_awaiting_decision(call_id: str, status: str | None) -> str:
    """A decision fed for a call no one is asking about (unknown, ended or not asked)."""
    if status is None:
        return f"decision for {describe(call_id, None)}"
    return f"{describe(call_id, status)} is not awaiting a decision"


def move(call: Any, new: CallStatus, event: object) -> None:
    """Give `call` (a scheduler's working call) the status `new`, if the table allows it.

    `event` is the input being handled, named if the move is refused; `call.record` is
    the caller-visible `CallRecord`: both always agree.
    """
    if new not in TRANSITIONS[call.status]:
        raise usage_error(event, f"{describe(call.id, call.status)} cannot become {new}")
    call.status = call.record.status = new

"""What a stored run and its calls look like to a reader (the CLI, the timeline, a page).

Plain data, defined here below the store so that renderers need not import the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CallInfo", "RunInfo"]


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One stored run as `tickloop runs` lists it."""

    run_id: str
    status: str  # running, interrupted, paused, done, failed
    created: float
    updated: float
    calls: int
    output: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CallInfo:
    """One call's row: status, redacted parameters, and the time of each transition.

    Times are on the run clock (seconds since the epoch); None for a transition the
    call never made.
    """

    id: str
    seq: int
    iteration: int
    tool: str | None
    status: str
    call: Any
    params: Any
    deps: list[str]
    decision: dict[str, Any] | None
    error: dict[str, Any] | None
    received: float | None
    ready: float | None
    asked: float | None
    decided: float | None
    started: float | None
    finished: float | None
    worker: str | None = None  # the worker that ran it, when calls run on many (Temporal)

    @property
    def line(self) -> int | None:
        """A code plan's call (PROTOCOL §14): the program line that made it."""
        line = self.call.get("_line") if isinstance(self.call, dict) else None
        return line if type(line) is int else None

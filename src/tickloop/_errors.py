"""The small tree of exceptions tickloop raises.

Errors a *call* makes never become exceptions: they become Error Messages in the log
(PROTOCOL §7). Exceptions are kept for the caller's mistakes (configuration, syntax) and
for the few ways a whole run can stop (iteration limit, model attempts used up).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class TickloopError(Exception):
    """Base class of every exception tickloop raises on purpose."""


class ConfigurationError(TickloopError):
    """Bad tools or options, raised before anything runs."""


class ReferenceSyntaxError(TickloopError, ValueError):
    """A reference or output-path expression that does not parse.

    `position` is the 0-based index in `text` where parsing failed, so the message can
    point at the fault instead of repeating the whole expression.
    """

    def __init__(self, message: str, text: str, position: int) -> None:
        self.text = text
        self.position = position
        self.reason = message
        super().__init__(f"{message} at position {position} in {text!r}")


class _RunStopped(TickloopError):
    """A run that stopped carries its log so the caller can resume from it."""

    def __init__(self, message: str, messages: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.messages: list[dict[str, Any]] = list(messages or [])


class MaxIterationsError(_RunStopped, RuntimeError):
    """The model kept asking for more requests than `max_iterations` allows."""


class ExecuteError(_RunStopped):
    """Every attempt at one model request failed; `.messages` is the log to resume from."""


class ResumeError(TickloopError):
    """A resume that cannot go ahead: unknown run, finished run, or a bad decision."""


class StoreError(TickloopError):
    """A store file that cannot be used (not a store, corrupt, unreadable)."""


@contextmanager
def unwrap_single() -> Iterator[None]:
    """Give back a nursery's lone exception as itself.

    Call tasks never raise (their failures become Error Messages), so a group around a
    run holds what the caller's own code raised: `MaxIterationsError` should reach the
    caller as `MaxIterationsError`, not as an exception group holding it.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            error = group.exceptions[0]
            raise error from error.__cause__
        raise

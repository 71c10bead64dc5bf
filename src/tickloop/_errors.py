"""The small tree of exceptions tickloop raises.

Errors a *call* makes never become exceptions: they become Error Messages in the log
(PROTOCOL §7). Exceptions are kept for the caller's mistakes (configuration, syntax) and
for the few ways a whole run can stop (iteration limit, model attempts used up). The
whole tree, every class defined here (catch `TickloopError` for all of them):

    TickloopError
    ├── ConfigurationError ······ bad tools or options, raised before anything runs
    ├── ReferenceSyntaxError ···· (also a ValueError) an expression that does not parse
    ├── SchedulerUsageError ····· (also a ValueError) a driver fed an event out of turn
    ├── RunStopped ·············· the run stopped before a final output; `.messages`
    │   ├── MaxIterationsError ·· (also a RuntimeError) `max_iterations` used up
    │   ├── ExecuteError ········ every attempt at one model request failed
    │   ├── BudgetExceeded ······ a budget's limit left no room; `.limit`, `.usage`
    │   └── ContextOverflow ····· what cannot be compacted does not fit the window
    │   └── GuardrailTripped ···· a guardrail tripped (PROTOCOL §15); `.guardrail`,
    │                             `.reason`, `.info`, `.usage`
    ├── ModelError ·············· a failed model request; `.status`, `.retry_after`
    ├── ReplayMismatchError ····· a strict `ReplayModel` got another request than recorded
    ├── ResumeError ············· a resume that cannot go ahead (unknown run, decision)
    ├── SessionBusy ············· a session's run is running, paused or crashed; `.run_id`
    ├── StoreError ·············· a store file that cannot be used
    ├── CodeError ··············· (also a ValueError) a program outside the language of
    │                             code plans; `.line`, `.construct`
    └── RemoteAgentError ········ (also a RuntimeError) `tickloop.a2a`: the remote task
                                  failed, was rejected or gave no output

A `ModelError` inside a run is retried (PROTOCOL §8) and reaches the caller as the
`ExecuteError` it ended in; a `RemoteAgentError` fails its call, never the run.
`ToolError` (`tickloop._code`) is no exception tickloop raises at its caller: it is what a
code plan's program catches when one of its calls fails (PROTOCOL §14).
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
        super().__init__(f"{message} at position {position} in {_excerpt(text, position)}")


_EXCERPT = 200  # characters of an expression an error message quotes


def _excerpt(text: str, position: int) -> str:
    """The text, or for a long one the part around `position`: a 10 MB expression is a
    fault to point at, not to repeat in every message that mentions it."""
    if len(text) <= _EXCERPT:
        return repr(text)
    start = max(0, min(position - _EXCERPT // 2, len(text) - _EXCERPT))
    part = text[start : start + _EXCERPT]
    before = "..." if start else ""
    after = "..." if start + _EXCERPT < len(text) else ""
    return f"{before}{part!r}{after} ({len(text):,} characters)"


class SchedulerUsageError(TickloopError, ValueError):
    """A driver fed the scheduler an event its state does not allow (a finish for a call
    that is not running, a decision nobody asked for, a second open tick).

    A bug in the driver, never in a call or the model: those become Error Messages. A
    `ValueError` too, which is what drivers written before it caught.
    """


class RunStopped(TickloopError):
    """A run stopped before the model gave a final output.

    It carries the run's log (`.messages`) so the caller can continue from it:
    `agent.run(..., messages=error.messages)`. Catch this to handle every way a run can
    stop short (iteration limit, model attempts used up, a budget) in one place.
    """

    def __init__(self, message: str, messages: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.messages: list[dict[str, Any]] = list(messages or [])


class MaxIterationsError(RunStopped, RuntimeError):
    """The model kept asking for more requests than `max_iterations` allows."""


class ExecuteError(RunStopped):
    """Every attempt at one model request failed; `.messages` is the log to resume from."""


class ContextOverflow(RunStopped):
    """What a request can never compact (instructions, tool menu, output schema, input,
    state view, previous plan or program, last errors) leaves no room for the answer in
    the agent's `context_window` (PROTOCOL §16). `.fixed`, `.max_output` and `.window`
    are the tokens that did not fit; `.messages` the log to continue from."""

    def __init__(
        self,
        fixed: int,
        max_output: int,
        window: int,
        messages: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(
            f"context overflow: the part of the request that cannot be compacted takes "
            f"{fixed:,} tokens and the answer up to {max_output:,}, more than the context "
            f"window of {window:,}; shorten the instructions or the state, or raise "
            "context_window",
            messages,
        )
        self.fixed = fixed
        self.max_output = max_output
        self.window = window


class GuardrailTripped(RunStopped):
    """A guardrail tripped (PROTOCOL §15): the run stopped at once, calls in flight were
    cancelled and nothing else started. `.guardrail` names it, `.reason` and `.info` are
    its verdict's, `.usage` what the run used, `.messages` its log for audit."""

    def __init__(
        self,
        guardrail: str,
        reason: str,
        info: Any = None,
        messages: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(f"guardrail {guardrail} tripped: {reason}", messages)
        self.guardrail = guardrail
        self.reason = reason
        self.info = info
        self.usage: Any = None


class BudgetExceeded(RunStopped):
    """A limit of the run's budget left no room for the next model request, or its wall
    time ran out (PROTOCOL §12). `.limit` names it ("cost", "requests", ...), `.usage`
    (a `tl.RunUsage`) is what the run used, `.messages` the log to continue from with
    more budget."""

    def __init__(
        self,
        message: str,
        messages: list[dict[str, Any]] | None = None,
        *,
        limit: str = "",
        usage: Any = None,
    ) -> None:
        super().__init__(message, messages)
        self.limit = limit
        self.usage = usage


class SessionBusy(TickloopError):
    """A session already has a run that is not over (PROTOCOL §16 "Busy").

    `run_id` names it and `reason` says how it stands: "running" (in a live process;
    raised when `session_busy="raise"` or the wait timed out), "paused" or "crashed"
    (resume it with `agent.resume(run_id)` or free the session with
    `session.abandon(run_id)`)."""

    def __init__(self, message: str, *, session_id: str, run_id: str | None, reason: str) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.run_id = run_id
        self.reason = reason


class ModelError(TickloopError):
    """A failed model request.

    `status` is the HTTP status (None for a transport error: connection refused, reset,
    a stream that broke off before the answer began); `retry_after` is the server's
    Retry-After in seconds, when it sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.body = body

    @property
    def retryable(self) -> bool:
        return self.status is None or is_retryable_status(self.status)


RETRYABLE_STATUSES = frozenset({408, 409, 429})


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or 500 <= status <= 599


class ReplayMismatchError(TickloopError):
    """A strict `ReplayModel` got a request that differs from the recorded one."""


class RemoteAgentError(TickloopError, RuntimeError):
    """`tickloop.a2a.RemoteAgent`: the remote agent's task failed, was rejected, or gave
    no output. A `RuntimeError` too, as it was before it joined the tree."""


class ResumeError(TickloopError):
    """A resume that cannot go ahead: unknown run, finished run, or a bad decision.

    `process` is the `host:pid` of the process running the run when that is why; it is
    kept out of the message, which a served agent shows its web clients (AG-UI's
    `RUN_ERROR`, an A2A task's failure); `tickloop resume` prints it.
    """

    def __init__(self, message: str, *, process: str | None = None) -> None:
        super().__init__(message)
        self.process = process


class StoreError(TickloopError):
    """A store file that cannot be used (not a store, corrupt, unreadable)."""


class CodeError(TickloopError, ValueError):
    """A program outside the language of code plans (PROTOCOL §14), or one that does not
    parse. `.line` is the 1-based line of the program it points at, `.construct` names
    what is refused ("syntax", "import", "class", "dunder", ...)."""

    def __init__(self, message: str, *, line: int = 0, construct: str = "") -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.reason = message
        self.line = line
        self.construct = construct


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


# -- what a handler or hook raised, as text for an Error Message ------------------------------

#: What always goes through a handler or a hook: the person at the keyboard stopping the
#: program. The engine adds trio's `Cancelled` when the call's own scope really is being
#: cancelled (`passing=`); any other `BaseException` (`SystemExit` from argparse,
#: `GeneratorExit`, asyncio's `CancelledError`, a foreign `trio.Cancelled` re-raised by a
#: tool, a custom subclass) is only that call's failure.
PASSING: tuple[type[BaseException], ...] = (KeyboardInterrupt,)

_GROUP_LEAVES_SHOWN = 5
_GROUP_WALK_LIMIT = 10_000  # exceptions looked at in one group, however it is nested


def is_call_error(error: BaseException, passing: tuple[type[BaseException], ...] = PASSING) -> bool:
    """Whether `error`, raised by a handler or a hook, is only that call's failure.

    Everything is, except the `passing` types; an exception group that holds one of those
    (at any depth) is let through whole.
    """
    if not isinstance(error, BaseExceptionGroup):
        return not isinstance(error, passing)
    leaves, _ = _leaves(error, limit=None)
    return not any(isinstance(leaf, passing) for leaf in leaves)


def describe_error(error: BaseException) -> str:
    """`Type: message` for an exception a handler or a hook raised; this never raises.

    A message that cannot be rendered (a `__str__` that raises) gives the type name and
    says so, rather than losing the call. An exception group's own text only counts its
    sub-exceptions, so its leaf exceptions follow it (the first five, then how many more):
    `ExceptionGroup: several (2 sub-exceptions): OSError: disk full; KeyError: 'user'`.
    """
    text = _describe_one(error)
    if not isinstance(error, BaseExceptionGroup):
        return text
    leaves, more = _leaves(error, limit=_GROUP_LEAVES_SHOWN)
    parts = [_describe_one(leaf) for leaf in leaves]
    if more:
        parts.append(f"and {more} more")
    return f"{text}: {'; '.join(parts)}" if parts else text


def describe_value(value: Any) -> str:
    """`repr(value)`, or what it is when its `__repr__` raises; this never raises."""
    try:
        return repr(value)
    except Exception as problem:
        return (
            f"a {_type_name(value)} object (its repr could not be rendered: __repr__ raised "
            f"{_type_name(problem)})"
        )


def _describe_one(error: BaseException) -> str:
    name = _type_name(error)
    try:
        message = str(error)
    except Exception as problem:
        return f"{name} (its message could not be rendered: __str__ raised {_type_name(problem)})"
    return f"{name}: {message}" if message else name


def _type_name(value: Any) -> str:
    try:
        name = type(value).__name__
    except Exception:  # a metaclass may make even this raise
        return "object"
    return name if isinstance(name, str) else "object"


def _leaves(
    group: BaseExceptionGroup[Any], *, limit: int | None
) -> tuple[list[BaseException], int]:
    """The group's leaf exceptions in order, nested groups flattened (without recursion).

    With a `limit`, at most that many are returned, with how many more there are. The
    walk stops after `_GROUP_WALK_LIMIT` exceptions, so a pathological group is cut short.
    """
    leaves: list[BaseException] = []
    more = 0
    stack: list[BaseException] = [group]
    seen = 0
    while stack and seen < _GROUP_WALK_LIMIT:
        seen += 1
        error = stack.pop()
        if isinstance(error, BaseExceptionGroup):
            stack.extend(reversed(error.exceptions))
        elif limit is None or len(leaves) < limit:
            leaves.append(error)
        else:
            more += 1
    return leaves, more

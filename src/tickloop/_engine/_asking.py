"""Asking an approval hook, on trio: the I/O half of the decisions in `_core._decisions`."""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable
from typing import Any

import trio

from .._core._decisions import (
    HOOK_REFUSED,
    ApproveHook,
    Decision,
    Deny,
    PendingCall,
    Plan,
    ReviewHook,
    normalize_decision,
)
from .._errors import PASSING, describe_error, is_call_error

__all__ = ["ask", "call_hook", "passing_here", "review"]


def passing_here() -> tuple[type[BaseException], ...]:
    """What goes through a handler or hook here: trio's `Cancelled` only while this task's
    own scope is cancelled (its effective deadline is then -inf); a `Cancelled` a tool
    re-raised from a scope of its own, or made up, is that call's failure."""
    if trio.current_effective_deadline() == -math.inf:
        return (*PASSING, trio.Cancelled)
    return PASSING


async def call_hook(hook: Callable[..., Any], *args: Any) -> Any:
    """`hook(*args)` as every user hook is called (approval, plan review, budget,
    guardrail): an async one in this task; a sync one in a worker thread, abandoned at
    once when the run is cancelled; an awaitable it returns (a lambda around an async
    function) awaited here. What it raises goes to the caller."""
    if _is_async(hook):
        answer = await hook(*args)
    else:
        # Boxed: trio refuses a coroutine returned from a thread.
        [answer] = await trio.to_thread.run_sync(lambda: [hook(*args)], abandon_on_cancel=True)
    if inspect.isawaitable(answer):
        answer = await answer
    return answer


async def ask(hook: ApproveHook, pending: PendingCall) -> Decision:
    """Ask the hook about one call; a hook that raises denies the call (fail closed).

    Any exception counts as raising (`SystemExit` from argparse, asyncio's
    `CancelledError`, a foreign `trio.Cancelled`); a `KeyboardInterrupt` or the
    cancellation of this task goes through, and so does a group holding one.

    An async hook runs in the asking task. A sync hook runs in a worker thread, so a
    hook that takes its time (a policy lookup, a person at a prompt) never holds up the
    other calls (PROTOCOL §6); a cancel of the run abandons its thread at once. The
    scheduler asks about one call at a time, so one hook runs at a time.
    """
    try:
        answer = await call_hook(hook, pending)
    except BaseException as error:
        if not is_call_error(error, passing_here()):
            raise
        logging.getLogger("tickloop").warning(
            "approval hook bug: it raised %s on call %s (%s); the call is refused",
            describe_error(error),
            pending.id,
            pending.tool,
        )
        return Deny(HOOK_REFUSED)
    return normalize_decision(answer)


async def review(hook: ReviewHook, plan: Plan) -> dict[str, Decision]:
    """Ask the plan-review hook (PROTOCOL §15), run as `ask` runs the approval hook.

    A review that raises, or answers with something that is not a dict of decisions,
    decides nothing: every gated call then goes to the approval hook, one by one, as
    without a review (fail closed to asking, never to running)."""
    try:
        answer = await call_hook(hook, plan)
    except BaseException as error:
        if not is_call_error(error, passing_here()):
            raise
        logging.getLogger("tickloop").warning(
            "plan review bug: it raised %s; its calls go to the approval hook",
            describe_error(error),
        )
        return {}
    if not isinstance(answer, dict):
        logging.getLogger("tickloop").warning(
            "plan review bug: it returned %s, not a dict of decisions by call id; its "
            "calls go to the approval hook",
            type(answer).__name__,
        )
        return {}
    return {str(key): normalize_decision(value) for key, value in answer.items()}


def _is_async(hook: Callable[..., Any]) -> bool:
    """An `async def` function (a partial of one too) or an object with `async def __call__`."""
    return inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(
        getattr(hook, "__call__", None)  # noqa: B004  # the method itself, as _tools does
    )

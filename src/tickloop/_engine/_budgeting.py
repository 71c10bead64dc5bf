"""Asking the budget hook (PROTOCOL §12), on trio: the I/O half of `_core._budget_gate`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .._core._budget import Budget, BudgetRequest
from .._core._decisions import Defer
from .._errors import describe_error, is_call_error
from ._asking import call_hook, passing_here

__all__ = ["BudgetHook", "ask_budget"]

BudgetHook = Callable[[BudgetRequest], Any]
_log = logging.getLogger("tickloop")


async def ask_budget(hook: BudgetHook, request: BudgetRequest, *, durable: bool) -> Any:
    """The hook's answer as `AnswerBudget` takes it: a `Budget`, None or "defer".

    A sync hook runs in a worker thread (a person may be asked), an async one in this
    task. A hook that raises, or answers anything else, refuses (fail closed, logged);
    `tl.Defer()` in a run without a store has no one to resume it, so it refuses too.
    """
    try:
        answer = await call_hook(hook, request)
    except BaseException as error:
        if not is_call_error(error, passing_here()):
            raise
        _log.warning(
            "budget hook bug: it raised %s about %s; more room is refused",
            describe_error(error),
            request.limit,
        )
        return None
    if answer is None or isinstance(answer, Budget):
        return answer
    if isinstance(answer, Defer) or (isinstance(answer, type) and answer is Defer):
        if durable:
            return "defer"
        _log.warning(
            "budget hook deferred %s in a run without a store (nothing could resume it); "
            "more room is refused",
            request.limit,
        )
        return None
    _log.warning(
        "budget hook bug: it answered %r about %s (a tl.Budget, None or tl.Defer() was "
        "expected); more room is refused",
        answer,
        request.limit,
    )
    return None

"""Asking a guardrail on trio (PROTOCOL §15): the I/O half of `_core._guardrails`.

A guardrail is asked as the approval hook is (`_asking`): an async one in the asking
task, a sync one in a worker thread. One that raises, or answers with no verdict its
kind allows, fails closed, locally: `on_fault` says what that means for its kind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

from .._core._guardrails import Verdict
from .._errors import describe_error, is_call_error
from ._asking import call_hook, passing_here

__all__ = ["check"]


async def check(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    allowed: tuple[type, ...],
    on_fault: Callable[[str], Verdict],
) -> Verdict:
    """Ask `fn(*args)`; its verdict when it is one of `allowed`, else `on_fault(text)`."""
    try:
        answer = await call_hook(fn, *args)
    except BaseException as error:
        if not is_call_error(error, passing_here()):
            raise
        text = f"guardrail {_name(fn)} raised {describe_error(error)}"
        logging.getLogger("tickloop").warning("%s; it fails closed", text)
        return on_fault(text)
    if isinstance(answer, allowed):
        return cast(Verdict, answer)
    return on_fault(f"guardrail {_name(fn)} answered {answer!r}, not a verdict")


def _name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__name__", None) or type(fn).__name__)

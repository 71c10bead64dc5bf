"""Guardrails (PROTOCOL §15): the four kinds a run is given, and the verdicts they answer.

Pure data: which guardrail applies to which call, and what a verdict means. Asking one
(sync or async, fail closed) is the engine's (`_engine._guarding`). A tool guardrail's
`Deny` is the approval hook's `Deny`: the same concept, a call that ends `denied`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._decisions import Deny

__all__ = [
    "Deny",
    "GuardrailContext",
    "InputGuardrail",
    "OutputGuardrail",
    "Pass",
    "Reject",
    "ReplaceResult",
    "ResultGuardrail",
    "ToolGuardrail",
    "Trip",
    "Verdict",
    "guardrail_name",
    "verdict_to_dict",
]


@dataclass(frozen=True, slots=True)
class Pass:
    """The guardrail has nothing against it: the run goes on."""


@dataclass(frozen=True, slots=True)
class Trip:
    """Stop the run at once (`tl.GuardrailTripped`); `info` is kept for audit."""

    reason: str = "guardrail tripped"
    info: Any = None


@dataclass(frozen=True, slots=True)
class ReplaceResult:
    """A result guardrail's verdict: write `value` instead of the call's result."""

    value: Any


@dataclass(frozen=True, slots=True)
class Reject:
    """A result guardrail's verdict: the call fails (Error Message of type `guardrail`)
    and writes nothing. An output guardrail's: the output is a structural error fed back
    to the model with `reason` as the feedback."""

    reason: str


Verdict = Pass | Trip | Deny | ReplaceResult | Reject


@dataclass(frozen=True, slots=True)
class GuardrailContext:
    """What a guardrail may read of the run (read-only): its id, its path in a tree of
    runs, what it used so far and its state (a frozen copy); and `ask_model`."""

    run_id: str | None
    path: str
    usage: Any = None
    state: Mapping[str, Any] = field(default_factory=dict)
    # The run's one-shot request (PROTOCOL §15: an async guardrail may call a model,
    # counted in the run's budget); None where the run's model cannot be asked so.
    asker: Callable[[str], Awaitable[str]] | None = field(default=None, repr=False)

    async def ask_model(self, prompt: str) -> str:
        """Ask the run's model `prompt` in one request and return its text. The request
        is reserved and counted in the run's budget and usage like any of the run's
        (PROTOCOL §12); one the budget refuses raises `tl.BudgetExceeded`, and like
        any exception it makes the guardrail fail closed. From an async guardrail."""
        if not isinstance(prompt, str):
            raise TypeError(f"ask_model takes the prompt as a str, not {prompt!r}")
        if self.asker is None:
            raise RuntimeError(
                "this run's model cannot be asked from a guardrail (it streams no "
                "plain-text answers)"
            )
        return await self.asker(prompt)


def _check_function(kind: str, fn: Any) -> None:
    if not callable(fn):
        raise TypeError(f"{kind} takes a function, not {fn!r}")


def _check_tools(kind: str, tools: Any) -> tuple[str, ...] | None:
    if tools is None:
        return None
    if isinstance(tools, str) or not all(isinstance(name, str) for name in tools):
        raise TypeError(f"{kind}(tools=...) takes a list of tool names, not {tools!r}")
    return tuple(tools)


@dataclass(frozen=True, slots=True, init=False)
class InputGuardrail:
    """`fn(input, ctx)` checks the run's input while the first request streams; until it
    passes, calls of tools that are not `read_only` wait (`blocking=True`: the first
    request waits too)."""

    fn: Callable[..., Any]
    blocking: bool

    def __init__(self, fn: Callable[..., Any], blocking: bool = False) -> None:
        _check_function("InputGuardrail", fn)
        object.__setattr__(self, "fn", fn)
        object.__setattr__(self, "blocking", bool(blocking))


@dataclass(frozen=True, slots=True, init=False)
class _CallGuardrail:
    """What a tool and a result guardrail share: the function, and `tools`, the names of
    the tools whose calls it sees (None: every tool's)."""

    fn: Callable[..., Any]
    tools: tuple[str, ...] | None

    def __init__(self, fn: Callable[..., Any], tools: Any = None) -> None:
        kind = type(self).__name__
        _check_function(kind, fn)
        object.__setattr__(self, "fn", fn)
        object.__setattr__(self, "tools", _check_tools(kind, tools))

    def applies_to(self, tool: str) -> bool:
        return self.tools is None or tool in self.tools


class ToolGuardrail(_CallGuardrail):
    """`fn(call: PendingCall, ctx)` sees a ready call with its resolved parameters,
    before the approval hook: `Pass`, `Deny(reason)` or `Trip`. `tools`: only these."""

    __slots__ = ()


class ResultGuardrail(_CallGuardrail):
    """`fn(call: PendingCall, result, ctx)` sees a call's result before it is journaled,
    emitted or written: `Pass`, `ReplaceResult(value)`, `Reject(reason)` or `Trip`."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, init=False)
class OutputGuardrail:
    """`fn(output, ctx)` sees the final output before the run returns: `Pass`,
    `Reject(feedback)` (a structural error fed back; the loop goes on) or `Trip`."""

    fn: Callable[..., Any]

    def __init__(self, fn: Callable[..., Any]) -> None:
        _check_function("OutputGuardrail", fn)
        object.__setattr__(self, "fn", fn)


Guardrail = InputGuardrail | ToolGuardrail | ResultGuardrail | OutputGuardrail


def guardrail_name(guardrail: Guardrail) -> str:
    """How events, records and errors name a guardrail: its function's name."""
    fn = guardrail.fn
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def verdict_to_dict(verdict: Verdict) -> dict[str, Any]:
    """A verdict as JSON for events and records (a replacement's value is not repeated)."""
    if isinstance(verdict, Pass):
        return {"verdict": "pass"}
    if isinstance(verdict, Trip):
        return {"verdict": "trip", "reason": verdict.reason}
    if isinstance(verdict, Deny):
        return {"verdict": "deny", "reason": verdict.reason}
    if isinstance(verdict, ReplaceResult):
        return {"verdict": "replace"}
    return {"verdict": "reject", "reason": verdict.reason}

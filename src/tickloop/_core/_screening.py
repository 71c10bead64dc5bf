"""Calls between readiness and the approval hook (PROTOCOL §15): held at the
input-guardrail gate, or being checked by the tool guardrails.

Owns the gate (closed while an input guardrail is pending) and the calls it holds, and
the set of calls whose tool guardrails are being asked. The scheduler moves calls in and
out; what a guardrail answers is the driver's to ask (`ScreenCall` / `Screened`).
"""

from __future__ import annotations

from collections.abc import Callable

from ._call import Call

__all__ = ["Screening"]


class Screening:
    """The gate and the calls being screened; `screens(tool)` says whether a tool's calls
    go to tool guardrails (None: no tool guardrail at all)."""

    __slots__ = ("at_gate", "checking", "gate_closed", "screens")

    def __init__(self, screens: Callable[[str], bool] | None = None) -> None:
        self.screens = screens
        # Closed only between `CloseGate` and `OpenGate`: a run without input guardrails
        # never closes it, so its calls never wait here.
        self.gate_closed = False
        self.at_gate: list[Call] = []  # in the order they became ready
        self.checking: set[str] = set()  # ids asked about (`ScreenCall`), not answered

    @property
    def busy(self) -> bool:
        return bool(self.at_gate or self.checking)

    def holds(self, call: Call) -> bool:
        """Whether `call` must wait at the gate: it is closed and the tool may have effects
        (a latent call runs nothing: it goes on)."""
        return self.gate_closed and not call.tool.read_only and not call.tool.is_latent

    def screened(self, call: Call) -> bool:
        return self.screens is not None and self.screens(call.tool.name)

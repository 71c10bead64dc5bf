"""Agents that tests/test_web_serve.py serves with `tickloop serve --agui/--a2a`."""

from __future__ import annotations

import tickloop as tl


@tl.tool
def double(n: int) -> int:
    """Twice n."""
    return 2 * n


def agent() -> tl.Agent:
    plan = {"calls": [{"_tool": "double", "n": 21, "_outputPath": "†state.answer"}]}
    model = tl.ScriptedModel([plan, {"calls": [], "output": "†state.answer"}] * 20)
    return tl.Agent(model, tools=[double], name="doubler", instructions="Doubles numbers.")

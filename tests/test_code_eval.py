"""The program machine of code plans (PROTOCOL §14), driven directly: statements in,
calls finished in a chosen order, actions and the outcome out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tickloop as tl
from tickloop._code import (
    CodeTool,
    Commit,
    Globals,
    Limits,
    MakeCall,
    Printed,
    ProgramMachine,
    ProgramStream,
    split_statements,
)

TOOLS = {
    "fetch": CodeTool("fetch", "fetch", ("url",), {}, read_only=True),
    "search": CodeTool("search", "search", ("query", "limit"), {"limit": 3}, read_only=True),
    "charge": CodeTool("charge", "charge", ("customer", "cents"), {}, read_only=False),
}


def default_result(call: MakeCall) -> Any:
    """fetch(url) → url*2; search(query) → three urls; charge → receipt; "bad" fails."""
    if "bad" in str(call.params.values()):
        return RuntimeError(f"{call.tool} failed")
    if call.tool == "fetch":
        return str(call.params["url"]) * 2
    if call.tool == "search":
        return [f"{call.params['query']}-{i}" for i in range(3)]
    return {"ok": True, "cents": call.params.get("cents")}


@dataclass
class Run:
    machine: ProgramMachine
    actions: list[Any] = field(default_factory=list)
    waves: list[list[str]] = field(default_factory=list)  # call ids made per step

    @property
    def calls(self) -> list[MakeCall]:
        return [a for a in self.actions if isinstance(a, MakeCall)]

    @property
    def ids(self) -> list[str]:
        return [c.call_id for c in self.calls]

    @property
    def commits(self) -> list[Any]:
        return [a for a in self.actions if isinstance(a, Commit | Printed)]

    @property
    def outcome(self) -> tl_outcome:  # noqa: F821 - the machine's ProgramOutcome
        return self.machine.outcome()

    @property
    def printed(self) -> list[str]:
        return [a.text for a in self.actions if isinstance(a, Printed)]

    def variables(self) -> dict[str, Any]:
        return self.machine.globals.variables


tl_outcome = Any


def drive(
    source: str,
    results: Callable[[MakeCall], Any] = default_result,
    *,
    pick: Callable[[list[MakeCall]], int] = lambda pending: 0,
    globals: Globals | None = None,  # noqa: A002
    limits: Limits | None = None,
    task_input: Any = None,
    iteration: int = 1,
) -> Run:
    """Run a program on the machine; `pick` chooses which running call ends next."""
    machine = ProgramMachine(
        iteration=iteration, tools=TOOLS, globals=globals or Globals(),
        task_input=task_input, limits=limits or Limits(),
    )  # fmt: skip
    for statement in split_statements(source):
        machine.add_statement(statement)
    machine.close()
    run = Run(machine)
    running: list[MakeCall] = []
    for _ in range(100_000):
        actions = machine.step()
        run.actions += actions
        made = [a for a in actions if isinstance(a, MakeCall)]
        run.waves.append([c.call_id for c in made])
        running += made
        if machine.finished:
            return run
        if not running:
            continue  # paused after 1,000 steps
        call = running.pop(pick(running) % len(running))
        result = results(call)
        if isinstance(result, Exception):
            error = {"type": "runtime", "message": str(result), "status": "failed"}
            machine.call_finished(call.call_id, error=error)
        else:
            machine.call_finished(call.call_id, result)
    raise AssertionError("the program never finished")


def reversed_pick(pending: Sequence[MakeCall]) -> int:
    return len(pending) - 1


# -- the stream -------------------------------------------------------------------------------


def test_statements_complete_as_the_answer_streams() -> None:
    stream = ProgramStream()
    seen = []
    text = "Plan:\n```python\nx = fetch('a')\nif x:\n    y = 1\nelse:\n    y = 2\nz = 3\n```\n"
    for char in text:
        seen += [(s.line, s.source) for s in stream.feed(char)]
        if char == "z":  # `if` completes when the next statement starts at column 0
            assert seen == [(1, "x = fetch('a')\n"), (2, "if x:\n    y = 1\nelse:\n    y = 2\n")]
    seen += [(s.line, s.source) for s in stream.close()]
    assert seen[-1] == (6, "z = 3\n")
    assert stream.prose == "Plan:\n"


def test_text_after_the_closing_fence_is_ignored_and_a_second_block_flagged() -> None:
    stream = ProgramStream()
    out = stream.feed("```py\na = 1\n```\nmore\n```python\nb = 2\n```\n") + stream.close()
    assert [s.source for s in out] == ["a = 1\n"]
    assert stream.second_block


def test_an_answer_without_a_fence_is_the_program_at_the_end() -> None:
    stream = ProgramStream()
    assert stream.feed("a = 1\nb = 2\n") == []  # held: a fence may still open
    assert [s.source for s in stream.close()] == ["a = 1\n", "b = 2\n"]


# -- data flow --------------------------------------------------------------------------------


def test_independent_statements_make_their_calls_in_the_same_step() -> None:
    run = drive("a = fetch('x')\nb = fetch('y')\nc = fetch(a + b)\n")
    assert run.waves[0] == ["c1.0", "c1.1"]  # both at once, c1.2 waits for a and b
    assert "c1.2" not in run.waves[0]
    assert run.variables() == {"a": "xx", "b": "yy", "c": "xxyyxxyy"}


def test_a_loop_makes_all_its_calls_at_once() -> None:
    run = drive("pages = [fetch(u) for u in ['a', 'b', 'c']]\nfor u in 'de':\n    fetch(u)\n")
    assert run.waves[0] == ["c1.0[0]", "c1.0[1]", "c1.0[2]", "c1.1[0]", "c1.1[1]"]
    assert run.variables()["pages"] == ["aa", "bb", "cc"]

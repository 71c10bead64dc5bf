"""`output=` takes any type pydantic can describe (docs/api.md "Agents"), as Pydantic AI
does: `int`, `list[str]`, a dataclass, a union... under either protocol, the run's output
is an instance of it; a value that is not a type is refused before anything runs."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest

import tickloop as tl

ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass
class Point:
    x: int
    y: int


@tl.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


CASES: list[tuple[Any, Any, Any]] = [
    # output type, what the model answers (JSON), the run's output
    (int, 3, 3),
    (list[str], ["a", "b"], ["a", "b"]),
    (dict[str, int], {"a": 1}, {"a": 1}),
    (int | str, "x", "x"),
    (Literal["yes", "no"], "no", "no"),
    (Point, {"x": 1, "y": 2}, Point(1, 2)),
]


@pytest.mark.parametrize(("kind", "answer", "expected"), CASES)
def test_the_solution_protocol_gives_an_output_of_the_type(
    kind: Any, answer: Any, expected: Any
) -> None:
    model = tl.ScriptedModel([{"output": answer}])
    result = tl.Agent(model, output=kind).run({"question": "?"})
    assert result.output == expected
    assert type(result.output) is type(expected)
    assert model.requests[0]["schema"]["properties"]["output"]  # the type's schema asked


@pytest.mark.parametrize(("kind", "answer", "expected"), CASES)
def test_the_tools_protocol_gives_an_output_of_the_type(
    kind: Any, answer: Any, expected: Any
) -> None:
    import json

    model = tl.ScriptedModel([json.dumps(answer)])
    result = tl.Agent(model, output=kind, protocol="tools").run({"question": "?"})
    assert result.output == expected
    assert type(result.output) is type(expected)


def test_an_output_of_the_type_may_be_read_from_the_state() -> None:
    model = tl.ScriptedModel(
        [
            {"calls": [{"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.sum"}]},
            {"output": "†state.sum"},
        ]
    )
    assert tl.Agent(model, tools=[add], output=int).run().output == 3


def test_an_answer_not_of_the_type_is_sent_back_to_the_model() -> None:
    model = tl.ScriptedModel([{"output": "three"}, {"output": 3}])
    result = tl.Agent(model, output=int).run()
    assert result.output == 3 and result.iterations == 2
    assert "does not match the output schema" in str(model.requests[1]["messages"])


def test_output_str_under_the_tools_protocol_is_the_answers_text() -> None:
    """The final answer is plain text, not a JSON string, as without an output."""
    model = tl.ScriptedModel(["It is 21 degrees."])
    result = tl.Agent(model, output=str, protocol="tools").run({"question": "?"})
    assert result.output == "It is 21 degrees."


@pytest.mark.parametrize("bad", ["int", 3, [int], object(), tl.Tool])
def test_a_value_that_is_not_a_describable_type_is_refused_before_anything_runs(
    bad: Any,
) -> None:
    with pytest.raises(tl.ConfigurationError, match="output must be a type pydantic"):
        tl.Agent(tl.ScriptedModel([]), output=bad)


def test_the_user_script_runs_as_it_type_checks() -> None:
    """tests/typing/user_script.py (typed outputs, tools, decisions, a client of its own)
    does at run time what its types say."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "typing" / "user_script.py")],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"

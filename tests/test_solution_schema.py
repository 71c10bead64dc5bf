"""schemas/solution.json describes the solutions the loop really reads and records."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import trio
import trio.testing
from referencing import Registry, Resource

import tickloop as tl
from tickloop._cli._demo import _script

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def validator() -> jsonschema.Draft202012Validator:
    registry = Registry().with_resources(
        (name, Resource.from_contents(json.loads((SCHEMAS / name).read_text())))
        for name in ("call.json", "solution.json")
    )
    schema = json.loads((SCHEMAS / "solution.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, registry=registry)


def test_the_demo_script_and_recorded_solutions_are_valid() -> None:
    check = validator()
    for solution in _script(3):
        check.validate(solution)

    @tl.tool
    async def add(a: int, b: int) -> int:
        return a + b

    model = tl.ScriptedModel(
        [
            {
                "calls": [
                    {"_tool": "add", "a": 1, "b": "†state.x || †input.b", "_outputPath": "†state.x"}
                ],
                "output": None,
            },
            {"calls": [], "output": 3},
        ]
    )
    result = trio.run(
        lambda: tl.Agent(model, tools=[add]).run_async({"b": 2}),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
    recorded = [m["solution"] for m in result.messages if m["type"] == "solution"]
    assert len(recorded) == 2
    for solution in recorded:
        check.validate(solution)


def test_malformed_solutions_are_rejected() -> None:
    check = validator()
    assert not check.is_valid({"calls": [{"a": 1}], "output": None})  # no _tool
    assert not check.is_valid({"calls": []})  # output is required (null to go on)
    assert not check.is_valid({"calls": [], "output": None, "extra": 1})

"""Output references and the context budget (PROTOCOL §8)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

import tickloop as tl
from tickloop._agent._prompt import PROTOCOL_GUIDE, solution_schema
from tickloop._core._tools import ToolSet


@tl.tool
async def make(value: Any = None) -> Any:
    """Return `value`."""
    return value


@tl.tool
async def page(size: int) -> str:
    """A page of `size` characters."""
    return "x" * size


def _agent(responses: list[Any], **options: Any) -> tl.Agent:
    return tl.Agent(tl.ScriptedModel(responses), tools=[make, page], **options)


def test_an_output_reference_returns_what_the_plan_wrote() -> None:
    plan = [{"_tool": "make", "value": "the report", "_outputPath": "†state.report"}]
    result = _agent([{"calls": plan, "output": "†state.report"}]).run()
    assert result.output == "the report"
    assert result.iterations == 1


def test_references_inside_an_output_are_resolved_then_checked_against_its_schema() -> None:
    plan = [
        {"_tool": "make", "value": 3, "_outputPath": "†state.sum"},
        {"_tool": "make", "value": "ok", "_outputPath": "†state.note"},
    ]
    schema = {
        "type": "object",
        "properties": {"total": {"type": "integer"}, "note": {"type": "string"}},
        "required": ["total", "note"],
    }
    agent = _agent(
        [{"calls": plan, "output": {"total": "†state.sum", "note": "†state.note"}}], output=schema
    )
    assert agent.run().output == {"total": 3, "note": "ok"}


def test_a_resolved_output_that_fails_the_schema_is_fed_back() -> None:
    plan = [{"_tool": "make", "value": "three", "_outputPath": "†state.sum"}]
    schema = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}
    responses = [
        {"calls": plan, "output": {"total": "†state.sum"}},
        {"calls": [], "output": {"total": 3}},
    ]
    agent = _agent(responses, output=schema)
    result = agent.run()
    assert (result.output, result.iterations) == ({"total": 3}, 2)
    second = json.dumps(agent.model.requests[1]["messages"], ensure_ascii=False)
    assert "does not match the output schema" in second


def test_an_unresolvable_output_reference_is_a_structural_error_fed_back() -> None:
    responses = [{"calls": [], "output": "†state.missing"}, {"calls": [], "output": "done"}]
    agent = _agent(responses)
    result = agent.run()
    assert (result.output, result.iterations) == ("done", 2)
    error = next(m for m in result.messages if m.get("kind") == "error")
    assert error["data"]["error"]["type"] == "structural"
    assert "unresolved reference †state.missing in the output" in error["data"]["error"]["message"]
    second = json.dumps(agent.model.requests[1]["messages"], ensure_ascii=False)
    assert "unresolved reference" in second


def test_an_escaped_dagger_in_the_output_is_a_literal() -> None:
    assert _agent([{"calls": [], "output": "††state.s"}]).run().output == "†state.s"


def test_the_strict_solution_schema_admits_output_references() -> None:
    output = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}
    schema = solution_schema(ToolSet([make, page]), output, strict=True)
    for answer in ({"total": "†state.sum"}, "†state.result", {"total": 3}, None):
        jsonschema.validate({"calls": [], "output": answer}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"calls": [], "output": {"total": 3.5}}, schema)


def test_the_guide_explains_plan_order_output_references_and_cut_values() -> None:
    assert "Plan order" in PROTOCOL_GUIDE
    assert '"output": "†state.report"' in PROTOCOL_GUIDE
    assert "shown cut" in PROTOCOL_GUIDE


# -- the context budget --------------------------------------------------------------


def _second_request(**options: Any) -> str:
    plan = [
        {"_tool": "page", "size": 50_000, "_outputPath": "†state.page"},
        {"_tool": "make", "value": "small", "_outputPath": "†state.title"},
    ]
    agent = _agent([{"calls": plan, "output": None}, {"calls": [], "output": "ok"}], **options)
    agent.run()
    return agent.model.requests[1]["messages"][-1]["content"]


def test_a_large_state_value_is_shown_cut_with_its_path_and_size() -> None:
    shown = _second_request()
    assert len(shown) < 10_000
    assert "<cut: 50,002 characters" in shown
    assert "pass †state.page to a tool to use all of it" in shown
    assert '"title": "small"' in shown


def test_a_budget_of_none_shows_everything() -> None:
    shown = _second_request(context_budget=None)
    assert "x" * 50_000 in shown and "<cut:" not in shown


def test_a_cut_value_is_still_read_whole_by_reference() -> None:
    plan = [{"_tool": "page", "size": 20_000, "_outputPath": "†state.page"}]
    agent = _agent(
        [
            {"calls": plan, "output": None},
            {
                "calls": [{"_tool": "make", "value": "†state.page", "_outputPath": "†state.copy"}],
                "output": "†state.copy",
            },
        ],
        context_budget=100,
    )
    assert agent.run().output == "x" * 20_000


@pytest.mark.parametrize("budget", [0, -1, 1.5, True, "big"])
def test_a_bad_context_budget_is_refused(budget: Any) -> None:
    with pytest.raises(tl.ConfigurationError, match="context_budget"):
        _agent([], context_budget=budget)

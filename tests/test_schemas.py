"""The JSON Schemas in schemas/ against what the engine really produces.

Other programs (a UI, a store reader, a model's structured output) rely on these files, so
they are checked against real runs rather than hand-written samples: every message of a
run with writes and every kind of error, every tool description, and the reference grammar
of call.json against the engine's own parser.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from trio.testing import MockClock

import tickloop as tl

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def load(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{name}.json").read_text(encoding="utf-8"))


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load(name))


@pytest.mark.parametrize("name", ["call", "message", "error", "tool"])
def test_each_schema_is_a_valid_2020_12_schema(name: str) -> None:
    schema = load(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_the_error_data_is_defined_the_same_in_both_files() -> None:
    assert load("message")["$defs"]["errorData"] == load("error")["properties"]["data"]


# -- a run that produces every kind of message -----------------------------------------------


@tl.tool
async def fetch(url: str, seconds: float = 0) -> dict:
    await trio.sleep(seconds)
    if "bad" in url:
        raise ConnectionError(f"cannot reach {url}")
    return {"url": url, "body": "text"}


@tl.tool(requires_approval=True)
async def publish(text: str) -> str:
    return text


@tl.tool(timeout=1)
async def slow() -> None:
    await trio.sleep(5)


summarize = tl.Tool(
    name="summarize",
    description="Summarize a text.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    output={"type": "string"},
)

GOOD_CALLS = [
    {"_tool": "fetch", "url": "https://a", "_outputPath": "†state.page", "_id": "page"},
    {"_tool": "fetch", "url": "https://b", "_outputPath": "†state.pages", "_outputMethod": "push"},
    {"_tool": "fetch", "url": "https://c", "_outputPath": "†state.p.c && †audit.p"},
    {
        "_tool": "summarize",
        "text": "†state.page.body",
        "_output": "short",
        "_outputPath": "†state.summary",
        "_reasoningForCall": "the page is long",
    },
    {"_tool": "summarize", "text": "††literal", "_output": "a thought"},
    {"_tool": "publish", "text": "†state.summary", "_outputPath": "†state.published"},
    {"_tool": "fetch", "url": "https://bad", "_outputPath": "†state.broken"},  # runtime
    {"_tool": "slow", "_outputPath": "†state.slow"},  # runtime: timeout
    {"_tool": "fetch", "url": "†state.broken.url", "_outputPath": "†state.x"},  # unresolved
    {"_tool": "fetch", "url": "†state.cy2", "_outputPath": "†state.cy1"},  # cycle
    {"_tool": "fetch", "url": "†state.cy1", "_outputPath": "†state.cy2"},  # cycle
    {"_tool": "fetch", "url": 3, "_outputPath": "†state.y"},  # schema
    {"_tool": "fetch", "url": "https://d", "_outputPath": "†state.page", "_id": "page"},  # dup id
    {"_tool": "fetch", "url": "https://e", "_outputPath": "†state.p", "_outputMethod": "push"},
]

# Calls the engine rejects on arrival, and that call.json rejects too.
MALFORMED_CALLS = [
    {"url": "https://a"},
    {"_tool": "no such tool!"},
    {"_tool": "fetch", "url": "x", "_extra": 1},
    {"_tool": "fetch", "url": "†state..x"},
    {"_tool": "fetch", "url": {"deep": ["†state.a ||"]}},
    {"_tool": "fetch", "url": "x", "_outputPath": "state.x"},
    {"_tool": "fetch", "url": "x", "_outputMethod": "append"},
    {"_tool": "fetch", "url": "x", "_id": ""},
    ["fetch"],
    "fetch(x)",
]


def deny_second(call: tl.PendingCall) -> tl.Decision:
    return tl.Deny("not today")


@pytest.fixture(scope="module")
def result() -> tl.ExecutionResult:
    return trio.run(
        partial(
            tl.execute,
            GOOD_CALLS + MALFORMED_CALLS,
            tools=[fetch, publish, slow, summarize],
            approve=deny_second,
            input={"topic": "schemas"},
            state={"p": {}},
        ),
        clock=MockClock(autojump_threshold=0),
    )


def test_every_message_of_a_run_matches_message_json(result: tl.ExecutionResult) -> None:
    check = validator("message")
    kinds = set()
    for message in result.messages:
        check.validate(message)
        kinds.add(message.get("kind"))
    assert {"input", "state", "audit", "error"} <= kinds
    written = [m for m in result.messages if "_call" in m]
    assert {m["_outputMethod"] for m in written} >= {"set", "push"}


def test_every_error_type_occurs_and_matches_error_json(result: tl.ExecutionResult) -> None:
    check = validator("error")
    for message in result.errors:
        check.validate(message)
    types = {message["data"]["error"]["type"] for message in result.errors}
    assert types == {"structural", "runtime", "denied"}
    details = {key for message in result.errors for key in message["data"]["error"]}
    assert {"reference", "writer", "cycle", "id"} <= details


def test_text_plan_and_solution_messages_match_message_json() -> None:
    check = validator("message")
    check.validate({"type": "text", "role": "system", "text": "You are terse."})
    check.validate({"type": "plan", "calls": GOOD_CALLS})
    check.validate({"type": "solution", "iteration": 1, "solution": {"calls": [], "output": 1}})
    check.validate({"type": "solution", "iteration": 2, "solution": None, "text": "{oops"})


@pytest.mark.parametrize(
    "message",
    [
        {"type": "text", "role": "tool", "text": "x"},
        {"type": "data", "kind": "state"},
        {"type": "data", "kind": "9lives", "data": 1},
        {"type": "data", "kind": "state", "data": 1, "_outputMethod": "append"},
        {"type": "data", "kind": "state", "data": 1, "_date": "yesterday"},
        {"type": "data", "kind": "error", "data": {"call": {}, "error": {"type": "fatal"}}},
        {"type": "solution", "iteration": 0, "solution": None},
        {"type": "note", "text": "x"},
    ],
)
def test_message_json_rejects_malformed_messages(message: dict[str, Any]) -> None:
    assert not validator("message").is_valid(message)


def test_every_accepted_call_matches_call_json(result: tl.ExecutionResult) -> None:
    check = validator("call")
    for wire in GOOD_CALLS:
        check.validate(wire)
    for message in result.messages:
        if "_call" in message:
            check.validate(message["_call"])


@pytest.mark.parametrize("wire", MALFORMED_CALLS, ids=repr)
def test_call_json_rejects_what_the_engine_rejects_on_arrival(
    wire: Any, result: tl.ExecutionResult
) -> None:
    assert not validator("call").is_valid(wire)
    [error] = [m for m in result.errors if m["data"]["call"] == wire or _same_call(m, wire)]
    assert error["data"]["error"]["type"] == "structural"


def _same_call(message: dict[str, Any], wire: Any) -> bool:
    """An Error Message shows a call with the id the engine gave it."""
    call = message["data"]["call"]
    if not isinstance(call, dict) or not isinstance(wire, dict):
        return False
    return {k: v for k, v in call.items() if k != "_id"} == {
        k: v for k, v in wire.items() if k != "_id"
    }


_EXPRESSION_ALPHABET = st.sampled_from([*"†ab_1.[]0 |&$-", "||", "&&", "†a", "[1]"])


@settings(max_examples=300)
@given(st.lists(_EXPRESSION_ALPHABET, max_size=12).map("".join))
def test_the_reference_pattern_of_call_json_is_the_engine_grammar(text: str) -> None:
    expression = load("call")["$defs"]["expression"]
    try:
        tl.parse_expression(text)
    except tl.ReferenceSyntaxError:
        parses = False
    else:
        parses = True
    assert jsonschema.Draft202012Validator(expression).is_valid(text) is parses


# -- tool descriptions -------------------------------------------------------------------------


class Query(pydantic.BaseModel):
    q: str
    limit: int = 10


def test_tool_descriptions_match_tool_json() -> None:
    @tl.tool(
        requires_approval=lambda p: True,
        depends_on=["fetch", "†state.token"],
        output_path="†state.a || †state.b",
        timeout=2.5,
        max_concurrency=3,
        idempotent=True,
    )
    def everything(x: int) -> list[int]:
        return [x]

    @tl.tool(bind={"unit": "preferred_unit"})
    def bound(city: str, unit: str = "C") -> str:
        return city

    tools = [
        fetch,
        publish,
        slow,
        summarize,
        everything,
        bound,
        tl.Tool(name="search", parameters=Query, output=Query),
    ]
    check = validator("tool")
    for item in tools:
        description = item.describe()
        check.validate(description)
        json.dumps(description)  # plain JSON, nothing else
    assert everything.describe()["options"]["requires_approval"] == "conditional"


@pytest.mark.parametrize(
    ("field", "value"),
    [("name", "bad name"), ("parameters", {"type": "array"}), ("output", "string")],
)
def test_tool_json_rejects_a_bad_description(field: str, value: Any) -> None:
    description = fetch.describe()
    description[field] = value
    assert not validator("tool").is_valid(description)

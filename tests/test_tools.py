"""Tests of tools as users define them (PROTOCOL §2, API "Tools").

A tool is checked completely when it is made, so most of what can go wrong with one is a
`ConfigurationError` here, before any run; the behaviour of tools inside a tick is in
test_engine.py.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pydantic
import pytest

import tickloop as tl
from tickloop._core._tools import CallContext, ToolSet

# -- tools from functions -------------------------------------------------------------------


def test_a_function_becomes_a_tool_named_after_it_described_by_its_docstring() -> None:
    @tl.tool
    def add(a: int, b: int = 2) -> int:
        """Add two integers.

        The second one defaults to two.
        """
        return a + b

    assert isinstance(add, tl.Tool)
    assert add.name == "add"
    assert add.description == "Add two integers.\n\nThe second one defaults to two."
    assert not add.is_latent
    assert add.parameters["type"] == "object"
    assert add.parameters["properties"]["a"]["type"] == "integer"
    assert add.parameters["required"] == ["a"]
    assert add.parameters["properties"]["b"]["default"] == 2
    assert add.output == {"type": "integer"}


def test_the_signature_schema_rejects_what_the_function_would_not_accept() -> None:
    @tl.tool
    def greet(name: str, times: int) -> str:
        return name * times

    validator = jsonschema.Draft202012Validator(greet.parameters)
    assert validator.is_valid({"name": "a", "times": 2})
    assert not validator.is_valid({"name": "a"})  # missing
    assert not validator.is_valid({"name": "a", "times": "2"})  # wrong type
    assert not validator.is_valid({"name": "a", "times": 2, "extra": 1})  # unknown


def test_options_are_given_through_the_decorator_with_arguments() -> None:
    @tl.tool(
        name="charge_card",
        description="Charge a card.",
        requires_approval=True,
        output_path="†state.receipt",
        timeout=10,
        max_concurrency=2,
        depends_on=["†state.user"],
        idempotent=True,
    )
    async def charge(customer: str, cents: int) -> dict:
        return {}

    assert charge.name == "charge_card"
    assert charge.description == "Charge a card."
    assert charge.requires_approval is True
    assert charge.output_path == "†state.receipt"
    assert charge.timeout == 10.0
    assert charge.max_concurrency == 2
    assert charge.depends_on == ("†state.user",)
    assert charge.idempotent is True
    assert charge.is_async


def test_a_call_context_parameter_is_injected_and_hidden_from_the_model() -> None:
    @tl.tool
    def whoami(ctx: tl.CallContext, prefix: str) -> str:
        return prefix + ctx.id

    assert set(whoami.parameters["properties"]) == {"prefix"}
    assert whoami.parameters["required"] == ["prefix"]


def test_a_function_without_a_return_annotation_has_no_output_schema() -> None:
    @tl.tool
    def anything(x: int):
        return x

    @tl.tool
    def nothing(x: int) -> None:
        return None

    assert anything.output is None
    assert nothing.output is None


class Address(pydantic.BaseModel):
    city: str
    zip: str


def test_pydantic_types_in_a_signature_become_json_schema() -> None:
    @tl.tool
    def ship(to: Address, express: bool = False) -> Address:
        return to

    validator = jsonschema.Draft202012Validator(ship.parameters)
    assert validator.is_valid({"to": {"city": "Oslo", "zip": "0150"}})
    assert not validator.is_valid({"to": {"city": "Oslo"}})
    assert jsonschema.Draft202012Validator(ship.output).is_valid({"city": "a", "zip": "b"})


@pytest.mark.parametrize(
    "define",
    [
        lambda: tl.tool(lambda *args: None, name="star"),
        lambda: tl.tool(lambda **kwargs: None, name="starstar"),
    ],
    ids=["*args", "**kwargs"],
)
def test_variadic_parameters_cannot_be_described_to_a_model(define: Any) -> None:
    with pytest.raises(tl.ConfigurationError, match="name every parameter"):
        define()


def test_a_parameter_starting_with_an_underscore_would_be_a_meta_key() -> None:
    def f(_secret: int) -> int:
        return _secret

    with pytest.raises(tl.ConfigurationError, match="'_secret' starts with '_'"):
        tl.tool(f)


# -- tools from JSON Schema and pydantic models ----------------------------------------------


def test_a_tool_without_a_handler_is_latent() -> None:
    summarize = tl.Tool(
        name="summarize",
        description="Summarize a text in one sentence.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
        output={"type": "string"},
    )
    assert summarize.is_latent
    assert summarize.parameters["required"] == ["text"]
    assert summarize.output == {"type": "string"}


def test_a_latent_tool_needs_a_parameters_schema() -> None:
    with pytest.raises(tl.ConfigurationError, match="needs a parameters schema"):
        tl.Tool(name="thought")


def test_parameters_and_output_may_be_pydantic_models() -> None:
    class Query(pydantic.BaseModel):
        q: str
        limit: int = 10

    class Hits(pydantic.BaseModel):
        hits: list[str]

    search = tl.Tool(name="search", parameters=Query, output=Hits)
    assert search.is_latent
    params = jsonschema.Draft202012Validator(search.parameters)
    assert params.is_valid({"q": "x"})
    assert not params.is_valid({"limit": 3})
    assert jsonschema.Draft202012Validator(search.output).is_valid({"hits": ["a"]})
    assert not jsonschema.Draft202012Validator(search.output).is_valid({"hits": "a"})


def test_a_json_schema_tool_may_have_a_handler_and_is_then_explicit() -> None:
    def handler(city: str) -> str:
        return city.upper()

    upper = tl.Tool(
        name="upper",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
        handler=handler,
    )
    assert not upper.is_latent
    assert upper.parameters["properties"] == {"city": {"type": "string"}}


@pytest.mark.parametrize(
    "schema",
    [{"type": "array"}, {"properties": {"a": {"type": "string"}}}],
    ids=["array", "no-type"],
)
def test_the_parameters_schema_must_describe_an_object(schema: dict[str, Any]) -> None:
    with pytest.raises(tl.ConfigurationError, match='"type": "object"'):
        tl.Tool(name="t", parameters=schema)


def test_an_invalid_json_schema_is_a_configuration_error() -> None:
    with pytest.raises(tl.ConfigurationError, match="not a valid JSON Schema"):
        tl.Tool(name="t", parameters={"type": "object", "properties": {"a": {"type": 3}}})


def test_a_schema_that_is_neither_a_dict_nor_a_model_is_a_configuration_error() -> None:
    with pytest.raises(tl.ConfigurationError, match="JSON Schema dict or a pydantic model"):
        tl.Tool(name="t", parameters="object")  # type: ignore[arg-type]


# -- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "_x", "get-page", "Tool_2", "A" * 64])
def test_good_tool_names(name: str) -> None:
    assert tl.Tool(name=name, parameters={"type": "object"}).name == name


@pytest.mark.parametrize(
    "name", ["", "1abc", "-x", "has space", "dotted.name", "A" * 65, "é", None, "add\n"]
)
def test_bad_tool_names_are_configuration_errors(name: Any) -> None:
    with pytest.raises(tl.ConfigurationError, match="must match"):
        tl.Tool(name=name, parameters={"type": "object"})


def test_two_tools_with_one_name_are_a_configuration_error() -> None:
    first = tl.Tool(name="lookup", parameters={"type": "object"})
    second = tl.Tool(name="lookup", parameters={"type": "object"})
    with pytest.raises(tl.ConfigurationError, match="two tools are named 'lookup'"):
        ToolSet([first, second])
    with pytest.raises(tl.ConfigurationError, match="two tools are named 'lookup'"):
        tl.run_calls([], tools=[first, second])


def test_something_that_is_not_a_tool_in_the_tool_list_is_a_configuration_error() -> None:
    def plain(x: int) -> int:
        return x

    with pytest.raises(tl.ConfigurationError, match=r"@tl\.tool"):
        tl.run_calls([], tools=[plain])  # type: ignore[list-item]


# -- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["state.x", "†state..x", "†state.x ||", "†a || †b && †c"])
def test_a_bad_output_path_is_a_configuration_error_naming_the_fault(path: str) -> None:
    with pytest.raises(tl.ConfigurationError, match=r"output_path .* at position"):
        tl.Tool(name="t", parameters={"type": "object"}, handler=lambda: None, output_path=path)


@pytest.mark.parametrize(
    ("path", "shape"),
    [("†state.a || †state.b", "the branch"), ("†state.a && †log.a", "the fan-out")],
)
def test_a_latent_tool_must_prescribe_exactly_one_output_term(path: str, shape: str) -> None:
    # A latent call names exactly one term (PROTOCOL §4): no Branch to choose with, no fan-out.
    message = f"tool 't': a latent tool's output_path must name exactly one term, not {shape}"
    with pytest.raises(tl.ConfigurationError, match=re.escape(message)):
        tl.Tool(name="t", parameters={"type": "object"}, output_path=path)
    one = tl.Tool(name="t", parameters={"type": "object"}, output_path="†state.a")
    assert one.output_path == "†state.a"


def test_depends_on_splits_references_from_tool_names() -> None:
    @tl.tool(depends_on=["†state.token", "login", "†state.a || †state.b"])
    def fetch(url: str) -> str:
        return url

    assert [str(e) for e in fetch.dependency_references] == ["†state.token", "†state.a || †state.b"]
    assert fetch.dependency_tools == ("login",)


def test_depends_on_an_unknown_tool_is_a_configuration_error_listing_the_tools() -> None:
    @tl.tool(depends_on=["login"])
    def fetch(url: str) -> str:
        return url

    with pytest.raises(tl.ConfigurationError, match=r"depends on tool 'login'.*fetch"):
        tl.run_calls([], tools=[fetch])


@pytest.mark.parametrize("entry", ["not a name", "†state.", 3])
def test_a_bad_depends_on_entry_is_a_configuration_error(entry: Any) -> None:
    with pytest.raises(tl.ConfigurationError, match="depends_on"):
        tl.Tool(name="t", parameters={"type": "object"}, depends_on=[entry])


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("timeout", 0),
        ("timeout", -1),
        ("timeout", "10"),
        ("timeout", True),
        ("max_concurrency", 0),
        ("max_concurrency", 1.5),
        ("requires_approval", "yes"),
    ],
)
def test_bad_option_values_are_configuration_errors(option: str, value: Any) -> None:
    with pytest.raises(tl.ConfigurationError, match=option):
        tl.Tool(name="t", parameters={"type": "object"}, **{option: value})


def test_bind_must_name_a_parameter() -> None:
    with pytest.raises(tl.ConfigurationError, match="bind names 'unit'"):
        tl.Tool(name="t", parameters={"type": "object"}, bind={"unit": "preferred_unit"})


def test_an_approval_predicate_sees_the_parameters_and_fails_closed() -> None:
    seen: list[dict[str, Any]] = []

    def over_limit(params: dict[str, Any]) -> bool:
        seen.append(params)
        return params["cents"] > 10_000

    @tl.tool(requires_approval=over_limit)
    def charge(cents: int) -> None:
        return None

    assert charge.may_require_approval
    assert charge.needs_approval({"cents": 20_000}) is True
    assert charge.needs_approval({"cents": 5}) is False
    assert seen == [{"cents": 20_000}, {"cents": 5}]
    # A predicate that raises cannot say the call is safe: a person must look at it.
    assert charge.needs_approval({}) is True


def test_a_tool_that_never_requires_approval_says_so() -> None:
    @tl.tool
    def free(x: int) -> int:
        return x

    assert not free.may_require_approval
    assert free.needs_approval({"x": 1}) is False


# -- describe --------------------------------------------------------------------------------


def test_describe_gives_plain_json_with_the_options() -> None:
    @tl.tool(requires_approval=lambda p: p["n"] > 3, output_path="†state.n", timeout=2.5)
    def count(n: int) -> int:
        """Count to n."""
        return n

    description = count.describe()
    assert description["name"] == "count"
    assert description["description"] == "Count to n."
    assert description["parameters"] == count.parameters
    assert description["output"] == {"type": "integer"}
    assert description["options"]["requires_approval"] == "conditional"
    assert description["options"]["output_path"] == "†state.n"
    assert description["options"]["timeout"] == 2.5
    assert description["options"]["latent"] is False
    # A copy: changing the description cannot change the tool.
    description["parameters"]["properties"]["n"]["type"] = "string"
    assert count.parameters["properties"]["n"]["type"] == "integer"


# -- the call context ------------------------------------------------------------------------


def test_the_call_context_is_a_read_only_live_window_on_the_views() -> None:
    views: dict[str, Any] = {"state": {"user": {"name": "ada", "tags": ["x"]}}}
    context = CallContext("c1.0", "t", {"_tool": "t"}, views.get)
    assert context.id == "c1.0"
    assert context.state["user"]["name"] == "ada"
    with pytest.raises(TypeError):
        context.state["user"] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        context.state["user"]["name"] = "eve"  # type: ignore[index]
    with pytest.raises(AttributeError):
        context.state["user"]["tags"].append("y")
    views["state"]["user"]["name"] = "bob"  # a later write is seen: the window is live
    assert context.state["user"]["name"] == "bob"
    assert context.input is None
    assert dict(CallContext("c1.1", "t", {}, lambda kind: None).state) == {}


def test_an_approval_predicate_that_exits_means_a_person_looks() -> None:
    def strict(params: dict) -> bool:
        raise SystemExit(2)  # e.g. argparse inside a policy check

    tool = tl.Tool(
        name="pay", parameters={"type": "object"}, handler=lambda: 1, requires_approval=strict
    )
    assert tool.needs_approval({}) is True
    with pytest.raises(KeyboardInterrupt):
        tl.Tool(
            name="pay",
            parameters={"type": "object"},
            handler=lambda: 1,
            requires_approval=lambda p: (_ for _ in ()).throw(KeyboardInterrupt()),
        ).needs_approval({})

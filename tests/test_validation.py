"""The fast path of schema validation must never disagree with jsonschema.

It exists only for speed, so the one thing a user relies on is that it changes nothing:
the same values are accepted, and the errors (always jsonschema's) are the same.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pydantic
from hypothesis import given, settings
from hypothesis import strategies as st

import tickloop as tl
from tickloop._core._arrival import about_unknown as _about_unknown
from tickloop._core._expressions import substitute
from tickloop._core._validation import UNKNOWN, SchemaValidator, compile_fast_check

_TYPES = ["string", "integer", "number", "boolean", "null", "array", "object"]

_leaf_schemas = st.one_of(
    st.just(True),
    st.just({}),
    st.sampled_from(_TYPES).map(lambda name: {"type": name, "title": name}),
    st.lists(st.sampled_from(_TYPES), min_size=1, max_size=3, unique=True).map(
        lambda names: {"type": names}
    ),
)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    names = st.sampled_from(["a", "b", "c"])
    return st.one_of(
        st.builds(
            lambda props, required, extra: {
                "type": "object",
                "properties": props,
                "required": sorted(required),
                **({} if extra is None else {"additionalProperties": extra}),
            },
            st.dictionaries(names, children, max_size=3),
            st.sets(names, max_size=2),
            st.one_of(st.none(), st.booleans(), children),
        ),
        st.builds(lambda items: {"type": "array", "items": items}, children),
        st.lists(children, min_size=1, max_size=3).map(lambda options: {"anyOf": options}),
    )


schemas = st.recursive(_leaf_schemas, _extend, max_leaves=8)

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-5, 5),
        st.floats(allow_nan=False, allow_infinity=False),  # 1.0 is an integer in JSON Schema
        st.text(st.characters(blacklist_characters="†"), max_size=3),  # no references
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), children, max_size=4),
    ),
    max_leaves=10,
)


@settings(max_examples=300)
@given(schemas, st.lists(json_values, min_size=1, max_size=5))
def test_the_fast_check_only_says_yes_when_jsonschema_does(schema: Any, values: list) -> None:
    fast = compile_fast_check(schema)
    assert fast is not None  # everything generated here is in the fast subset
    full = jsonschema.Draft202012Validator(schema)
    validator = SchemaValidator(schema)
    for value in values:
        expected = full.is_valid(value)
        if fast(value):
            assert expected, (schema, value)
        assert validator.is_valid(value) is expected
        assert [e.message for e in validator.iter_errors(value)] == [
            e.message for e in full.iter_errors(value)
        ]


def test_a_plain_valid_value_is_accepted_without_jsonschema() -> None:
    @tl.tool
    def add(a: int, b: int = 0, note: str | None = None) -> int:
        return a + b

    fast = compile_fast_check(add.parameters)
    assert fast is not None
    assert fast({"a": 1}) and fast({"a": 1, "b": 2, "note": None})
    assert not fast({"a": "1"}) and not fast({"b": 1}) and not fast({"a": 1, "z": 0})


class Inner(pydantic.BaseModel):
    x: int


class Nested(pydantic.BaseModel):
    inner: Inner


def test_schemas_with_other_keywords_are_left_to_jsonschema() -> None:
    for schema in (
        {"type": "integer", "minimum": 0},
        {"enum": [1, 2]},
        {"type": "string", "pattern": "^a"},
        Nested.model_json_schema(),  # $defs and $ref
    ):
        assert compile_fast_check(schema) is None


@given(st.integers())
def test_a_validator_without_a_fast_check_is_jsonschema(value: int) -> None:
    validator = SchemaValidator({"type": "integer", "minimum": 0})
    assert validator.is_valid(value) is (value >= 0)


def _locations(value: Any, here: tuple = ()) -> list[tuple]:
    found = [here]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _locations(item, (*here, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _locations(item, (*here, index))
    return found


def instances(schema: Any) -> st.SearchStrategy[Any]:
    """Values shaped like `schema` (so the checks get past the surface), now and then not."""
    if not isinstance(schema, dict) or not schema:
        return json_values
    if "anyOf" in schema:
        return st.one_of([instances(option) for option in schema["anyOf"]])
    names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    shaped = []
    for name in names:
        if name == "object":
            properties = schema.get("properties", {})
            required = set(schema.get("required", []))
            shaped.append(
                st.fixed_dictionaries(
                    {key: instances(properties.get(key, True)) for key in required},
                    optional={
                        **{
                            key: instances(sub)
                            for key, sub in properties.items()
                            if key not in required
                        },
                        "z": json_values,
                    },
                )
            )
        elif name == "array":
            shaped.append(st.lists(instances(schema.get("items", True)), max_size=3))
        else:
            shaped.append(json_values)
    return st.one_of(*shaped, json_values)


# Parameters schemas are objects: the case the check on arrival meets. Optional models
# (`anyOf` an object or null, as pydantic writes `Item | None`) are drawn often: an `anyOf`
# fails above the reference inside it, the case the check must not report early.
_optional_models = st.builds(
    lambda properties: {
        "anyOf": [
            {"type": "object", "properties": properties, "required": sorted(properties)},
            {"type": "null"},
        ]
    },
    st.dictionaries(st.sampled_from(["a", "b"]), schemas, min_size=1, max_size=2),
)
parameter_schemas = st.builds(
    lambda properties, required, extra: {
        "type": "object",
        "properties": properties,
        "required": sorted(required & set(properties)),
        "additionalProperties": extra,
    },
    st.dictionaries(
        st.sampled_from(["a", "b", "c"]),
        st.one_of(schemas, _optional_models),
        min_size=1,
        max_size=3,
    ),
    st.sets(st.sampled_from(["a", "b", "c"])),
    st.booleans(),
)


@settings(max_examples=300)
@given(parameter_schemas, st.data())
def test_valid_around_unknowns_means_every_error_is_about_an_unknown(
    schema: Any, data: st.DataObject
) -> None:
    # What the scheduler's check on arrival relies on: when the lenient check passes, every
    # error jsonschema finds with reference strings in place is one it leaves for later.
    value = data.draw(instances(schema))
    inner = _locations(value)[1:]  # the root unknown leaves nothing to judge around it
    if not inner:
        return
    chosen = data.draw(st.sets(st.sampled_from(inner), min_size=1, max_size=3))
    locations = sorted(
        (loc for loc in chosen if not any(o != loc and loc[: len(o)] == o for o in chosen)),
        key=len,
    )
    # An unknown is a reference string, or UNKNOWN (how a bound parameter is checked).
    markers = data.draw(st.lists(st.sampled_from([UNKNOWN, "†state.x"]), min_size=3))
    with_unknowns = substitute(value, dict(zip(locations, markers, strict=False)))
    with_references = substitute(value, {location: "†state.x" for location in locations})
    if SchemaValidator(schema).valid_around_unknowns(with_unknowns):
        for error in jsonschema.Draft202012Validator(schema).iter_errors(with_references):
            assert _about_unknown(error, locations), (error.message, list(error.absolute_path))

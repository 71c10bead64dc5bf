"""Schema validation with a fast "yes" for the plain schemas most tools have.

Every call is validated at least twice (its parameters, its result), and jsonschema's
validator, general as it is, costs tens of microseconds per check: the largest part of the
engine's cost per call. Most tool schemas are plain, though: an object of typed
properties, `required`, `additionalProperties: false`, as pydantic writes them for a
function signature. For those, a checker made of plain `isinstance` tests answers the
common case (the value is valid) in a microsecond or two.

The fast checker only ever says "certainly valid". Whenever it says anything else, or the
schema uses a keyword it does not know, jsonschema decides and writes the error messages,
so the results are exactly jsonschema's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jsonschema

from ._expressions import is_reference

__all__ = ["UNKNOWN", "SchemaValidator", "compile_fast_check", "is_unknown"]

FastCheck = Callable[[Any], bool]


class _Unknown:
    """The type of UNKNOWN."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
"""Stands for a value not known yet (a bound input, say) in a lenient check."""


def is_unknown(value: Any) -> bool:
    """Whether a lenient check must take `value` as not known yet: UNKNOWN, or a reference
    string (`†…`, not the escaped literal `††…`), which stands for its value to come."""
    return value is UNKNOWN or is_reference(value)


# Keywords that never make a value invalid (Draft 2020-12 without a format checker, which
# is how the engine's validators are built: `format` is an annotation there).
_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "format",
    }
)


def _is_integer(value: Any) -> bool:
    # 1.0 is an integer to JSON Schema; the fast check says "not sure" and jsonschema decides.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_TYPES: dict[str, FastCheck] = {
    "string": lambda value: isinstance(value, str),
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "array": lambda value: isinstance(value, list),
    "object": lambda value: isinstance(value, dict),
}


def _always(value: Any) -> bool:
    return True


def compile_fast_check(schema: Any, *, lenient: bool = False) -> FastCheck | None:
    """A function that returns True only for values `schema` certainly accepts.

    None when the schema uses a keyword outside the small set handled here (`type`,
    `properties`, `required`, `additionalProperties`, `items`, `anyOf`, annotations).
    With `lenient`, UNKNOWN and reference strings are accepted wherever they stand (see
    `is_unknown`): True then means the value is
    valid whatever values later take the place of the unknown parts, as far as the
    schema's judgement of everything around them goes (the parts themselves are checked
    once known).
    """
    return _compile(schema, lenient)


def _compile(schema: Any, lenient: bool) -> FastCheck | None:
    check = _compile_node(schema, lenient)
    if not lenient or check is None or check is _always:
        return check
    return lambda value: is_unknown(value) or check(value)


def _compile_node(schema: Any, lenient: bool) -> FastCheck | None:
    if schema is True:
        return _always
    if not isinstance(schema, dict):
        return None
    keys = set(schema) - _ANNOTATIONS
    checks: list[FastCheck] = []
    object_keys = {"properties", "required", "additionalProperties"} & keys
    # `"type": "object"` with object keywords is one check: the object check tests the type.
    typed_object = schema.get("type") == "object" and bool(object_keys)
    if "type" in schema and not typed_object:
        keys.discard("type")
        names = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
        if not isinstance(names, list) or not names or any(name not in _TYPES for name in names):
            return None
        type_checks = tuple(_TYPES[name] for name in names)
        if len(type_checks) == 1:
            checks.append(type_checks[0])
        else:
            checks.append(lambda value: any(check(value) for check in type_checks))
    keys.discard("type")
    if "anyOf" in schema:
        keys.discard("anyOf")
        options = schema["anyOf"]
        if not isinstance(options, list) or not options:
            return None
        compiled = [_compile(option, lenient) for option in options]
        if any(check is None for check in compiled):
            return None
        alternatives = tuple(check for check in compiled if check is not None)
        checks.append(lambda value: any(check(value) for check in alternatives))
    if "items" in schema:
        keys.discard("items")
        item_check = _compile(schema["items"], lenient)
        if item_check is None:
            return None
        checks.append(
            lambda value: not isinstance(value, list) or all(item_check(item) for item in value)
        )
    if object_keys:
        keys -= object_keys
        object_check = _compile_object(schema, lenient, typed_object)
        if object_check is None:
            return None
        checks.append(object_check)
    if keys:
        return None
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda value: first(value) and second(value)
    all_checks = tuple(checks)
    return lambda value: all(check(value) for check in all_checks)


def _compile_object(
    schema: dict[str, Any], lenient: bool, must_be_object: bool
) -> FastCheck | None:
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    additional = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list):
        return None
    if not all(isinstance(name, str) for name in required):
        return None
    compiled: dict[str, FastCheck | None] = {}  # None: any value (annotations only)
    for name, subschema in properties.items():
        check = _compile(subschema, lenient)
        if check is None:
            return None
        compiled[name] = None if check is _always else check
    if isinstance(additional, bool):
        extra: FastCheck | bool = additional
    else:
        extra_check = _compile(additional, lenient)
        if extra_check is None:
            return None
        extra = extra_check
    names = tuple(required)

    def check_object(value: Any) -> bool:
        if not isinstance(value, dict):
            return not must_be_object  # else these keywords only constrain objects
        for name in names:
            if name not in value:
                return False
        for key, item in value.items():
            if key in compiled:
                check = compiled[key]
                if check is not None and not check(item):
                    return False
            elif extra is False:
                return False
            elif extra is not True and not extra(item):
                return False
        return True

    return check_object


class SchemaValidator:
    """A Draft 2020-12 validator whose `iter_errors` skips jsonschema for plain valid values."""

    __slots__ = ("_fast", "_full_validator", "_lenient", "schema")

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self._full_validator: jsonschema.Draft202012Validator | None = None
        self._fast = compile_fast_check(schema)
        self._lenient = compile_fast_check(schema, lenient=True)

    @property
    def _full(self) -> jsonschema.Draft202012Validator:
        """jsonschema's validator, built (and jsonschema imported) the first time a value
        is not certainly valid: tools whose values always pass the fast check never
        load it."""
        if self._full_validator is None:
            from jsonschema import Draft202012Validator

            self._full_validator = Draft202012Validator(self.schema)
        return self._full_validator

    def valid_around_unknowns(self, instance: Any) -> bool:
        """True when `instance` is certainly valid wherever it holds no unknown value.

        False means "not sure": the caller must then ask jsonschema.
        """
        return self._lenient is not None and self._lenient(instance)

    def certainly_valid(self, instance: Any) -> bool:
        """True only when the fast check says `instance` is valid; False is "not sure"."""
        return self._fast is not None and self._fast(instance)

    def iter_errors(self, instance: Any) -> Iterator[jsonschema.ValidationError]:
        if self._fast is not None and self._fast(instance):
            return iter(())
        return self._full.iter_errors(instance)

    def is_valid(self, instance: Any) -> bool:
        if self._fast is not None and self._fast(instance):
            return True
        return self._full.is_valid(instance)

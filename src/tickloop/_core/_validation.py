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

No schema may make the run wait on anything outside it (docs/decisions.md, "Schemas
reach nothing outside themselves"): a `$ref` is looked up in the schema itself (and the
JSON Schema meta-schemas tickloop ships with), never fetched; a `pattern` runs on RE2, a
regex engine linear in the length of the string, so no pattern stalls the loop. A schema
that would need either (a remote `$ref`, a pattern with a lookaround or backreference) is
refused: `schema_problem` names it before a tool is made, and a validator that meets one
anyway (an MCP server's schema) reports it as that value's error, never raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import jsonschema

from ._expressions import is_reference

__all__ = [
    "UNKNOWN",
    "SchemaValidator",
    "compile_fast_check",
    "full_validator",
    "is_unknown",
    "schema_problem",
]

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
            self._full_validator = full_validator(self.schema)
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


# -- schemas that reach nothing outside themselves ---------------------------------------

NEVER_FETCHED = (
    "tickloop never fetches a schema: a $ref must point inside the schema "
    "(no schema may cause a network request)"
)
UNBOUNDED_PATTERN = (
    "which cannot be checked in bounded time (lookarounds and backreferences are not "
    "supported: patterns run on RE2, linear in the length of the string)"
)

# Keywords whose values are data, not schemas: a "$ref" or "pattern" key inside them is
# just a key.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
# Keywords whose values map names (or patterns) to schemas.
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)


class _RefusedRetrieval(Exception):
    """The registry's answer to every URI it does not hold."""


def _refuse(uri: str) -> NoReturn:
    raise _RefusedRetrieval(uri)


def _registry() -> Any:
    """A registry that holds nothing but what a validator adds (the schema itself) and
    retrieves nothing: jsonschema adds the meta-schemas it ships with."""
    from referencing import Registry

    return Registry(retrieve=_refuse)  # type: ignore[call-arg]


def _compiled_pattern(pattern: str) -> Any:
    """`pattern` compiled by RE2, or the reason it cannot be (a str)."""
    return _compile_pattern(pattern)


@functools.lru_cache(maxsize=512)  # thread-safe; the patterns of the tools in use
def _compile_pattern(pattern: str) -> Any:
    import re2  # type: ignore[import-untyped]

    options = re2.Options()
    options.log_errors = False  # the reason is returned, not printed on stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as error:
        reason = error.args[0] if error.args else error
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        return str(reason)


def _pattern_error(pattern: str) -> str | None:
    compiled = _compiled_pattern(pattern)
    if isinstance(compiled, str):
        return f"pattern {pattern!r} is refused ({compiled}), {UNBOUNDED_PATTERN}"
    return None


@functools.lru_cache(maxsize=1)
def _validator_class() -> Any:
    """Draft 2020-12 with `pattern` and `patternProperties` on RE2 and every `$ref` that
    cannot be resolved turned into a validation error (jsonschema raises)."""
    from jsonschema import Draft202012Validator, ValidationError
    from jsonschema.validators import extend
    from referencing.exceptions import Unresolvable

    keywords = Draft202012Validator.VALIDATORS

    def unresolvable(ref: str) -> Any:
        return ValidationError(f"its schema refers to {ref!r}: {NEVER_FETCHED}")

    def reference(keyword: str) -> Callable[..., Iterator[Any]]:
        original = keywords[keyword]

        def check(validator: Any, ref: Any, instance: Any, schema: Any) -> Iterator[Any]:
            try:
                yield from original(validator, ref, instance, schema)
            except Unresolvable:
                yield unresolvable(ref)

        return check

    def pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not isinstance(instance, str):
            return
        compiled = _compiled_pattern(pattern)
        if isinstance(compiled, str):
            yield ValidationError(_pattern_error(pattern) or compiled)
        elif compiled.search(instance) is None:
            yield ValidationError(f"{instance!r} does not match {pattern!r}")

    def pattern_properties(
        validator: Any, patterns: Any, instance: Any, schema: Any
    ) -> Iterator[Any]:
        if not isinstance(instance, dict):
            return
        for pattern, subschema in patterns.items():
            compiled = _compiled_pattern(pattern)
            if isinstance(compiled, str):
                yield ValidationError(_pattern_error(pattern) or compiled)
                continue
            for key, value in instance.items():
                if compiled.search(key) is not None:
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)

    return extend(  # type: ignore[no-untyped-call]  # jsonschema's own is untyped
        Draft202012Validator,
        {
            "$ref": reference("$ref"),
            "$dynamicRef": reference("$dynamicRef"),
            "pattern": pattern,
            "patternProperties": pattern_properties,
        },
    )


def full_validator(schema: Any) -> jsonschema.Draft202012Validator:
    """jsonschema's Draft 2020-12 validator for `schema`, made safe: it fetches nothing
    and runs patterns on RE2 (see the module's docstring)."""
    validator: jsonschema.Draft202012Validator = _validator_class()(schema, registry=_registry())
    return validator


def schema_problem(schema: Any) -> str | None:
    """Why `schema` cannot be used safely (a `$ref` that does not resolve inside it, a
    pattern RE2 cannot run), or None. Checked when a tool is made, so a user's schema
    fails there, before anything runs."""
    if not isinstance(schema, dict) or _plainly_safe(schema, schema):
        return None  # nothing to look up or to compile: nothing is loaded for it
    from jsonschema_specifications import REGISTRY  # type: ignore[import-untyped]
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    if not isinstance(schema, dict):
        return None
    registry = REGISTRY.combine(_registry())
    problems: list[str] = []

    def visit(node: Any, resolver: Any) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item, resolver)
            return
        if not isinstance(node, dict):
            return
        if node is not schema and isinstance(node.get("$id"), str):
            resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
        for keyword, value in node.items():
            if keyword in _DATA_KEYWORDS:
                continue
            if keyword in ("$ref", "$dynamicRef") and isinstance(value, str):
                try:
                    resolver.lookup(value)
                except Unresolvable:
                    problems.append(f"it refers to {value!r}: {NEVER_FETCHED}")
            elif keyword == "pattern" and isinstance(value, str):
                problem = _pattern_error(value)
                if problem is not None:
                    problems.append(problem)
            elif keyword in _SCHEMA_MAPS and isinstance(value, dict):
                for name, subschema in value.items():
                    if keyword == "patternProperties" and isinstance(name, str):
                        problem = _pattern_error(name)
                        if problem is not None:
                            problems.append(problem)
                    visit(subschema, resolver)
            else:
                visit(value, resolver)

    visit(schema, registry.resolver_with_root(DRAFT202012.create_resource(schema)))
    return "; ".join(problems) if problems else None


def _plainly_safe(node: Any, root: dict[str, Any]) -> bool:
    """True when `node` has no pattern, no `$id` and only `$ref`s that point into `root`
    (`#/$defs/Item`, what pydantic makes): safe without loading a resolver or RE2. False
    means "look closer" (`schema_problem`)."""
    if isinstance(node, list):
        return all(_plainly_safe(item, root) for item in node)
    if not isinstance(node, dict):
        return True
    for keyword, value in node.items():
        if keyword in _DATA_KEYWORDS:
            continue
        if keyword in ("pattern", "patternProperties", "$id", "$dynamicRef"):
            return False
        if keyword == "$ref":
            if not isinstance(value, str) or not _points_into(value, root):
                return False
        elif keyword in _SCHEMA_MAPS and isinstance(value, dict):
            if not all(_plainly_safe(item, root) for item in value.values()):
                return False
        elif not _plainly_safe(value, root):
            return False
    return True


def _points_into(ref: str, root: dict[str, Any]) -> bool:
    """Whether `ref` is a JSON pointer (`#/...`) to a place `root` has."""
    if ref == "#":
        return True
    if not ref.startswith("#/"):
        return False
    node: Any = root
    for step in ref[2:].split("/"):
        step = step.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and step in node:
            node = node[step]
        elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        else:
            return False
    return True

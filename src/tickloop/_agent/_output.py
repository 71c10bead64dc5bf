"""Output references (PROTOCOL §8): `"output": "†state.report"` names what tools wrote.

A final answer should not have to copy back what the calls already put in the state: the
model may write references in `output` (the whole output, or strings inside it). They
are resolved after the tick, against the state it left, and the resolved value is what
is checked against the output schema and returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

from .._core._expressions import find_references, format_location, substitute
from .._core._log import ContextLog, copy_json
from .._core._validation import SchemaValidator, schema_problem
from .._errors import ConfigurationError, ReferenceSyntaxError

__all__ = ["OutputSpec", "has_references", "resolve_output"]


class OutputSpec:
    """The user's output: any type pydantic can describe (a model class, `int`,
    `list[str]`, a dataclass, a `TypedDict`...), a JSON Schema dict, or None (any JSON).

    A type is read through a `pydantic.TypeAdapter`, as Pydantic AI does: its JSON Schema
    is what the model is asked for, and the adapter makes the run's output an instance of
    it. Both protocols judge a final output with `check`, so an answer is accepted or
    refused by the same rule whichever way the model gave it.
    """

    def __init__(self, output: Any) -> None:
        self.adapter: pydantic.TypeAdapter[Any] | None = None
        # `output=str` under protocol="tools": the final answer's text is the output.
        self.is_text = output is str
        if output is None:
            self.schema: dict[str, Any] | None = None
        elif isinstance(output, Mapping):
            self.schema = _checked(dict(output))
        else:
            self.adapter = _adapter(output)
            self.schema = self.adapter.json_schema()  # valid as pydantic made it
        if self.schema is not None:
            problem = schema_problem(self.schema)
            if problem is not None:
                raise ConfigurationError(f"output schema cannot be used: {problem}")
        # jsonschema loads with the first answer the fast check cannot settle.
        self._validator = None if self.schema is None else SchemaValidator(self.schema)

    def problem(self, value: Any) -> str | None:
        """Why `value` does not match the output schema, or None."""
        if self._validator is None:
            return None
        errors = sorted(self._validator.iter_errors(value), key=lambda e: list(map(str, e.path)))
        if not errors:
            return None
        parts = [
            f"{'.'.join(map(str, error.absolute_path)) or '(output)'}: {error.message}"
            for error in errors[:5]
        ]
        return "the output does not match the output schema: " + "; ".join(parts)

    def check(self, value: Any) -> str | None:
        """Why `value` is not a valid output (the schema, then the type), or None."""
        problem = self.problem(value)
        if problem is None and self.adapter is not None:
            try:
                self.adapter.validate_python(value)
            except pydantic.ValidationError as error:
                problem = f"the output does not validate: {error.errors()[0].get('msg')}"
        return problem

    def convert(self, value: Any) -> Any:
        """The run's output: `value` (checked JSON) as an instance of the output type."""
        return self.adapter.validate_python(value) if self.adapter is not None else value

    def dump(self, value: Any) -> Any:
        """`convert`'s inverse: the output as JSON data (to send or store it)."""
        return self.adapter.dump_python(value, mode="json") if self.adapter is not None else value


def _checked(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema the user wrote, or a `ConfigurationError` saying what is wrong."""
    import jsonschema  # only for a schema a user wrote

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        raise ConfigurationError(f"output is not a valid JSON Schema: {error.message}") from error
    return schema


def _adapter(output: Any) -> pydantic.TypeAdapter[Any]:
    """The adapter of an output type, or a `ConfigurationError` saying why there is none."""
    refused = (
        "output must be a type pydantic can describe (a pydantic model class, int, "
        "list[str], a dataclass...), a JSON Schema dict or None"
    )
    if isinstance(output, str | bytes | int | float | list | tuple):
        raise ConfigurationError(f"{refused}, not {output!r}")
    try:
        adapter = pydantic.TypeAdapter(output)
        adapter.json_schema()
    except (pydantic.PydanticUserError, pydantic.errors.PydanticSchemaGenerationError) as error:
        raise ConfigurationError(f"{refused}, not {output!r}") from error
    return adapter


def has_references(output: Any) -> bool:
    """Whether `output` must wait for the tick: it holds a reference (or a bad one)."""
    try:
        return bool(find_references(output))
    except ReferenceSyntaxError:
        return True  # reported, with its place, once the tick is over


def resolve_output(output: Any, log: ContextLog) -> tuple[Any, str | None]:
    """The output with every reference replaced by what it reads, or a fault to feed back.

    `||` takes the first present term and `&&` needs every term, as in a call (§3); a
    reference that reads nothing is a structural fault naming it and where it sits.
    """
    try:
        references = find_references(output)
    except ReferenceSyntaxError as error:
        where = _where(getattr(error, "location", ()))
        return None, f"bad reference in the output{where}: {error}"
    values: dict[tuple[str | int, ...], Any] = {}
    for reference in references:
        expression = reference.expression
        found = False
        value: Any = None
        for term in expression.terms:
            present, current = log.lookup(term)
            if expression.op == "&&":
                if not present:
                    found = False
                    break
                found, value = True, current
            elif present:
                found, value = True, current
                break
        if not found:
            where = _where(reference.location)
            return None, (
                f"unresolved reference {reference.source} in the output{where}: the state this "
                "plan left has nothing there; write it with a call first, or answer with a value"
            )
        values[reference.location] = copy_json(value)
    return substitute(output, values), None


def _where(location: tuple[str | int, ...]) -> str:
    return f" at {format_location(location)}" if location else ""

"""A run's input and starting state as JSON, converted the way tool results are.

Every path (no store, a store, protocol="tools", `run_calls`) starts from the same log,
so converting once, where the log is made, keeps them agreeing; a value with no JSON
form is refused before anything runs instead of becoming a `repr` string, a store error
or an invalid `NaN` token in a request.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

from .._errors import ConfigurationError
from ._log import MAX_VALUE_DEPTH, shape_fault

__all__ = ["run_value_to_json"]


def run_value_to_json(value: Any, what: str) -> Any:
    """`value` as plain JSON data (pydantic models, dataclasses, datetimes, decimals,
    UUIDs, enums, sets...); `ConfigurationError` naming `what` when it has no JSON form."""
    try:
        converted = to_jsonable_python(value)
    except (PydanticSerializationError, TypeError, ValueError) as error:
        raise ConfigurationError(f"the run's {what} has no JSON form: {error}") from error
    try:
        json.dumps(converted, allow_nan=False)
    except ValueError as error:  # NaN and infinities are not JSON
        raise ConfigurationError(
            f"the run's {what} has no JSON form: {error} (NaN and infinity are not JSON)"
        ) from error
    except (TypeError, RecursionError) as error:
        raise ConfigurationError(f"the run's {what} has no JSON form: {error}") from error
    fault = shape_fault(converted, MAX_VALUE_DEPTH)  # lone surrogates, runaway nesting
    if fault is not None:
        raise ConfigurationError(f"the run's {what} {fault}")
    return converted

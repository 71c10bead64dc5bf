"""The checks a call gets the moment it arrives (PROTOCOL §7.1), before it may wait or run.

Shape first (string keys, bounded nesting: every later walk is then safe from recursion),
then meta keys, tool, output path, references, and the parameters that can be judged
before any reference resolves. A call that fails raises `Structural`, which the scheduler
turns into an Error Message; one that passes leaves its parsed form on the `Call`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._errors import ReferenceSyntaxError
from ._call import (
    Call,
    CallRecord,
    Structural,
    error_message,
    json_type,
    parameters_of,
    schema_message,
    syntax,
)
from ._expressions import (
    MAX_NESTING,
    REF,
    RESERVED_OUTPUT_KINDS,
    SCALARS,
    Expression,
    find_references,
    format_location,
    parse_expression,
)
from ._log import (
    SURROGATE_FAULT,
    cut_json,
    describe_key,
    has_surrogate,
    shape_fault,
    short_repr,
)
from ._paths import id_problem
from ._results import check_output
from ._status import CallStatus
from ._tools import Tool, ToolSet
from ._validation import UNKNOWN

__all__ = [
    "CALL_DEPTH",
    "CUT_NOTE",
    "META_KEYS",
    "METHODS",
    "about_unknown",
    "check_call",
    "check_edit",
    "check_id",
    "fault_message",
    "locate_shape_fault",
    "new_call",
    "record_parameters",
]

META_KEYS = frozenset(
    {"_tool", "_outputPath", "_outputMethod", "_id", "_output", "_reasoningForCall"}
)
METHODS = ("set", "merge", "assign", "push", "concat")
CALL_DEPTH = MAX_NESTING + 1  # the call object itself, then each value at most MAX_NESTING
CUT_NOTE = f"(shown cut at {MAX_NESTING} levels)"
_META_LIST = ", ".join(sorted(META_KEYS))
# A call's parameters, the meta keys it has that are not ones, and whether it is plain
# (`_read_keys`, one walk over the keys a call arrives with).
Keys = tuple[dict[str, Any], list[str], bool]


def new_call(
    wire: Any,
    iteration: int,
    index: int,
    seq: int,
    calls: Mapping[str, object],
    code: bool = False,
) -> tuple[Call, Any, str, Keys | None]:
    """A call as it arrives, before any check: (call, the `_id` given, the id it wants,
    the walk over its keys that `check_call` is given).

    A call without a usable `_id` is known by its engine id, made unique if an explicit
    `_id` already took it; only a repeated explicit id is the call's fault (`check_id`).
    The wire is copied: the `_id` the call gets is written into the copy.
    """
    auto_id = f"c{iteration}.{index}"
    if auto_id in calls:
        auto_id = _free_id(auto_id, calls)
    # A dict's parameters are filed by `check_call` (or `record_parameters` when the call
    # fails first): not built twice for every call that arrives.
    if isinstance(wire, dict):
        wire = dict(wire)
        # Walked before its `_id` is written, the same for the checks: `_id` is a meta
        # key, and the id it gets (the one it gave, or an engine id) keeps it plain.
        keys = _read_keys(wire, code)
        given = wire.get("_id")
        # An id that cannot be a path's segment (a "/", or a code call path's "[", "]",
        # ">": PROTOCOL §11, §14) is known by its engine id, and refused (`check_id`).
        wanted = given if isinstance(given, str) and id_problem(given) is None else auto_id
        wire["_id"] = wanted
        tool_name = wire.get("_tool")
        params, shown = UNCHECKED, wire
    else:
        given, wanted, tool_name, keys = None, auto_id, None, None
        params, shown = wire, {"_id": wanted}
    record_id = wanted if wanted not in calls else auto_id
    tool = tool_name if isinstance(tool_name, str) else None
    record = CallRecord(record_id, tool, CallStatus.WAITING, params, wire, iteration)
    return Call(record_id, seq, iteration, record, shown), given, wanted, keys


UNCHECKED: Any = object()  # `CallRecord.params` of a call whose checks have not filed them


def record_parameters(call: Call) -> None:
    """File the parameters of a call that failed its checks before `check_call` did."""
    record = call.record
    if record.params is UNCHECKED:
        wire = record.call
        record.params = parameters_of(wire) if isinstance(wire, dict) else wire


def _free_id(auto_id: str, calls: Mapping[str, object]) -> str:
    """An id no call has, for a call whose own id is taken: its record is never lost.

    The engine id is free unless an explicit `_id` happened to look like one; then a
    suffix that no engine id carries keeps it apart, deterministically.
    """
    candidate, n = auto_id, 1
    while candidate in calls:
        n += 1
        candidate = f"{auto_id}#{n}"
    return candidate


# The characters of a code plan's call path (PROTOCOL §14): only its driver's ids hold them.
_CALL_PATH_MARKS = frozenset("[]>")


def check_id(call: Call, given: Any, wanted: str, code: bool = False) -> None:
    if given is not None:  # most calls give none, and the engine's ids are sound
        if not isinstance(given, str) or not given:
            raise Structural(f"_id must be a non-empty string, got {given!r}")
        problem = id_problem(given)
        if problem is not None:
            raise Structural(f"_id {problem}")
        if not code and not _CALL_PATH_MARKS.isdisjoint(given):
            # Even a whole call path: only a code plan's driver names calls by them (§14).
            raise Structural(
                f"_id {given!r} holds '[', ']' or '>', which only the call paths of code "
                "plans use; choose an id without them"
            )
    if call.id != wanted:
        raise Structural(
            f"id {wanted!r} is already used by another call in this run; ids must be unique "
            f"(this call is recorded as {call.id!r})",
            id=wanted,
        )


def check_call(
    tools: ToolSet,
    call: Call,
    wire: Any,
    given: Any = None,
    wanted: str | None = None,
    *,
    code: bool = False,
    hidden: frozenset[str] = frozenset(),
    keys: Keys | None = None,
) -> None:
    """Structural checks made at once, before a call may wait or run (PROTOCOL §7.1).

    The shape comes first, even before the id a new call gave (`given`, and the id it
    gets, `wanted`): a call refused for any reason is recorded and logged, which only a
    call of a sound shape (or the echo `_check_shape` makes of it) can be. `keys` is the
    walk over the wire's keys `new_call` made (`_read_keys`), or None to make it here.
    """
    if keys is None and type(wire) is dict:
        keys = _read_keys(wire, code)
    if keys is None or not keys[2]:  # a plain call passes the shape check
        _check_shape(call, wire)
    if wanted is not None:
        check_id(call, given, wanted, code)
    if not isinstance(wire, dict):
        raise Structural(f"a call must be a JSON object, got {json_type(wire)}")
    if keys is None:  # a dict of another type, whose keys `_check_shape` found strings
        read = _read_keys(dict(wire), code)
        assert read is not None
        keys = (read[0], read[1], False)  # plain is only ever a dict as `new_call` copies
    params, unknown, plain = keys
    if code:  # a code plan's call: the program line that made it (PROTOCOL §14)
        line = wire.get("_line")
        call.record.line = line if type(line) is int else None
    tool_name = wire.get("_tool")
    tool = tools.get(tool_name) if isinstance(tool_name, str) else None
    if hidden and (tool is None or tool_name in hidden):
        if tool is not None:
            raise Structural(f"unknown tool {tool_name!r} (try search_tools)")
        known = ", ".join(name for name in tools if name not in hidden) or "none"
        raise Structural(
            f"unknown tool {tool_name!r}; the tools are: {known} (try search_tools for more)"
        )
    if tool is None:
        known = ", ".join(tools) or "none"
        if tool_name is None:
            raise Structural(f"the call has no _tool; the tools are: {known}")
        raise Structural(f"unknown tool {tool_name!r}; the tools are: {known}")
    call.tool = tool
    if tool.read_only:
        call.record.read_only = True
    if unknown:
        unknown.sort()
        raise Structural(f"unknown meta key {unknown[0]!r}; meta keys are: {_META_LIST}")
    method = wire.get("_outputMethod", "set")
    if method not in METHODS:
        raise Structural(f"_outputMethod {method!r} is not one of: {', '.join(METHODS)}")
    call.method = method
    latent = tool.is_latent
    if latent:
        if "_output" not in wire:
            raise Structural(f"latent tool {tool.name!r} needs its result in _output")
        check_output(tool, wire["_output"], structural=True)
        call.latent_output = wire["_output"]
    elif "_output" in wire:
        raise Structural(f"_output is only for latent tools; {tool.name!r} runs its own handler")
    call.output = output = _output_expression(tool, wire)
    call.writes = () if output is None else output.terms
    call.fire_and_forget = output is None and not latent
    if tool.bind:
        for bound in tool.bind:
            params.pop(bound, None)  # a bound parameter comes from the run's input only
    call.plain = plain  # and then it holds no reference
    try:
        call.references = references = () if plain else find_references(params)
    except ReferenceSyntaxError as error:
        location = format_location(getattr(error, "location", ()))
        raise Structural(
            f"parameter {location}: bad reference: {syntax(error)}", parameter=location
        ) from error
    call.params = params
    call.record.params = params
    # The common call, checked here: nothing unknown, and certainly valid as it is.
    if references or tool.bind or not tool.parameter_validator.certainly_valid(params):
        _check_parameters_early(call)


def _read_keys(wire: dict[Any, Any], code: bool) -> Keys | None:
    """One walk over a call's keys: (its parameters, the meta keys it has that are not
    ones, whether it is plain); None when a key is not a string, which `_check_shape`
    refuses.

    Plain is flat: ASCII `str` keys, every value a finite number, a boolean, null or a
    string, no string with a lone surrogate and no parameter starting with a dagger. That
    is most calls of a plan, and it answers two more walks at once: a plain call passes
    `_check_shape` and holds no reference (`tests/test_fast_paths.py` checks both).
    """
    params: dict[str, Any] = {}
    unknown: list[str] = []
    plain = True
    for key, value in wire.items():
        if type(key) is not str or not key.isascii():
            if not isinstance(key, str):
                return None
            plain = False
        if key not in META_KEYS:  # a parameter, or a meta key that is not one
            if not key.startswith("_"):
                params[key] = value
            elif not (code and key == "_line"):  # a code plan's call names its line
                unknown.append(key)
        if plain:  # once it is not, the shape check and the reference search decide
            kind = type(value)
            if kind is str:
                # An ASCII string holds neither a dagger nor a surrogate: one C call.
                plain = value.isascii() or not (
                    has_surrogate(value) or (value[:1] == REF and not key.startswith("_"))
                )
            elif kind is float:
                plain = value - value == 0.0  # not inf or NaN, which JSON has not
            else:
                plain = kind in SCALARS
    return params, unknown, plain


def _check_shape(call: Call, wire: Any) -> None:
    """Keys are strings and values nest at most MAX_NESTING deep, before anything else.

    One walk with its own stack, so every later walk of the call (references, copies,
    schema checks, logging) is safe from recursion. A call that fails is recorded and
    echoed in a form that can be logged: cut at that depth, odd keys as text.
    """
    fault = shape_fault(wire, CALL_DEPTH)
    if fault is None:
        return
    echo, cut = cut_json(wire, CALL_DEPTH)
    call.record.call = echo
    call.record.params = parameters_of(echo) if isinstance(echo, dict) else echo
    if isinstance(echo, dict):
        call.wire = echo
    if not isinstance(wire, dict):
        note = f" {CUT_NOTE}" if cut else ""
        raise Structural(f"a call must be a JSON object, got {json_type(wire)}{note}")
    located = locate_shape_fault(wire, "call")
    assert located is not None  # a fault in a dict is in one of its keys or values
    message, details = located
    if cut:
        message = f"{message} {CUT_NOTE}"
    raise Structural(message, **details)


def _output_expression(tool: Tool, wire: dict[str, Any]) -> Expression | None:
    given = wire.get("_outputPath")
    if given is None:
        return tool.output_expression
    if not isinstance(given, str):
        raise Structural(f"_outputPath must be a string, got {json_type(given)}")
    try:
        expression = parse_expression(given)
    except ReferenceSyntaxError as error:
        raise Structural(f"bad _outputPath: {syntax(error)}") from error
    for term in expression.terms:
        if term.kind in RESERVED_OUTPUT_KINDS:
            what = (
                "the engine's Error Messages (PROTOCOL §7)"
                if term.kind == "error"
                else "the run's input, which only the caller gives"
            )
            raise Structural(
                f"_outputPath {short_repr(given)} writes to {str(term)!r}, but no call may "
                f"write to the kind {term.kind!r}: it holds {what}; write to †state or "
                "a kind of your own",
                expected=f"a kind other than {', '.join(sorted(RESERVED_OUTPUT_KINDS))}",
            )
    if tool.output_expression is not None and expression != tool.output_expression:
        raise Structural(
            f"output path {given!r} is not allowed: tool {tool.name!r} always writes to "
            f"{tool.output_path!r}; omit _outputPath or use that one",
            expected=tool.output_path,
        )
    if tool.is_latent and expression.op is not None:
        # Its result is the model's own `_output`, written to one place (PROTOCOL §4):
        # it has no Branch to choose a term with, and is not fanned out.
        shape = "the branch" if expression.op == "||" else "the fan-out"
        raise Structural(
            f"a latent call must name exactly one output term, not {shape} {given!r}: "
            f"latent tool {tool.name!r} writes its _output to one place; give one term, "
            f"such as {str(expression.terms[0])!r}",
            expected="one term",
        )
    return expression


def _check_parameters_early(call: Call) -> None:
    """Catch what is wrong already: missing or unknown parameters, bad literals.

    A reference (or a bound parameter) stands for a value not known yet, so schema
    errors at or under its location are left for the check after resolution, and so
    are errors of keywords that judge a value by what is inside it (`anyOf` of an
    optional object holding a reference fails at the object, above the reference).
    """
    validator = call.tool.parameter_validator
    if not call.references and not call.tool.bind:
        if validator.certainly_valid(call.params):
            return
    else:
        # The fast path first: valid around the unknowns (the references, the bound
        # parameters) means there is nothing to report yet.
        known = call.params
        if call.tool.bind:
            known = {**known, **dict.fromkeys(call.tool.bind, UNKNOWN)}
        if validator.valid_around_unknowns(known):
            return
    probe = dict(call.params) if call.tool.bind else call.params  # checking changes nothing
    unknown_locations = [reference.location for reference in call.references]
    for bound in call.tool.bind:
        probe[bound] = None
        unknown_locations.append((bound,))
    errors = [
        error
        for error in validator.iter_errors(probe)
        if not about_unknown(error, unknown_locations)
    ]
    if errors:
        raise Structural(schema_message(call.tool, errors, "parameters"))


# Keywords whose error sits at a value but may come from what is inside it.
_JUDGED_BY_CONTENTS = frozenset(
    {
        "anyOf",
        "oneOf",
        "not",
        "contains",
        "enum",
        "const",
        "uniqueItems",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)


def check_edit(tool: Tool, params: Any) -> str | None:
    """What is wrong with parameters a person edited, or None when they are good."""
    if not isinstance(params, dict):
        return f"the edited parameters must be an object, got {json_type(params)}"
    located = locate_shape_fault(params, "edited parameters")
    if located is not None:
        return located[0]
    errors = list(tool.parameter_validator.iter_errors(params))
    if errors:
        return schema_message(tool, errors, "edited parameters")
    return None


def fault_message(call: Any, error: dict[str, Any]) -> dict[str, Any]:
    """The Error Message of a fault of the iteration itself (`ReportFault`)."""
    if shape_fault(call, CALL_DEPTH) is not None:
        # Logging the message copies what it shows: a value the model nested 1,000 deep
        # (an invalid output, say) is shown cut, never allowed to make that fail.
        call, cut = cut_json(call, CALL_DEPTH)
        if cut and isinstance(error, dict) and isinstance(error.get("message"), str):
            error = {**error, "message": f"{error['message']} {CUT_NOTE}"}
    return error_message(call, error)


def about_unknown(error: Any, unknown_locations: list[tuple[str | int, ...]]) -> bool:
    """Whether a schema error of the probe may be caused by a value not known yet."""
    path = tuple(error.absolute_path)
    for location in unknown_locations:
        if path[: len(location)] == location:
            return True  # at or under the unknown value
        if error.validator in _JUDGED_BY_CONTENTS and location[: len(path)] == path:
            return True  # above it, judging it among the rest
    return False


def locate_shape_fault(mapping: Any, what: str) -> tuple[str, dict[str, Any]] | None:
    """Name the key or value of a call (or edited parameters) that fails `shape_fault`."""
    if not isinstance(mapping, dict):
        return None
    for key, value in mapping.items():
        if not isinstance(key, str):
            return f"{what} keys must be strings, got {describe_key(key)}", {}
        if has_surrogate(key):
            return f"a key of the {what} {SURROGATE_FAULT}", {}
        fault = shape_fault(value, MAX_NESTING)
        if fault is not None:
            if key.startswith("_") and what == "call":
                return f"meta key {key} {fault}", {}
            location = format_location((key,))
            return f"parameter {location} {fault}", {"parameter": location}
    return None

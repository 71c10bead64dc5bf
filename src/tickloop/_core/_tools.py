"""Tools: a name, a schema, options, and (for explicit tools) a Python handler.

A tool is checked completely when it is made, so that a bad tool is a
`ConfigurationError` at definition time instead of an Error Message in the middle of a
run. Everything the scheduler needs per call (validators, the approval predicate, the
dependency lists) is prepared here once, because the scheduler touches it for every call.
"""

from __future__ import annotations

import copy
import inspect
import re
import sys
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, ClassVar, Union, get_args, get_origin, get_type_hints, overload

import pydantic
from pydantic_core import to_jsonable_python

from .._errors import ConfigurationError, ReferenceSyntaxError, is_call_error
from ._expressions import RESERVED_OUTPUT_KINDS, Expression, is_reference, parse_expression
from ._validation import SchemaValidator, schema_problem

__all__ = [
    "Branch",
    "CallContext",
    "MakesTool",
    "RawTool",
    "Tool",
    "ToolSet",
    "ToolSource",
    "split_tools",
    "tool",
]

TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")  # used with fullmatch: no "\n" before $
_NO_OUTPUT_ANNOTATIONS = (inspect.Signature.empty, None, type(None), Any)


@dataclass(frozen=True, slots=True)
class Branch:
    """What an activity returns to choose one term of a `||` output path."""

    term: str
    value: Any


class _ReadOnlyMapping(Mapping[str, Any]):
    """A live, read-only window on a view, so a tool can read state but never write it
    behind the log's back (all writes must go through the log to keep provenance)."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return _read_only(self._data[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"ReadOnly({self._data!r})"


def _read_only(value: Any) -> Any:
    if isinstance(value, dict):
        return _ReadOnlyMapping(value)
    if isinstance(value, list):
        return tuple(_read_only(item) for item in value)
    return value


class CallContext:
    """Injected into a handler parameter annotated `CallContext`.

    It is not part of the parameter schema: the model never sees it. `id` is the call's
    full path in its tree of runs ("c1.2/c1.0" in a sub-agent's run, PROTOCOL §11), so
    `(run_id, id)` names one call of the whole tree (an idempotency key); `path` is the
    ids of the agent calls above its run, `()` at the root.
    """

    __slots__ = ("_views", "call", "id", "path", "run_id", "scope", "tool")

    def __init__(
        self,
        id: str,
        tool: str,
        call: dict[str, Any],
        views: Callable[[str], Any],
        run_id: str | None = None,
        scope: object = None,
        path: tuple[str, ...] = (),
    ) -> None:
        self.id = id
        self.path = path
        self.tool = tool
        self.call = call
        self._views = views
        self.run_id = run_id  # None outside a named run (run_calls)
        # The run's place in a tree of runs, given by its driver and opaque here: what a
        # sub-agent's call needs to start its child run (PROTOCOL §11); None elsewhere.
        self.scope = scope

    def view(self, kind: str) -> Any:
        """The current view of `kind`, read-only (None when nothing of that kind exists)."""
        return _read_only(self._views(kind))

    @property
    def state(self) -> Mapping[str, Any]:
        return self.view("state") or _ReadOnlyMapping({})

    @property
    def input(self) -> Any:
        return self.view("input")

    def __repr__(self) -> str:
        return f"CallContext(id={self.id!r}, tool={self.tool!r})"


ApprovalRule = bool | Callable[[dict[str, Any]], bool]


class Tool:
    """A tool the model can call.

    With a `handler` it is explicit (tickloop runs it); without one it is latent (the
    model writes the result itself in `_output`).
    """

    #: Whether a schema that cannot be used safely (a remote `$ref`, a pattern that cannot
    #: run in bounded time) fails the tool's definition. A tool listed by a server (MCP)
    #: says False: that tool's calls fail with the reason instead, the server's other
    #: tools stay usable.
    unsafe_schema_fails_definition = True
    #: Whether the handler keeps its own `timeout` (a sub-agent's call cuts its child run
    #: off itself, ending the child's calls); the engine applies it to any other.
    times_itself = False
    #: Whether a call resumes where it was after a pause or a crash instead of starting
    #: over (a sub-agent's call: its child run replays its journal), so it keeps the time
    #: it first started.
    resumes = False

    #: Whether the tool's calls take their checked JSON parameters as they are, with the
    #: call's context, through `run_raw` (a `RawTool`), instead of a handler's signature.
    takes_raw_parameters: ClassVar[bool] = False

    def __init__(
        self,
        name: str,
        description: str = "",
        parameters: Mapping[str, Any] | type[pydantic.BaseModel] | None = None,
        output: Mapping[str, Any] | type[pydantic.BaseModel] | None = None,
        handler: Callable[..., Any] | None = None,
        *,
        requires_approval: ApprovalRule = False,
        depends_on: Iterable[str] = (),
        output_path: str | None = None,
        timeout: float | None = None,
        max_concurrency: int | None = None,
        bind: Mapping[str, str] | None = None,
        idempotent: bool = False,
        annotations: Mapping[str, Any] | None = None,
        expected_duration: float | None = None,
        read_only: bool = False,
        defer_loading: bool = False,
    ) -> None:
        if name == "<lambda>":
            raise ConfigurationError(
                "a lambda has no name a model can call: pass name= (tl.tool(fn, name='...'))"
            )
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise ConfigurationError(
                f"tool name {name!r} must match ^{TOOL_NAME.pattern}$ (letters, digits, _ and -)"
            )
        self.name = name
        self.description = inspect.cleandoc(description or "")
        self.handler = handler
        self._signature = (
            _HandlerSignature(handler, name)
            if handler is not None and not self.takes_raw_parameters
            else None
        )
        # Facts of the handler, fixed with it (asked of every call, so not worked out anew):
        # a latent tool has none; a `RawTool`'s `run_raw` is a coroutine function and takes
        # a `CallContext`; else the signature says (no context: none is made for a call).
        self.is_latent = handler is None
        self.is_async = self.takes_raw_parameters or (
            self._signature is not None and self._signature.is_async
        )
        self.takes_context = self.takes_raw_parameters or (
            self._signature is not None and self._signature.context_parameter is not None
        )
        # A schema pydantic made (from the signature, the return annotation, a model
        # class) is valid as made; only a dict the user wrote is checked, so a tool made
        # from a function does not load jsonschema (docs/architecture.md).
        self.parameters: dict[str, Any]
        if parameters is not None:
            self.parameters = _schema_of(parameters, name, "parameters")
        elif self._signature is not None:
            self.parameters = dict(self._signature.parameters_schema)
        else:
            raise ConfigurationError(f"latent tool {name!r} needs a parameters schema")
        self.output: dict[str, Any] | None
        if output is not None:
            self.output = _schema_of(output, name, "output")
        else:
            self.output = None if self._signature is None else self._signature.output_schema
        if self.unsafe_schema_fails_definition:
            for what, schema in (("parameters", self.parameters), ("output", self.output)):
                problem = schema_problem(schema)
                if problem is not None:
                    raise ConfigurationError(
                        f"tool {name!r}: its {what} schema cannot be used: {problem}"
                    )
        self.requires_approval = _check_approval_rule(requires_approval, name)
        self.depends_on: tuple[str, ...] = _check_depends_on(depends_on, name)
        self.dependency_references: tuple[Expression, ...] = ()
        self.dependency_tools: tuple[str, ...] = ()
        self._split_dependencies()
        self.output_path = output_path
        self.output_expression: Expression | None = None
        if output_path is not None:
            self.output_expression = _parse_option(output_path, name, "output_path")
            for term in self.output_expression.terms:
                if term.kind in RESERVED_OUTPUT_KINDS:
                    raise ConfigurationError(
                        f"tool {name!r}: output_path {output_path!r} writes to {str(term)!r}, "
                        f"a reserved kind: no call may write to "
                        f"{' or '.join(sorted(RESERVED_OUTPUT_KINDS))}"
                    )
            if handler is None and self.output_expression.op is not None:
                # A latent call names exactly one term (PROTOCOL §4): its result has no
                # Branch to pick a term with, and is not fanned out either.
                shape = "the branch" if self.output_expression.op == "||" else "the fan-out"
                raise ConfigurationError(
                    f"tool {name!r}: a latent tool's output_path must name exactly one term, "
                    f"not {shape} {output_path!r}"
                )
        self.timeout = _check_positive(timeout, name, "timeout", float)
        self.max_concurrency = _check_positive(max_concurrency, name, "max_concurrency", int)
        # Seconds a call is expected to take: what orders starts under a limit (PROTOCOL
        # §13); None: the mean measured in this process, else 1.
        self.expected_duration = _check_finite(
            _check_positive(expected_duration, name, "expected_duration", float),
            name,
            "expected_duration",
        )
        self.bind: dict[str, str] = _check_bind(bind, name)
        if not isinstance(idempotent, bool):
            raise ConfigurationError(
                f"tool {name!r}: idempotent must be True or False, not {idempotent!r}"
            )
        self.idempotent = idempotent
        if not isinstance(read_only, bool):
            raise ConfigurationError(
                f"tool {name!r}: read_only must be True or False, not {read_only!r}"
            )
        # The tool changes nothing: a code plan may start its calls before earlier calls
        # are known not to fail (PROTOCOL §14 "Readiness"); shown in records and events.
        self.read_only = read_only
        if not isinstance(defer_loading, bool):
            raise ConfigurationError(
                f"tool {name!r}: defer_loading must be True or False, not {defer_loading!r}"
            )
        # Kept off the menu until the model finds it with `search_tools` (an agent with
        # tool search; docs/mcp.md "Tool search"): it saves the request its description.
        self.defer_loading = defer_loading
        # What the tool's source says about it (an MCP server's annotations: readOnlyHint,
        # destructiveHint...), kept for approval hooks and UIs; the engine does not read it.
        self.annotations: dict[str, Any] = dict(annotations or {})
        self._check_parameters()
        self.parameter_validator = SchemaValidator(self.parameters)
        self.output_validator = None if self.output is None else SchemaValidator(self.output)

    # -- what the scheduler asks -------------------------------------------------------

    @property
    def may_require_approval(self) -> bool:
        return self.requires_approval is not False

    def needs_approval(self, params: dict[str, Any]) -> bool:
        """Fail closed: a predicate that raises means a person must look at the call."""
        rule = self.requires_approval
        if type(rule) is bool:
            return rule
        try:
            return bool(rule(params))
        except BaseException as error:  # SystemExit too; never KeyboardInterrupt or a cancel
            if not is_call_error(error):
                raise
            return True

    def prepare(
        self, params: dict[str, Any], context: CallContext | None
    ) -> tuple[Any, dict[str, Any]]:
        """Turn checked JSON parameters into the handler and its keyword arguments.

        pydantic converts the values to the annotated types; jsonschema has already
        checked them, so a failure here is a validator of the user's own types rejecting
        a value, reported as a structural error by the caller. A `RawTool`'s parameters
        go to its `run_raw` as they are.
        """
        assert self.handler is not None
        if self._signature is None:
            return self.handler, {"params": params, "context": context}
        return self.handler, self._signature.arguments(params, context)

    def dump_output(self, value: Any) -> Any:
        """The JSON form of a handler's return value (pydantic models, dataclasses...)."""
        if isinstance(value, str | int | float | bool | type(None)):
            return value
        return to_jsonable_python(value)

    def describe(self) -> dict[str, Any]:
        """The tool as JSON (schemas/tool.json), for menus, UIs, logs and stored runs.

        Everything in it is plain JSON, so a predicate for `requires_approval` shows as
        `"conditional"`: the rule itself is code and stays on this side.
        """
        rule = self.requires_approval
        options: dict[str, Any] = {
            "latent": self.is_latent,
            "requires_approval": rule if isinstance(rule, bool) else "conditional",
            "depends_on": list(self.depends_on),
            "output_path": self.output_path,
            "timeout": self.timeout,
            "max_concurrency": self.max_concurrency,
            "expected_duration": self.expected_duration,
            "bind": dict(self.bind),
            "idempotent": self.idempotent,
            "read_only": self.read_only,
            "defer_loading": self.defer_loading,
        }
        return {
            "name": self.name,
            "description": self.description,
            "parameters": copy.deepcopy(self.parameters),
            "output": copy.deepcopy(self.output),
            "options": options,
        }

    def __repr__(self) -> str:
        kind = "latent" if self.is_latent else "explicit"
        return f"Tool({self.name!r}, {kind})"

    # -- checks made once, at definition --------------------------------------------------

    def _split_dependencies(self) -> None:
        references: list[Expression] = []
        tools: list[str] = []
        for entry in self.depends_on:
            if not isinstance(entry, str):
                raise ConfigurationError(
                    f"tool {self.name!r}: depends_on entries are references or tool names, "
                    f"not {entry!r}"
                )
            if is_reference(entry):
                references.append(_parse_option(entry, self.name, "depends_on"))
            elif TOOL_NAME.fullmatch(entry):
                tools.append(entry)
            else:
                raise ConfigurationError(
                    f"tool {self.name!r}: depends_on entry {entry!r} is neither a reference "
                    "(starting with '†') nor a tool name"
                )
        self.dependency_references = tuple(references)
        self.dependency_tools = tuple(tools)

    def _check_parameters(self) -> None:
        if self.parameters.get("type") != "object":
            raise ConfigurationError(
                f'tool {self.name!r}: the parameters schema must have "type": "object"'
            )
        properties = self.parameters.get("properties", {})
        for key in properties:
            if key.startswith("_"):
                raise ConfigurationError(
                    f"tool {self.name!r}: parameter {key!r} starts with '_', which marks meta "
                    "keys in a call"
                )
        for key in self.bind:
            if key not in properties:
                raise ConfigurationError(
                    f"tool {self.name!r}: bind names {key!r}, which is not a parameter"
                )


class RawTool(Tool):
    """A tool whose calls take their parameters as the model wrote them: a sub-agent (its
    input), a remote A2A agent, an MCP server's tool.

    Its `parameters` schema is given, not read from a signature, and checked before a
    call runs; the checked JSON object goes to `run_raw` as it is, with the call's
    context (always made for these tools). A subclass implements `run_raw`; nothing else
    of `Tool` is overridden.
    """

    takes_raw_parameters = True

    def __init__(
        self,
        name: str,
        description: str = "",
        parameters: Mapping[str, Any] | type[pydantic.BaseModel] | None = None,
        output: Mapping[str, Any] | type[pydantic.BaseModel] | None = None,
        **options: Any,
    ) -> None:
        if parameters is None:
            raise ConfigurationError(f"tool {name!r} needs a parameters schema")
        super().__init__(name, description, parameters, output, self.run_raw, **options)

    async def run_raw(self, params: dict[str, Any], context: CallContext) -> Any:
        """Run one call on its checked parameters; what it returns is the result, what it
        raises fails the call (PROTOCOL §7)."""
        raise NotImplementedError


class _HandlerSignature:
    """What a handler's signature says: its schema, its context parameter, its types."""

    def __init__(self, handler: Callable[..., Any], tool_name: str) -> None:
        if not callable(handler):
            raise ConfigurationError(f"tool {tool_name!r}: handler {handler!r} is not callable")
        self.is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004
        )
        signature = inspect.signature(handler)
        hints = _type_hints(handler)
        self.context_parameter: str | None = None
        fields: dict[str, Any] = {}
        for parameter in signature.parameters.values():
            annotation = hints.get(parameter.name, parameter.annotation)
            if annotation is CallContext:
                self.context_parameter = parameter.name
                continue
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise ConfigurationError(
                    f"tool {tool_name!r}: *args and **kwargs cannot be described to a model; "
                    "name every parameter"
                )
            if parameter.kind is parameter.POSITIONAL_ONLY:
                raise ConfigurationError(
                    f"tool {tool_name!r}: positional-only parameter {parameter.name!r} cannot "
                    "be passed by name"
                )
            if parameter.name.startswith("_"):
                # pydantic would quietly make it a private attribute, leaving it out of the
                # schema, and the handler would then be called without it.
                raise ConfigurationError(
                    f"tool {tool_name!r}: parameter {parameter.name!r} starts with '_', which "
                    "marks meta keys in a call"
                )
            if annotation is inspect.Parameter.empty:
                annotation = Any
            default = ... if parameter.default is inspect.Parameter.empty else parameter.default
            fields[parameter.name] = (annotation, default)
        try:
            self.model: type[pydantic.BaseModel] = pydantic.create_model(
                f"{tool_name}_parameters",
                __config__=pydantic.ConfigDict(extra="forbid"),
                **fields,
            )
            self.parameters_schema = self.model.model_json_schema()
        except Exception as error:
            raise ConfigurationError(
                f"tool {tool_name!r}: cannot build a schema from its signature: {error}"
            ) from error
        self.parameters_schema.pop("title", None)
        self.fields = tuple(fields)
        # Every parameter a bare `str`/`int`/`float`/`bool` or `Any` (or unannotated): a
        # value of exactly that type (any value for `Any`) is what pydantic would hand back
        # itself, the same object, so a call giving every parameter that way skips the
        # model (`arguments`). Anything else, a missing
        # parameter (its default), a bool for an int, an extra key, takes pydantic's path.
        plain = {name: spec[0] for name, spec in fields.items()}
        self.plain: dict[str, Any] | None = (
            plain if all(kind in _PLAIN_TYPES for kind in plain.values()) else None
        )
        returned = hints.get("return", signature.return_annotation)
        self.output_schema: dict[str, Any] | None = None
        if returned not in _NO_OUTPUT_ANNOTATIONS and not _may_return_branch(returned):
            try:
                self.output_schema = pydantic.TypeAdapter(returned).json_schema()
            except Exception:
                self.output_schema = None  # a return type pydantic cannot describe: unchecked

    def arguments(self, params: dict[str, Any], context: CallContext | None) -> dict[str, Any]:
        plain = self.plain
        if plain is not None and len(params) == len(plain):
            for name, value in params.items():
                kind = plain.get(name)
                if kind is not type(value) and kind is not Any:  # None: not a parameter
                    break
            else:  # pydantic would return these very objects (tests/test_fast_paths.py)
                arguments = dict(params)
                if self.context_parameter is not None:
                    arguments[self.context_parameter] = context
                return arguments
        converted = self.model.model_validate(params)
        arguments = {name: getattr(converted, name) for name in self.fields}
        if self.context_parameter is not None:
            arguments[self.context_parameter] = context
        return arguments


_PLAIN_TYPES = frozenset({str, int, float, bool, Any})


def _may_return_branch(annotation: Any) -> bool:
    """`-> Branch` or `-> int | Branch`: a Branch's value may be anything, so the
    annotation does not constrain the output, and there is no output schema to check."""
    if annotation is Branch:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_may_return_branch(member) for member in get_args(annotation))
    return False


def _type_hints(handler: Callable[..., Any]) -> dict[str, Any]:
    """The handler's annotations, resolved.

    Under `from __future__ import annotations` they are strings, and one that names a
    class local to the defining function (a pydantic model made in a test or a factory)
    cannot be resolved from the module's globals alone: like pydantic, look in the
    namespace of the code that defined the tool as well. When even that fails, fall back
    to the raw annotations.
    """
    try:
        return get_type_hints(handler, include_extras=True)
    except Exception:
        pass
    try:
        return get_type_hints(handler, localns=_definer_namespace(), include_extras=True)
    except Exception:
        return {}


def _definer_namespace() -> dict[str, Any] | None:
    """The local names of the first frame on the stack outside tickloop: the user's code
    that is applying `@tool` or calling `Tool(...)`."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module != "tickloop" and not module.startswith("tickloop."):
            return dict(frame.f_locals)
        frame = frame.f_back
    return None


def _schema_of(
    schema: Mapping[str, Any] | type[pydantic.BaseModel], tool_name: str, what: str
) -> dict[str, Any]:
    if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
        return schema.model_json_schema()  # valid as pydantic made it
    if isinstance(schema, Mapping):
        result = dict(schema)
    else:
        raise ConfigurationError(
            f"tool {tool_name!r}: {what} must be a JSON Schema dict or a pydantic model class, "
            f"not {type(schema).__name__}"
        )
    import jsonschema  # only for schemas a user wrote

    try:
        jsonschema.Draft202012Validator.check_schema(result)
    except jsonschema.SchemaError as error:
        raise ConfigurationError(
            f"tool {tool_name!r}: {what} is not a valid JSON Schema: {error.message}"
        ) from error
    return result


def _parse_option(text: str, tool_name: str, option: str) -> Expression:
    try:
        return parse_expression(text)
    except ReferenceSyntaxError as error:
        raise ConfigurationError(f"tool {tool_name!r}: {option} {error}") from error


def _check_approval_rule(rule: Any, tool_name: str) -> ApprovalRule:
    if isinstance(rule, bool) or callable(rule):
        checked: ApprovalRule = rule
        return checked
    raise ConfigurationError(
        f"tool {tool_name!r}: requires_approval must be True, False or a predicate over the "
        f"parameters, not {rule!r}"
    )


def _check_depends_on(value: Any, tool_name: str) -> tuple[str, ...]:
    # A bare string is iterable too: "other" would become five one-letter dependencies.
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigurationError(
            f"tool {tool_name!r}: depends_on must be a list of references or tool names, "
            f"not {value!r} (write depends_on=[{value!r}])"
        )
    entries = tuple(value)
    for entry in entries:
        if not isinstance(entry, str):
            raise ConfigurationError(
                f"tool {tool_name!r}: depends_on entries must be strings, not {entry!r}"
            )
    return entries


def _check_bind(value: Any, tool_name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(key, str) and isinstance(source, str) for key, source in value.items()
    ):
        raise ConfigurationError(
            f"tool {tool_name!r}: bind must map parameter names to input keys "
            f"(bind={{'unit': 'preferred_unit'}}), not {value!r}"
        )
    return dict(value)


def _check_positive(value: Any, tool_name: str, option: str, kind: type) -> Any:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value != value  # NaN compares false with everything, so `<= 0` lets it through
        or value <= 0
    ):
        raise ConfigurationError(f"tool {tool_name!r}: {option} must be a positive number")
    if kind is int and not isinstance(value, int):
        raise ConfigurationError(f"tool {tool_name!r}: {option} must be a whole number")
    try:
        return kind(value)
    except OverflowError:  # an int too large for a float
        raise ConfigurationError(f"tool {tool_name!r}: {option} must be a finite number") from None


def _check_finite(value: float | None, tool_name: str, option: str) -> float | None:
    if value is not None and value == float("inf"):
        raise ConfigurationError(f"tool {tool_name!r}: {option} must be a finite number")
    return value


# `@tool` gives a Tool; `@tool(...)` gives a decorator that does (typed both ways, so a
# user's `mypy --strict` sees a `Tool`, not an untyped decorator). The options are
# listed in each overload and in the implementation: add a new one to all three.
@overload
def tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: ApprovalRule = False,
    depends_on: Iterable[str] = (),
    output_path: str | None = None,
    timeout: float | None = None,
    max_concurrency: int | None = None,
    bind: Mapping[str, str] | None = None,
    idempotent: bool = False,
    expected_duration: float | None = None,
    read_only: bool = False,
    defer_loading: bool = False,
) -> Tool: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: ApprovalRule = False,
    depends_on: Iterable[str] = (),
    output_path: str | None = None,
    timeout: float | None = None,
    max_concurrency: int | None = None,
    bind: Mapping[str, str] | None = None,
    idempotent: bool = False,
    expected_duration: float | None = None,
    read_only: bool = False,
    defer_loading: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: ApprovalRule = False,
    depends_on: Iterable[str] = (),
    output_path: str | None = None,
    timeout: float | None = None,
    max_concurrency: int | None = None,
    bind: Mapping[str, str] | None = None,
    idempotent: bool = False,
    expected_duration: float | None = None,
    read_only: bool = False,
    defer_loading: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a `Tool` from a type-hinted function; the docstring is the description.

    Usable bare (`@tool`) or with options (`@tool(timeout=10)`).
    """

    def make(function: Callable[..., Any], stacklevel: int = 2) -> Tool:
        made = Tool(
            name=name or function.__name__,
            description=description if description is not None else (function.__doc__ or ""),
            handler=function,
            requires_approval=requires_approval,
            depends_on=depends_on,
            output_path=output_path,
            timeout=timeout,
            max_concurrency=max_concurrency,
            bind=bind,
            idempotent=idempotent,
            expected_duration=expected_duration,
            read_only=read_only,
            defer_loading=defer_loading,
        )
        if not made.description:
            # Once per definition (the warnings filter's default): the model would see a
            # bare name, and nothing else says so. `stacklevel` points at the user's line.
            warnings.warn(
                f"tool {made.name!r} has no description: the model sees only its name and "
                "parameters; give the function a docstring or pass description=",
                UserWarning,
                stacklevel=stacklevel,
            )
        return made

    if fn is not None:
        return make(fn, stacklevel=3)
    return make


class ToolSource:
    """Stands in a tools list for tools that are known only once it is connected (an MCP
    server). The run opens every source in its own nursery, lists its tools, then builds
    the `ToolSet` (see `_engine._sources`); this layer only tells sources and tools apart,
    so it stays free of I/O.
    """

    #: How errors name the source (a command line or a URL).
    label: str = "a tool source"

    def may_require_approval(self) -> bool:
        """Whether some tool of this source may need the approval hook (checked before
        anything runs, like a tool's `requires_approval`)."""
        return False


class MakesTool:
    """Stands in a tools list for the tool it makes (an `Agent`: `agent.as_tool()`, a
    call that runs it as a child run), so every `tools=` takes it alike: an Agent's,
    `run_calls`' and `execute`'s. This layer only asks for the tool."""

    def as_tool(self) -> Tool:
        raise NotImplementedError


def split_tools(
    items: Sequence[Tool | ToolSource | MakesTool] | Mapping[str, Tool | MakesTool] | ToolSet,
) -> tuple[list[Tool], list[ToolSource]]:
    """The plain tools and the tool sources of a `tools=` argument, each in given order
    (a `MakesTool` as the tool it makes)."""
    if isinstance(items, Mapping):
        return _tools_of_mapping(items), []
    if isinstance(items, ToolSource):  # a lone server passed where a list is expected
        return [], [items]
    _check_tools_argument(items)
    tools: list[Tool] = []
    sources: list[ToolSource] = []
    for item in items:
        if isinstance(item, ToolSource):
            if any(item is other for other in sources):
                raise ConfigurationError(f"{item.label} is listed twice among the tools")
            sources.append(item)
        elif isinstance(item, MakesTool):
            tools.append(item.as_tool())
        else:
            tools.append(item)
    return tools, sources


def _tools_of_mapping(items: Mapping[Any, Any]) -> list[Tool]:
    """The tools of a `{name: tool}` mapping, whose keys must be the tools' own names.

    A model calls a tool by `Tool.name`; a key that differs would be silently ignored
    (the model would be refused "unknown tool"), so it is refused here instead of
    renaming the tool behind its definition's back (docs/decisions.md)."""
    if isinstance(items, ToolSet):
        return list(items.values())
    tools: list[Tool] = []
    for key, item in items.items():
        if isinstance(item, MakesTool):
            item = item.as_tool()
        if not isinstance(item, Tool):
            raise ConfigurationError(
                f"tools= maps {key!r} to {item!r}, which is not a tickloop Tool "
                "(decorate the function with @tl.tool)"
            )
        if key != item.name:
            raise ConfigurationError(
                f"tools= maps {key!r} to tool {item.name!r}, but a model calls a tool by its "
                f"own name: pass a list (tools=[{item.name}, ...]), or name the tool "
                f"{key!r} where it is made (@tl.tool(name={key!r}) or tl.tool(fn, name={key!r}))"
            )
        tools.append(item)
    return tools


def missing_bindings(tools: Iterable[Tool], input: Any) -> list[str]:
    """Bound parameters the run's input cannot fill, described for an error.

    A bound parameter is hidden from the model, so a missing input key is the
    developer's to fix: reported before the run, never to the model as a schema error.
    Optional parameters (with a default) may go without.
    """
    problems: list[str] = []
    for item in tools:
        required = set(item.parameters.get("required", ()))
        for parameter, key in item.bind.items():
            if parameter not in required:
                continue
            if not isinstance(input, Mapping) or key not in input:
                problems.append(
                    f"tool {item.name!r} binds parameter {parameter!r} to input key {key!r}, "
                    "which the run's input does not have"
                )
    return problems


def _check_tools_argument(tools: Any) -> None:
    """`tools=echo` or `tools="echo"` would be iterated into nonsense: say what is expected."""
    if isinstance(tools, Tool | str | bytes) or not isinstance(tools, Iterable | Mapping):
        hint = f"tools=[{tools.name}]" if isinstance(tools, Tool) else "tools=[my_tool]"
        raise ConfigurationError(
            f"tools= expects a list of tools ({hint}), not {type(tools).__name__} {tools!r}"
        )


class ToolSet(Mapping[str, Tool]):
    """The tools of one run, checked together: names unique, dependencies known."""

    def __init__(
        self,
        tools: Sequence[Tool] | Mapping[str, Tool] | ToolSet,
        *,
        deferred: Iterable[str] = (),
    ) -> None:
        _check_tools_argument(tools)
        items = _tools_of_mapping(tools) if isinstance(tools, Mapping) else list(tools)
        self._tools: dict[str, Tool] = {}
        for item in items:
            if isinstance(item, ToolSource):
                raise ConfigurationError(
                    f"{item.label} must be opened before its tools can be used: pass it in "
                    "tools=[...] of an Agent, run_calls or execute"
                )
            if not isinstance(item, Tool):
                raise ConfigurationError(
                    f"{item!r} is not a tickloop Tool (decorate the function with @tl.tool)"
                )
            if item.name in self._tools:
                raise ConfigurationError(f"two tools are named {item.name!r}")
            self._tools[item.name] = item
        for item in items:
            for dependency in item.dependency_tools:
                if dependency not in self._tools:
                    raise ConfigurationError(
                        f"tool {item.name!r} depends on tool {dependency!r}, which is not "
                        f"among the tools ({', '.join(sorted(self._tools)) or 'none'})"
                    )
        # Tools off the menu until a `search_tools` call of an earlier request found them
        # (tool search): a call of one before that is refused on arrival (the scheduler
        # reveals them tick by tick, `OpenTick.found`). Every tool is still iterated here,
        # so configuration checks (the approval hook's) cover them too.
        self.deferred: frozenset[str] = frozenset(deferred)
        unknown = sorted(self.deferred - set(self._tools))
        if unknown:
            raise ConfigurationError(f"deferred tools {unknown} are not among the tools")

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    # The dict's own lookups: Mapping's generic ones go through __getitem__ and a
    # KeyError, and the scheduler asks for a tool several times per call.
    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def get(self, name: str, default: Any = None) -> Any:
        return self._tools.get(name, default)

    @property
    def may_require_approval(self) -> list[str]:
        return [name for name, item in self._tools.items() if item.may_require_approval]

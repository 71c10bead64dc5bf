"""What the model is shown: the request built from the log, and the solution schema.

All rendering lives here so it can be tuned in one place. The request is rebuilt from
the log every iteration (PROTOCOL §8), never patched, so a resumed run sees exactly what
an uninterrupted one would have.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .._core._expressions import REF
from .._core._log import ContextLog
from .._core._media import MEDIA_KEY, media_refs
from .._core._tools import Tool, ToolSet
from ._compaction import HISTORY_KIND, history_turns

__all__ = [
    "DEFAULT_CONTEXT_BUDGET",
    "PROTOCOL_GUIDE",
    "PromptRenderer",
    "chat_key",
    "conversation_summary",
    "cut_to_budget",
    "render_messages",
    "solution_schema",
    "strip_strict_nulls",
    "tool_call_schema",
    "visible_parameters",
]

PROTOCOL_GUIDE = """\
You work by writing a solution: a JSON object {"calls": [...], "output": ...}.

- "calls" is a plan: tool calls that tickloop runs as soon as their inputs exist, in
  parallel, while you are still writing. Each call is an object with "_tool" (the tool
  name) and the tool's parameters.
- A parameter value may be a reference to data instead of a literal: a string starting
  with "†", like "†state.page.body" or "†input.question" or "†state.items[0]".
  "†a || †b" takes the first that exists; "†a && †b" waits for both and takes the last.
  Write "††" to start a literal string with "†".
- "_outputPath" says where a call's result goes, e.g. "†state.page". Later calls can
  read it by reference, in the same solution. "†state.x && †state.y" writes to both.
  "_outputMethod" is "set" (default), "merge", "assign", "push" or "concat".
  A call without "_outputPath" runs but its result is dropped.
- "_id" names a call (optional); "_reasoningForCall" is free text for your reasoning.
- Latent tools have no code: you write their result yourself in "_output", and give
  it one "_outputPath" term (no "&&" or "||").
- Plan order: a reference reads what the calls written *before it* leave there, as if
  the calls ran one at a time in your order, so write producers before consumers (three
  calls that push to †state.docs, then one that reads †state.docs, sees all three). A
  reference to a path no earlier call writes waits until a later call writes it.
- Set "output" to the final answer when you are done, otherwise null. It may be, or
  hold, references ("output": "†state.report"), read once this plan's calls are done,
  so never copy back what tools wrote. You see the results (the state) and any errors
  in the next request.
- A large value in the state is shown cut, marked with its path and full size; a
  reference to that path (†state.page) still passes the whole value to a tool.
"""


DEFAULT_CONTEXT_BUDGET = 4000
"""Characters of JSON each state value may take in a request before it is shown cut."""


def render_messages(
    log: ContextLog,
    tools: ToolSet,
    instructions: str | None,
    output_schema: Any,
    context_budget: int | None = DEFAULT_CONTEXT_BUDGET,
) -> list[dict[str, Any]]:
    """Chat messages for one solution request, rendered from the log."""
    return PromptRenderer().render(log, tools, instructions, output_schema, context_budget)


class PromptRenderer:
    """Renders the requests of one run, reading each log message once.

    The log only grows, so what a request needs from its history (the chat's text
    messages, each kind's latest description and schema, the last plan, where the last
    solution was) is kept up to date from the messages appended since the previous
    request. Rendering then costs what the request shows, not the length of the run.
    A log that is not the one seen before (or shrank) is read again from the start.
    """

    __slots__ = (
        "_chat",
        "_compaction",
        "_descriptions",
        "_messages",
        "_plan",
        "_schemas",
        "_seen",
        "_solution_at",
        "_system",
    )

    def __init__(self) -> None:
        self._reset(None)

    def _reset(self, messages: list[dict[str, Any]] | None) -> None:
        self._messages = messages
        self._seen = 0
        self._system: list[str] = []
        # The chat's text messages, each with the key a compaction covers it by (§16).
        self._chat: list[tuple[str, dict[str, Any]]] = []
        self._compaction: tuple[str, frozenset[str]] | None = None  # the newest one
        self._descriptions: dict[str, Any] = {}
        self._schemas: dict[str, Any] = {}
        self._plan: dict[str, Any] | None = None
        self._solution_at = -1  # index of the last solution message

    def _catch_up(self, log: ContextLog) -> None:
        messages = log.messages
        if messages is not self._messages or len(messages) < self._seen:
            self._reset(messages)
        for index in range(self._seen, len(messages)):
            message = messages[index]
            kind = message.get("type")
            if kind == "text":
                role = message.get("role", "user")
                if role == "system":
                    self._system.append(str(message.get("text", "")))
                else:
                    content = {"role": role, "content": str(message.get("text", ""))}
                    self._chat.append((chat_key(index), content))
            elif kind == "data":
                data_kind = str(message.get("kind"))
                if message.get("description"):
                    self._descriptions[data_kind] = message["description"]
                if message.get("schema"):
                    self._schemas[data_kind] = message["schema"]
            elif kind == "plan":
                self._plan = message
            elif kind == "solution":
                self._solution_at = index
            elif kind == "compaction":
                self._compaction = (str(message["summary"]), frozenset(message["covers"]))
        self._seen = len(messages)

    def render(
        self,
        log: ContextLog,
        tools: ToolSet,
        instructions: str | None,
        output_schema: Any,
        context_budget: int | None = DEFAULT_CONTEXT_BUDGET,
    ) -> list[dict[str, Any]]:
        """Chat messages for one solution request, rendered from the log."""
        self._catch_up(log)
        system_parts = [instructions.strip()] if instructions else []
        system_parts.append(PROTOCOL_GUIDE)
        system_parts.append(render_tool_menu(tools))
        system_parts.append(
            "## Output\nThe final output must match this JSON Schema:\n"
            + _json(output_schema if output_schema is not None else {})
        )
        system_parts.extend(self._system)
        chat = self._shown_chat()
        context = self.context(log, context_budget)
        chat.append({"role": "user", "content": with_media_parts(context, log)})
        return [{"role": "system", "content": "\n\n".join(system_parts)}, *chat]

    def _shown_chat(self) -> list[dict[str, Any]]:
        """The chat as a request shows it: the newest compaction's summary in place of
        the messages it covers (they are the oldest, §16), then the others."""
        summary = self._compacted_chat()
        covered = self._compaction[1] if self._compaction is not None else frozenset()
        return [
            *({"role": "user", "content": text} for _, text in summary),
            # copies: the caller may change them
            *(dict(message) for key, message in self._chat if key not in covered),
        ]

    def _compacted_history(self, history: Any) -> Any:
        """A session run's history as the request shows it once a compaction covers its
        oldest runs (PROTOCOL §16): the runs kept, after a note; `†history[i]` still
        reads the whole history."""
        assert self._compaction is not None
        kept = [entry for _, entry in history_turns(history, self._compaction[1])]
        if not isinstance(history, list) or len(kept) == len(history):
            return history
        gone = len(history) - len(kept)
        note = f"<the {gone} earliest entries are in the summary of the earlier conversation>"
        return [note, *kept]

    def _compacted_chat(self) -> list[tuple[str, str]]:
        """The summary of the newest compaction, as (key "compaction", text), if any."""
        if self._compaction is None:
            return []
        return [("compaction", conversation_summary(self._compaction[0]))]

    def compactable_turns(
        self, log: ContextLog, budget: int | None = DEFAULT_CONTEXT_BUDGET
    ) -> list[tuple[str, str]]:
        """A plan request's compactable turns, oldest first, as (key, text): the newest
        compaction's summary, then a session's earlier runs (its `history`) when the
        request shows them whole, then the chat's text messages it does not cover but the
        last (PROTOCOL §16). A history over the per-value `budget` is shown cut (§8), at
        a size that no longer grows, so it is not a turn. The input, the state, the
        previous plan and the last errors are never compacted."""
        self._catch_up(log)
        covered = self._compaction[1] if self._compaction is not None else frozenset()
        history = history_turns(log.view(HISTORY_KIND), covered)
        if budget is not None and len(_json([entry for _, entry in history])) > budget:
            history = []
        shown = [(key, message) for key, message in self._chat if key not in covered]
        return [
            *self._compacted_chat(),
            *((key, _json(entry)) for key, entry in history),
            *((key, str(message["content"])) for key, message in shown[:-1]),
        ]

    def context(self, log: ContextLog, budget: int | None = DEFAULT_CONTEXT_BUDGET) -> str:
        """The data the model works from: every kind's view, the last plan, the last errors.

        Each value is shown within `budget` characters (None: everything), PROTOCOL §8.
        """
        self._catch_up(log)
        sections: list[str] = []
        kinds = [kind for kind in log.kinds() if kind != "error"]
        if "state" not in kinds:  # every request shows the state (PROTOCOL §8), empty or not
            kinds.append("state")
        for kind in kinds:
            view = log.view(kind)
            if kind == HISTORY_KIND and self._compaction is not None:
                view = self._compacted_history(view)
            sections.append(
                _render_kind(
                    kind, view, budget, self._descriptions.get(kind), self._schemas.get(kind)
                )
            )
        if self._plan is not None:
            sections.append("## Previous plan\n" + _json(self._plan.get("calls", [])))
        messages = log.messages
        errors = [
            message
            for message in messages[self._solution_at + 1 :]
            if message.get("type") == "data" and message.get("kind") == "error"
        ]
        if errors:
            # The log keeps them in the order they happened (PROTOCOL §7), and a call that
            # fails while the model still writes races the stream's own errors; shown
            # sorted, the same errors always give the same request (docs/decisions.md).
            rendered = "\n".join(sorted(_json(message.get("data")) for message in errors))
            sections.append(
                "## Errors from the last plan\nFix these in your next solution:\n" + rendered
            )
        return "\n\n".join(sections)


def with_media_parts(text: str, log: ContextLog) -> str | list[dict[str, Any]]:
    """The context message's content: its text, then each image or audio clip the views
    hold (`$media` references, once each, in view order) as a media part, which the model
    client turns into its provider's own (an image part, an image block)."""
    parts: list[dict[str, Any]] = []
    seen: set[str] = set()
    for kind in log.kinds():
        if kind == "error":
            continue
        for ref in media_refs(log.view(kind)):
            if ref[MEDIA_KEY] in seen:
                continue
            seen.add(ref[MEDIA_KEY])
            parts.append({"type": "text", "text": f"{ref[MEDIA_KEY]}:"})
            parts.append({"type": "media", **ref})
    if not parts:
        return text
    return [{"type": "text", "text": text}, *parts]


def chat_key(index: int) -> str:
    """What a `compaction` message's `covers` names a text message of the log by: its
    place in the log, which never changes (the log only grows, §1)."""
    return f"message {index}"


def conversation_summary(summary: str) -> str:
    """How a request shows the summary of the earlier conversation it compacted."""
    return "## Summary of the earlier conversation (compacted)\n" + summary


def render_tool_menu(tools: ToolSet) -> str:
    lines = ["## Tools"]
    for tool in tools.values():
        lines.append(
            f"### {tool.name}"
            + (" (latent: write its result in _output)" if tool.is_latent else "")
        )
        if tool.description:
            lines.append(tool.description)
        lines.append("Parameters: " + _json(visible_parameters(tool)))
        if tool.output is not None:
            lines.append("Result: " + _json(tool.output))
        notes = []
        if tool.output_path:
            notes.append(f"always writes to {tool.output_path}")
        if tool.depends_on:
            notes.append("runs after " + ", ".join(tool.depends_on))
        if tool.requires_approval is not False:
            notes.append("a person may have to approve it")
        as_text = json_text_parameters(tool)
        if as_text:
            notes.append(
                "write " + ", ".join(sorted(as_text)) + " as JSON text (a string holding the "
                "JSON value)"
            )
        if notes:
            lines.append("Notes: " + "; ".join(notes) + ".")
    return "\n".join(lines)


def render_context(log: ContextLog, budget: int | None = DEFAULT_CONTEXT_BUDGET) -> str:
    """The data the model works from: every kind's view, the last plan, the last errors.

    Each value is shown within `budget` characters (None: everything), PROTOCOL §8.
    """
    return PromptRenderer().context(log, budget)


def last_tick_errors(log: ContextLog) -> list[dict[str, Any]]:
    """Error Messages appended since the last solution (the last tick's errors)."""
    errors: list[dict[str, Any]] = []
    for message in reversed(log.messages):
        if message.get("type") == "solution":
            break
        if message.get("type") == "data" and message.get("kind") == "error":
            errors.append(message)
    errors.reverse()
    return errors


def _render_kind(kind: str, view: Any, budget: int | None, description: Any, schema: Any) -> str:
    lines = [f"## {kind}"]
    if description:
        lines.append(str(description))
    if schema is not None:
        lines.append("Schema: " + _json(schema))
    lines.append(f"Read it with references like †{kind}.<key>.")
    view = {} if view is None and kind == "state" else view
    if budget is not None:
        view = cut_to_budget(view, kind, budget)
    lines.append(_view_json(view, written=kind != "input"))
    return "\n".join(lines)


_MAX_SHOWN_KEYS = 50  # an object over budget shows its keys (one level) up to this many
_PREVIEW = 200  # characters of a cut value shown, so the model knows what it is


def cut_to_budget(value: Any, kind: str, budget: int) -> Any:
    """The view with every value over `budget` characters of JSON shown cut (PROTOCOL §8).

    A large tool result must not ride along in every later request: it is replaced by a
    marker naming its path and full size (with the start of it), and the model is told a
    reference still reaches all of it. An object over budget is opened one level at a
    time, so the model still sees its keys and every small value in it.
    """
    return _cut(value, REF + kind, budget, kind != "input")


def _cut(value: Any, path: str, budget: int, written: bool = True) -> Any:
    text = _view_json(value, written)
    if len(text) <= budget:
        return value
    if (
        isinstance(value, dict)
        and 0 < len(value) <= _MAX_SHOWN_KEYS
        and all(_KEY.fullmatch(key) for key in value)
    ):
        return {key: _cut(item, f"{path}.{key}", budget, written) for key, item in value.items()}
    preview = text[: min(budget // 2, _PREVIEW)]
    return (
        f"<cut: {len(text):,} characters; starts {preview}…; pass {path} to a tool to use "
        "all of it>"
    )


def _last(messages: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    for message in reversed(messages):
        if message.get("type") == kind:
            found: dict[str, Any] = message
            return found
    return None


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=None, default=str)


def _view_json(value: Any, written: bool) -> str:
    """A view as a request shows it. The views calls write (the state, a user's kinds)
    have their keys sorted, so the text is a function of the value alone, not of the
    order the calls that wrote it finished in: the same state always gives the same
    request (replay and fork compare requests, docs/replay.md). The input is shown in the
    order its keys were given."""
    return json.dumps(value, ensure_ascii=False, indent=None, default=str, sort_keys=written)


# ---------------------------------------------------------------------------------------
# The solution schema


def visible_parameters(tool: Tool) -> dict[str, Any]:
    """The parameter schema the model sees: bound parameters are hidden (PROTOCOL §9)."""
    if not tool.bind:
        return tool.parameters
    schema = dict(tool.parameters)
    properties = {
        key: value for key, value in schema.get("properties", {}).items() if key not in tool.bind
    }
    schema["properties"] = properties
    if "required" in schema:
        schema["required"] = [key for key in schema["required"] if key not in tool.bind]
    return schema


_KEY = re.compile(r"[A-Za-z0-9_$-]+")  # a key a reference can spell (PROTOCOL §3)

_REFERENCE = {"type": "string", "description": "a reference expression, like †state.x"}
_METHODS = ["set", "merge", "assign", "push", "concat"]


def tool_call_schema(tool: Tool, *, strict: bool = True) -> dict[str, Any]:
    """One tool's call schema: `_tool` fixed, its parameters (each may be a reference),
    and the meta keys. In strict mode every key is required and optional ones nullable,
    as OpenAI strict structured outputs demand; `strip_strict_nulls` undoes that."""
    parameters = visible_parameters(tool)
    definitions = parameters.get("$defs", {})
    required = set(parameters.get("required", []))
    properties: dict[str, Any] = {"_tool": {"type": "string", "enum": [tool.name]}}
    as_text = json_text_parameters(tool) if strict else frozenset()
    for key, declared in parameters.get("properties", {}).items():
        if key in as_text:
            value_schema: dict[str, Any] = {"type": "string", "description": _JSON_TEXT_NOTE}
            properties[key] = value_schema if key in required else _nullable(value_schema)
            continue
        value_schema = _or_reference(_referable(_strictify(declared) if strict else declared))
        properties[key] = value_schema if key in required or not strict else _nullable(value_schema)
    path_schema: dict[str, Any] = (
        {"type": "string", "enum": [tool.output_path]}
        if tool.output_path
        else {
            "type": "string",
            "description": "where your _output goes: one term, like †state.x"
            if tool.is_latent
            else "where the result goes, like †state.x",
        }
    )
    meta: dict[str, Any] = {
        "_outputPath": path_schema,
        "_outputMethod": {"type": "string", "enum": _METHODS},
        "_id": {"type": "string"},
        "_reasoningForCall": {"type": "string"},
    }
    for key, meta_schema in meta.items():
        properties[key] = _nullable(meta_schema) if strict else meta_schema
    call_required = ["_tool", *(key for key in properties if key in required)]
    if tool.is_latent:
        output = tool.output if tool.output is not None else {}
        properties["_output"] = _strictify(output) if strict else output
        call_required.append("_output")
    schema: dict[str, Any] = {
        "type": "object",
        "description": tool.description or tool.name,
        "properties": properties,
        "required": list(properties) if strict else call_required,
        "additionalProperties": False,
    }
    if definitions and not as_text:
        schema["$defs"] = {
            k: _referable(_strictify(v) if strict else v) for k, v in definitions.items()
        }
    elif definitions:  # only the definitions the parameters still sent as schemas use
        used = _used_definitions(properties, definitions)
        if used:
            schema["$defs"] = {
                k: _referable(_strictify(v)) for k, v in definitions.items() if k in used
            }
    return schema


# ---------------------------------------------------------------------------------------
# Parameters strict structured output cannot describe


_JSON_TEXT_NOTE = (
    "this parameter's value written as JSON text (its schema is in the tool menu), or a "
    "reference like †state.x"
)

#: Keywords strict structured output refuses outright (OpenAI's strict mode); a schema
#: using them is not made strict, it is sent as JSON text for that parameter only.
_NOT_IN_STRICT = frozenset(
    {
        "patternProperties",
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "unevaluatedProperties",
        "propertyNames",
    }
)


def json_text_parameters(tool: Tool) -> frozenset[str]:
    """The parameters of `tool` whose schema strict structured output cannot take (a
    free-form map, `patternProperties`, `not`...). In a strict solution schema each of
    them is written as JSON text and parsed back before the engine sees the call, so one
    odd tool (typically an MCP server's) does not make the whole request fail. A loop
    works these out once per run (`json_text_by_tool`): its every call needs them."""
    parameters = tool.parameters
    definitions = parameters.get("$defs", {})
    return frozenset(
        key
        for key, schema in parameters.get("properties", {}).items()
        if key not in tool.bind and strict_problem(_strictify(schema), definitions) is not None
    )


def json_text_by_tool(tools: ToolSet) -> dict[str, frozenset[str]]:
    """`json_text_parameters` of every tool that has some, by name."""
    found = {name: json_text_parameters(tool) for name, tool in tools.items()}
    return {name: keys for name, keys in found.items() if keys}


def strict_problem(schema: Any, definitions: dict[str, Any] | None = None) -> str | None:
    """What in a (strictified) schema strict structured output cannot take, or None."""
    seen: set[str] = set()

    def visit(node: Any) -> str | None:
        if isinstance(node, list):
            for item in node:
                found = visit(item)
                if found:
                    return found
            return None
        if not isinstance(node, dict):
            return None
        reference = node.get("$ref")
        if isinstance(reference, str) and definitions:
            name = reference.rsplit("/", 1)[-1]
            if name not in seen and name in definitions:
                seen.add(name)
                found = visit(_strictify(definitions[name]))
                if found:
                    return found
        refused = sorted(_NOT_IN_STRICT.intersection(node))
        if refused:
            return f"uses {refused[0]!r}"
        kinds = node.get("type")
        is_object = kinds == "object" or (isinstance(kinds, list) and "object" in kinds)
        if is_object and (
            "properties" not in node and node.get("additionalProperties") is not False
        ):
            return "an object with free-form keys"
        for key, value in node.items():
            if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
                found = visit(list(value.values()))
            elif key in ("items", "anyOf", "oneOf", "allOf", "additionalProperties", "prefixItems"):
                found = visit(value)
            else:
                continue
            if found:
                return found
        return None

    return visit(schema)


def _used_definitions(schema: Any, definitions: dict[str, Any]) -> set[str]:
    used: set[str] = set()
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            reference = node.get("$ref")
            if isinstance(reference, str):
                name = reference.rsplit("/", 1)[-1]
                if name in definitions and name not in used:
                    used.add(name)
                    pending.append(definitions[name])
            pending.extend(value for value in node.values() if isinstance(value, dict | list))
    return used


def parse_json_text_parameters(call: dict[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    """Undo the JSON text of `json_text_parameters` (a reference is left as it is; text
    that does not parse stays text, and the parameter check reports it)."""
    if not keys:
        return call
    result = dict(call)
    for key in keys:
        value = result.get(key)
        if isinstance(value, str) and not value.startswith("†"):
            try:
                result[key] = json.loads(value)
            except ValueError:
                pass
    return result


def _or_reference(schema: Any) -> dict[str, Any]:
    return {"anyOf": [schema, _REFERENCE]}


def _referable(schema: Any) -> Any:
    """Let a reference stand in for any value inside a parameter, not only a whole one.

    The engine resolves strings at every depth (PROTOCOL §3), but under strict structured
    outputs the schema is all the model can write: without this, `{"price":
    "†state.price"}` inside an object parameter would be unwritable. A plain string
    already admits a reference and is left as it is.
    """
    if isinstance(schema, list):
        return [_referable(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = dict(schema)
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(result.get(key), list):
            result[key] = [_referable(item) for item in result[key]]
    if isinstance(result.get("properties"), dict):
        result["properties"] = {
            key: _referable_value(value) for key, value in result["properties"].items()
        }
    if isinstance(result.get("items"), dict):
        result["items"] = _referable_value(result["items"])
    return result


def _referable_value(schema: Any) -> Any:
    """A nested value's schema, or a reference in its place."""
    if not isinstance(schema, dict) or not schema or _admits_any_string(schema):
        return _referable(schema)
    return _or_reference(_referable(schema))


def _admits_any_string(schema: dict[str, Any]) -> bool:
    constrained = ("enum", "const", "pattern", "format", "minLength", "maxLength")
    return schema.get("type") == "string" and not any(key in schema for key in constrained)


def solution_schema(tools: ToolSet, output: Any, *, strict: bool = True) -> dict[str, Any]:
    """`calls` as `anyOf` of every tool's call schema; `output` nullable (PROTOCOL §8).

    `calls` comes first: models write properties in schema order, and calls written
    before the output are calls that start early.
    """
    definitions: dict[str, Any] = {}
    variants = []
    for tool in tools.values():
        call = tool_call_schema(tool, strict=strict)
        for name, definition in call.pop("$defs", {}).items():
            definitions[name] = definition  # pydantic names are unique per model
        variants.append(call)
    output_schema = output if output is not None else {}
    if strict:
        output_schema = _strictify(output_schema)
    if isinstance(output_schema, dict):
        output_schema = dict(output_schema)  # the user's own schema is never changed
    for name, definition in (
        output_schema.pop("$defs", {}).items() if isinstance(output_schema, dict) else ()
    ):
        definitions[name] = _referable(definition)
    # The output may be, or hold, references to what the calls wrote (PROTOCOL §8).
    output_schema = _referable_value(output_schema)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "calls": {"type": "array", "items": {"anyOf": variants} if variants else {}},
            "output": _nullable(output_schema),
        },
        "required": ["calls", "output"],
        "additionalProperties": False,
    }
    if definitions:
        schema["$defs"] = definitions
    return schema


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if not schema:
        return schema  # {} already admits null
    return {"anyOf": [schema, {"type": "null"}]}


_UNSUPPORTED_IN_STRICT = ("default", "title", "examples")


def _strictify(schema: Any) -> Any:
    """Make a schema acceptable to strict structured outputs without changing what a
    correct answer looks like: closed objects, every property required, optional ones
    nullable (their nulls are stripped again before the engine sees the call)."""
    if isinstance(schema, list):
        return [_strictify(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {
        key: _strictify(value) for key, value in schema.items() if key not in _UNSUPPORTED_IN_STRICT
    }
    if result.get("type") == "object" and "properties" in result:
        required = set(result.get("required", []))
        result["properties"] = {
            key: value if key in required else _nullable(value)
            for key, value in result["properties"].items()
        }
        result["required"] = list(result["properties"])
        result["additionalProperties"] = False
    return result


def strip_strict_nulls(
    call: Any, tools: ToolSet, as_text: Mapping[str, frozenset[str]] | None = None
) -> Any:
    """Drop the nulls strict mode forces for optional keys, so the engine sees the call
    the model meant: an absent optional parameter, not a null one (at any depth).
    `as_text` is `json_text_by_tool(tools)`, when the caller keeps it."""
    if not isinstance(call, dict):
        return call
    name = call.get("_tool")
    tool = tools.get(name) if isinstance(name, str) else None
    keys: frozenset[str] = frozenset()
    if tool is not None:
        keys = json_text_parameters(tool) if as_text is None else as_text.get(tool.name, keys)
    if not _holds_null(call) and not keys:
        return call  # nothing to strip or parse: the common case, once per call of a plan
    if tool is None:
        return {key: value for key, value in call.items() if value is not None}
    definitions = tool.parameters.get("$defs", {})
    cleaned = _strip(
        parse_json_text_parameters(
            {key: value for key, value in call.items() if not key.startswith("_")}, keys
        ),
        tool.parameters,
        definitions,
    )
    for key, value in call.items():
        if not key.startswith("_"):
            continue
        if key == "_output":
            output = tool.output or {}
            cleaned[key] = _strip(value, output, output.get("$defs", {}))
        elif value is not None:
            cleaned[key] = value
    return cleaned


def _holds_null(value: Any) -> bool:
    """Whether a null is anywhere in `value` (a walk with its own stack)."""
    stack = None
    node = value
    while True:
        for item in node.values() if isinstance(node, dict) else node:
            if item is None:
                return True
            if type(item) not in _FLAT and isinstance(item, dict | list):
                if stack is None:
                    stack = [item]  # most calls are flat: no list for them
                else:
                    stack.append(item)
        if not stack:
            return False
        node = stack.pop()


_FLAT = frozenset({str, int, float, bool})  # holds no null and nothing to walk


def strip_strict_output_nulls(output: Any, schema: dict[str, Any] | None) -> Any:
    """The output the model meant: strict mode made it write null for optional fields it
    left out, which the user's own schema (what the output is checked against) rejects."""
    if schema is None:
        return output
    return _strip(output, schema, schema.get("$defs", {}))


def _strip(value: Any, schema: Any, definitions: dict[str, Any]) -> Any:
    schema = _dereference(schema, definitions)
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict) and "properties" in schema:
        required = set(schema.get("required", []))
        properties = schema["properties"]
        return {
            key: _strip(item, properties.get(key), definitions)
            for key, item in value.items()
            if not (
                item is None
                and key not in required
                and not _admits_null(_dereference(properties.get(key), definitions))
            )
        }
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_strip(item, schema["items"], definitions) for item in value]
    return value


def _dereference(schema: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        name = schema["$ref"].rsplit("/", 1)[-1]
        return definitions.get(name, schema)
    return schema


def _admits_null(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_admits_null(option) for option in schema.get("anyOf", []))

"""What a code plan's model is shown (PROTOCOL §14 "The request"): tools as Python stubs.

A tool becomes a function signature: its parameters from the parameter schema, required
ones first, each group in schema order; JSON Schema types as annotations (`Literal` for
an enum, a union for `anyOf`); defaults; an object output schema as a `TypedDict`; the
description as the docstring. Names that are not identifiers, or are keywords, are
mangled (`-` → `_`, a trailing `_` for a keyword); two tools (or two parameters of one
tool) that mangle to the same name, or a tool named like a built-in of the language, is
a `ConfigurationError` before anything runs.

The rest of the request is here too: the instructions of the protocol, the output type,
`task_input`, each earlier program with what it printed, its result and its error, and
the variables, each value cut like a state value (PROTOCOL §8). Everything is rendered
from the log, so a resumed run shows the model exactly what an uninterrupted one would.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._core._log import ContextLog
from .._core._tools import Tool, ToolSet
from .._errors import ConfigurationError
from ._compaction import history_turns, latest_compaction
from ._prompt import visible_parameters, with_media_parts

__all__ = [
    "CODE_GUIDE",
    "LANGUAGE_NAMES",
    "PROGRAM_KIND",
    "CodeName",
    "code_names",
    "code_turns",
    "printed_of",
    "python_name",
    "render_code_request",
    "render_stubs",
]

PROGRAM_KIND = "program"
"""The data kind of what each program of a run left: printed lines, result, error
(pushed, one entry per iteration, so the view is every program's in order)."""


def printed_of(log: ContextLog) -> dict[int, list[str]]:
    """What each program of a run printed, by iteration (`RunResult.printed`)."""
    printed: dict[int, list[str]] = {}
    for entry in log.view(PROGRAM_KIND) or ():
        if isinstance(entry, dict) and isinstance(entry.get("iteration"), int):
            printed[entry["iteration"]] = [str(line) for line in entry.get("printed") or ()]
    return printed


# Names a program reads as the language's own (PROTOCOL §14): a tool may not take one.
LANGUAGE_NAMES = frozenset(
    {
        *"len sum min max sorted reversed range enumerate zip map filter any all abs round"
        " divmod pow str int float bool list dict set tuple isinstance repr print".split(),
        *"ToolError Exception ValueError TypeError KeyError IndexError ZeroDivisionError"
        " AssertionError RuntimeError NameError".split(),
        *"final_answer reset task_input asyncio json math re datetime".split(),
    }
)

CODE_GUIDE = """\
You work by writing a Python program that calls the tools below as functions. Answer
with one ```python code block; tickloop runs it with its own interpreter (not CPython):

- Calls run as soon as their inputs are known, in parallel, while you are still
  writing: `a = search(query="x")` then `b = search(query="y")` run together, and so
  does `[fetch(url=u) for u in urls]`. You may also `await` them and use
  `asyncio.gather`, as in async Python. Write the program top to bottom as if each call
  returned at once; a call that changes something (not marked read-only) runs only after
  every earlier call has succeeded.
- A failing call raises `ToolError` (`.type`, `.message`, `.status`) where it is made:
  catch it with try/except, or let it end the program; you see the error next time.
- Values are JSON: None, bools, numbers, strings, lists, dicts (also tuples and sets
  inside the program). Built-ins: len sum min max sorted reversed range enumerate zip map
  filter any all abs round divmod pow str int float bool list dict set tuple isinstance
  repr print, and the methods of str, list and dict. You may import asyncio, json, math,
  re and datetime; nothing else. No classes, `with`, `yield`, or attributes other than
  the methods above (`r.title` reads the key "title" of a dict). Define helpers with def.
- `task_input` holds the run's input. Variables you assign at the top level are kept for
  your next program, and shown to you; `print(...)` lines are shown to you too.
- End with `final_answer(value)` when you have the answer. A program that does not call
  it is run, and you see what it printed, its variables and its last expression's value
  in the next request, so you can write another.
"""


# ---------------------------------------------------------------------------------------
# Names


def python_name(name: str) -> str:
    """A tool's or a parameter's name as a program writes it (PROTOCOL §14)."""
    mangled = re.sub(r"\W", "_", name.replace("-", "_"))
    if not mangled or mangled[0].isdigit():
        mangled = "_" + mangled
    if keyword.iskeyword(mangled) or keyword.issoftkeyword(mangled):
        mangled += "_"
    return mangled


@dataclass(frozen=True)
class CodeName:
    """A tool as a program calls it: its Python name, and its parameters' (Python name →
    the schema's name), in stub order: required first, then optional, each in schema order."""

    name: str
    tool: str
    params: tuple[tuple[str, str], ...]
    required: frozenset[str]
    defaults: Mapping[str, Any]

    @property
    def python_params(self) -> tuple[str, ...]:
        return tuple(python for python, _ in self.params)


def code_names(tools: ToolSet) -> dict[str, CodeName]:
    """Every tool by its Python name; a collision is a `ConfigurationError`."""
    names: dict[str, CodeName] = {}
    for tool in tools.values():
        python = python_name(tool.name)
        if python in LANGUAGE_NAMES:
            raise ConfigurationError(
                f"tool {tool.name!r} is named like {python!r}, a built-in of code plans "
                "(PROTOCOL §14); rename the tool (tl.tool(fn, name=...))"
            )
        other = names.get(python)
        if other is not None:
            raise ConfigurationError(
                f"tools {other.tool!r} and {tool.name!r} are both {python!r} in a program "
                "(PROTOCOL §14: '-' becomes '_'); rename one of them"
            )
        names[python] = _code_name(tool, python)
    return names


def _code_name(tool: Tool, python: str) -> CodeName:
    schema = visible_parameters(tool)
    properties = schema.get("properties") or {}
    required = [key for key in schema.get("required") or () if key in properties]
    order = required + [key for key in properties if key not in required]
    params: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for key in order:
        mangled = python_name(key)
        if mangled in seen:
            raise ConfigurationError(
                f"tool {tool.name!r}: parameters {seen[mangled]!r} and {key!r} are both "
                f"{mangled!r} in a program (PROTOCOL §14); rename one of them"
            )
        seen[mangled] = key
        params.append((mangled, key))
    defaults = {
        python_name(key): properties[key]["default"]
        for key in order
        if isinstance(properties[key], dict) and "default" in properties[key]
    }
    return CodeName(python, tool.name, tuple(params), frozenset(required), defaults)


# ---------------------------------------------------------------------------------------
# Stubs


def render_stubs(tools: ToolSet) -> str:
    """Every tool as a Python stub, with the `TypedDict`s of their results first."""
    names = code_names(tools)
    by_tool = {name.tool: name for name in names.values()}
    classes: list[str] = []
    stubs: list[str] = []
    for tool in tools.values():
        stubs.append(_stub(tool, by_tool[tool.name], classes))
    header = "from typing import Any, Literal, TypedDict\n"
    return "\n\n".join([header, *classes, *stubs]).rstrip() + "\n"


def _stub(tool: Tool, name: CodeName, classes: list[str]) -> str:
    schema = visible_parameters(tool)
    properties = schema.get("properties") or {}
    definitions = _definitions(schema)
    parts: list[str] = []
    for python, key in name.params:
        prop = properties.get(key) or {}
        annotation = annotation_of(prop, definitions)
        if key in name.required:
            parts.append(f"{python}: {annotation}")
        elif isinstance(prop, dict) and "default" in prop:
            parts.append(f"{python}: {annotation} = {_literal(prop['default'])}")
        else:
            parts.append(f"{python}: {_optional(annotation)} = None")
    result = "Any"
    if tool.output is not None:
        result = _output_annotation(tool.output, _camel(name.name) + "Result", classes)
    signature = f"def {name.name}({', '.join(parts)}) -> {result}:"
    if len(signature) > 88 and parts:
        inner = "".join(f"    {part},\n" for part in parts)
        signature = f"def {name.name}(\n{inner}) -> {result}:"
    doc = tool.description.strip()
    notes = []
    if tool.read_only:
        notes.append("Read-only: it changes nothing, so it may start early.")
    if tool.may_require_approval:
        notes.append("A person may have to approve a call.")
    doc = "\n\n".join(part for part in (doc, " ".join(notes)) if part) or "(no description)"
    body = _docstring(doc)
    return f"{signature}\n{body}\n    ..."


def _docstring(text: str) -> str:
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    lines = text.splitlines() or [""]
    if len(lines) == 1:
        return f'    """{lines[0]}"""'
    inner = "\n".join(f"    {line}" if line else "" for line in lines)
    return f'    """\n{inner}\n    """'


def _output_annotation(schema: Any, class_name: str, classes: list[str]) -> str:
    """An object schema with properties becomes a `TypedDict` named `class_name`."""
    definitions = _definitions(schema)
    schema = _resolve(schema, definitions)
    if (
        isinstance(schema, dict)
        and schema.get("type") == "object"
        and isinstance(schema.get("properties"), dict)
        and schema["properties"]
        and all(_is_identifier(key) for key in schema["properties"])
    ):
        required = set(schema.get("required") or ())
        total = required >= set(schema["properties"])
        lines = [f"class {class_name}(TypedDict{'' if total else ', total=False'}):"]
        description = schema.get("description")
        if isinstance(description, str) and description.strip():
            lines.append(_docstring(description.strip()))
        for key, prop in schema["properties"].items():
            line = f"    {key}: {annotation_of(prop, definitions)}"
            described = prop.get("description") if isinstance(prop, dict) else None
            if isinstance(described, str) and described.strip():
                line += f"  # {' '.join(described.split())}"
            lines.append(line)
        classes.append("\n".join(lines))
        return class_name
    return annotation_of(schema, definitions)


_SIMPLE = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "null": "None",
}


def annotation_of(schema: Any, definitions: Mapping[str, Any] | None = None, depth: int = 0) -> str:
    """A JSON Schema as a Python annotation (what a stub shows; `Any` when it cannot say)."""
    definitions = definitions or {}
    if depth > 8 or not isinstance(schema, dict):
        return "Any"
    schema = _resolve(schema, definitions)
    if not isinstance(schema, dict):
        return "Any"
    if "const" in schema:
        return f"Literal[{_literal(schema['const'])}]"
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return f"Literal[{', '.join(_literal(value) for value in schema['enum'])}]"
    for union in ("anyOf", "oneOf"):
        options = schema.get(union)
        if isinstance(options, list) and options:
            return _union([annotation_of(option, definitions, depth + 1) for option in options])
    kind = schema.get("type")
    if isinstance(kind, list):
        return _union(
            [annotation_of({**schema, "type": item}, definitions, depth + 1) for item in kind]
        )
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind == "array":
        items = schema.get("items")
        return f"list[{annotation_of(items, definitions, depth + 1) if items else 'Any'}]"
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return f"dict[str, {annotation_of(extra, definitions, depth + 1)}]"
        return "dict[str, Any]"
    return "Any"


def _union(parts: list[str]) -> str:
    unique: list[str] = []
    for part in parts:
        if part not in unique:
            unique.append(part)
    if "Any" in unique:
        return "Any"
    return " | ".join(unique)


def _optional(annotation: str) -> str:
    if annotation == "Any" or annotation == "None" or annotation.endswith("| None"):
        return annotation
    return f"{annotation} | None"


def _definitions(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, dict):
        return {}
    found: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        table = schema.get(key)
        if isinstance(table, dict):
            found.update(table)
    return found


def _resolve(schema: Any, definitions: Mapping[str, Any]) -> Any:
    """Follow a local `$ref` (`#/$defs/X`), at most a few times."""
    for _ in range(8):
        if not isinstance(schema, dict) or not isinstance(schema.get("$ref"), str):
            return schema
        target = definitions.get(schema["$ref"].rsplit("/", 1)[-1])
        if target is None:
            return {}
        schema = target
    return schema


def _literal(value: Any) -> str:
    """A JSON value written as Python (a stub's default, a Literal's member)."""
    if value is None or isinstance(value, bool | int | float | str):
        return repr(value)
    return python_value(value)


def _is_identifier(key: Any) -> bool:
    return isinstance(key, str) and key.isidentifier() and not keyword.iskeyword(key)


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Tool"


# ---------------------------------------------------------------------------------------
# The request


def python_value(value: Any) -> str:
    """A JSON value as a Python literal (`True`, `None`, dicts and lists as written)."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int | float | str):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(python_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"{python_value(key)}: {python_value(item)}" for key, item in value.items())
            + "}"
        )
    return repr(value)


_PREVIEW = 200  # characters of a cut value shown, so the model knows what it is


def shown(value: Any, budget: int | None, name: str) -> str:
    """A value as the request shows it, cut like a state value (PROTOCOL §8) when its
    text is over `budget` characters: the start of it, its size, and that `name` still
    holds all of it."""
    text = python_value(value)
    if budget is None or len(text) <= budget:
        return text
    preview = text[: min(budget // 2, _PREVIEW)]
    return f"...  # cut: {len(text):,} characters; starts {preview}…; {name} holds all of it"


def render_code_request(
    log: ContextLog,
    tools: ToolSet,
    instructions: str | None,
    output_schema: Any,
    budget: int | None,
) -> list[dict[str, Any]]:
    """The chat messages of one code-plan request, rendered from the log (§14)."""
    system = [instructions.strip()] if instructions else []
    system.append(CODE_GUIDE)
    system.append("## Tools\n```python\n" + render_stubs(tools) + "```")
    system.append(_output_section(output_schema))
    for message in log.messages:
        if message.get("type") == "text" and message.get("role") == "system":
            system.append(str(message.get("text", "")))
    chat: list[dict[str, Any]] = [
        {"role": str(message.get("role")), "content": str(message.get("text", ""))}
        for message in log.messages
        if message.get("type") == "text" and message.get("role") in ("user", "assistant")
    ]
    chat.append({"role": "user", "content": with_media_parts(_context(log, budget), log)})
    return [{"role": "system", "content": "\n\n".join(system)}, *chat]


def program_key(entry: dict[str, Any]) -> str:
    """What a `compaction` message's `covers` names an earlier program by (§16)."""
    return f"iteration {entry.get('iteration')}"


def summary_section(summary: str) -> str:
    return "## Summary of your earlier programs (compacted)\n" + summary


def code_turns(log: ContextLog, budget: int | None) -> list[tuple[str, str]]:
    """The compactable turns of the next code-plan request, oldest first, as (key, text):
    the newest compaction's summary (key "compaction"), then each run of a session's
    history it does not cover (key: the run id; the history's own compaction, key
    GIVEN_SUMMARY), then every earlier program it does not cover but the last, which is
    never compacted (PROTOCOL §16). A compaction covers the oldest turns, so one that
    exists covers the history before any program."""
    summary, covers = latest_compaction(log)
    covered = set(covers)
    programs = {
        message.get("iteration"): message
        for message in log.messages
        if message.get("type") == "solution" and "program" in message
    }
    entries = [entry for entry in (log.view(PROGRAM_KIND) or ()) if isinstance(entry, dict)]
    refused = refused_answers(log)
    turns = [("compaction", summary_section(summary))] if summary is not None else []
    for key, entry in history_turns(log.view("history"), covered):
        turns.append((key, _history_entry(entry, budget)))
    for entry in entries[:-1]:
        if program_key(entry) not in covered:
            iteration = entry.get("iteration")
            text = _program_section(entry, programs.get(iteration), budget, refused)
            turns.append((program_key(entry), text))
    return turns


def _output_section(schema: Any) -> str:
    if schema is None:
        return "## Output\nEnd with `final_answer(value)`; the value may be any JSON value."
    classes: list[str] = []
    annotation = _output_annotation(schema, "Output", classes)
    shown_classes = ("\n\n".join(classes) + "\n\n") if classes else ""
    return (
        "## Output\nEnd with `final_answer(value)`, where value is of this type:\n"
        f"```python\n{shown_classes}value: {annotation}\n```\nIts JSON Schema: "
        + json.dumps(schema, ensure_ascii=False)
    )


def _context(log: ContextLog, budget: int | None) -> str:
    summary, covers = latest_compaction(log)
    covered = set(covers)
    history = log.view("history")
    sections = []
    if isinstance(history, list) and history:
        lines = ["## Earlier in this conversation"]
        shown_history = history_turns(history, covered)
        if summary is not None and len(shown_history) < len(history):
            lines.append(summary_section(summary))  # where the first run it covers was
            summary = None
        lines += [_history_entry(entry, budget) for _, entry in shown_history]
        sections.append("\n".join(lines))
    sections.append("## task_input\ntask_input = " + shown(log.view("input"), budget, "task_input"))
    programs = {
        message.get("iteration"): message
        for message in log.messages
        if message.get("type") == "solution" and "program" in message
    }
    refused = refused_answers(log)
    for entry in log.view(PROGRAM_KIND) or ():
        if not isinstance(entry, dict):
            continue
        if program_key(entry) in covered:
            if summary is not None:  # shown once, where the first program it covers was
                sections.append(summary_section(summary))
                summary = None
            continue
        solution = programs.get(entry.get("iteration"))
        sections.append(_program_section(entry, solution, budget, refused))
    state = log.view("state")
    if isinstance(state, dict) and state:
        lines = [f"{name} = {shown(value, budget, name)}" for name, value in sorted(state.items())]
        sections.append("## Variables\n" + "\n".join(lines))
    else:
        sections.append("## Variables\n(none yet)")
    helpers = [entry for entry in (log.view(PROGRAM_KIND) or ()) if isinstance(entry, dict)]
    defined = [signature for entry in helpers for signature in entry.get("helpers") or ()]
    if defined:
        sections.append("## Your helpers\n" + "\n".join(dict.fromkeys(defined)))
    return "\n\n".join(sections)


def _history_entry(entry: dict[str, Any], budget: int | None) -> str:
    """One earlier run of the session as the request shows it, or the summary of the
    earliest ones."""
    if "summary" in entry:
        return "Summary of the earliest runs (compacted):\n" + str(entry["summary"])
    return (
        f"Run {entry.get('run_id')}:\n  task_input = "
        + shown(entry.get("input"), budget, "its input")
        + "\n  final_answer = "
        + shown(entry.get("output"), budget, "its answer")
    )


def refused_answers(log: ContextLog) -> dict[Any, list[str]]:
    """By iteration, why a program's final answer was not accepted: the Error Messages
    about its output (`{"call": {"output": ...}}`: not of the output schema, or rejected
    by an output guardrail, PROTOCOL §15), which follow the program's entry in the log.
    (A program's own error is its entry's `error`.)"""
    refused: dict[Any, list[str]] = {}
    iteration = None
    for message in log.messages:
        if message.get("type") == "solution":
            iteration = message.get("iteration")
        elif message.get("type") == "data" and message.get("kind") == "error":
            data = message.get("data")
            call = data.get("call") if isinstance(data, dict) else None
            error = data.get("error") if isinstance(data, dict) else None
            if isinstance(call, dict) and "output" in call and isinstance(error, dict):
                refused.setdefault(iteration, []).append(str(error.get("message", "")))
    return refused


def _program_section(
    entry: dict[str, Any],
    solution: dict[str, Any] | None,
    budget: int | None,
    refused: dict[Any, list[str]],
) -> str:
    iteration = entry.get("iteration")
    program = solution.get("program") if solution is not None else None
    lines = [f"## Program {iteration}"]
    if program:
        lines.append("```python\n" + str(program).rstrip("\n") + "\n```")
    else:
        lines.append("(no program was read from your answer)")
    printed = entry.get("printed") or []
    if printed:
        text = "\n".join(str(line) for line in printed)
        if budget is not None and len(text) > budget:
            text = text[:budget] + f"\n… (cut: {len(text):,} characters printed in all)"
        lines.append("Printed:\n" + text)
    if "result" in entry:
        lines.append("Result: " + shown(entry["result"], budget, "the result"))
    error = entry.get("error")
    if isinstance(error, dict):
        where = error.get("line")
        quoted = error.get("text")
        place = f" at line {where}" + (f" (`{quoted}`)" if quoted else "") if where else ""
        lines.append(f"Error{place}: {error.get('type', 'runtime')}: {error.get('message', '')}")
        also = error.get("also_ran")
        if also:
            lines.append("also ran: " + ", ".join(map(str, also)))
    for reason in refused.get(iteration, ()):
        lines.append(f"Your final answer was not accepted: {reason}")
    for note in entry.get("notes") or ():
        lines.append(f"Note: {note}")
    return "\n".join(lines)

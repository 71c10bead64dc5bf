"""An MCP server's question (`tl.Question`) as a form a person fills in, and back.

MCP asks with a flat object schema: each property a string (maybe with a `format`), a
number, an integer, a boolean, a choice (`enum`, or `oneOf` of `const`s with titles), or
a list of choices. Each becomes one field named `answer.<property>`; what a form posts
comes back as lists of strings (`form.getlist`), which `answer_from_fields` turns into
the typed answer and checks against the schema (`Refused` says what is wrong). Every
text shown is escaped: the server chose it.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from .._core._questions import Accept, Cancel, Decline, Question, check_answer
from ._common import Refused

__all__ = ["FIELD", "answer_from_fields", "question_form", "verdict_from_form"]

FIELD = "answer."  # the prefix of a question's fields in a posted form

_FORMATS = {"email": "email", "uri": "url", "date": "date", "date-time": "datetime-local"}


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _choices(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(value, label) of a choice property, or [] when it is not one."""
    if isinstance(spec.get("enum"), list):
        names = spec.get("enumNames")
        values = [str(value) for value in spec["enum"]]
        if isinstance(names, list) and len(names) == len(values):
            return list(zip(values, [str(name) for name in names], strict=True))
        return [(value, value) for value in values]
    options = spec.get("oneOf") or spec.get("anyOf")
    if isinstance(options, list) and all(isinstance(o, dict) and "const" in o for o in options):
        return [(str(o["const"]), str(o.get("title") or o["const"])) for o in options]
    return []


def _field(name: str, spec: dict[str, Any], required: bool) -> str:
    label = escape(str(spec.get("title") or name))
    about = spec.get("description")
    hint = f'<span class="hint">{escape(str(about))}</span>' if about else ""
    field = escape(FIELD + name)
    need = " required" if required else ""
    default = spec.get("default")
    kind = spec.get("type")
    choices = _choices(spec)
    if kind == "array":
        items = _object(spec.get("items"))
        chosen = {str(v) for v in default} if isinstance(default, list) else set()
        options = "".join(
            f'<option value="{escape(value)}"{" selected" if value in chosen else ""}>'
            f"{escape(text)}</option>"
            for value, text in _choices(items)
        )
        control = f'<select name="{field}" multiple{need}>{options}</select>'
    elif choices:
        options = "".join(
            f'<option value="{escape(value)}"'
            f"{' selected' if default is not None and str(default) == value else ''}>"
            f"{escape(text)}</option>"
            for value, text in choices
        )
        control = f'<select name="{field}"{need}>{options}</select>'
    elif kind == "boolean":
        checked = " checked" if default is True else ""
        control = f'<input type="checkbox" name="{field}" value="true"{checked}>'
    else:
        if kind in ("number", "integer"):
            step = "1" if kind == "integer" else "any"
            bounds = "".join(
                f' {attribute}="{escape(str(spec[key]))}"'
                for key, attribute in (("minimum", "min"), ("maximum", "max"))
                if isinstance(spec.get(key), int | float)
            )
            kind_attribute = f'type="number" step="{step}"{bounds}'
        else:
            kind_attribute = f'type="{_FORMATS.get(str(spec.get("format")), "text")}"'
        value = f' value="{escape(str(default))}"' if default is not None else ""
        control = f'<input {kind_attribute} name="{field}"{value}{need}>'
    return f'<label class="field"><span>{label}</span>{control}{hint}</label>'


def question_form(question: Question, hidden: str) -> str:
    """The question's message and a form of its fields, with Accept, Decline and Cancel;
    `hidden` are the form's hidden inputs (token, run, call)."""
    schema = question.schema if isinstance(question.schema, dict) else {}
    properties = _object(schema.get("properties"))
    required = set(schema.get("required") or [])
    fields = "".join(
        _field(str(name), spec if isinstance(spec, dict) else {}, name in required)
        for name, spec in properties.items()
    )
    return (
        f'<p class="question">{escape(question.message)}</p>'
        f'<p class="hint">asked by MCP server {escape(question.server)}</p>'
        f'<form method="post" action="/decide" class="decide answer">{hidden}{fields}'
        f'<button class="approve" name="action" value="accept">Answer</button></form>'
        f'<div class="buttons"><form method="post" action="/decide" class="decide">{hidden}'
        f'<button class="deny" name="action" value="decline">Decline</button></form>'
        f'<form method="post" action="/decide" class="decide">{hidden}'
        f'<button name="action" value="cancel">Cancel</button></form></div>'
    )


def _typed(name: str, spec: dict[str, Any], given: list[str]) -> Any:
    kind = spec.get("type")
    if kind == "array":
        return [value for value in given if value != ""]
    value = given[-1] if given else ""
    if kind == "boolean":
        return value in ("true", "on", "1")
    if value == "":
        return None
    if kind in ("number", "integer"):
        try:
            number = float(value)
        except ValueError:
            raise Refused(f"{name}: {value!r} is not a number") from None
        if kind == "integer" and not number.is_integer():
            raise Refused(f"{name}: {value!r} is not a whole number")
        return int(number) if number.is_integer() else number
    return value


def answer_from_fields(question: Question, fields: dict[str, list[str]]) -> dict[str, Any]:
    """The typed answer a form's fields hold, checked against the question's schema."""
    schema = question.schema if isinstance(question.schema, dict) else {}
    properties = _object(schema.get("properties"))
    answer: dict[str, Any] = {}
    for name, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        if spec.get("type") != "boolean" and name not in fields:
            continue
        value = _typed(str(name), spec, fields.get(name, []))
        if value is not None:
            answer[str(name)] = value
    problem = check_answer(question, answer)
    if problem is not None:
        raise Refused(f"the answer does not match the question: {problem}")
    return answer


def verdict_from_form(question: Question, action: str, text: str) -> Accept | Decline | Cancel:
    """A person's answer on a page: `text` is the JSON of the posted fields."""
    if action == "decline":
        return Decline()
    if action == "cancel":
        return Cancel()
    if action != "accept":
        raise Refused(f"a question is answered with accept, decline or cancel, not {action!r}")
    try:
        fields = json.loads(text or "{}")
    except ValueError as error:
        raise Refused(f"the answer is not readable: {error}") from None
    if not isinstance(fields, dict):
        raise Refused("the answer is not readable")
    lists = {
        str(k): [str(v) for v in (vs if isinstance(vs, list) else [vs])] for k, vs in fields.items()
    }
    return Accept(answer_from_fields(question, lists))

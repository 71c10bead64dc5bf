"""`tl.ConsoleApproval()`: a person answers in the terminal, one call at a time.

The hook is synchronous on purpose: the engine runs a sync hook in a worker thread, so
while a person reads and types, every call that does not wait on this one keeps running
(PROTOCOL §6). It reads plain lines, so a script can drive it through a pipe.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable
from typing import Any, TextIO

from .._core._decisions import Decision, Deny, PendingCall
from .._core._questions import Accept, Cancel, Decline, Question
from .._observe._events import Redactor
from .._terminal import shown
from ._common import Refused, decision_from_answer, describe_links, make_redactor, pretty, view_of
from ._question_form import answer_from_fields

__all__ = ["ConsoleApproval"]

_CHOICES = {
    "a": "approve",
    "approve": "approve",
    "y": "approve",
    "yes": "approve",
    "d": "deny",
    "deny": "deny",
    "n": "deny",
    "no": "deny",
    "e": "edit",
    "edit": "edit",
    "r": "respond",
    "respond": "respond",
}
_BOOLEAN = {"y": "true", "yes": "true", "n": "false", "no": "false"}
_NO_INPUT = "denied: the console's input ended before a decision was typed"


class ConsoleApproval:
    """An approval hook that asks in the terminal.

    ::

        agent = tl.Agent(model, tools=[charge], approve=tl.ConsoleApproval())

    For each call it prints the tool, the resolved parameters (secrets redacted, as in
    events), the calls its values came from and the calls waiting on it, then reads
    `a` (approve), `d` (deny, then a reason), `e` (edit: the parameters as JSON, asked
    again until they match the tool's schema) or `r` (respond: the result as JSON). JSON
    may span lines; an empty line gives up on it. When the input ends (a closed pipe),
    the call is denied: a hook that cannot get an answer fails closed.

    It is a `questions=` hook too: an MCP server's question prints its message and reads
    `a` (answer: each field of its schema in turn, a list as comma-separated values),
    `d` (decline) or `c` (cancel); an input that ends cancels.

    `input` and `output` default to `sys.stdin` and `sys.stderr` (prompts on stderr keep
    stdout for the script's own output). `redact` takes the patterns of
    `tl.Agent(redact=...)` when those were changed.
    """

    def __init__(
        self,
        *,
        input: TextIO | None = None,
        output: TextIO | None = None,
        redact: Iterable[str] | Redactor | None = None,
    ) -> None:
        self._input = input
        self._output = output
        self._redactor = make_redactor(redact)
        self._lock = threading.Lock()  # one question on the terminal at a time

    def __call__(self, call: PendingCall | Question) -> Any:
        """An approval hook and a `questions=` hook at once: a call gets a decision, an
        MCP server's question a verdict."""
        with self._lock:
            if isinstance(call, Question):
                return self._ask_question(call)
            return self._ask(call)

    # -- an MCP server's question ------------------------------------------------------

    def _ask_question(self, question: Question) -> Any:
        """The message, then each field of its schema in turn (an empty line leaves an
        optional one out), checked against the schema; or decline or cancel."""
        self._say(f"\n── question from MCP server {question.server}")
        self._say(question.message)
        if question.sampling is not None:
            for message in question.sampling.messages:
                self._say(_indent(f"{message['role']}: {message['content']}"))
        while True:
            answer = self._read("[a]nswer, [d]ecline, [c]ancel? ")
            if answer is None:
                return Cancel()
            choice = answer.strip().lower()
            if choice in ("d", "decline", "n", "no"):
                return Decline()
            if choice in ("c", "cancel"):
                return Cancel()
            if choice not in ("a", "answer", "y", "yes"):
                self._say("please type a, d or c")
                continue
            if question.sampling is not None or question.schema is None:
                return Accept()
            fields = self._read_fields(question)
            if fields is None:
                return Cancel()
            try:
                return Accept(answer_from_fields(question, fields))
            except Refused as refusal:
                self._say(f"not accepted: {refusal}")

    def _read_fields(self, question: Question) -> dict[str, list[str]] | None:
        schema = question.schema or {}
        required = set(schema.get("required") or [])
        fields: dict[str, list[str]] = {}
        for name, spec in (schema.get("properties") or {}).items():
            spec = spec if isinstance(spec, dict) else {}
            about = spec.get("description") or spec.get("title") or ""
            kind = spec.get("type") or "string"
            need = "" if name in required else ", optional"
            line = self._read(f"{name} ({kind}{need}){': ' + str(about) if about else ''}: ")
            if line is None:
                return None
            if kind == "array":
                fields[name] = [part.strip() for part in line.split(",") if part.strip()]
            elif line.strip() or kind == "boolean":
                fields[name] = [_BOOLEAN.get(line.strip().lower(), line.strip())]
        return fields

    # -- the conversation --------------------------------------------------------------

    def _ask(self, call: PendingCall) -> Decision:
        view = view_of(call, self._redactor)
        where = f" (run {call.run_id})" if call.run_id else ""
        self._say(f"\n── approval needed: {call.id} {call.tool}{where}")
        self._say("parameters:")
        self._say(_indent(pretty(view.params)))
        for line in describe_links(view):
            self._say(line)
        while True:
            answer = self._read("[a]pprove, [d]eny, [e]dit, [r]espond? ")
            if answer is None:
                return Deny(_NO_INPUT)
            action = _CHOICES.get(answer.strip().lower())
            if action is None:
                self._say("please type a, d, e or r")
                continue
            try:
                decision = self._answer(view, call, action)
            except _GaveUp:
                continue
            if decision is not None:
                return decision
            return Deny(_NO_INPUT)

    def _answer(self, view: Any, call: PendingCall, action: str) -> Decision | None:
        if action == "approve":
            return decision_from_answer(view, "approve", redactor=self._redactor)
        if action == "deny":
            reason = self._read("reason (told to the model): ")
            if reason is None:
                return None
            return decision_from_answer(view, "deny", reason=reason, redactor=self._redactor)
        what = "parameters" if action == "edit" else "result"
        while True:
            text = self._read_json(f"the {what} as JSON (an empty line to go back):")
            if text is None:
                return None
            try:
                return decision_from_answer(
                    view, action, text=text, real_params=call.params, redactor=self._redactor
                )
            except Refused as refusal:
                self._say(f"not accepted: {refusal}")

    def _read_json(self, prompt: str) -> str | None:
        """Lines until they parse as JSON; raises `_GaveUp` on an empty line."""
        import json

        self._say(prompt)
        lines: list[str] = []
        while True:
            line = self._read("  " if lines else "> ")
            if line is None:
                return "\n".join(lines) if lines else None
            if not line.strip():
                if lines:
                    return "\n".join(lines)  # let the schema check say what is wrong
                raise _GaveUp
            lines.append(line)
            try:
                json.loads("\n".join(lines))
            except ValueError:
                continue
            return "\n".join(lines)

    # -- the streams -------------------------------------------------------------------

    def _say(self, text: str) -> None:
        out = self._output or sys.stderr
        out.write(shown(text) + "\n")  # the model chose the ids and values: made safe
        out.flush()

    def _read(self, prompt: str) -> str | None:
        out = self._output or sys.stderr
        out.write(prompt)
        out.flush()
        source = self._input or sys.stdin
        line = source.readline()
        if not line:
            out.write("\n")
            return None
        line = line.rstrip("\r\n")
        if not _is_terminal(source):  # piped: echo the answer, so a log reads like a session
            out.write(line + "\n")
        return line


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class _GaveUp(Exception):
    """The person left a JSON prompt empty: back to the choice."""


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())

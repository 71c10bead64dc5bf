"""What an unresolved reference misses, and what is there instead (PROTOCOL §5).

"no call wrote it" is only true when nothing of the kind exists; a model that wrote
`†state.user.nme` after `state.user` was written needs to hear that `user` has no key
`nme`, which keys it has, and the one it probably meant. Pure: it only reads the view.
"""

from __future__ import annotations

from typing import Any

from ._expressions import RESERVED_OUTPUT_KINDS, Step, Term

__all__ = ["describe_missing"]

_SHOWN_KEYS = 12  # keys listed in a message; a larger object is cut with a count


def describe_missing(term: Term, view: Any) -> str:
    """Why `term` reads nothing in `view` (the current value of its kind, None when the
    kind has no data): the first step that is missing, and what its parent holds.

    The words should not depend on which unrelated call happened to finish first: a
    kind that calls write (state) holds keys any running call may be adding, so a
    missing first key is "no call wrote it" whatever else is there. Below it, the parent
    is the work of the calls that write it, which this call waited for (only a call
    writing a sibling key at that very moment could still change what is listed). The
    input never changes: it is always described.
    """
    written_by_calls = term.kind not in RESERVED_OUTPUT_KINDS
    if view is None and term.kind == "input":
        return "the run has no input"
    if view is None or (written_by_calls and _first_step_missing(term, view)):
        return "no call wrote it, and none will"
    reason = _first_missing(term, view)
    if reason is None:  # present now: only a later write made it so (plan order, §3)
        return "no call wrote it, and none will"
    return f"{reason}, and no call will write it" if written_by_calls else reason


def _first_step_missing(term: Term, view: Any) -> bool:
    first = term.path[0] if term.path else None
    return not isinstance(view, dict) or not isinstance(first, str) or first not in view


def _first_missing(term: Term, view: Any) -> str | None:
    current = view
    for depth, step in enumerate(term.path):
        parent = _name(term, depth)
        if isinstance(current, dict):
            if isinstance(step, str) and step in current:
                current = current[step]
                continue
            return _missing_key(term, parent, step, current)
        if isinstance(current, list):
            if isinstance(step, int) and 0 <= step < len(current):
                current = current[step]
                continue
            return _missing_index(term, depth, parent, step, current)
        what = "field" if term.kind == "input" and depth == 0 else _step_word(step)
        return f"{parent} is {_a(current)}, which has no {what} {step!r}"
    return None


def _missing_key(term: Term, parent: str, step: Step, value: dict[str, Any]) -> str:
    if isinstance(step, int):
        return f"{parent} is an object, not a list: it has no index {step} ({_keys(value)})"
    if term.kind == "input" and parent == "the input":
        keys = _keys(value, "its fields")
        return f"the input has no field {step!r} ({_suggest(step, value)}{keys})"
    return f"{parent} has no key {step!r} ({_suggest(step, value)}{_keys(value)})"


def _missing_index(term: Term, depth: int, parent: str, step: Step, value: list[Any]) -> str:
    count = f"{len(value)} item" + ("" if len(value) == 1 else "s")
    if isinstance(step, str):
        hint = ""
        if step.isdigit() and int(step) < len(value):
            indexed = Term(term.kind, (*term.path[:depth], int(step)))
            hint = f" (an index is written {indexed})"
        return f"{parent} is a list ({count}), which has no key {step!r}{hint}"
    if not value:
        return f"{parent} is an empty list, so no index {step}"
    return f"{parent} has {count} (indexes 0 to {len(value) - 1}), so no index {step}"


def _name(term: Term, depth: int) -> str:
    if term.kind == "input" and depth == 0:
        return "the input"
    return str(Term(term.kind, term.path[:depth]))


def _keys(value: dict[str, Any], label: str = "its keys") -> str:
    if not value:
        return "it is empty"
    keys = list(value)
    shown = ", ".join(repr(key) for key in keys[:_SHOWN_KEYS])
    more = f", … {len(keys)} in all" if len(keys) > _SHOWN_KEYS else ""
    return f"{label}: {shown}{more}"


def _suggest(step: str, value: dict[str, Any]) -> str:
    import difflib  # only on this error path

    close = difflib.get_close_matches(step, [key for key in value if isinstance(key, str)], n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def _step_word(step: Step) -> str:
    return "index" if isinstance(step, int) else "key"


def _a(value: Any) -> str:
    """A JSON value's type, never its content (which may be long, or private)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"

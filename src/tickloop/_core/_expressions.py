"""Reference expressions and output paths (PROTOCOL §3 and §4).

Every parameter string that starts with `†` and every `_outputPath` goes through this
module, once per call, so parsing is cached and takes a regular-expression fast path for
the common valid case. Only text that fails the fast path is walked by the character
scanner, whose sole extra job is to say *where* and *why* the text is wrong, so a model
reading the error can fix its call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NoReturn, TypeVar

from .._errors import ReferenceSyntaxError

__all__ = [
    "MAX_INDEX_DIGITS",
    "MAX_NESTING",
    "REF",
    "RESERVED_OUTPUT_KINDS",
    "SCALARS",
    "Expression",
    "Reference",
    "Step",
    "Term",
    "find_references",
    "format_location",
    "is_reference",
    "parse_expression",
    "parse_term",
    "substitute",
    "unescape",
]

REF = "\u2020"
"""The dagger that marks a string as a reference (and, doubled, escapes a literal one)."""

Step = str | int
"""One path step: a `str` is an object key, an `int` is an array index."""

MAX_NESTING = 64
"""The deepest a call may nest: steps in one path, and arrays and objects inside one value
of a call. Far beyond what any real call needs, and well inside what every recursive walk
of a call (reference search, copying, jsonschema with a recursive `$ref`) can take."""

MAX_INDEX_DIGITS = 18
"""The longest index a path may spell: an index of 19 digits is beyond any list, and
converting thousands of digits to an int is refused by Python itself."""

RESERVED_OUTPUT_KINDS = frozenset({"error", "input"})
"""Kinds no output path may name: `error` holds only the engine's Error Messages (PROTOCOL
§7), and `input` is the run's input, which `bind` trusts to come from the caller alone."""

_ESCAPED = REF + REF
_OPERATORS = ("||", "&&")

# The alphabets are spelled out in ASCII on purpose: `\w`, `\d` and `str.isdigit` would also
# accept non-ASCII letters and digits, which the grammar does not.
_KIND_PATTERN = "[A-Za-z_][A-Za-z0-9_]*"
_KEY_PATTERN = "[A-Za-z0-9_$-]+"
_TERM_PATTERN = rf"{REF}(?P<kind>{_KIND_PATTERN})(?P<path>(?:\.{_KEY_PATTERN}|\[[0-9]+\])*)"
_BARE_TERM = rf"{REF}{_KIND_PATTERN}(?:\.{_KEY_PATTERN}|\[[0-9]+\])*"

_TERM_RE = re.compile(_TERM_PATTERN)
# One term of keys only (`†state.a.b`): its steps are the text between the dots.
_KEYS_TERM_RE = re.compile(rf"{REF}({_KIND_PATTERN})((?:\.{_KEY_PATTERN})*)")
_FAST_LIMIT = 4096  # longer texts go to the scanner, whose memory is bounded
_STEP_RE = re.compile(rf"\.({_KEY_PATTERN})|\[([0-9]+)\]")
_KIND_RE = re.compile(_KIND_PATTERN)
_KEY_RE = re.compile(_KEY_PATTERN)
# re.ASCII keeps `\s` to the same six characters as `_WHITESPACE` below, so the fast path
# and the scanner accept exactly the same language.
_OR_RE = re.compile(rf"\s*{_BARE_TERM}(?:\s*\|\|\s*{_BARE_TERM})*\s*", re.ASCII)
_AND_RE = re.compile(rf"\s*{_BARE_TERM}(?:\s*&&\s*{_BARE_TERM})*\s*", re.ASCII)

_WHITESPACE = frozenset(" \t\n\r\f\v")
_INDEX_LIMIT = 10**MAX_INDEX_DIGITS
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_DIGITS = frozenset("0123456789")
_KIND_START = frozenset(_LETTERS + "_")
_KIND_CHARS = _KIND_START | _DIGITS
_KEY_CHARS = _KIND_CHARS | frozenset("$-")


def _check_step(step: object) -> None:
    """Reject steps the grammar cannot spell, so `str` of any Term parses back to it."""
    if isinstance(step, bool) or not isinstance(step, str | int):
        raise ValueError(f"a path step must be a str key or an int index, not {step!r}")
    if isinstance(step, int):
        if step < 0:
            raise ValueError(f"an array index must be non-negative, not {step}")
        if step >= _INDEX_LIMIT:
            raise ValueError(f"an array index must have at most {MAX_INDEX_DIGITS} digits")
    elif _KEY_RE.fullmatch(step) is None:
        raise ValueError(f"a key must match {_KEY_PATTERN}, not {step!r}")


@dataclass(frozen=True, slots=True)
class Term:
    """One `†kind.path` operand: the kind of data message and the path inside its value.

    Construction validates, so every Term that exists has a canonical text that parses
    back to an equal Term.
    """

    kind: str
    path: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or _KIND_RE.fullmatch(self.kind) is None:
            raise ValueError(f"a kind must match {_KIND_PATTERN}, not {self.kind!r}")
        if not isinstance(self.path, tuple):
            raise ValueError(f"a path must be a tuple of steps, not {type(self.path).__name__}")
        if len(self.path) > MAX_NESTING:
            raise ValueError(f"a path may have at most {MAX_NESTING} steps, not {len(self.path)}")
        for step in self.path:
            _check_step(step)

    def __str__(self) -> str:
        parts = [REF, self.kind]
        for step in self.path:
            parts.append(f"[{step}]" if isinstance(step, int) else f".{step}")
        return "".join(parts)

    @property
    def steps(self) -> tuple[Step, ...]:
        """The kind as the first step, so readiness can compare whole locations at once."""
        return (self.kind, *self.path)

    def is_prefix_of(self, other: Term) -> bool:
        """Whether writing `self` can change what `other` reads (whole steps only).

        Steps compare by type as well as value: key `"0"` is not index `0`, and
        `state.b` is not a prefix of `state.base`.
        """
        if self.kind != other.kind:
            return False
        size = len(self.path)
        return size <= len(other.path) and other.path[:size] == self.path

    def overlaps(self, other: Term) -> bool:
        """Whether a write to either term can affect a read of the other."""
        return self.is_prefix_of(other) or other.is_prefix_of(self)


@dataclass(frozen=True, slots=True)
class Expression:
    """Terms joined by one operator; `op` is None exactly when there is one term.

    Keeping `op` None for a single term makes equality canonical: `†a` is one
    expression, not an `||` and an `&&` that happen to print the same.
    """

    terms: tuple[Term, ...]
    op: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.terms, tuple) or not self.terms:
            raise ValueError("an expression needs a non-empty tuple of terms")
        if len(self.terms) == 1:
            if self.op is not None:
                raise ValueError("a single-term expression has op None")
        elif self.op not in _OPERATORS:
            raise ValueError(f"several terms need op '||' or '&&', not {self.op!r}")

    def __str__(self) -> str:
        if self.op is None:
            return str(self.terms[0])
        return f" {self.op} ".join(str(term) for term in self.terms)


@dataclass(frozen=True, slots=True)
class Reference:
    """A reference found in a call's params, with where it sits so it can be replaced."""

    location: tuple[Step, ...]
    expression: Expression
    source: str


_new_object = object.__new__
_set_field = object.__setattr__


def _trusted_term(kind: str, path: tuple[Step, ...]) -> Term:
    """A Term the grammar has already checked (a fast-path match): `Term(...)` would check
    every step again with a regular expression, once per call of a plan."""
    term = _new_object(Term)
    _set_field(term, "kind", kind)
    _set_field(term, "path", path)
    return term


def _trusted_expression(terms: tuple[Term, ...], op: str | None) -> Expression:
    expression = _new_object(Expression)
    _set_field(expression, "terms", terms)
    _set_field(expression, "op", op)
    return expression


_Kept = TypeVar("_Kept", bound=Hashable)


def _interned(table: dict[_Kept, _Kept], value: _Kept, bound: int) -> _Kept:
    """The one object kept for values equal to `value`, so every holder shares it: a
    parsed kind or a reference's location is a new object each time, though few differ
    (each term of a large plan would hold its own "state"). Bounded, so that a stream of
    made-up values cannot grow `table` without end: past the bound a value is kept as it
    is, simply not shared."""
    kept = table.get(value)
    if kept is None:
        if len(table) < bound:
            table[value] = value
        return value
    return kept


_KINDS: dict[str, str] = {"state": "state", "input": "input", "error": "error"}
_MAX_KINDS = 1024


def _term_from_match(match: re.Match[str]) -> Term | None:
    """The term a fast-path match spells; None when a limit is passed, so that the scanner
    reports it with its position (a path too long, an index with too many digits)."""
    path: list[Step] = []
    # Step by step, so a path of a million steps stops at the limit instead of being
    # materialised first (a 10 MB path cost about 1 GB).
    for step in _STEP_RE.finditer(match.string, match.start("path"), match.end("path")):
        if len(path) == MAX_NESTING:
            return None
        key, index = step.group(1, 2)
        if index:
            if len(index) > MAX_INDEX_DIGITS:
                return None
            path.append(int(index))
        else:
            path.append(key)
    return _trusted_term(_interned(_KINDS, match["kind"], _MAX_KINDS), tuple(path))


def _fast_parse(text: str) -> Expression | None:
    """Parse valid text with regular expressions; None sends it to the scanner.

    Only for texts of ordinary length: the regex engine keeps state for each repetition
    of a path step while it matches, so a 10 MB path would cost hundreds of MB before any
    limit is checked. The scanner checks the step limit as it goes.
    """
    if len(text) > _FAST_LIMIT:
        return None
    keys = _KEYS_TERM_RE.fullmatch(text)  # the commonest case: one term, keys only
    if keys is not None:
        kind, dotted = keys.group(1, 2)
        path = tuple(dotted[1:].split(".")) if dotted else ()
        if len(path) <= MAX_NESTING:
            kind = _interned(_KINDS, kind, _MAX_KINDS)
            return _trusted_expression((_trusted_term(kind, path),), None)
    single = _TERM_RE.fullmatch(text)  # the common case: one term, no whitespace
    if single is not None:
        term = _term_from_match(single)
        return None if term is None else _trusted_expression((term,), None)
    if _OR_RE.fullmatch(text) is not None:
        op = "||"
    elif _AND_RE.fullmatch(text) is not None:
        op = "&&"
    else:
        return None
    terms: list[Term] = []
    for match in _TERM_RE.finditer(text):
        term = _term_from_match(match)
        if term is None:
            return None
        terms.append(term)
    return _trusted_expression(tuple(terms), op if len(terms) > 1 else None)


class _Scanner:
    """A character-at-a-time parser whose value is its error positions and messages."""

    __slots__ = ("end", "pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.end = len(text)

    def fail(self, message: str, position: int) -> NoReturn:
        raise ReferenceSyntaxError(message, self.text, position)

    def found(self) -> str:
        return repr(self.text[self.pos]) if self.pos < self.end else "end of text"

    def skip_whitespace(self) -> None:
        text, pos, end = self.text, self.pos, self.end
        while pos < end and text[pos] in _WHITESPACE:
            pos += 1
        self.pos = pos

    def take(self, alphabet: frozenset[str]) -> str:
        text, start, end = self.text, self.pos, self.end
        pos = start
        while pos < end and text[pos] in alphabet:
            pos += 1
        self.pos = pos
        return text[start:pos]

    def term(self) -> Term:
        text = self.text
        if self.pos >= self.end or text[self.pos] != REF:
            self.fail(f"expected '{REF}' to start a term, found {self.found()}", self.pos)
        self.pos += 1
        if self.pos >= self.end or text[self.pos] not in _KIND_START:
            self.fail(f"expected a kind name, found {self.found()}", self.pos)
        kind = self.take(_KIND_CHARS)
        path: list[Step] = []
        while self.pos < self.end:
            char = text[self.pos]
            if char in ".[" and len(path) == MAX_NESTING:
                self.fail(f"path deeper than {MAX_NESTING} steps", self.pos)
            if char == ".":
                self.pos += 1
                key = self.take(_KEY_CHARS)
                if not key:
                    self.fail(f"expected a key after '.', found {self.found()}", self.pos)
                path.append(key)
            elif char == "[":
                self.pos += 1
                start = self.pos
                digits = self.take(_DIGITS)
                if not digits:
                    self.fail(f"expected an integer index, found {self.found()}", self.pos)
                if len(digits) > MAX_INDEX_DIGITS:
                    self.fail(
                        f"index too large ({len(digits)} digits; at most {MAX_INDEX_DIGITS})",
                        start,
                    )
                if self.pos >= self.end or text[self.pos] != "]":
                    self.fail(f"expected ']', found {self.found()}", self.pos)
                self.pos += 1
                path.append(int(digits))
            else:
                break
        return Term(kind, tuple(path))

    def after_term(self, gap_start: int) -> NoReturn:
        """Explain the character that ended a term without being an operator or the end."""
        char = self.text[self.pos]
        if char in "|&":
            self.fail(f"expected '{char}{char}', found a single {char!r}", self.pos)
        if gap_start < self.pos and (char in _KEY_CHARS or char in ".["):
            # The term seems to go on after the gap: the whitespace itself is the fault.
            self.fail(f"unexpected character {self.text[gap_start]!r} inside a term", gap_start)
        if char == REF:
            self.fail("expected '||' or '&&' between terms", self.pos)
        self.fail(f"unexpected character {char!r}", self.pos)

    def expression(self) -> Expression:
        self.skip_whitespace()
        if self.pos >= self.end:
            self.fail("empty expression", self.pos)
        terms = [self.term()]
        op: str | None = None
        while True:
            gap_start = self.pos
            self.skip_whitespace()
            if self.pos >= self.end:
                break
            pair = self.text[self.pos : self.pos + 2]
            if pair not in _OPERATORS:
                self.after_term(gap_start)
            if op is None:
                op = pair
            elif pair != op:
                self.fail(f"cannot mix '||' and '&&' (this expression uses '{op}')", self.pos)
            self.pos += 2
            self.skip_whitespace()
            if self.pos >= self.end or self.text[self.pos] in "|&":
                self.fail(f"expected a term after '{pair}', found {self.found()}", self.pos)
            terms.append(self.term())
        return Expression(tuple(terms), op)

    def single_term(self) -> Term:
        self.skip_whitespace()
        if self.pos >= self.end:
            self.fail("empty term", self.pos)
        term = self.term()
        gap_start = self.pos
        self.skip_whitespace()
        if self.pos < self.end:
            pair = self.text[self.pos : self.pos + 2]
            if pair in _OPERATORS:
                self.fail(f"expected a single term, found '{pair}'", self.pos)
            self.after_term(gap_start)
        return term


def _scan_expression(text: str) -> Expression:
    """The slow path on its own, so tests can check it agrees with the fast one."""
    return _Scanner(text).expression()


# Small on purpose: most texts a plan parses are spelled once (each call's own output
# path), and a large cache keeps every one of them alive to evict it thousands of parses
# later, cold, at a cost the clock shows per call (docs/decisions.md "A small parse
# cache"). A text that comes back soon (a path read or pushed by call after call) stays.
@lru_cache(maxsize=64)
def parse_expression(text: str) -> Expression:
    """Parse a reference or output-path expression.

    Cached because the same few strings are parsed for every call of every tick, and
    Expressions are immutable. Errors are not cached; they are rare and cheap to rebuild.
    """
    expression = _fast_parse(text)
    if expression is None:
        expression = _scan_expression(text)
    return expression


def parse_term(text: str) -> Term:
    """Parse exactly one term, e.g. the branch a `Branch(term, value)` names, or the path
    a data message was written at (through `parse_expression`'s cache, which still holds
    the text when its call arrived a few dozen parses before)."""
    try:
        expression: Expression | None = parse_expression(text)
    except ValueError:
        expression = None
    if expression is not None and expression.op is None:
        return expression.terms[0]
    return _Scanner(text).single_term()  # the error about a single term, or the term


def is_reference(value: object) -> bool:
    """Whether a parameter value must be resolved rather than passed through."""
    return isinstance(value, str) and value.startswith(REF) and not value.startswith(_ESCAPED)


def unescape(value: str) -> str:
    """Turn the escaped literal `††x` into `†x`; every other string is already literal."""
    return value[1:] if value.startswith(_ESCAPED) else value


def find_references(params: object) -> tuple[Reference, ...]:
    """Every reference in `params`, deep and in document order.

    A reference that does not parse raises its ReferenceSyntaxError with `location` set,
    so the error reported for the call can name the parameter at fault.
    """
    found: list[Reference] = []
    _collect(params, (), found)
    return tuple(found)


# A reference's location: the same few (`("x",)`, `("items", 0)`) recur in every call of
# a tool, and each waiting call keeps its own.
_LOCATIONS: dict[tuple[Step, ...], tuple[Step, ...]] = {}
_MAX_LOCATIONS = 4096


def _collect(value: object, location: tuple[Step, ...], found: list[Reference]) -> None:
    if isinstance(value, str):
        if is_reference(value):
            try:
                expression = parse_expression(value)
            except ReferenceSyntaxError as error:
                error.location = location  # type: ignore[attr-defined]
                raise
            found.append(
                Reference(_interned(_LOCATIONS, location, _MAX_LOCATIONS), expression, value)
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            # A number, a boolean, null or a plain word holds no reference: passed over
            # without a call (or a location) per parameter.
            if type(item) in SCALARS or (type(item) is str and item[:1] != REF):
                continue
            _collect(item, (*location, key), found)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if type(item) in SCALARS or (type(item) is str and item[:1] != REF):
                continue
            _collect(item, (*location, index), found)


# Exact types of the JSON values that hold no text and no items: no reference, nothing to
# copy, check or unescape in them (the log and the reader ask the same question).
SCALARS = frozenset({int, float, bool, type(None)})


def substitute(params: object, values: Mapping[tuple[Step, ...], object]) -> object:
    """A copy of `params` with each location in `values` replaced and other strings unescaped.

    The input is never mutated, since the wire call is logged as sent. Replacement values
    are inserted as they are: they come from resolution, not from the wire, so they are
    neither copied nor unescaped. A location that is not in `params` raises KeyError,
    because it means the caller's locations and params have drifted apart.

    It runs for every call that becomes ready, so it is one copying walk (which unescapes
    as it goes) and then one short walk down to each location.
    """
    if () in values:
        if len(values) > 1:
            others = [format_location(loc) for loc in values if loc]
            raise KeyError(f"no such location in params: {', '.join(others)}")
        return values[()]
    result = _unescape_all(params)
    for location, value in values.items():
        node: Any = result
        try:
            for step in location[:-1]:
                node = _child(node, step)
            last = location[-1]
            _child(node, last)
        except LookupError:
            raise KeyError(f"no such location in params: {format_location(location)}") from None
        node[last] = value
    return result


def _child(node: Any, step: Step) -> Any:
    """`node[step]` if the location exists as JSON spells it (a key in an object, a valid
    index in an array), else LookupError."""
    if isinstance(node, dict) and isinstance(step, str):
        return node[step]
    if isinstance(node, list) and isinstance(step, int) and not isinstance(step, bool):
        if 0 <= step < len(node):
            return node[step]
    raise LookupError(step)


def _unescape_all(value: object) -> object:
    if isinstance(value, str):
        return unescape(value)
    # Numbers, booleans, null and strings without a dagger are kept without a call each.
    if isinstance(value, dict):
        return {
            key: item
            if type(item) in SCALARS or (type(item) is str and item[:1] != REF)
            else _unescape_all(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            item
            if type(item) in SCALARS or (type(item) is str and item[:1] != REF)
            else _unescape_all(item)
            for item in value
        ]
    return value


def format_location(location: tuple[Step, ...]) -> str:
    """Name a parameter the way a model would write it, for error messages."""
    if not location:
        return "(params)"
    parts: list[str] = []
    for step in location:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif isinstance(step, str) and _KEY_RE.fullmatch(step) is not None:
            parts.append(f".{step}" if parts else step)
        elif isinstance(step, str):
            parts.append(f"[{json.dumps(step, ensure_ascii=False)}]")
        else:
            parts.append(f"[{step!r}]")
    return "".join(parts)

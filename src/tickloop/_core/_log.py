"""The context log (PROTOCOL §1) and the output methods that write into it (§4).

The log is the run's only memory: it is append-only, and everything else is derived from it.
Reads happen far more often than writes (every reference of every call, every readiness
check), so each kind keeps a *materialized view* that every `data` message is applied to as
it is appended. Applying forward in log order gives the same value as the seed chapter's
reverse-chronological read, without a read ever having to walk the log.

Two rules keep the views trustworthy:

- A view never shares a mutable object with a message or with a value handed in, so no caller
  can change the state behind the log's back (and no later write can rewrite a logged
  message). Values are copied once on the way in with a JSON-aware copy.
- A write is checked completely before anything is touched, so a write that cannot apply
  leaves both the log and the view as they were: the failed call simply wrote nothing. A
  fan-out (`write_many`) is checked whole, each term as the earlier ones leave the views,
  before its first term is written.

Writes mutate the view in place; copying the whole view per write would make a run of many
small writes quadratic.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from ._expressions import SCALARS, Step, Term, parse_term

__all__ = [
    "LEAVES",
    "MAX_VALUE_DEPTH",
    "MESSAGE_TYPES",
    "METHODS",
    "SURROGATE_FAULT",
    "ContextLog",
    "WriteError",
    "copy_json",
    "cut_json",
    "describe_key",
    "has_surrogate",
    "is_flat",
    "private_copy",
    "shape_fault",
    "short_repr",
]

# `unset` removes the key at the path (absent is no error); only code plans write it, for a
# variable a program deleted (PROTOCOL §4, §14): a call's `_outputMethod` cannot name it.
METHODS: Final = ("set", "merge", "assign", "push", "concat", "unset")
"""The `_outputMethod`s, `set` first because it is the default."""

MESSAGE_TYPES: Final = ("text", "data", "plan", "solution", "compaction")

_MISSING: Final = object()

MAX_VALUE_DEPTH: Final = 254
"""The deepest value a write may store, in arrays and objects (`[[1]]` is 2).

Results come from code (an API's JSON, a tree), so the bound is generous: the deepest
pydantic converts, as the engine allows a result. With paths of at most `MAX_NESTING`
steps, it keeps every view shallow enough to copy, merge and render without running out
of stack."""

_CONTAINERS: Final = (dict, list, tuple)
_CUT_BUDGET: Final = 10_000  # containers copied into a cut echo before the rest is cut too
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
SURROGATE_FAULT: Final = (
    "holds a lone surrogate (a string escape such as \\ud800 with no pair), which is not "
    "Unicode text and cannot be stored or sent"
)


NONFINITE_FAULT: Final = (
    "holds a number that is not finite (JSON has no infinity or NaN; a literal such as "
    "1e999 overflows to infinity)"
)
_EXACT_SCALARS: Final = frozenset({int, bool, type(None)})  # always JSON; floats may not be


def _finite(number: float) -> bool:
    return number - number == 0.0  # inf - inf and nan - nan are nan


def has_surrogate(text: str) -> bool:
    """Whether a string holds a lone surrogate: JSON's `"\\ud800"` decodes to one, and
    `os.listdir` gives them for names that are not UTF-8. Nothing can encode it as UTF-8
    (the store, the next HTTP request), so it is refused where it enters."""
    if text.isascii():
        return False
    try:  # UTF-8 refuses exactly the lone surrogates, and encoding beats a regex scan
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _clean(text: str) -> str:
    """The text with each lone surrogate shown as U+FFFD, for an echo that is logged."""
    return _SURROGATE.sub("\ufffd", text) if has_surrogate(text) else text


class WriteError(Exception):
    """An output method that cannot apply where it was aimed.

    It is a runtime error of the call that wrote (§4), so the message names the method, the
    type found and the path: the model reads it and has to be able to fix the call.
    """


def copy_json(value: Any) -> Any:
    """Copy a JSON value; leaves are immutable, so only containers need new objects.

    Much faster than `copy.deepcopy`, which is worth it because every write copies its value.
    Tuples come out as lists, which is what they would be after a JSON round trip.
    """
    if isinstance(value, dict):
        # A leaf is kept as it is without a call per leaf: most values are flat.
        return {
            key: item if type(item) in LEAVES else copy_json(item) for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [item if type(item) in LEAVES else copy_json(item) for item in value]
    return value


LEAVES = frozenset({str, int, float, bool, type(None)})  # JSON values a copy shares as they are


def is_flat(value: dict[str, Any]) -> bool:
    """Whether every value of the dict is a leaf: a copy of it would share everything."""
    for item in value.values():
        if type(item) not in LEAVES:
            return False
    return True


def private_copy(value: Any) -> Any:
    """`copy_json(value)` when that is the same value of the same types (dicts, lists and
    leaves only), sharing no container with `value`; None when it holds anything else (a
    tuple, which `copy_json` would make a list). Only for values of bounded depth."""
    kind = type(value)
    if kind is dict:
        copied: dict[Any, Any] = {}
        for key, item in value.items():
            if type(item) not in LEAVES:
                item = private_copy(item)
                if item is None:
                    return None
            copied[key] = item
        return copied
    if kind is list:
        items = []
        for item in value:
            if type(item) not in LEAVES:
                item = private_copy(item)
                if item is None:
                    return None
            items.append(item)
        return items
    return value if kind in LEAVES else None


def shape_fault(value: Any, limit: int) -> str | None:
    """What keeps `value` from being a JSON value at most `limit` containers deep, or None.

    Checked: arrays and objects nest at most `limit` deep (`[[1]]` is 2; a scalar is 0),
    every object key is a string, no string holds a lone surrogate and every number is
    finite (JSON has no infinity: `1e999` decodes to one). The walk keeps its own stack,
    so a value nested 50,000 deep (or one that contains itself) is reported, not a
    RecursionError; it stops at the first fault. Leaves other than strings and floats are
    not examined, so it costs little for flat values.
    """
    kind = type(value)
    if kind in _EXACT_SCALARS:
        return None
    if kind is float:
        return None if _finite(value) else NONFINITE_FAULT
    if not isinstance(value, _CONTAINERS):
        if isinstance(value, float) and not _finite(value):
            return NONFINITE_FAULT
        return SURROGATE_FAULT if isinstance(value, str) and has_surrogate(value) else None
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return f"nests deeper than {limit} levels of arrays and objects"
        # `text.isascii()` first: an ASCII string holds no surrogate, and it is one C call.
        if isinstance(node, dict):
            for key, item in node.items():
                if not isinstance(key, str):
                    return f"has an object key that is not a string: {describe_key(key)}"
                if not key.isascii() and has_surrogate(key):
                    return f"has an object key that {SURROGATE_FAULT}"
                kind = type(item)
                if kind in _EXACT_SCALARS:
                    continue
                if kind is float:
                    if _finite(item):
                        continue
                    return NONFINITE_FAULT
                if isinstance(item, _CONTAINERS):
                    stack.append((item, depth + 1))
                elif isinstance(item, str) and not item.isascii() and has_surrogate(item):
                    return SURROGATE_FAULT
                elif isinstance(item, float) and not _finite(item):  # a float subclass
                    return NONFINITE_FAULT
        else:
            for item in node:
                kind = type(item)
                if kind in _EXACT_SCALARS:
                    continue
                if kind is float:
                    if _finite(item):
                        continue
                    return NONFINITE_FAULT
                if isinstance(item, _CONTAINERS):
                    stack.append((item, depth + 1))
                elif isinstance(item, str) and not item.isascii() and has_surrogate(item):
                    return SURROGATE_FAULT
                elif isinstance(item, float) and not _finite(item):  # a float subclass
                    return NONFINITE_FAULT
    return None


def short_repr(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters for an error message; never raises, whatever
    the value's `__repr__` does (a broken one must not turn a clear error into a crash)."""
    try:
        text = repr(value)
    except Exception:
        text = f"<unprintable {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_key(key: Any) -> str:
    """A key for an error message, with its type: `1 (int)`."""
    return f"{short_repr(key)} ({type(key).__name__})"


def cut_json(value: Any, limit: int) -> tuple[Any, bool]:
    """A copy of `value` safe to log and show, and whether anything was cut from it.

    Every container deeper than `limit` is replaced by a string saying so, keys that are
    not strings become their repr, lone surrogates become U+FFFD and numbers that are not
    finite their text.

    For echoing a call that failed `shape_fault` in its Error Message: the echo is what
    the message can show of it, never something that makes logging the message fail.
    Iterative, and bounded in size too (a list that holds itself twice would otherwise
    copy into 2**limit lists).
    """
    if not isinstance(value, _CONTAINERS):
        return _clean_leaf(value), False
    marker = "<cut: nested too deep>"
    cut = False
    root: Any = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any, int]] = [(value, root, 1)]
    budget = _CUT_BUDGET
    while stack:
        source, target, depth = stack.pop()
        pairs = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in pairs:
            if isinstance(item, _CONTAINERS):
                budget -= 1
                if depth >= limit or budget < 0:
                    copy: Any = marker if depth >= limit else "<cut: too large to show>"
                    cut = True
                else:
                    copy = {} if isinstance(item, dict) else []
                    stack.append((item, copy, depth + 1))
            else:
                copy = _clean_leaf(item)
            if isinstance(target, dict):
                target[_clean(key) if isinstance(key, str) else describe_key(key)] = copy
            else:
                target.append(copy)
    return root, cut


def storable(value: Any) -> Any:
    """`value` itself when the log can hold it; otherwise a copy where each lone surrogate
    is written as its escape (the six characters `\\ud800`) and each number that is not
    finite as its text. For what a provider sent that tickloop keeps verbatim (an
    assistant turn): the call it made is refused for the same fault on arrival, and the
    turn is still recorded, and sent back, as near to what came as JSON can hold."""
    fault = shape_fault(value, MAX_VALUE_DEPTH)
    if fault is None or (SURROGATE_FAULT not in fault and fault != NONFINITE_FAULT):
        return value

    def leaf(item: Any) -> Any:
        if isinstance(item, str) and has_surrogate(item):
            return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", item)
        if isinstance(item, float) and not _finite(item):
            return repr(item)
        return item

    if not isinstance(value, _CONTAINERS):
        return leaf(value)
    root: Any = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        source, target = stack.pop()
        pairs = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in pairs:
            if isinstance(item, _CONTAINERS):
                copy: Any = {} if isinstance(item, dict) else []
                stack.append((item, copy))
            else:
                copy = leaf(item)
            if isinstance(target, dict):
                target[leaf(key)] = copy
            else:
                target.append(copy)
    return root


def _clean_leaf(value: Any) -> Any:
    """A leaf as an echo can hold it: lone surrogates as U+FFFD, a number that is not
    finite as its text ("inf")."""
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, float) and not _finite(value):
        return repr(value)
    return value


def _a(value: Any) -> str:
    """Name a value's type for an error message a model (or a person) will read."""
    if value is None:
        return "null"
    name = type(value).__name__
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def _nest(path: tuple[Step, ...], value: Any) -> Any:
    """Wrap `value` so it sits at `path`, the shape a data message's `data` has.

    An index step becomes a list padded with nulls, so the message reads on its own as the
    value it puts in place, without its `_path`.
    """
    for step in reversed(path):
        if isinstance(step, int):
            padded: list[Any] = [None] * step
            padded.append(value)
            value = padded
        else:
            value = {step: value}
    return value


def _unnest(data: Any, term: Term) -> Any:
    """Take the applied value back out of a message's `data`; a mismatch is a bad message."""
    for depth, step in enumerate(term.path):
        if isinstance(step, int):
            fits = isinstance(data, list) and step < len(data)
        else:
            fits = isinstance(data, dict) and step in data
        if not fits:
            where = Term(term.kind, term.path[:depth])
            raise ValueError(
                f"a data message's data does not match its _path {term}: "
                f"no {'index' if isinstance(step, int) else 'key'} {step!r} in {_a(data)} "
                f"at {where}"
            )
        data = data[step]
    return data


def _check_value(method: str, value: Any) -> str | None:
    """The value's own type is checked first: it is wrong wherever it would be written."""
    if method in ("merge", "assign") and not isinstance(value, dict):
        return f"cannot {method} {_a(value)}: {method} needs a dict value"
    if method == "concat" and not isinstance(value, list):
        return f"cannot concat {_a(value)}: concat needs a list value"
    fault = shape_fault(value, MAX_VALUE_DEPTH)
    if fault is not None:
        return f"cannot {method} a value that {fault}"
    return None


def _check_target(method: str, present: bool, old: Any) -> str | None:
    """Whether `method` can apply to what is there; an absent target always can."""
    if not present or method == "set":
        return None
    if method in ("push", "concat") and not isinstance(old, list):
        return f"cannot {method} onto {_a(old)}"
    if method in ("merge", "assign") and not isinstance(old, dict):
        return f"cannot {method} into {_a(old)}"
    return None


def _deep_merge(target: dict[str, Any], new: dict[str, Any]) -> None:
    """Merge `new` (already a private copy) into `target` in place."""
    for key, value in new.items():
        old = target.get(key, _MISSING)
        if isinstance(old, dict) and isinstance(value, dict):
            _deep_merge(old, value)
        else:
            target[key] = value


def _combine(method: str, present: bool, old: Any, value: Any) -> Any:
    """The value a checked write leaves at its target; containers are changed in place.

    `value` is already a private copy, so it may be stored (or taken apart) as it is.
    """
    if not present or method == "set":
        return [value] if method == "push" else value
    if method == "merge":
        _deep_merge(old, value)
    elif method == "assign":
        old.update(value)
    elif method == "push":
        old.append(value)
    else:
        old.extend(value)
    return old


class ContextLog:
    """The append-only message list of one run, with a materialized view per data kind."""

    __slots__ = ("_by_kind", "_messages", "_views")

    def __init__(self, messages: Iterable[dict[str, Any]] = ()) -> None:
        self._messages: list[dict[str, Any]] = []
        self._views: dict[str, Any] = {}
        self._by_kind: dict[str, list[dict[str, Any]]] = {}
        for message in messages:
            self.append(message)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The log itself, not a copy: a long run's log is large, and callers only read it."""
        return self._messages

    def __len__(self) -> int:
        return len(self._messages)

    def append(self, message: dict[str, Any]) -> None:
        """Append one message, applying a `data` message to its kind's view first.

        Raises ValueError for a malformed message and WriteError for a data message whose
        method cannot apply; in both cases nothing is appended.
        """
        if not isinstance(message, dict):
            raise ValueError(f"a message must be a dict, not {type(message).__name__}")
        kind_of_message = message.get("type")
        if kind_of_message not in MESSAGE_TYPES:
            raise ValueError(
                f"a message needs a type of {', '.join(MESSAGE_TYPES)}, not {kind_of_message!r}"
            )
        if kind_of_message == "compaction":
            _check_compaction(message)
        if kind_of_message != "data":
            self._messages.append(message)
            return
        term, method, value = self._parse_data(message)
        error = self._check(term, method, value)
        if error is not None:
            raise WriteError(error)
        self._apply(term, method, copy_json(value))
        self._record(term.kind, message)

    def has_view(self, kind: str) -> bool:
        return kind in self._views

    def view(self, kind: str) -> Any:
        """The live view (not a copy, so reads stay cheap); None when the kind has no data."""
        return self._views.get(kind)

    def lookup(self, term: Term) -> tuple[bool, Any]:
        """Whether `term` is present (a stored null is) and, if so, its live value."""
        current = self._views.get(term.kind, _MISSING)
        if current is _MISSING:
            return False, None
        for step in term.path:
            if isinstance(step, int):
                if not isinstance(current, list) or step >= len(current):
                    return False, None
            elif not isinstance(current, dict) or step not in current:
                return False, None
            current = current[step]
        return True, current

    def check_write(self, term: Term, method: str, value: Any) -> str | None:
        """The WriteError text `write` would raise, or None; nothing is changed.

        Lets the engine turn a doomed write into the call's runtime error before it logs
        anything, with exactly the words `write` would have used.
        """
        if method not in METHODS:
            raise ValueError(f"unknown output method {method!r}; expected one of {METHODS}")
        return self._check(term, method, value)

    def write(
        self,
        term: Term,
        method: str,
        value: Any,
        *,
        call: dict[str, Any] | None = None,
        date: str | None = None,
    ) -> dict[str, Any]:
        """Write a call's result at `term` and log it as a data message, which is returned.

        Atomic: when the method cannot apply, WriteError is raised and neither the log nor
        the view has changed.
        """
        error = self.check_write(term, method, value)
        if error is not None:
            raise WriteError(error)
        return self._write_checked(term, method, value, call, date)

    def write_many(
        self,
        terms: Iterable[Term],
        method: str,
        value: Any,
        *,
        call: dict[str, Any] | None = None,
        date: str | None = None,
        share_call: bool = False,
    ) -> list[dict[str, Any]]:
        """Write the same value at every term, in order: a fan-out (PROTOCOL §4).

        All or nothing: every term is checked as it will find the views once the terms
        before it are written (`†state.a && †state.a.b` writes below what its first term
        wrote), before anything is appended. When one cannot apply, WriteError is raised
        and neither the log nor any view has changed. The data messages, one per term,
        are returned in order.

        With `share_call` the messages hold `call` itself rather than a copy each: the
        caller's promise that nothing changes it and it shares no container with anyone
        (the scheduler's own copy of a wire call, which the call's record shows).
        """
        terms = tuple(terms)
        copy_call = call is not None and not share_call
        if method not in METHODS:
            raise ValueError(f"unknown output method {method!r}; expected one of {METHODS}")
        if len(terms) == 1:  # the common case: one place, checked where it is written
            error = _check_in(self._views, terms[0], method, value)
            if error is not None:
                raise WriteError(error)
            return [self._write_checked(terms[0], method, value, call, date, copy_call)]
        error = self._check_in_order(terms, method, value)
        if error is not None:
            raise WriteError(error)
        return [self._write_checked(term, method, value, call, date, copy_call) for term in terms]

    def _check_in_order(self, terms: tuple[Term, ...], method: str, value: Any) -> str | None:
        """The first fault of writing `value` at `terms` one after another, or None.

        The writes are tried on a scratch set of views that shares everything with the
        real ones except the containers a write changes, which are copied first along its
        path; so the cost is the paths written, not the size of the state.
        """
        if len(terms) == 1:
            return self._check(terms[0], method, value)
        scratch = dict(self._views)
        for index, term in enumerate(terms):
            error = _check_in(scratch, term, method, value)
            if error is not None:
                if index and self._check(term, method, value) is None:
                    earlier = " && ".join(str(written) for written in terms[:index])
                    error += (
                        f" (after the fan-out's earlier term{'s' if index > 1 else ''} "
                        f"{earlier}); nothing was written"
                    )
                return error
            if index + 1 < len(terms):
                _copy_path(scratch, term, method)
                _apply_in(scratch, term, method, copy_json(value))
        return None

    def _write_checked(
        self,
        term: Term,
        method: str,
        value: Any,
        call: dict[str, Any] | None,
        date: str | None,
        copy_call: bool = True,
    ) -> dict[str, Any]:
        # The message and the view each get their own copy (a leaf is its own copy).
        leaf = type(value) in LEAVES
        path = term.path
        data = value if leaf else copy_json(value)
        if len(path) == 1 and type(path[0]) is str:
            data = {path[0]: data}
        elif path:
            data = _nest(path, data)
        text = str(term)
        given = None if call is None else call.get("_outputPath")
        if type(given) is str and given == text:
            text = given  # the call's own text, kept once rather than twice per write
        message: dict[str, Any] = {
            "type": "data",
            "kind": term.kind,
            "data": data,
            "_path": text,
            "_outputMethod": method,
        }
        if call is not None:
            message["_call"] = copy_json(call) if copy_call else call
        if date is not None:
            message["_date"] = date
        _apply_in(self._views, term, method, value if leaf else copy_json(value))
        self._messages.append(message)
        by_kind = self._by_kind.get(term.kind)
        if by_kind is None:
            self._by_kind[term.kind] = [message]
        else:
            by_kind.append(message)
        return message

    def kinds(self) -> list[str]:
        """Every data kind in the log, in order of first appearance."""
        return list(self._by_kind)

    def data_messages(self, kind: str) -> list[dict[str, Any]]:
        """The kind's data messages in log order, from an index kept as they are appended."""
        return list(self._by_kind.get(kind, ()))

    # -- internals ---------------------------------------------------------------------

    def _record(self, kind: str, message: dict[str, Any]) -> None:
        self._messages.append(message)
        self._by_kind.setdefault(kind, []).append(message)

    @staticmethod
    def _parse_data(message: dict[str, Any]) -> tuple[Term, str, Any]:
        """Where a data message applies, with which method and what value."""
        kind = message.get("kind")
        if not isinstance(kind, str):
            raise ValueError(f"a data message needs a str kind, not {kind!r}")
        if "data" not in message:
            raise ValueError(f"a data message of kind {kind!r} has no data")
        method = message.get("_outputMethod", "set")
        if method not in METHODS:
            raise ValueError(f"unknown _outputMethod {method!r}; expected one of {METHODS}")
        path = message.get("_path")
        if path is None:
            return Term(kind), method, message["data"]
        if not isinstance(path, str):
            raise ValueError(f"a data message's _path must be a str, not {path!r}")
        term = parse_term(path)
        if term.kind != kind:
            raise ValueError(f"a data message of kind {kind!r} has the _path {path} of another")
        return term, method, _unnest(message["data"], term)

    def _check(self, term: Term, method: str, value: Any) -> str | None:
        """The fault of writing `value` at `term` now, or None (see `_check_in`)."""
        return _check_in(self._views, term, method, value)

    def _apply(self, term: Term, method: str, value: Any) -> None:
        """Apply a checked write; `value` is a private copy the view may keep."""
        _apply_in(self._views, term, method, value)


def _shallow(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value


def _copy_path(views: dict[str, Any], term: Term, method: str) -> None:
    """Give `views` its own copy of every container a write at `term` may change in place.

    The containers above the target are copied shallowly (the write changes one entry of
    each); the target is copied shallowly for `assign`, `push` and `concat`, whole for
    `merge` (which changes nested objects) and not at all for `set` (which replaces it).
    Where the path leaves what exists, the write only creates new containers.
    """
    kind, path = term.kind, term.path
    if kind not in views:
        return

    def copy(value: Any, target: bool) -> Any:
        if not target:
            return _shallow(value)
        if method == "merge":
            return copy_json(value)
        return value if method == "set" else _shallow(value)

    last = len(path) - 1
    node = views[kind] = copy(views[kind], last < 0)
    for depth, step in enumerate(path):
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                return
        elif not isinstance(node, dict) or step not in node:
            return
        node[step] = child = copy(node[step], depth == last)
        node = child


def _check_in(views: dict[str, Any], term: Term, method: str, value: Any) -> str | None:
    """Walk the path as `_apply` will, without creating anything, and find the fault.

    A missing key on the way would be created as a dict, so below it only key steps can
    follow: an index step needs a list that already exists.
    """
    if method == "unset":  # removes what is there, if anything
        if term.path and isinstance(term.path[-1], int):
            return f"cannot unset {term}: unset removes a key of an object, not a list's item"
        return None
    # A number, a boolean or null can be set or pushed anywhere: nothing to check in it.
    if type(value) not in SCALARS or (method != "set" and method != "push"):
        error = _check_value(method, value)
        if error is not None:
            return f"{error} at {term}"
    present = term.kind in views
    current = views.get(term.kind)
    path = term.path
    for depth, step in enumerate(path):
        if isinstance(step, int):
            if not present:
                return (
                    f"cannot {method} at {term}: {Term(term.kind, path[:depth])} is absent, "
                    f"and the index step [{step}] needs an existing list"
                )
            if not isinstance(current, list):
                return (
                    f"cannot {method} at {term}: {Term(term.kind, path[:depth])} is "
                    f"{_a(current)}, not a list to take the index [{step}] of"
                )
            if step < len(current):
                current = current[step]
            elif step == len(current):
                present, current = False, None
            else:
                return (
                    f"cannot {method} at {term}: index {step} is out of range for the list "
                    f"of length {len(current)} at {Term(term.kind, path[:depth])}"
                )
        elif present:
            if not isinstance(current, dict):
                return (
                    f"cannot {method} at {term}: {Term(term.kind, path[:depth])} is "
                    f"{_a(current)}, not a dict to take the key {step!r} of"
                )
            if step in current:
                current = current[step]
            else:
                present, current = False, None
    if not present or method == "set":
        return None
    error = _check_target(method, present, current)
    return None if error is None else f"{error} at {term}"


def _apply_in(views: dict[str, Any], term: Term, method: str, value: Any) -> None:
    """Apply a checked write to `views`; `value` is a private copy the view may keep."""
    kind, path = term.kind, term.path
    if method == "unset":
        _unset_in(views, term)
        return
    if not path:
        present = kind in views
        views[kind] = _combine(method, present, views.get(kind), value)
        return
    if kind not in views:
        views[kind] = {}
    parent = views[kind]
    last = len(path) - 1
    for step in path[:last] if last else ():
        # `_check` passed, so a missing step is a key (or an index one past the end)
        # with a key step after it: it becomes a new dict.
        if isinstance(step, int):
            if step == len(parent):
                parent.append({})
        elif step not in parent:
            parent[step] = {}
        parent = parent[step]
    step = path[last]
    if method == "set" and type(step) is str:  # the common case: a key, replaced
        parent[step] = value
        return
    if isinstance(step, int):
        if step < len(parent):
            parent[step] = _combine(method, True, parent[step], value)
        else:
            parent.append(_combine(method, False, None, value))
    else:
        old = parent.get(step, _MISSING)
        present = old is not _MISSING
        parent[step] = _combine(method, present, old if present else None, value)


def _unset_in(views: dict[str, Any], term: Term) -> None:
    """Remove the key at `term`, when it is there (PROTOCOL §4 `unset`)."""
    if not term.path:
        views.pop(term.kind, None)
        return
    node = views.get(term.kind, _MISSING)
    for step in term.path[:-1]:
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                return
        elif not isinstance(node, dict) or step not in node:
            return
        node = node[step]
    if isinstance(node, dict):  # the last step is a key (`_check_in`)
        node.pop(term.path[-1], None)


def _check_compaction(message: dict[str, Any]) -> None:
    """A `compaction` message (PROTOCOL §1, §16): `covers` names what its `summary` is
    shown in place of."""
    covers = message.get("covers")
    if not isinstance(covers, list) or not all(isinstance(key, str) for key in covers):
        raise ValueError(f"a compaction's covers must be a list of strings, not {covers!r}")
    if not isinstance(message.get("summary"), str):
        raise ValueError("a compaction's summary must be a string")

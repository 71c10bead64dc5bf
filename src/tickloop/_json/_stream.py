"""Incremental parsing of streamed solutions, and tolerant parsing of tool arguments.

A solution (PROTOCOL §8) arrives as text chunks while the model is still writing, and each
call must start the moment its JSON object closes. Buffering the text and re-parsing it per
chunk would cost time quadratic in the solution's length, so `SolutionStream` is a
character-level pushdown automaton: it validates the JSON grammar as the text goes by,
remembers where the current top-level call began, and hands each call to `json.loads` once,
on its own slice, when its closing character arrives.

`resilient_json_parse` is the other side of the coin (PROTOCOL §9): tool arguments from a
native function-calling API are usually JSON but sometimes wrapped in a code fence, surrounded
by prose or carrying trailing commas. Only those repairs are made, so a genuinely broken
argument string still fails instead of being guessed into something the model never meant.
"""

from __future__ import annotations

import bisect
import json
import logging
import re
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SolutionStream",
    "StreamOutcome",
    "resilient_json_parse",
    "resilient_json_parse_with_strategy",
]

_log = logging.getLogger("tickloop")
_log.addHandler(logging.NullHandler())  # a library prints nothing the app did not ask for


@dataclass(frozen=True)
class StreamOutcome:
    """What a finished stream amounted to.

    `calls` counts what `feed()` already handed on, so the engine can tell a solution whose
    calls all ran from one that was cut off or broken after some of them.
    """

    solution: dict[str, Any] | None
    error: str | None
    calls: int


# Grammar modes: what the automaton expects next outside strings, numbers and literals.
_PRE = 0  # before the solution's opening brace (prose or a code fence may come first)
_VALUE = 1  # a value, after ':'
_ARR_FIRST = 2  # a value or ']', just after '['
_ARR_NEXT = 3  # a value, after ',' in an array
_OBJ_FIRST = 4  # a key or '}', just after '{'
_OBJ_NEXT = 5  # a key, after ',' in an object
_COLON = 6
_AFTER = 7  # ',' or the container's closer, after a value
_DONE = 8  # the solution object closed; the rest of the text is ignored
_FAILED = 9

# Lexical states, for tokens that may be split across chunks.
_LEX_NONE = 0
_LEX_STRING = 1
_LEX_NUMBER = 2
_LEX_LITERAL = 3

# Preamble states: is the text before the first bracket only whitespace and a fence opener?
_PRE_WS = 0
_PRE_TICKS = 1
_PRE_TAG = 2
_PRE_WS2 = 3
_PRE_DIRTY = 4

_STR_RUN = re.compile(r'[^"\\\x00-\x1f]*')
_WS_RUN = re.compile(r"[ \t\n\r]*")
_NUM_RUN = re.compile(r"[-+0-9.eE]*")
_NEXT_ITEM = re.compile(r"[ \t\n\r]*,[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_WS = frozenset(" \t\n\r")
_SIMPLE_ESCAPES = frozenset('"\\/bfnrt')
_HEX = frozenset("0123456789abcdefABCDEF")
_DIGITS = frozenset("-0123456789")
_LITERALS = {"t": "true", "f": "false", "n": "null"}
_TAG_CHARS = frozenset("_+.-")


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict, refusing a key given twice: JSON would keep the last,
    so what ran and what is logged (or judged) could differ."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {_cut(key)} in an object")
            seen.add(key)
    return value


# One decoder for every call and solution: `json.loads(text, object_pairs_hook=...)` would
# build a new JSONDecoder each time (a cost per call of a long plan), and the decoder keeps
# no state between texts.
_decode_refusing_duplicates = json.JSONDecoder(object_pairs_hook=unique_keys).decode


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# A call that lies whole in the chunk at hand is read by the C decoder in one step
# (`_scan`, at a call's opening brace), not character by character. Strict as the
# automaton: NaN and Infinity, which `json` would accept, are refused, and any refusal
# sends the text back to the automaton, which finds the fault and says where. The
# scanner itself, not `raw_decode` around it: it raises StopIteration where no value is.
_decode_call_at: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder(
    object_pairs_hook=unique_keys, parse_constant=_refuse_constant
).scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__, not in typeshed


def _cut(text: str, limit: int = 60) -> str:
    """A key for an error message: quoted, and at most `limit` characters of it."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


class SolutionStream:
    """Feed a streamed solution chunk by chunk; get each top-level call as soon as it closes.

    Only the items of the top-level object's `"calls"` array are emitted: a key named
    `calls` deeper down (inside a call's parameters or inside `output`) is ordinary data.
    Once the text stops being JSON, nothing more is emitted, because a call after the fault
    could not be told apart from garbage; `close()` then says where and what went wrong.
    """

    def __init__(self) -> None:
        self._chunks: list[str] = []
        self._starts: list[int] = []  # global offset of each stored chunk, for slicing
        self._length = 0
        self._mode = _PRE
        self._pre_state = _PRE_WS
        self._pre_ticks = 0
        self._lex = _LEX_NONE
        self._esc = 0  # 0: plain, -1: after a backslash, k > 0: hex digits of \u still due
        self._is_key = False
        self._key_start = 0
        self._num_parts: list[str] = []
        self._num_start = 0
        self._lit_word = ""
        self._lit_idx = 0
        self._stack: list[bool] = []  # True for an object, False for an array
        self._obj_start = -1
        self._obj_end = -1
        self._top_key: str | None = None
        self._calls_open = False
        # The top-level calls array: its items as emitted, and where it begins and ends
        # (global offsets; -1 until it opens, and until it closes). The solution is decoded
        # at the close without it, and holds these very items (`_settle`).
        self._calls: list[Any] = []
        self._calls_begin = -1
        self._calls_end = -1
        self._top_keys: set[str] = set()
        self._item_start = 0
        self._error: str | None = None
        self._outcome: StreamOutcome | None = None

    @property
    def error(self) -> str | None:
        """The fault found so far, so a caller can react before the model stops writing."""
        return self._error

    @property
    def calls_emitted(self) -> int:
        return len(self._calls)

    def feed(self, chunk: str) -> list[Any]:
        """Return the calls whose JSON value closed inside `chunk`, parsed, in order."""
        if self._outcome is not None:
            raise RuntimeError("SolutionStream.feed() called after close()")
        if not chunk:
            return []
        base = self._length
        self._length += len(chunk)
        if self._mode >= _DONE:
            return []
        self._chunks.append(chunk)
        self._starts.append(base)
        out: list[Any] = []
        self._scan(chunk, base, out)
        return out

    def close(self) -> StreamOutcome:
        """Settle the stream; calling it again returns the same outcome."""
        if self._outcome is None:
            self._outcome = self._settle()
        return self._outcome

    # -- the automaton ---------------------------------------------------------------

    def _scan(self, chunk: str, base: int, out: list[Any]) -> None:
        i = 0
        n = len(chunk)
        if self._mode == _PRE:
            i = self._scan_pre(chunk, base)
            if self._mode != _OBJ_FIRST or i < 0:
                return
        stack = self._stack
        while i < n:
            lex = self._lex
            if lex == _LEX_STRING:
                esc = self._esc
                if esc == 0:
                    m = _STR_RUN.match(chunk, i)
                    i = m.end() if m is not None else i
                    if i >= n:
                        return
                    c = chunk[i]
                    i += 1
                    if c == '"':
                        self._lex = _LEX_NONE
                        if not self._string_done(base + i, out):
                            return
                    elif c == "\\":
                        self._esc = -1
                    else:
                        self._fail(base + i - 1, "control character inside a string")
                        return
                elif esc == -1:
                    c = chunk[i]
                    if c == "u":
                        self._esc = 4
                    elif c in _SIMPLE_ESCAPES:
                        self._esc = 0
                    else:
                        self._fail(base + i, f"invalid escape '\\{c}' in a string")
                        return
                    i += 1
                else:
                    if chunk[i] not in _HEX:
                        self._fail(base + i, "invalid \\u escape in a string")
                        return
                    self._esc = esc - 1
                    i += 1
                continue

            if lex == _LEX_NUMBER:
                m = _NUM_RUN.match(chunk, i)
                j = m.end() if m is not None else i
                self._num_parts.append(chunk[i:j])
                i = j
                if i >= n:
                    return
                text = "".join(self._num_parts)
                self._num_parts = []
                self._lex = _LEX_NONE
                if _NUMBER.fullmatch(text) is None:
                    self._fail(self._num_start, f"invalid number {text!r}")
                    return
                if not self._value_done(base + i, out):
                    return
                continue

            if lex == _LEX_LITERAL:
                word = self._lit_word
                k = self._lit_idx
                while k < len(word) and i < n:
                    if chunk[i] != word[k]:
                        self._fail(base + i, f"invalid literal (expected {word!r})")
                        return
                    k += 1
                    i += 1
                self._lit_idx = k
                if k == len(word):
                    self._lex = _LEX_NONE
                    if not self._value_done(base + i, out):
                        return
                continue

            c = chunk[i]
            if c in _WS:
                m = _WS_RUN.match(chunk, i)
                i = m.end() if m is not None else i + 1
                continue
            mode = self._mode

            if mode == _AFTER:
                is_obj = stack[-1]
                if c == ",":
                    self._mode = _OBJ_NEXT if is_obj else _ARR_NEXT
                    i += 1
                elif c == ("}" if is_obj else "]"):
                    stack.pop()
                    i += 1
                    if not self._value_done(base + i, out):
                        return
                else:
                    self._fail(base + i, "expected ',' or '}'" if is_obj else "expected ',' or ']'")
                    return

            elif _VALUE <= mode <= _ARR_NEXT:
                pos = base + i
                if c == "]" and mode == _ARR_FIRST:
                    stack.pop()
                    i += 1
                    if not self._value_done(pos + 1, out):
                        return
                    continue
                depth = len(stack)
                if self._calls_open and depth == 2:
                    self._item_start = pos
                    if c == "{":
                        try:
                            value, end = _decode_call_at(chunk, i)
                        except (ValueError, RecursionError, StopIteration):
                            pass  # cut by the chunk's end, or not JSON: read it as below
                        else:
                            # What the automaton would have ended in: the call emitted,
                            # a ',' or ']' of the calls array expected next.
                            self._mode = _AFTER
                            out.append(value)
                            self._calls.append(value)
                            i = end
                            # The ',' before the next call, read as the automaton would
                            # (`_AFTER` then `_ARR_NEXT`), without a turn per character.
                            m = _NEXT_ITEM.match(chunk, i)
                            if m is not None:
                                self._mode = _ARR_NEXT
                                i = m.end()
                            continue
                if c == '"':
                    self._lex = _LEX_STRING
                    self._is_key = False
                    self._esc = 0
                    i += 1
                elif c == "{":
                    stack.append(True)
                    self._mode = _OBJ_FIRST
                    i += 1
                elif c == "[":
                    stack.append(False)
                    self._mode = _ARR_FIRST
                    if depth == 1 and self._top_key == "calls" and self._calls_begin < 0:
                        self._calls_open = True
                        self._calls_begin = pos
                    i += 1
                elif c in _DIGITS:
                    self._lex = _LEX_NUMBER
                    self._num_start = pos
                elif c in _LITERALS:
                    self._lex = _LEX_LITERAL
                    self._lit_word = _LITERALS[c]
                    self._lit_idx = 0
                else:
                    if mode == _ARR_NEXT and c == "]":
                        msg = "expected a value after ',' (trailing comma before ']')"
                    elif mode == _ARR_FIRST:
                        msg = "expected a value or ']'"
                    else:
                        msg = "expected a value"
                    self._fail(pos, msg)
                    return

            elif mode == _OBJ_FIRST or mode == _OBJ_NEXT:
                if c == '"':
                    self._lex = _LEX_STRING
                    self._is_key = True
                    self._esc = 0
                    self._key_start = base + i
                    i += 1
                elif c == "}" and mode == _OBJ_FIRST:
                    stack.pop()
                    i += 1
                    if not self._value_done(base + i, out):
                        return
                else:
                    if mode == _OBJ_FIRST:
                        msg = "expected a key in double quotes or '}'"
                    elif c == "}":
                        msg = "expected a key after ',' (trailing comma before '}')"
                    else:
                        msg = "expected a key in double quotes"
                    self._fail(base + i, msg)
                    return

            elif mode == _COLON:
                if c != ":":
                    self._fail(base + i, "expected ':'")
                    return
                self._mode = _VALUE
                i += 1

            else:  # _DONE or _FAILED: nothing more to read
                return

    def _scan_pre(self, chunk: str, base: int) -> int:
        """Skip prose or a fence opener before the solution; return the index after its '{'.

        A '[' right at the start (after whitespace and at most a fence opener) means the
        model answered with an array, which is a definite fault; a '[' inside prose is not.
        """
        state = self._pre_state
        ticks = self._pre_ticks
        i = 0
        n = len(chunk)
        while i < n:
            if state == _PRE_DIRTY:
                j = chunk.find("{", i)
                if j < 0:
                    break
                i = j
            c = chunk[i]
            if c == "{":
                self._pre_state = state
                self._stack.append(True)
                self._obj_start = base + i
                self._mode = _OBJ_FIRST
                return i + 1
            if c == "[" and (state != _PRE_TICKS or ticks >= 3) and state != _PRE_DIRTY:
                self._mode = _FAILED
                self._error = "the solution is not a JSON object"
                return -1
            if c in _WS:
                if state == _PRE_TICKS:
                    state = _PRE_WS2 if ticks >= 3 else _PRE_DIRTY
                elif state == _PRE_TAG:
                    state = _PRE_WS2
            elif c == "`":
                if state == _PRE_WS:
                    state = _PRE_TICKS
                    ticks = 1
                elif state == _PRE_TICKS:
                    ticks += 1
                else:
                    state = _PRE_DIRTY
            elif (c.isalnum() or c in _TAG_CHARS) and (
                state == _PRE_TAG or (state == _PRE_TICKS and ticks >= 3)
            ):
                state = _PRE_TAG
            else:
                state = _PRE_DIRTY
            i += 1
        self._pre_state = state
        self._pre_ticks = ticks
        return n

    def _string_done(self, end: int, out: list[Any]) -> bool:
        if not self._is_key:
            return self._value_done(end, out)
        self._mode = _COLON
        if len(self._stack) == 1:
            try:
                key = json.loads(self._slice(self._key_start, end))
            except ValueError as exc:  # the grammar was checked; this is belt and braces
                self._fail(self._key_start, str(exc))
                return False
            if key in self._top_keys:
                # Two "calls" arrays would run one and log the other: refused, like any
                # duplicate key (json.loads would silently keep the last).
                self._fail(self._key_start, f"duplicate key {_cut(key)} in the solution")
                return False
            self._top_keys.add(key)
            self._top_key = key
        return True

    def _value_done(self, end: int, out: list[Any]) -> bool:
        """Account for a value that ended at `end`; False when scanning must stop."""
        depth = len(self._stack)
        if depth == 0:
            self._mode = _DONE
            self._obj_end = end
            return False
        self._mode = _AFTER
        if self._calls_open:
            if depth == 2:
                return self._emit(self._item_start, end, out)
            if depth == 1:
                self._calls_open = False
                self._calls_end = end
        if depth == 1:
            self._top_key = None
        return True

    def _emit(self, start: int, end: int, out: list[Any]) -> bool:
        try:
            value = _decode_refusing_duplicates(self._slice(start, end))
        except json.JSONDecodeError as exc:
            self._fail(start + exc.pos, exc.msg)
            return False
        except (ValueError, RecursionError) as exc:  # e.g. an integer over the digit limit
            self._fail(start, str(exc))
            return False
        out.append(value)
        self._calls.append(value)
        return True

    def _fail(self, pos: int, message: str) -> None:
        self._mode = _FAILED
        self._error = f"invalid JSON at character {pos}: {message}"

    def _slice(self, start: int, end: int) -> str:
        """Text between two global offsets, touching only the chunks that hold it."""
        starts = self._starts
        chunks = self._chunks
        k = bisect.bisect_right(starts, start) - 1
        first = chunks[k]
        offset = starts[k]
        if end - offset <= len(first):
            return first[start - offset : end - offset]
        parts = [first[start - offset :]]
        k += 1
        while True:
            chunk = chunks[k]
            offset = starts[k]
            if end - offset <= len(chunk):
                parts.append(chunk[: end - offset])
                return "".join(parts)
            parts.append(chunk)
            k += 1

    def _settle(self) -> StreamOutcome:
        n = len(self._calls)
        mode = self._mode
        if mode == _FAILED:
            return StreamOutcome(None, self._error, n)
        if mode == _DONE:
            solution = self._solution_around_calls()
            if solution is not None:
                return StreamOutcome(solution, None, n)
            try:
                solution = _decode_refusing_duplicates(self._slice(self._obj_start, self._obj_end))
            except json.JSONDecodeError as exc:
                error = f"invalid JSON at character {self._obj_start + exc.pos}: {exc.msg}"
                return StreamOutcome(None, error, n)
            except (ValueError, RecursionError) as exc:
                return StreamOutcome(None, f"invalid JSON: {exc}", n)
            return StreamOutcome(solution, None, n)
        if mode == _PRE:
            return StreamOutcome(None, self._no_object_error(), n)
        if self._calls_open:
            where = "inside 'calls', "
        elif self._top_key is not None:
            where = f"inside {self._top_key!r}, "
        else:
            where = ""
        plural = "" if n == 1 else "s"
        error = (
            f"the solution was cut off after {self._length} characters "
            f"({where}{n} call{plural} complete)"
        )
        return StreamOutcome(None, error, n)

    def _solution_around_calls(self) -> dict[str, Any] | None:
        """The solution, its calls the very items the stream emitted; None when it has no
        complete top-level calls array, or when the rest is not JSON (the whole text is
        then decoded, to say where).

        The items were decoded as they closed, each from its own characters: decoding
        them again from the whole text would only make equal copies (a thousand-call plan
        read twice). The rest of the object is decoded with an empty array in their place.
        """
        begin, end = self._calls_begin, self._calls_end
        if end < 0:
            return None
        text = f"{self._slice(self._obj_start, begin)}[]{self._slice(end, self._obj_end)}"
        try:
            solution = _decode_refusing_duplicates(text)
        except (ValueError, RecursionError):
            return None
        if type(solution) is not dict or solution.get("calls") != []:
            return None  # cannot happen: the automaton read this very object
        solution["calls"] = self._calls
        return solution

    def _no_object_error(self) -> str:
        """Tell an answer that is JSON but not an object from one with no JSON at all."""
        text = "".join(self._chunks)
        fenced = _strip_fence(text)
        for candidate in (text, fenced):
            if candidate is None or not candidate.strip():
                continue
            try:
                json.loads(candidate)
            except (ValueError, RecursionError):
                continue
            return "the solution is not a JSON object"
        return "no solution in the response"


# -- resilient argument parsing --------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*[\w+.-]*[ \t]*\r?\n?(.*?)(?:```|\Z)", re.S)
_TRAILING_COMMA = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|,(\s*[}\]])', re.S)
_SCAN_TOKEN = re.compile(r'[{}\[\]"\\]')
_CLOSER_FOR = {"{": "}", "[": "]"}

_PHRASES = {
    "fence": "after stripping a code fence",
    "block": "from a JSON block found in the text",
    "trailing-commas": "after removing trailing commas",
}


def _strip_fence(text: str) -> str | None:
    """The body of the first markdown code fence; an unclosed fence runs to the end."""
    m = _FENCE.search(text)
    return m.group(1) if m is not None else None


def _remove_trailing_commas(text: str) -> str:
    """Drop each ',' that only whitespace separates from a closer, leaving strings alone."""

    def repl(m: re.Match[str]) -> str:
        closer = m.group(1)
        return closer if closer is not None else m.group(0)

    return _TRAILING_COMMA.sub(repl, text)


class _Scans:
    """The open blocks of every scan that reads the text the same way from here on.

    Scans that are in the same place of the string grammar (outside a string, or inside
    one) see the same tokens, so they share everything pushed since they came together
    (`top`, opener numbers, innermost last) and keep apart only what each had before
    (`below`, one group per group that joined). Every opener starts a scan of its own,
    so each pushed opener is the bottom of exactly one scan's stack.

    A group that is one scan holding only its own opener is that opener's number, a
    plain int: most groups are, and an object each would cost a hundred bytes or more
    per character of some texts (`[\\"` repeated). Numbers are kept in arrays, so memory
    stays a small multiple of the text.
    """

    __slots__ = ("below", "top")

    def __init__(self, top: array[int], below: list[_Group] | tuple[_Group, ...]) -> None:
        self.top = top
        self.below = below


_Group = _Scans | int


def _join(a: _Group | None, b: _Group | None) -> _Group | None:
    if a is None:
        return b
    if b is None:
        return a
    for parent, child in ((a, b), (b, a)):
        if isinstance(parent, _Scans) and not parent.top:  # a join already: one more part
            if isinstance(parent.below, tuple):
                parent.below = list(parent.below)
            parent.below.append(child)
            return parent
    return _Scans(array("q"), [a, b])


def _close(
    group: _Group, text: str, closer: str, end: int, openers: array[int], ends: array[int]
) -> _Group | None:
    """Apply one closer to every stack in `group`; return what is left open, or None.

    Where a stack's innermost opener matches, it is popped, and the scan that opener
    started ends here (`ends[number] = end`). Where it does not, every scan with an opener
    on that stack fails (they all see that mismatch), so the stack is dropped whole. The
    tree is walked with a stack of its own; each step pops or drops something pushed
    once, so all the closers of a text together cost time linear in its length.
    """
    frames: list[tuple[_Scans, list[_Group], int]] = []  # joins being visited
    node = group
    while True:
        while isinstance(node, _Scans) and not node.top:  # a join: its parts hold the rest
            frames.append((node, [], 0))
            node = node.below[0]
        if isinstance(node, int):
            number, rest = node, False
        else:
            number = node.top.pop()
            rest = bool(node.top) or bool(node.below)
        result: _Group | None = None
        if _CLOSER_FOR[text[openers[number]]] == closer:
            ends[number] = end
            if rest:
                result = node
        while frames:
            parent, kept, index = frames.pop()
            if result is not None:
                kept.append(result)
            index += 1
            if index < len(parent.below):
                frames.append((parent, kept, index))
                node = parent.below[index]
                break
            if not kept:
                result = None
            elif len(kept) == 1:
                result = kept[0]  # a join of one group is that group
            else:
                parent.below = kept
                result = parent
        else:
            return result


def _block_ends(text: str) -> tuple[array[int], array[int]]:
    """Every opener's position, and where the balanced block it opens ends (exclusive;
    -1 for none), by the opener's number.

    A block is what a scan from its opener finds: strings skipped (escapes respected),
    each closer matching the innermost open opener, done when the first one closes; a
    mismatched closer, or the end of the text, and there is no block. A scan starts at
    every `{` and `[`, even one that another scan reads as part of a string, because
    prose around JSON has quotes of its own. Scanning from each opener in turn costs
    time quadratic in the text (`"[" * 10_000` took seconds); this does all the scans in
    one pass, as groups: every scan is outside a string, inside one, or just after a
    backslash inside one, and scans in the same state read the rest of the text the same
    way (`_Scans`).
    """
    openers = array("q")
    ends = array("q")
    outside: _Group | None = None
    inside: _Group | None = None
    escaped: _Group | None = None  # inside a string, after the backslash at `escape_at`
    escape_at = -2
    for match in _SCAN_TOKEN.finditer(text):
        pos = match.start()
        char = text[pos]
        consumed: _Group | None = None
        if escaped is not None:
            if pos == escape_at + 1:
                consumed, escaped = escaped, None  # this character is escaped for them
            else:  # they read their escaped character before this token
                inside, escaped = _join(inside, escaped), None
        if char == '"':
            outside, inside = inside, outside
        elif char == "\\":
            escaped, escape_at, inside = inside, pos, None
        elif char in _CLOSER_FOR:
            number = len(openers)
            openers.append(pos)
            ends.append(-1)
            if outside is None:
                outside = number
            elif isinstance(outside, int):
                outside = _Scans(array("q", (outside, number)), ())
            else:
                outside.top.append(number)
        elif outside is not None:
            outside = _close(outside, text, char, pos + 1, openers, ends)
        if consumed is not None:
            inside = _join(inside, consumed)
    return openers, ends


def _balanced_blocks(text: str) -> Iterator[str]:
    """Balanced `{…}` / `[…]` blocks in order; a block that is tried is not searched inside.

    Not looking inside a rejected block keeps a broken object from being "repaired" into
    one of its own nested values.
    """
    openers, ends = _block_ends(text)
    resume = 0
    for start, end in zip(openers, ends, strict=True):
        if start < resume or end < 0:
            continue
        yield text[start:end]
        resume = end


def _loads_container(text: str) -> tuple[bool, dict[str, Any] | list[Any] | None]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False, None
    if isinstance(value, dict | list):
        return True, value
    return False, None


def _attempts(raw: str) -> Iterator[tuple[str, str]]:
    """Candidate texts with their strategy names, least repair first."""
    yield raw, "direct"
    stripped = _remove_trailing_commas(raw)
    if stripped != raw:
        yield stripped, "trailing-commas"
    fenced = _strip_fence(raw)
    sources: list[tuple[str, str]] = []
    if fenced is not None:
        yield fenced, "fence"
        stripped = _remove_trailing_commas(fenced)
        if stripped != fenced:
            yield stripped, "fence+trailing-commas"
        sources.append((fenced, "fence+block"))
    sources.append((raw, "block"))
    for text, name in sources:
        for block in _balanced_blocks(text):
            yield block, name
            stripped = _remove_trailing_commas(block)
            if stripped != block:
                yield stripped, name + "+trailing-commas"


def resilient_json_parse_with_strategy(
    raw: str,
) -> tuple[dict[str, Any] | list[Any] | None, str]:
    """Parse tool arguments and say which repair made them parse ("none" on failure).

    The strategy name lets tests and telemetry tell clean model output from repaired output.
    """
    if not isinstance(raw, str):
        return None, "none"
    for text, strategy in _attempts(raw):
        ok, value = _loads_container(text)
        if ok:
            if strategy != "direct":
                phrases = ", ".join(_PHRASES[part] for part in strategy.split("+"))
                _log.warning("parsed tool arguments %s (strategy %s)", phrases, strategy)
            return value, strategy
    return None, "none"


def resilient_json_parse(raw: str) -> Any:
    """Parse model output with only the repairs of PROTOCOL §9.

    Plain JSON of any kind parses as itself (`null` is None); otherwise the repairs look
    for an object or array. Failure raises, so None never means both "null" and "no
    JSON"; never returns `{}` for garbage, which would call a tool with defaults the
    model never chose.
    """
    if not isinstance(raw, str):
        raise TypeError(f"resilient_json_parse expects a str, got {type(raw).__name__}")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        pass
    value, strategy = resilient_json_parse_with_strategy(raw)
    if strategy == "none":
        raise ValueError(
            "no JSON found: tried the text as it is, without trailing commas, inside a "
            "```json fence, and each balanced {...} or [...] block in it"
        )
    return value

"""The answer of a code plan, read as it streams (PROTOCOL §14 "The answer").

Owns two rules of §14: which part of the model's answer is the program (the fence rule),
and when a top-level statement of it is complete (the tokenizer rule). Nothing here
parses the program: `tokenize` only finds where statements end, so the first call of a
program can start while the model still writes the rest.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass, field

__all__ = ["ProgramStream", "Statement", "split_statements"]

_PROGRAM_TAGS = frozenset({"", "python", "py"})
_CONTINUATIONS = frozenset({"elif", "else", "except", "finally"})
_NOT_CODE = frozenset(
    {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
)


@dataclass(frozen=True)
class Statement:
    """One complete top-level statement of a program.

    `index` counts statements from 0 in program order; `line` is the 1-based line of its
    first line in the program; `source` its text as written (starting at column 0).
    """

    index: int
    line: int
    source: str

    def __post_init__(self) -> None:
        if self.index < 0 or self.line < 1:
            raise ValueError(f"bad statement position: index {self.index}, line {self.line}")


def _fence_tag(line: str) -> str | None:
    """The tag of a fence line (```python → "python"), or None for any other line."""
    stripped = line.strip()
    if not stripped.startswith("```"):
        return None
    return stripped[3:].strip().lower()


def _starts_statement(partial: str) -> bool:
    """Whether an unfinished last line already shows a new top-level statement: it
    starts at column 0 with a whole first word that is not a continuation keyword."""
    if not partial or partial[0].isspace() or partial[0] == "#":
        return False
    word = partial[: len(partial) - len(partial.lstrip("abcdefghijklmnopqrstuvwxyz"))]
    if word == partial:  # the word may still grow: `el` into `else`
        return not any(keyword.startswith(word) for keyword in _CONTINUATIONS)
    return word not in _CONTINUATIONS


def _spans(text: str, *, final: bool, partial: str = "") -> tuple[list[tuple[int, int]], int]:
    """The complete statements of `text` as (first line, last line) pairs (1-based,
    inclusive), and the line the next statement starts on (or where code may begin).

    Only complete lines are given while streaming, so a token at the start of a line is
    whole. `final`: the text is the whole program, its last statement is complete too.
    """
    spans: list[tuple[int, int]] = []
    start: int | None = None
    newline_at: int | None = None
    readline = io.StringIO(text).readline
    try:
        for token in tokenize.generate_tokens(readline):
            if token.type in _NOT_CODE:
                continue
            if token.type == tokenize.NEWLINE:
                newline_at = token.start[0]
                continue
            row, col = token.start
            if start is None:
                start = row
            elif newline_at is not None and col == 0 and token.string not in _CONTINUATIONS:
                spans.append((start, newline_at))
                start = row
            newline_at = None
    except (tokenize.TokenError, IndentationError, SyntaxError):
        newline_at = None  # an unfinished string or bracket: nothing after `start` is done
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    if not final and start is not None and newline_at is not None and _starts_statement(partial):
        spans.append((start, newline_at))
        start = None
    if final and start is not None and text[_offset(text, start) :].strip():
        spans.append((start, lines))
        start = None
    return spans, start if start is not None else lines + 1


def _offset(text: str, line: int) -> int:
    """Character offset of the start of 1-based `line` in `text`."""
    offset = 0
    for _ in range(line - 1):
        offset = text.index("\n", offset) + 1
    return offset


def split_statements(program: str) -> list[Statement]:
    """Every top-level statement of a whole program (the rule of §14, all at once)."""
    stream = ProgramStream(fenced=False)
    return stream.feed(program) + stream.close()


@dataclass
class _Splitter:
    """Cuts complete statements off the program text as lines arrive."""

    text: str = ""
    first_line: int = 1  # program line of `text`'s first line; text before it was emitted
    count: int = 0  # statements emitted so far (the next one's index)

    def add(self, text: str, *, final: bool) -> list[Statement]:
        self.text += text
        if not final:
            cut = self.text.rfind("\n") + 1
            if not cut:
                return []
            return self._take(self.text[:cut], final=False, partial=self.text[cut:])
        return self._take(self.text, final=True)

    def peek(self, partial: str) -> list[Statement]:
        """Statements completed by the start of an unfinished line (`z` after an `if`)."""
        if not self.text.endswith("\n") or not _starts_statement(partial):
            return []
        return self._take(self.text, final=False, partial=partial)

    def _take(self, text: str, *, final: bool, partial: str = "") -> list[Statement]:
        spans, next_start = _spans(text, final=final, partial=partial)
        lines = text.splitlines(keepends=True)
        statements = []
        for first, last in spans:
            source = "".join(lines[first - 1 : last])
            statements.append(Statement(self.count, self.first_line + first - 1, source))
            self.count += 1
        if spans or final:
            keep = _offset(text, next_start) if next_start <= len(lines) else len(text)
            if final:
                keep = len(self.text)
            self.text = self.text[keep:]
            self.first_line += text.count("\n", 0, keep)
        return statements


@dataclass
class ProgramStream:
    """The answer text in, complete statements out (§14 "The answer").

    `feed(text)` takes the next piece of the answer and returns the statements it
    completed; `close()` ends the answer and returns the rest. `prose` is the text before
    the program's fence (kept as the iteration's text, never evaluated); `program` the
    program text read so far; `second_block` is set when a fence opened after the
    program's closing fence (that block is not run, and the next request says so).
    `fenced=False` reads the whole text as the program (`compile_program`, `run_program`).
    """

    fenced: bool = True
    prose: str = ""
    program: str = ""
    second_block: bool = False
    # "start": no non-blank line yet; "holding": prose, no program fence yet; "program":
    # inside the program; "after": the program's fence closed, the rest is ignored.
    _state: str = "start"
    _pending: str = ""  # an incomplete line not yet classified
    _held: str = ""  # the whole answer while holding (the program if no fence comes)
    _splitter: _Splitter = field(default_factory=_Splitter)

    def __post_init__(self) -> None:
        if not self.fenced:
            self._state = "program"

    def feed(self, text: str) -> list[Statement]:
        if self._state == "program" and not self.fenced:
            self.program += text
            return self._splitter.add(text, final=False)
        self._pending += text
        out: list[Statement] = []
        while "\n" in self._pending:
            line, self._pending = self._pending.split("\n", 1)
            out += self._line(line + "\n")
        if self._state == "program" and self._pending and not self._pending.startswith("`"):
            out += self._splitter.peek(self._pending)
        return out

    def close(self) -> list[Statement]:
        out: list[Statement] = []
        if self._pending:
            pending, self._pending = self._pending, ""
            out += self._line(pending)
        if self._state == "holding" or (self._state == "start" and self._held):
            self._state = "program"
            self.program, self.prose = self._held, ""
            out += self._splitter.add(self._held, final=False)
        if self._state == "program":
            return out + self._splitter.add("", final=True)
        return out

    def _line(self, line: str) -> list[Statement]:
        """Classify one line of a fenced answer and pass program lines on."""
        tag = _fence_tag(line)
        if self._state == "program":
            if tag == "" and line.strip() == "```":
                self._state = "after"
                return self._splitter.add("", final=True)
            self.program += line
            return self._splitter.add(line, final=False)
        if self._state == "after":
            if tag is not None and tag in _PROGRAM_TAGS:
                self.second_block = True
            return []
        self._held += line
        if self._state == "start" and not line.strip():
            return []
        if tag is not None and tag in _PROGRAM_TAGS:
            self.prose = self._held[: len(self._held) - len(line)]
            self._state = "program"
            return []
        self._state = "holding"
        return []

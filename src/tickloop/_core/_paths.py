"""Run paths: where a run or a call is in a tree of runs (PROTOCOL §11, §14).

The one owner of the grammar. A **run path** is the ids of the agent calls above a run,
outermost first (`()` at the root); a call's **full id** is its run's path with its own
local id appended, shown joined by `/`: `c1.2/c2.1/c1.0` is call `c1.0` of the run that
call `c2.1` of the run that call `c1.2` of the root started. Every segment is a call id:
one the engine gave (`c<iteration>.<index>`), a model's own `_id`, or a code plan's call
path (`c<iteration>.<site>([i])*(>site([i])*)*`, PROTOCOL §14), valid at any depth:
`c1.2/c2.7[3]>1[0]`.

Everything else — the scheduler, the journal, the store, events, the CLI, the inbox,
decisions — makes, parses, compares, shows and stores paths through `RunPath` and the
helpers here; nothing else splits or joins ids on `/` (tests/test_run_paths.py keeps it so).

Invariants of a `RunPath`: its `parts` are non-empty strings holding no `/`; a part
holding `[`, `]` or `>` is a code plan's call path (the regex below), never anything else.
A path is immutable and hashable, equal to another with the same parts, and ordered by
its parts' call-id order (`c1.2` before `c1.10`; a call path after the call it extends).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

__all__ = [
    "CALL_PATH",
    "SEPARATOR",
    "RunPath",
    "call_id_key",
    "id_problem",
    "is_call_path",
    "tag_kind",
    "untag_kind",
]

SEPARATOR = "/"  # between the segments of a full id
_TAG = "@"  # between a journal entry's kind and the path of the run that wrote it
_RESERVED = frozenset("[]>")  # only a code plan's call path holds these

#: A code plan's call id (PROTOCOL §14): program, site, loop indexes, then per helper.
CALL_PATH = re.compile(r"c(\d+)\.(\d+)((?:\[\d+\])*)((?:>\d+(?:\[\d+\])*)*)")
_ENGINE_ID = re.compile(r"c(\d+)\.(\d+)")
_FRAME = re.compile(r"(\d+)((?:\[\d+\])*)")
_INDEX = re.compile(r"\[(\d+)\]")

_V = TypeVar("_V")


def is_call_path(call_id: str) -> bool:
    """Whether `call_id` is a code plan's call id (which the engine's ids also are)."""
    return CALL_PATH.fullmatch(call_id) is not None


def id_problem(call_id: str) -> str | None:
    """Why `call_id` cannot be one segment of a path, or None when it can: what an `_id`
    a model chose is checked against (PROTOCOL §11, §14)."""
    if not call_id:
        return "an id must not be empty"
    if SEPARATOR in call_id:
        return (
            f"{call_id!r} holds a '/', which separates a sub-agent's call ids from its "
            "parent call's; choose an id without one"
        )
    if not _RESERVED.isdisjoint(call_id) and not is_call_path(call_id):
        return (
            f"{call_id!r} holds '[', ']' or '>', which only a code plan's call path "
            "(c<program>.<site>[<index>]>...) may hold; choose an id without them"
        )
    return None


def call_id_key(call_id: str) -> tuple[Any, ...]:
    """The order of one segment: engine ids and code call paths by their numbers (`c1.2`
    before `c1.10`, `c2.7` before `c2.7[0]` before `c2.7[0]>1`), then any other id by
    its text."""
    match = CALL_PATH.fullmatch(call_id)
    if match is None:
        return (1, call_id)
    iteration, site, indexes, helpers = match.groups()
    frames = [(int(site), _indexes(indexes))]
    for frame in helpers.split(">")[1:]:
        inner = _FRAME.fullmatch(frame)
        assert inner is not None  # the whole id matched CALL_PATH
        frames.append((int(inner.group(1)), _indexes(inner.group(2))))
    return (0, int(iteration), tuple(frames))


def _indexes(text: str) -> tuple[int, ...]:
    return tuple(int(index) for index in _INDEX.findall(text))


@dataclass(frozen=True, slots=True)
class RunPath:
    """A path in a tree of runs: the ids above a run, or a call's full id.

    Made with `RunPath.parse("c1.2/c1.0")`, `RunPath.of(("c1.2",))`, `ROOT`, or
    `path / "c1.0"`; shown with `str(path)` (the form stored, sent and typed at the CLI).
    """

    # Outermost first; each a valid segment (`id_problem` is None), never empty strings.
    parts: tuple[str, ...] = ()

    ROOT: ClassVar[RunPath]

    # -- making -------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> RunPath:
        """The path `text` shows (`""` is the root); ValueError naming the bad segment."""
        if not isinstance(text, str):
            raise ValueError(f"a path must be a string, got {type(text).__name__}")
        if not text:
            return ROOT
        return cls.of(text.split(SEPARATOR))

    @classmethod
    def of(cls, parts: Iterable[str]) -> RunPath:
        """The path of these segments (a stored tuple or list), each checked."""
        parts = tuple(parts)
        for part in parts:
            if not isinstance(part, str):
                raise ValueError(f"a path's segment must be a string, got {part!r}")
            problem = id_problem(part)
            if problem is not None:
                raise ValueError(f"bad path {SEPARATOR.join(map(str, parts))!r}: {problem}")
        return cls(parts)

    def __truediv__(self, call_id: str) -> RunPath:
        """The path one level down: a call of this run, or the child run it started."""
        return RunPath((*self.parts, call_id))

    child = __truediv__

    # -- reading ------------------------------------------------------------------------
    def __str__(self) -> str:
        return SEPARATOR.join(self.parts)

    def __repr__(self) -> str:
        return f"RunPath({str(self)!r})"

    def __bool__(self) -> bool:
        return bool(self.parts)

    def __len__(self) -> int:
        return len(self.parts)

    @property
    def depth(self) -> int:
        """How many runs down: 0 for the root."""
        return len(self.parts)

    @property
    def is_root(self) -> bool:
        return not self.parts

    @property
    def parent(self) -> RunPath:
        """The path one level up (the run a call belongs to); the root has none."""
        if not self.parts:
            raise ValueError("the root path has no parent")
        return RunPath(self.parts[:-1])

    @property
    def last(self) -> str:
        """The last segment: a call's local id, the id of the agent call a run is under."""
        if not self.parts:
            raise ValueError("the root path has no segments")
        return self.parts[-1]

    @property
    def prefix(self) -> str:
        """What a local id of the run at this path is shown after ("" at the root)."""
        return str(self) + SEPARATOR if self.parts else ""

    def full(self, call_id: str) -> str:
        """The full id of the call `call_id` of the run at this path, as shown."""
        return self.prefix + call_id if self.parts else call_id

    def is_within(self, other: RunPath) -> bool:
        """Whether this path is `other` or below it."""
        return self.parts[: len(other.parts)] == other.parts

    def relative_to(self, other: RunPath) -> RunPath:
        """This path seen from `other` (which it must be within)."""
        if not self.is_within(other):
            raise ValueError(f"{str(self)!r} is not within {str(other)!r}")
        return RunPath(self.parts[len(other.parts) :])

    def local_id(self, full_id: str) -> str | None:
        """The id inside the run at this path of the call shown as `full_id`, None when
        that call is not this run's own (another run's, or deeper)."""
        path = RunPath.parse(full_id)
        return path.last if path.parts and path.parent == self else None

    def below(self, by_full_id: Mapping[str, _V]) -> dict[str, _V]:
        """The entries of `by_full_id` (keyed by full ids) for calls at or below the run
        at this path, keyed by their ids seen from it."""
        found: dict[str, _V] = {}
        for full_id, value in by_full_id.items():
            path = RunPath.parse(full_id)
            if path.depth > self.depth and path.is_within(self):
                found[str(path.relative_to(self))] = value
        return found

    # -- ordering -----------------------------------------------------------------------
    def sort_key(self) -> tuple[Any, ...]:
        return tuple(call_id_key(part) for part in self.parts)

    def __lt__(self, other: RunPath) -> bool:
        return self.sort_key() < other.sort_key()

    def __le__(self, other: RunPath) -> bool:
        return self.sort_key() <= other.sort_key()

    def __gt__(self, other: RunPath) -> bool:
        return self.sort_key() > other.sort_key()

    def __ge__(self, other: RunPath) -> bool:
        return self.sort_key() >= other.sort_key()


ROOT = RunPath()
RunPath.ROOT = ROOT


# -- journal entry kinds of child runs: "event@c1.2" ------------------------------------------


def tag_kind(kind: str, path: RunPath) -> str:
    """The kind a journal entry of the run at `path` is stored under: the root's plain,
    a child's tagged with its path (`event@c1.2/c2.1`)."""
    return f"{kind}{_TAG}{path}" if path.parts else kind


def untag_kind(tagged: str) -> tuple[str, RunPath]:
    """The kind and the run's path of a stored journal entry (`tag_kind` undone)."""
    kind, _, where = tagged.partition(_TAG)
    return kind, RunPath.parse(where)

"""The evaluator's state for one pass over one statement, and how it waits.

Owns the small vocabulary between the evaluator and the machine: `Wait` (the only thing
a statement's coroutine ever yields: "resume me when this call ended / that statement
ended / every statement before me committed / after a pause"), `Frame` (where a call is:
its call-path prefix and loop indexes, §14 "Call ids"), and `Host` (what the evaluator
asks the machine for). Statements are plain Python coroutines driven by `.send()`.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from .._core._expressions import Expression
from ._scope import Sites
from ._values import CallState, Meter

__all__ = ["MAX_DEPTH", "Frame", "Host", "Wait"]

MAX_DEPTH: Final = 100  # §14: helper depth 100

WaitKind = Literal["call", "ended", "committed", "pause"]


@dataclass(frozen=True)
class Wait:
    """What a blocked statement waits for. `call`: that call ended; `ended`: statement
    `index` ended its evaluation; `committed`: every statement before `index` committed
    (the side-effect barrier); `pause`: nothing, the evaluator yields (every 1,000 steps).
    """

    kind: WaitKind
    call: CallState | None = None
    index: int = 0

    def __await__(self) -> Generator[Wait, None, None]:
        yield self


@dataclass
class Frame:
    """Where evaluation is in the call tree: `prefix` is the call path up to this frame
    (`c2.` at the top, `c2.7[3]>` inside a helper called at site 7 in iteration 3; ""
    inside a function given to a method, where a tool call has no id and is refused),
    `indexes` the counters of the enclosing `for`/`while`/comprehension clauses of this
    frame, outermost first, and `depth` how many helpers deep it is (0 at the top)."""

    prefix: str
    sites: Sites  # the numbering of the code running in this frame (a helper's own)
    depth: int = 0
    indexes: list[int] = field(default_factory=list)

    def call_id(self, site: int) -> str:
        return self.prefix + str(site) + "".join(f"[{i}]" for i in self.indexes)

    def inner(self, site: int, sites: Sites, item: int | None = None) -> Frame:
        """The frame of a helper entered from `site` (with a built-in's item index)."""
        prefix = self.call_id(site) + (f"[{item}]" if item is not None else "") + ">"
        return Frame(prefix, sites, self.depth + 1)


class CodeToolLike(Protocol):
    @property
    def tool(self) -> str: ...
    @property
    def params(self) -> tuple[str, ...]: ...
    @property
    def defaults(self) -> Mapping[str, Any]: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def depends_on(self) -> tuple[Expression, ...]: ...


class Host(Protocol):
    """What a statement's evaluation asks of the machine."""

    iteration: int
    meter: Meter

    @property
    def tools(self) -> Mapping[str, CodeToolLike]: ...

    async def earlier(self, index: int, name: str) -> Any:
        """The variable as the last earlier statement that may write it left it (waiting
        for that statement to end), or MISSING."""
        ...

    def fallback(self, name: str) -> Any:
        """A name that is no variable: a built-in, an import of an earlier program, or
        MISSING."""
        ...

    def make_call(self, index: int, call_id: str, name: str, params: dict[str, Any],
                  line: int) -> CallState:  # fmt: skip
        """Make the call (or reuse the one already made with that id)."""
        ...

    def must_wait_before_calls(self, index: int, read_only: bool) -> bool:
        """Whether a call of statement `index` waits for the statements before it to
        commit (a non-read-only call, or an earlier statement that may end the program)."""
        ...

"""What a program machine is given and what it gives back (the interface of §14's machine).

Owns the data at the machine's edges: `CodeTool` (a tool as a program calls it),
`Limits`, `Globals` (what carries over between the programs of a run: variables as
JSON, helpers and imports as source; to and from JSON for the journal), the actions
(`MakeCall`, `Printed`, `Commit`) and the `ProgramOutcome`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._core._expressions import Expression

__all__ = [
    "CodeAction",
    "CodeTool",
    "Commit",
    "Globals",
    "Limits",
    "MakeCall",
    "Printed",
    "ProgramOutcome",
]


@dataclass(frozen=True)
class CodeTool:
    """What the machine knows of a tool: `name` is its Python name (mangled: `-` → `_`,
    a keyword + `_`), `tool` its real name (for `MakeCall`), `params` its parameter
    names in stub order (positional arguments bind in this order), `defaults` the
    parameters that may be left out, `read_only` whether a call may start before the
    calls before it are known not to fail (§14 "Readiness")."""

    name: str
    tool: str
    params: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    read_only: bool = False
    # The tool's `depends_on` references (§14 "Tool options in programs"): each must be
    # present in the variables the statements before a call left (`†state.x` reads the
    # variable `x`, `†input.x` the task input), else the call raises ToolError
    # "structural" without being made.
    depends_on: tuple[Expression, ...] = ()

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"a code tool's name must be an identifier, not {self.name!r}")


@dataclass(frozen=True)
class Limits:
    """Bounds of one program (§14 "Limits"). `max_eval_seconds` is measured by the
    driver, which calls `stop_for_limit("max_eval_seconds")`: the machine has no clock."""

    max_calls: int = 1_000
    max_steps: int = 200_000
    max_eval_seconds: float = 1.0

    def __post_init__(self) -> None:
        if self.max_calls < 0 or self.max_steps < 1 or self.max_eval_seconds <= 0:
            raise ValueError(f"limits must be positive: {self}")


@dataclass
class Globals:
    """What carries over between the programs of one run (§14 "Names and the state").

    `variables`: name → JSON value (what the state view shows); `helpers`: name → the
    helper's source and the first call site of its body (so its call ids are the same
    in later programs); `imports`: name → the module (`"math"`) or member
    (`"datetime.datetime"`) it is bound to.
    """

    variables: dict[str, Any] = field(default_factory=dict)
    helpers: dict[str, dict[str, Any]] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "variables": copy.deepcopy(self.variables),
            "helpers": copy.deepcopy(self.helpers),
            "imports": dict(self.imports),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Globals:
        data = data or {}
        return cls(
            variables=copy.deepcopy(dict(data.get("variables", {}))),
            helpers=copy.deepcopy(dict(data.get("helpers", {}))),
            imports=dict(data.get("imports", {})),
        )


@dataclass(frozen=True)
class MakeCall:
    """Make this call now: `call_id` is its call path (`c2.7[3]>1[0]`), `params` its
    literal JSON parameters, `line` the program line of the call."""

    call_id: str
    tool: str
    params: dict[str, Any]
    line: int
    read_only: bool


@dataclass(frozen=True)
class Printed:
    """A line the program printed (committed, in program order), without its newline."""

    line: int
    text: str


@dataclass(frozen=True)
class Commit:
    """A statement finished and committed (in program order): the variables it changed
    (JSON) and those it deleted, for the run's `state` messages."""

    statement_index: int
    line: int
    writes: dict[str, Any]
    deletes: list[str]


CodeAction = MakeCall | Printed | Commit


@dataclass(frozen=True)
class ProgramOutcome:
    """How a program ended. `kind`: "final" (`final_answer`/top-level `return`),
    "result" (the last statement's value), "none", "error", "reset". `error`:
    {"type": "runtime"|"structural"|"limit", "message", "line", "text", "also_ran"}."""

    kind: Literal["final", "result", "none", "error", "reset"]
    value: Any = None
    error: dict[str, Any] | None = None
    printed: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if (self.kind == "error") != (self.error is not None):
            raise ValueError("an outcome has an error exactly when its kind is 'error'")

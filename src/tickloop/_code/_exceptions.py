"""What a program can raise and catch, and the signals that end its evaluation.

Owns the line between the two: `ToolError` and the standard exception classes are values
of the language (a program raises and catches them, §14 "The language"); a
`ProgramRaise` carries one through the evaluator. The signals below it (`LimitExceeded`,
`OutsideLanguage`, `Reevaluate`, `EndProgram`) are the evaluator's own control flow: they
derive from `BaseException` through `Signal`, so no `try` of a program can catch them.

    BaseException
    ├── ProgramRaise          a program's exception in flight (`.error`)
    └── Signal                never catchable by a program
        ├── LimitExceeded     max_steps, max_calls, value size, helper depth, ...
        ├── OutsideLanguage   a construct refused while running (an attribute, a name)
        ├── Reevaluate        a lazy pass met a failed call: run the statement strictly
        └── EndProgram        final_answer / top-level return / reset
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "EXCEPTION_CLASSES",
    "EndProgram",
    "LimitExceeded",
    "OutsideLanguage",
    "ProgramRaise",
    "Reevaluate",
    "Signal",
    "ToolError",
]

TOOL_ERROR_TYPES: Final = ("runtime", "structural", "denied", "budget", "guardrail")


class ToolError(Exception):
    """A tool call of a program that did not succeed, as the program catches it.

    `type` is one of "runtime", "structural", "denied", "budget", "guardrail" (PROTOCOL
    §14); `status` the call's end ("failed", "denied", "invalid", ...); `message` what
    went wrong; `call_id` the call's path (`c2.7[3]>1[0]`), empty for one a program
    raised itself.
    """

    def __init__(
        self,
        message: str = "",
        *,
        type: str = "runtime",
        status: str = "failed",
        call_id: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.type = type
        self.status = status
        self.call_id = call_id

    def __repr__(self) -> str:
        return f"ToolError({self.message!r}, type={self.type!r}, call_id={self.call_id!r})"


#: The exception classes a program names (§14): the program's `ValueError` is Python's.
EXCEPTION_CLASSES: Final[dict[str, type[Exception]]] = {
    "ToolError": ToolError,
    "Exception": Exception,
    "ValueError": ValueError,
    "TypeError": TypeError,
    "KeyError": KeyError,
    "IndexError": IndexError,
    "ZeroDivisionError": ZeroDivisionError,
    "AssertionError": AssertionError,
    "RuntimeError": RuntimeError,
    "NameError": NameError,
}


class ProgramRaise(BaseException):
    """A program's exception travelling to the `try` that catches it (or to the top).

    `error` is the exception value the program sees (`except E as e` binds it); `line`
    the program line it was raised at.
    """

    def __init__(self, error: BaseException, line: int = 0) -> None:
        super().__init__(error)
        self.error = error
        self.line = line


class Signal(BaseException):
    """The evaluator's own control flow; a program's `try` never catches it."""


class LimitExceeded(Signal):
    """A limit of §14 was passed: the program ends at this statement. `limit` names it."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit
        self.message = message


class OutsideLanguage(Signal):
    """A construct found outside the language only while running (`x.__dict__` on a
    value, a tool called through a name with no call site): a structural error."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Reevaluate(Signal):
    """A lazy pass forced one of its own calls and found it failed: the statement is run
    again strictly, from its start, with the calls it made reused by id."""


class EndProgram(Signal):
    """`final_answer(v)`, a top-level `return v` (kind "final") or `reset()` ("reset")."""

    def __init__(self, kind: str, value: Any = None) -> None:
        super().__init__(kind)
        self.kind = kind
        self.value = value

"""Code plans (PROTOCOL §14): the sans-IO layer that reads, checks and runs programs.

`ProgramStream` splits a streamed answer into complete statements, `check_statement`
refuses what is outside the language, `ProgramMachine` runs the statements as a
dependency graph over JSON values (events in, actions out), `compile_program` checks a
whole program. Nothing here executes a program as Python, does I/O or reads a clock.
"""

from ._check import check_statement
from ._compile import compile_program
from ._exceptions import ToolError
from ._machine import ProgramMachine
from ._program import (
    CodeAction,
    CodeTool,
    Commit,
    Globals,
    Limits,
    MakeCall,
    Printed,
    ProgramOutcome,
)
from ._stream import ProgramStream, Statement, split_statements

__all__ = [
    "CodeAction",
    "CodeTool",
    "Commit",
    "Globals",
    "Limits",
    "MakeCall",
    "Printed",
    "ProgramMachine",
    "ProgramOutcome",
    "ProgramStream",
    "Statement",
    "ToolError",
    "check_statement",
    "compile_program",
    "split_statements",
]

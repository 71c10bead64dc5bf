"""`tl.compile_program`: a whole program checked before anything runs (API.md "Code plans").

Owns the static check a caller can run on a program: every statement split (§14's
tokenizer rule), parsed and checked against the language, and every name called checked
against the tools, the built-ins, and the helpers and variables the program binds.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from .._errors import CodeError
from ._check import check_statement
from ._scope import BUILTIN_NAMES, scope_info_module
from ._stream import split_statements

__all__ = ["compile_program"]


def _tool_names(tools: Iterable[Any] | Mapping[str, Any] | None) -> set[str]:
    """Python names of the tools (a mapping's keys, or objects' `.name`, or strings)."""
    if tools is None:
        return set()
    if isinstance(tools, Mapping):
        return {str(name) for name in tools}
    names = set()
    for tool in tools:
        name = tool if isinstance(tool, str) else getattr(tool, "name", None)
        if isinstance(name, str):
            names.add(_mangle(name))
    return names


def _mangle(name: str) -> str:
    import keyword

    name = name.replace("-", "_")
    return name + "_" if keyword.iskeyword(name) else name


def compile_program(
    source: str, tools: Iterable[Any] | Mapping[str, Any] | None = None
) -> list[ast.Module]:
    """Check a program; return the parsed statements, or raise `CodeError` (with `.line`
    and `.construct`) at the first one outside the language or calling an unknown name."""
    if not isinstance(source, str):
        raise TypeError(
            f"compile_program() takes the program's source, not {type(source).__name__}"
        )
    known = BUILTIN_NAMES | _tool_names(tools)
    trees = []
    for statement in split_statements(source):
        tree = check_statement(statement.source, statement.line)
        trees.append(tree)
        known |= scope_info_module(tree)
    bound = set(known)
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name | ast.arg):
                bound.add(node.id if isinstance(node, ast.Name) else node.arg)
    for tree in trees:
        _check_called_names(tree, known | _locally_bound(tree))
    return trees


def _locally_bound(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
    return names


def _check_called_names(tree: ast.Module, known: set[str] | frozenset[str]) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise CodeError(
                    f"{name!r} is not a tool, helper, built-in or variable{hint}",
                    line=node.lineno,
                    construct="name",
                )

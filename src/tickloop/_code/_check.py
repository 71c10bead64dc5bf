"""The language of code plans, checked before anything runs (PROTOCOL §14 "The language").

Owns what a program may say: `check_statement` parses one complete statement with
`ast.parse` (never compiled) and refuses every construct outside the language with a
`CodeError` naming the construct and the line. What can only be known while running
(an attribute of a value, a name that is not bound) is refused by the evaluator.
"""

from __future__ import annotations

import ast
import string
from typing import Final

from .._errors import CodeError

__all__ = ["ALLOWED_IMPORTS", "MAX_NESTING", "check_statement", "format_fields_error"]

#: Modules a program may import, with the names `from … import` may take from each.
ALLOWED_IMPORTS: Final[dict[str, frozenset[str]]] = {
    "asyncio": frozenset({"gather"}),
    "json": frozenset({"dumps", "loads"}),
    "math": frozenset(
        "ceil floor sqrt isqrt log log2 log10 exp pow fabs isclose isnan isinf isfinite sin "
        "cos tan asin acos atan atan2 sinh cosh tanh hypot degrees radians pi e tau inf nan "
        "gcd lcm factorial comb perm prod fsum trunc copysign fmod modf dist".split()
    ),
    "re": frozenset(
        "search match fullmatch findall finditer sub subn split compile escape IGNORECASE I "
        "MULTILINE M DOTALL S".split()
    ),
    "datetime": frozenset({"date", "datetime", "timedelta", "timezone"}),
}

#: Expression nesting deeper than this is refused: the evaluator recurses on it.
MAX_NESTING: Final = 60

_STATEMENTS: Final = (
    ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.If, ast.For, ast.While,
    ast.Break, ast.Continue, ast.FunctionDef, ast.AsyncFunctionDef, ast.Return, ast.Pass,
    ast.Try, ast.Raise, ast.Assert, ast.Delete, ast.Global, ast.Nonlocal, ast.Import,
    ast.ImportFrom,
)  # fmt: skip
_EXPRESSIONS: Final = (
    ast.BoolOp, ast.NamedExpr, ast.BinOp, ast.UnaryOp, ast.Lambda, ast.IfExp, ast.Dict,
    ast.Set, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Await,
    ast.Compare, ast.Call, ast.FormattedValue, ast.JoinedStr, ast.Constant, ast.Attribute,
    ast.Subscript, ast.Starred, ast.Name, ast.List, ast.Tuple, ast.Slice,
)  # fmt: skip
_PARTS: Final = (
    ast.Module, ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop,
    ast.comprehension, ast.ExceptHandler, ast.arguments, ast.arg, ast.keyword, ast.alias,
)  # fmt: skip
_ALLOWED: Final = _STATEMENTS + _EXPRESSIONS + _PARTS

#: What a refused node is called in the error (the `construct`), by node type.
_CONSTRUCTS: Final[dict[type[ast.AST], str]] = {
    ast.ClassDef: "class",
    ast.With: "with",
    ast.AsyncWith: "with",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.AsyncFor: "async for",
    ast.Match: "match",
    ast.TryStar: "except*",
}


def check_statement(source: str, line: int = 1) -> ast.Module:
    """Parse one complete statement (or several) and check it is inside the language.

    `line` is the program line of the source's first line: every node's line numbers are
    moved to the program's, so errors and call records point at the program.
    """
    try:
        tree = ast.parse(source, mode="exec")
    except SyntaxError as error:
        at = line + (error.lineno or 1) - 1
        raise CodeError(f"syntax error: {error.msg}", line=at, construct="syntax") from None
    except (ValueError, MemoryError, RecursionError) as error:
        message = f"the program cannot be parsed: {error}"
        raise CodeError(message, line=line, construct="syntax") from None
    if line > 1:
        ast.increment_lineno(tree, line - 1)
    _Checker(line).check(tree)
    return tree


def format_fields_error(template: str) -> str | None:
    """Why `template`, a `str.format` string, is refused (a field reaching an attribute
    or an item: `{0.__class__}`, `{x[key]}`), or None when it is fine."""
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as error:
        return f"bad format string: {error}"
    for _, name, spec, _ in fields:
        if name is not None and ("." in name or "[" in name):
            return f"the format field {{{name}}} reads an attribute or an item"
        if spec and "{" in spec:
            nested = format_fields_error(spec)
            if nested:
                return nested
    return None


class _Checker:
    """Walks a statement's tree and raises at the first construct outside the language."""

    def __init__(self, line: int) -> None:
        self._line = line

    def check(self, tree: ast.Module) -> None:
        self._visit(tree, depth=0, in_function=False)

    def _refuse(self, node: ast.AST, message: str, construct: str) -> None:
        raise CodeError(message, line=getattr(node, "lineno", self._line), construct=construct)

    def _visit(self, node: ast.AST, *, depth: int, in_function: bool) -> None:
        if depth > MAX_NESTING:
            self._refuse(node, f"the program nests deeper than {MAX_NESTING} levels", "nesting")
        if not isinstance(node, _ALLOWED):
            construct = _CONSTRUCTS.get(type(node), type(node).__name__)
            self._refuse(node, f"{construct!r} is outside the language of code plans", construct)
        self._check_node(node, in_function=in_function)
        inside = in_function or isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        )
        for child in ast.iter_child_nodes(node):
            self._visit(child, depth=depth + 1, in_function=inside)

    def _check_node(self, node: ast.AST, *, in_function: bool) -> None:
        name = _bound_name(node)
        if name is not None and name.startswith("__"):
            self._refuse(node, f"the name {name!r} is outside the language (dunder)", "dunder")
        if isinstance(node, ast.Attribute):
            self._check_attribute(node)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            self._check_import(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self._check_function(node)
        elif isinstance(node, ast.Call):
            self._check_format_call(node)
        elif isinstance(node, ast.Name) and node.id == "task_input":
            if not isinstance(node.ctx, ast.Load):
                self._refuse(node, "task_input is read-only", "task_input")
        elif isinstance(node, ast.Subscript | ast.Attribute) and not isinstance(node.ctx, ast.Load):
            self._check_store_target(node)
        elif isinstance(node, ast.Global | ast.Nonlocal) and not in_function:
            if isinstance(node, ast.Nonlocal):
                self._refuse(node, "nonlocal outside a helper", "nonlocal")

    def _check_attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("_"):
            self._refuse(
                node, f"the attribute {node.attr!r} is outside the language (private)", "dunder"
            )
        if not isinstance(node.ctx, ast.Load):
            self._refuse(node, f"assigning the attribute .{node.attr} is outside the language",
                         "attribute")  # fmt: skip

    def _check_store_target(self, node: ast.Subscript | ast.Attribute) -> None:
        root: ast.expr = node
        while isinstance(root, ast.Subscript | ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id == "task_input":
            self._refuse(node, "task_input is read-only", "task_input")

    def _check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_IMPORTS:
                    self._refuse(node, _import_message(alias.name), "import")
            return
        module = node.module or ""
        if node.level or module not in ALLOWED_IMPORTS:
            self._refuse(node, _import_message("." * node.level + module), "import")
        for alias in node.names:
            if alias.name not in ALLOWED_IMPORTS[module]:
                allowed = ", ".join(sorted(ALLOWED_IMPORTS[module]))
                self._refuse(
                    node,
                    f"'from {module} import {alias.name}' is outside the language "
                    f"({module} gives: {allowed})",
                    "import",
                )

    def _check_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.decorator_list:
            self._refuse(node, "decorators are outside the language", "decorator")
        if node.args.posonlyargs or node.args.kwonlyargs:
            pass  # keyword-only and positional-only parameters are plain Python, kept

    def _check_format_call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in ("format", "format_map")
            and isinstance(func.value, ast.Constant)
            and isinstance(func.value.value, str)
        ):
            if func.attr == "format_map":
                self._refuse(node, "str.format_map is outside the language", "format")
            problem = format_fields_error(func.value.value)
            if problem:
                self._refuse(node, f"{problem}: outside the language", "format")


def _bound_name(node: ast.AST) -> str | None:
    """The identifier a node names or binds, if any."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name
    if isinstance(node, ast.arg):
        return node.arg
    if isinstance(node, ast.ExceptHandler):
        return node.name
    if isinstance(node, ast.alias):
        return node.asname or node.name
    if isinstance(node, ast.keyword):
        return node.arg
    return None


def _import_message(module: str) -> str:
    allowed = ", ".join(sorted(ALLOWED_IMPORTS))
    return f"importing {module!r} is outside the language (a program may import {allowed})"

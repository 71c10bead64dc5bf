"""Differential test of code plans (PROTOCOL §14 "The reference meaning").

Hypothesis writes programs in the part of the language where tickloop promises exactly
CPython's behaviour (no list or dict shared between two names, no attribute read on a
dict, no tuple or set leaving the program). Each program runs twice:

- as the REFERENCE program, by CPython itself, here in the test only (it is the oracle:
  `await` removed, `asyncio.gather` → `list`, `final_answer` ends the program, each tool
  a blocking function raising `ToolError`), recording the calls, the variables at the
  end, the printed lines and the output;
- through tickloop's `ProgramMachine`, with statements arriving and calls ending in an
  order hypothesis chooses (random tool latencies, the model still streaming).

Both must agree: the same calls with the same parameters (tickloop may add read-only
calls listed as "also ran" after an uncaught failure, never one with side effects), the
same variables, printed lines and output, the same error at the same line.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import json
import random
import re
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import tickloop as tl
from tickloop._code import (
    CodeTool,
    Globals,
    MakeCall,
    Printed,
    ProgramMachine,
    split_statements,
)

# -- the tools: pure functions of their arguments ------------------------------------------


class ToolError(Exception):
    """The reference program's ToolError (the same attributes as tickloop's)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.type = "runtime"
        self.status = "failed"
        self.call_id = ""


def fetch(url: str) -> str:
    if url.startswith("bad"):
        raise ToolError(f"cannot fetch {url}")
    return "page:" + url


def size(text: str) -> int:
    return len(text)


def square(n: int) -> int:
    if n % 5 == 3:
        raise ToolError(f"unlucky {n}")
    if abs(n) > 10**6:
        raise ToolError(f"{n} is too large")
    return n * n


def span(n: int, width: int = 3) -> list[int]:
    return list(range(n % 50, n % 50 + min(abs(width), 5)))


def store(key: str, value: int) -> dict[str, Any]:
    if value < 0:
        raise ToolError(f"cannot store {value} under {key}")
    return {"key": key, "stored": value}


def notify(text: str) -> bool:
    if "bad" in text:
        raise ToolError(f"refused to send {text!r}")
    return True


FUNCTIONS: dict[str, Callable[..., Any]] = {
    f.__name__: f for f in (fetch, size, square, span, store, notify)
}
READ_ONLY = {"fetch", "size", "square", "span"}
CODE_TOOLS = {
    name: CodeTool(
        name,
        name,
        tuple(inspect.signature(f).parameters),
        {
            p.name: p.default
            for p in inspect.signature(f).parameters.values()
            if p.default is not inspect.Parameter.empty
        },
        read_only=name in READ_ONLY,
    )
    for name, f in FUNCTIONS.items()
}


def answer(tool: str, params: dict[str, Any]) -> tuple[Any, str | None]:
    """A tool's result for parameters: (value, None) or (None, the ToolError message)."""
    try:
        return FUNCTIONS[tool](**params), None
    except ToolError as error:
        return None, error.message


# -- what a run gives back -----------------------------------------------------------------


@dataclass
class Observed:
    calls: list[tuple[str, str]]  # (tool, params as sorted JSON), in no particular order
    variables: dict[str, Any]
    printed: list[str]
    kind: str  # "final" | "result" | "none" | "error"
    value: Any = None
    error_type: str = ""
    error_line: int = 0
    also_ran: list[tuple[str, str, bool]] = field(default_factory=list)  # + read_only


def call_key(tool: str, params: dict[str, Any]) -> tuple[str, str]:
    return tool, json.dumps(params, sort_keys=True)


def as_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


# -- the reference program, run by CPython (the oracle; in this test only) -----------------


class _Final(BaseException):
    """final_answer(v) in the reference program: ends it (no `except` of it catches it)."""

    def __init__(self, value: Any) -> None:
        self.value = value


class _Reference(ast.NodeTransformer):
    """The rewrites of §14 "The reference meaning" that are syntax."""

    def visit_Await(self, node: ast.Await) -> ast.AST:
        return self.visit(node.value)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        self.generic_visit(node)
        return ast.copy_location(
            ast.FunctionDef(node.name, node.args, node.body, node.decorator_list,
                            node.returns, node.type_comment),
            node,
        )  # fmt: skip

    def visit_Import(self, node: ast.Import) -> ast.AST:
        return ast.copy_location(ast.Pass(), node)  # `asyncio` is given below


def _is_result_statement(statement: ast.stmt) -> bool:
    if not isinstance(statement, ast.Expr):
        return False
    value = statement.value
    if isinstance(value, ast.Await):
        value = value.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return value.func.id != "print" and value.func.id not in FUNCTIONS
    return True


def run_reference(source: str, message: Callable[[str], str] = str) -> Observed:
    """Run the reference program; `message(m)` is the message a failed call shows."""
    tree = _Reference().visit(ast.parse(source))
    if tree.body and _is_result_statement(tree.body[-1]):
        last = tree.body[-1]
        tree.body[-1] = ast.copy_location(
            ast.Assign([ast.Name("__result__", ast.Store())], last.value), last
        )
    ast.fix_missing_locations(tree)
    calls: list[tuple[str, str]] = []

    def as_blocking(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(function)

        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(call_key(name, dict(signature.bind(*args, **kwargs).arguments)))
            try:
                return function(*args, **kwargs)
            except ToolError as error:
                raise ToolError(message(error.message)) from None

        return call

    def final_answer(value: Any) -> None:
        raise _Final(value)

    namespace: dict[str, Any] = {name: as_blocking(name, f) for name, f in FUNCTIONS.items()}
    namespace.update(
        ToolError=ToolError,
        final_answer=final_answer,
        asyncio=types.SimpleNamespace(gather=lambda *values: list(values)),
    )
    given = set(namespace)
    out = io.StringIO()
    kind, value, error_type, error_line = "none", None, "", 0
    with contextlib.redirect_stdout(out):
        try:
            exec(compile(tree, "<program>", "exec"), namespace)  # the oracle, test only
        except _Final as end:
            kind, value = "final", end.value
        except Exception as error:
            kind, error_type = "error", type(error).__name__
            frames = [f for f in _traceback_frames(error.__traceback__) if f[0] == "<program>"]
            error_line = frames[-1][1]
    if kind == "none" and namespace.get("__result__") is not None:
        kind, value = "result", namespace["__result__"]
    variables = {
        name: item
        for name, item in namespace.items()
        if name not in given and not name.startswith("__") and _is_data(item)
    }
    return Observed(calls, variables, _lines(out.getvalue()), kind, value, error_type,
                    error_line)  # fmt: skip


def _traceback_frames(tb: types.TracebackType | None) -> list[tuple[str, int]]:
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    return frames


def _is_data(value: Any) -> bool:
    return isinstance(value, int | str | list | dict | float | type(None))


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


# -- the same program through tickloop's machine, under a hypothesis-chosen schedule -------


def run_machine(source: str, choose: Callable[[int], int]) -> Observed:
    """Statements arrive and calls end in the order `choose(n)` (0 <= i < n) picks."""
    machine = ProgramMachine(iteration=1, tools=CODE_TOOLS, globals=Globals())
    waiting = split_statements(source)
    running: list[MakeCall] = []
    made: dict[str, MakeCall] = {}
    printed: list[str] = []
    closed = False
    for _ in range(20_000):
        for action in machine.step():
            if isinstance(action, MakeCall):
                assert action.call_id not in made, f"{action.call_id} made twice"
                made[action.call_id] = action
                running.append(action)
            elif isinstance(action, Printed):
                printed.append(action.text)
        if machine.finished:
            break
        if machine.runnable:
            continue
        options = len(waiting) + len(running)
        if options == 0:
            assert not closed, "nothing runs, no call is running, and the program goes on"
            machine.close()
            closed = True
            continue
        pick = choose(options) if options > 1 else 0
        if pick < len(waiting) and waiting:  # the model writes the next statement
            machine.add_statement(waiting.pop(0))
            continue
        call = running.pop(pick - len(waiting))  # this call ends now
        value, message = answer(call.tool, call.params)
        if message is None:
            machine.call_finished(call.call_id, value)
        else:
            error = {"type": "runtime", "message": message, "status": "failed"}
            machine.call_finished(call.call_id, error=error)
    else:
        raise AssertionError("the program never finished")
    outcome = machine.outcome()
    assert printed == outcome.printed
    error = outcome.error or {}
    also = set(error.get("also_ran", []))
    observed = Observed(
        calls=[call_key(c.tool, c.params) for i, c in made.items() if i not in also],
        variables=machine.globals.variables,
        printed=outcome.printed,
        kind=outcome.kind,
        value=outcome.value,
        error_type=str(error.get("message", "")).split(":")[0],
        error_line=int(error.get("line", 0)),
        also_ran=[(*call_key(made[i].tool, made[i].params), made[i].read_only) for i in also],
    )
    if outcome.kind == "result" and outcome.value is None:
        observed.kind = "none"
    return observed


def assert_same(reference: Observed, ours: Observed, source: str) -> None:
    where = f"\n--- program ---\n{source}"
    assert ours.kind == reference.kind, f"{ours} != {reference}{where}"
    if reference.kind == "error":
        assert ours.error_type == reference.error_type, where
        assert ours.error_line == reference.error_line, where
        for tool, params, read_only in ours.also_ran:
            assert read_only, f"{tool}({params}) ran after an uncaught failure{where}"
    else:
        assert ours.also_ran == [], where
        assert as_json(ours.value) == as_json(reference.value), where
    assert Counter(ours.calls) == Counter(reference.calls), where
    assert as_json(ours.variables) == as_json(reference.variables), where
    assert ours.printed == reference.printed, where


# -- programs, valid by construction ---------------------------------------------------------

# A name's type is fixed by its pool, so a name never changes type, and a list or dict is
# only ever reached through the one name it was built for (no aliasing: §14 "Values").
POOLS = {"int": ["a", "b", "c", "d"], "str": ["s", "t", "u"], "list": ["xs", "ys", "zs"],
         "dict": ["r", "q"]}  # fmt: skip
WORDS = ["a", "ok", "bad", "zed", "b-1"]


@dataclass
class Helper:
    name: str
    params: list[str]  # int parameters
    defaults: int  # how many of them have defaults
    returns: str  # "int" | "str"
    is_async: bool


@dataclass
class Scope:
    defined: dict[str, str]  # name -> type, names bound on every path to here
    frozen: set[str] = field(default_factory=set)  # names a loop needs unchanged
    helpers: list[Helper] = field(default_factory=list)
    in_helper: bool = False
    loops: int = 0  # enclosing loops (for break / continue)

    def child(self, **changes: Any) -> Scope:
        values: dict[str, Any] = {
            "defined": dict(self.defined),
            "frozen": set(self.frozen),
            "helpers": self.helpers,
            "in_helper": self.in_helper,
            "loops": self.loops,
        }
        values.update(changes)
        return Scope(**values)

    def names(self, kind: str) -> list[str]:
        return [n for n, k in self.defined.items() if k == kind]


class Writer:
    """Draws one program: statements over a scope of names defined on every path."""

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        self.draw = draw
        self.helper_count = 0

    def pick(self, options: list[Any]) -> Any:
        return options[self.draw(st.integers(0, len(options) - 1))]

    def chance(self, percent: int) -> bool:
        return bool(self.draw(st.integers(0, 99)) < percent)

    # expressions ----------------------------------------------------------------------------

    def call(self, text: str, scope: Scope) -> str:
        return f"await {text}" if self.chance(20) else text

    def int_expr(self, scope: Scope, depth: int = 2) -> str:
        atoms = [str(self.draw(st.integers(-2, 9)))]
        atoms += scope.names("int")
        if depth <= 0:
            return self.pick(atoms)
        kind = self.pick(["atom", "atom", "arith", "arith", "len", "tool", "tool", "sub",
                          "dict", "helper", "cond", "minmax", "sum", "div"])  # fmt: skip
        inner = depth - 1
        if kind == "arith":
            op = self.pick(["+", "-"])
            return f"({self.int_expr(scope, inner)} {op} {self.int_expr(scope, inner)})"
        if kind == "len" and (scope.names("list") or scope.names("str")):
            return f"len({self.pick(scope.names('list') + scope.names('str'))})"
        if kind == "tool":
            if self.chance(50):
                return self.call(f"square({self.int_expr(scope, inner)})", scope)
            return self.call(f"size({self.str_expr(scope, inner)})", scope)
        if kind == "sub" and scope.names("list"):
            index = self.draw(st.integers(-2, 3))
            return f"{self.pick(scope.names('list'))}[{index}]"
        if kind == "dict" and scope.names("dict"):
            name = self.pick(scope.names("dict"))
            return f"{name}['stored']" if self.chance(60) else f"{name}.get('stored', 0)"
        if kind == "helper" and scope.helpers:
            return self.helper_call(scope, "int", inner)
        if kind == "cond":
            return (f"({self.int_expr(scope, inner)} if {self.condition(scope, inner)} "
                    f"else {self.int_expr(scope, inner)})")  # fmt: skip
        if kind == "minmax":
            fn = self.pick(["min", "max", "abs"])
            if fn == "abs":
                return f"abs({self.int_expr(scope, inner)})"
            return f"{fn}({self.int_expr(scope, inner)}, {self.int_expr(scope, inner)})"
        if kind == "sum" and scope.names("list"):
            xs = self.pick(scope.names("list"))
            return self.pick([f"sum({xs})", f"sum(k * 2 for k in {xs})",
                              f"len([k for k in {xs} if k % 2 == 0])"])  # fmt: skip
        if kind == "div":
            left = self.int_expr(scope, inner)
            if self.chance(15):
                return f"({left} // {self.int_expr(scope, 0)})"  # may divide by zero
            return f"({left} {self.pick(['//', '%'])} {self.draw(st.integers(1, 4))})"
        return self.pick(atoms)

    def str_expr(self, scope: Scope, depth: int = 2) -> str:
        atoms = [repr(self.pick(WORDS)), *scope.names("str")]
        if depth <= 0:
            return self.pick(atoms)
        inner = depth - 1
        kind = self.pick(["atom", "atom", "tool", "concat", "fstring", "str", "method",
                          "dict", "helper", "slice"])  # fmt: skip
        if kind == "tool":
            return self.call(f"fetch({self.str_expr(scope, inner)})", scope)
        if kind == "concat":
            return f"({self.str_expr(scope, inner)} + {self.str_expr(scope, inner)})"
        if kind == "fstring":  # atoms inside: Python 3.11 nests no quotes in f-strings
            spec = self.pick(["", "!r", ":>4", ":03d"])
            if spec == ":03d":
                return f'f"n={{{self.int_expr(scope, 0)}:03d}}/{{{self.str_expr(scope, 0)}}}"'
            return f'f"<{{{self.str_expr(scope, 0)}{spec}}}>{{{self.int_expr(scope, 0)}}}"'
        if kind == "str":
            return f"str({self.int_expr(scope, inner)})"
        if kind == "method":
            method = self.pick(["upper()", "lower()", "strip('-')", "replace('a', 'b')"])
            return f"{self.str_expr(scope, inner)}.{method}"
        if kind == "dict" and scope.names("dict"):
            return f"{self.pick(scope.names('dict'))}['key']"
        if kind == "helper" and scope.helpers:
            return self.helper_call(scope, "str", inner)
        if kind == "slice":
            return f"{self.str_expr(scope, inner)}[:{self.draw(st.integers(0, 6))}]"
        return self.pick(atoms)

    def list_expr(self, scope: Scope, depth: int = 2) -> str:
        inner = depth - 1
        kinds = ["literal", "tool", "range"]
        if depth > 0 and scope.names("list"):
            kinds += ["comprehension", "comprehension", "sorted", "concat", "gather", "slice"]
        kind = self.pick(kinds)
        if kind == "tool":
            width = f", width={self.draw(st.integers(1, 4))}" if self.chance(40) else ""
            return self.call(f"span({self.int_expr(scope, max(inner, 0))}{width})", scope)
        if kind == "range":
            return f"list(range({self.draw(st.integers(0, 4))}))"
        if kind == "comprehension":
            xs = self.pick(scope.names("list"))
            element = self.pick(["square(k)", "k * 3", "k + len(xs)".replace("xs", xs),
                                 "size(fetch(str(k)))"])  # fmt: skip
            where = f" if k % {self.draw(st.integers(2, 3))} != 0" if self.chance(40) else ""
            return f"[{element} for k in {xs}{where}]"
        if kind == "sorted":
            return f"sorted({self.pick(scope.names('list'))}, reverse={self.chance(50)})"
        if kind == "concat":
            return f"{self.pick(scope.names('list'))} + [{self.int_expr(scope, 0)}]"
        if kind == "gather":  # square fails for some k: its failure inside gather (§14)
            xs = self.pick(scope.names("list"))
            element = self.pick(["square(k)", "size(fetch(str(k)))"])
            return f"await asyncio.gather(*[{element} for k in {xs}])"
        if kind == "slice":
            return f"{self.pick(scope.names('list'))}[1:]"
        items = [self.int_expr(scope, max(inner, 0)) for _ in range(self.draw(st.integers(0, 3)))]
        return f"[{', '.join(items)}]"

    def dict_expr(self, scope: Scope) -> str:
        if self.chance(60):
            return self.call(f"store({self.str_expr(scope, 1)}, {self.int_expr(scope, 1)})", scope)
        return f'{{"key": {self.str_expr(scope, 1)}, "stored": {self.int_expr(scope, 1)}}}'

    def expr(self, kind: str, scope: Scope, depth: int = 2) -> str:
        if kind == "int":
            return self.int_expr(scope, depth)
        if kind == "str":
            return self.str_expr(scope, depth)
        if kind == "list":
            return self.list_expr(scope, depth)
        return self.dict_expr(scope)

    def condition(self, scope: Scope, depth: int = 1) -> str:
        kind = self.pick(["compare", "compare", "mod", "str", "in", "not", "and", "len"])
        if kind == "mod":
            return f"{self.int_expr(scope, depth)} % 2 == 0"
        if kind == "str":
            return f"{self.str_expr(scope, depth)}.startswith('page')"
        if kind == "in" and scope.names("list"):
            return f"{self.int_expr(scope, 0)} in {self.pick(scope.names('list'))}"
        if kind == "not":
            return f"not ({self.condition(scope, 0)})"
        if kind == "and":
            op = self.pick(["and", "or"])
            return f"({self.condition(scope, 0)} {op} {self.condition(scope, 0)})"
        if kind == "len" and scope.names("list"):
            return f"len({self.pick(scope.names('list'))}) > {self.draw(st.integers(0, 3))}"
        op = self.pick(["<", "<=", "==", "!=", ">"])
        return f"{self.int_expr(scope, depth)} {op} {self.int_expr(scope, depth)}"

    def helper_call(self, scope: Scope, returns: str, depth: int) -> str:
        options = [h for h in scope.helpers if h.returns == returns]
        if not options:
            return self.expr(returns, scope, 0)
        helper = self.pick(options)
        count = len(helper.params) - self.draw(st.integers(0, helper.defaults))
        args = [self.int_expr(scope, max(depth, 0)) for _ in range(count)]
        text = f"{helper.name}({', '.join(args)})"
        return f"await {text}" if helper.is_async else text

    # statements -----------------------------------------------------------------------------

    def block(self, scope: Scope, indent: str, size: int) -> list[str]:
        lines: list[str] = []
        for _ in range(max(size, 1)):
            lines += self.statement(scope, indent)
        return lines

    def assignable(self, scope: Scope, kind: str) -> str | None:
        names = [n for n in POOLS[kind] if n not in scope.frozen]
        return self.pick(names) if names else None

    def statement(self, scope: Scope, indent: str, top: bool = False) -> list[str]:
        kinds = ["assign", "assign", "assign", "augment", "append", "dict_set", "call",
                 "print", "print", "if", "for", "try"]  # fmt: skip
        if top:
            kinds += ["while", "def", "def", "for"]
        if scope.loops:
            kinds += ["break_if", "continue_if"]
        kind = self.pick(kinds)
        depth = len(indent) // 4
        if depth >= 3 and kind in ("if", "for", "try", "while"):
            kind = "assign"
        if kind == "augment":
            names = [n for n in scope.names("int") + scope.names("str") if n not in scope.frozen]
            if names:
                name = self.pick(names)
                return [f"{indent}{name} += {self.expr(scope.defined[name], scope, 1)}"]
            kind = "assign"
        if kind == "append":
            names = [n for n in scope.names("list") if n not in scope.frozen]
            if names:
                return [f"{indent}{self.pick(names)}.append({self.int_expr(scope)})"]
            kind = "assign"
        if kind == "dict_set":
            names = [n for n in scope.names("dict") if n not in scope.frozen]
            if names:
                return [f"{indent}{self.pick(names)}['stored'] = {self.int_expr(scope)}"]
            kind = "assign"
        if kind == "assign":
            type_ = self.pick(["int", "int", "str", "list", "dict"])
            name = self.assignable(scope, type_)
            if name is None:
                return [f"{indent}pass"]
            line = f"{indent}{name} = {self.expr(type_, scope)}"
            scope.defined[name] = type_
            return [line]
        if kind == "call":
            if self.chance(50):
                return [f"{indent}{self.call(f'notify({self.str_expr(scope)})', scope)}"]
            text = f"store({self.str_expr(scope, 1)}, {self.int_expr(scope, 1)})"
            return [f"{indent}{self.call(text, scope)}"]
        if kind == "print":
            values = [self.expr(self.pick(["int", "str", "str"]), scope, 1)
                      for _ in range(self.draw(st.integers(1, 2)))]  # fmt: skip
            if scope.names("list") and self.chance(20):
                values.append(self.pick(scope.names("list")))
            if scope.names("dict") and self.chance(15):
                values.append(self.pick(scope.names("dict")))
            end = ', end=""' if self.chance(15) else ""
            return [f"{indent}print({', '.join(values)}{end})"]
        if kind in ("break_if", "continue_if"):
            word = "break" if kind == "break_if" else "continue"
            return [f"{indent}if {self.condition(scope)}:", f"{indent}    {word}"]
        inner = indent + "    "
        if kind == "if":
            lines = [f"{indent}if {self.condition(scope)}:"]
            lines += self.block(scope.child(), inner, self.draw(st.integers(1, 2)))
            if self.chance(30):
                lines += [f"{indent}elif {self.condition(scope)}:"]
                lines += self.block(scope.child(), inner, 1)
            if self.chance(50):
                lines += [f"{indent}else:"]
                lines += self.block(scope.child(), inner, 1)
            return lines
        if kind == "for":
            return self.for_loop(scope, indent)
        if kind == "while":
            counter = self.assignable(scope, "int")
            if counter is None:
                return [f"{indent}pass"]
            body = scope.child(loops=scope.loops + 1, frozen=scope.frozen | {counter})
            body.defined[counter] = "int"
            scope.defined[counter] = "int"
            lines = [f"{indent}{counter} = 0", f"{indent}while {counter} < "
                     f"{self.draw(st.integers(0, 4))}:", f"{inner}{counter} += 1"]  # fmt: skip
            return lines + self.block(body, inner, self.draw(st.integers(1, 3)))
        if kind == "try":
            lines = [f"{indent}try:"]
            lines += self.block(scope.child(), inner, self.draw(st.integers(1, 3)))
            handler = self.pick(["ToolError as e", "ToolError", "Exception as e",
                                 "(ToolError, ZeroDivisionError) as e"])  # fmt: skip
            lines += [f"{indent}except {handler}:"]
            if handler.endswith(" e") and self.chance(70):
                what = self.pick(["e.message", "str(e)", "'error'"])
                lines += [f"{inner}print('caught', {what})"]
            lines += self.block(scope.child(), inner, 1)
            if self.chance(20):
                lines += [f"{indent}finally:", f"{inner}print('finally')"]
            return lines
        if kind == "def":
            return self.helper(scope, indent)
        raise AssertionError(kind)

    def for_loop(self, scope: Scope, indent: str) -> list[str]:
        inner = indent + "    "
        source = self.pick(["range", "list", "enumerate"])
        lists = scope.names("list")
        frozen = set(scope.frozen)
        if source in ("list", "enumerate") and lists:
            xs = self.pick(lists)
            frozen.add(xs)
            iterable = xs if source == "list" else f"enumerate({xs})"
        else:
            source, iterable = "range", f"range({self.draw(st.integers(0, 4))})"
        targets = [n for n in POOLS["int"] if n not in frozen]
        if len(targets) < 2:
            return [f"{indent}pass"]
        target = self.pick(targets)
        names = [target]
        if source == "enumerate":
            second = self.pick([n for n in targets if n != target])
            names.append(second)
            target = f"{target}, {second}"
        body = scope.child(loops=scope.loops + 1, frozen=frozen | set(names))
        for name in names:
            body.defined[name] = "int"
        lines = [f"{indent}for {target} in {iterable}:"]
        lines += self.block(body, inner, self.draw(st.integers(1, 3)))
        if self.chance(20):
            lines += [f"{indent}else:", f"{inner}print('loop done')"]
        return lines

    def helper(self, scope: Scope, indent: str) -> list[str]:
        name = f"h{self.helper_count}"
        self.helper_count += 1
        count = self.draw(st.integers(1, 2))
        params = ["n", "m"][:count]
        defaults = self.draw(st.integers(0, count))
        is_async = self.chance(30)
        returns = self.pick(["int", "str"])
        local = scope.child(in_helper=True, loops=0, frozen=set(POOLS["int"] + POOLS["str"]
                            + POOLS["list"] + POOLS["dict"]))  # fmt: skip
        for p in params:
            local.defined[p] = "int"
        signature = ", ".join(
            p if i < count - defaults else f"{p}={self.draw(st.integers(0, 5))}"
            for i, p in enumerate(params)
        )
        lines = [f"{indent}{'async ' if is_async else ''}def {name}({signature}):"]
        inner = indent + "    "
        if self.chance(60):
            lines += [f"{inner}v = {self.int_expr(local)}"]
            local.defined["v"] = "int"
        if self.chance(40):
            lines += [f"{inner}if {self.condition(local)}:",
                      f"{inner}    return {self.expr(returns, local, 1)}"]  # fmt: skip
        lines += [f"{inner}return {self.expr(returns, local)}"]
        scope.helpers.append(Helper(name, params, defaults, returns, is_async))
        return lines

    def program(self) -> str:
        scope = Scope(defined={})
        lines: list[str] = []
        if self.chance(30):
            lines.append("import asyncio")
        for _ in range(self.draw(st.integers(0, 3))):  # names later statements use
            type_ = self.pick(["int", "str", "list", "list", "dict"])
            name = self.pick(POOLS[type_])
            lines.append(f"{name} = {self.expr(type_, scope)}")
            scope.defined[name] = type_
        for _ in range(self.draw(st.integers(1, 7))):
            lines += self.statement(scope, "", top=True)
        if "asyncio.gather" in "\n".join(lines) and lines[0] != "import asyncio":
            lines.insert(0, "import asyncio")
        ending = self.pick(["none", "final", "final_if", "result"])
        if ending == "final":
            lines.append(f"final_answer({self.expr(self.pick(['int', 'str']), scope)})")
        elif ending == "final_if":
            lines.append(f"if {self.condition(scope)}:\n    final_answer({self.int_expr(scope)})")
            lines.append(f"print('after', {self.str_expr(scope)})")
        elif ending == "result":
            lines.append(self.expr(self.pick(["int", "str", "list"]), scope))
        return "\n".join(lines) + "\n"


@st.composite
def programs(draw: Callable[[Any], Any]) -> str:
    return Writer(draw).program()


# -- the property --------------------------------------------------------------------------


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(source=programs(), data=st.data())
def test_a_program_means_what_cpython_does_with_the_reference_program(
    source: str, data: st.DataObject
) -> None:
    reference = run_reference(source)
    ours = run_machine(source, lambda n: data.draw(st.integers(0, n - 1)))
    assert_same(reference, ours, source)


@pytest.mark.parametrize("schedule", [lambda n: 0, lambda n: n - 1], ids=["first", "last"])
def test_a_failure_inside_gather_lists_the_calls_after_it_as_also_ran(
    schedule: Callable[[int], int],
) -> None:
    source = "import asyncio\nzs = await asyncio.gather(square(6), square(8), square(21))\n"
    assert_same(run_reference(source), run_machine(source, schedule), source)


@pytest.mark.parametrize(
    "flag", ["True", "catch"], ids=["literal", "computed (the flag is read first)"]
)
def test_gather_with_return_exceptions_puts_the_failure_in_the_list(flag: str) -> None:
    source = (
        "import asyncio\n"
        "catch = 1 > 0\n"
        f"zs = await asyncio.gather(square(8), store('a', 1), return_exceptions={flag})\n"
        "print(len(zs), zs[1])\n"
    )
    # The reference program, by hand: square(8) raises, the ToolError is the first item.
    ours = run_machine(source, lambda n: 0)
    assert ours.kind == "none"
    assert Counter(ours.calls) == Counter(
        [call_key("square", {"n": 8}), call_key("store", {"key": "a", "value": 1})]
    )
    assert ours.printed == ["2 {'key': 'a', 'stored': 1}"]


def test_a_tool_errors_attribute_on_another_error_is_cpythons_attribute_error() -> None:
    # Found by the property: `e.message` on an IndexError raises AttributeError (the
    # handler's own error), and the `finally` still prints.
    source = (
        "xs = []\n"
        "try:\n"
        "    a = xs[0]\n"
        "except Exception as e:\n"
        "    print('caught', e.message)\n"
        "finally:\n"
        "    print('finally')\n"
    )
    reference = run_reference(source)
    assert reference.error_type == "AttributeError" and reference.printed == ["finally"]
    assert_same(reference, run_machine(source, lambda n: 0), source)


# -- the same, through the trio driver on the virtual clock ---------------------------------

LATENCIES = [0.0, 0.25, 1.0, 3.0]
latency_seed = [0]


async def _latency(tool: str, **params: Any) -> None:
    """A latency per call that depends only on the seed, the tool and its parameters."""
    key = f"{latency_seed[0]}|{tool}|{json.dumps(params, sort_keys=True)}"
    await trio.sleep(random.Random(key).choice(LATENCIES))


def _failing(tool: str, params: dict[str, Any]) -> Any:
    value, message = answer(tool, params)
    if message is not None:
        raise ValueError(message)  # a failed call; the program sees "ValueError: ..."
    return value


@tl.tool(name="fetch", read_only=True)
async def fetch_tool(url: str) -> str:
    """Fetch a page."""
    await _latency("fetch", url=url)
    return str(_failing("fetch", {"url": url}))


@tl.tool(name="size", read_only=True)
async def size_tool(text: str) -> int:
    """The length of a text."""
    await _latency("size", text=text)
    return int(_failing("size", {"text": text}))


@tl.tool(name="square", read_only=True)
async def square_tool(n: int) -> int:
    """n squared."""
    await _latency("square", n=n)
    return int(_failing("square", {"n": n}))


@tl.tool(name="span", read_only=True)
async def span_tool(n: int, width: int = 3) -> list[int]:
    """Consecutive integers."""
    await _latency("span", n=n, width=width)
    return list(_failing("span", {"n": n, "width": width}))


@tl.tool(name="store")
async def store_tool(key: str, value: int) -> dict[str, Any]:
    """Store a value: a side effect."""
    await _latency("store", key=key, value=value)
    return dict(_failing("store", {"key": key, "value": value}))


@tl.tool(name="notify")
async def notify_tool(text: str) -> bool:
    """Send a notification: a side effect."""
    await _latency("notify", text=text)
    return bool(_failing("notify", {"text": text}))


TRIO_TOOLS = [fetch_tool, size_tool, square_tool, span_tool, store_tool, notify_tool]
ALSO_RAN = re.compile(r"\(also ran: ([^)]*)\)")


def run_agent(source: str, chunk_chars: int, chunk_delay: float) -> Observed:
    """The program as a model's answer, streamed, through `protocol="code"` on trio's
    virtual clock; when it does not end the run, the next program does, changing nothing."""
    model = tl.ScriptedModel(
        [f"```python\n{source}```\n", "```python\nfinal_answer(None)\n```\n"],
        chunk_chars=chunk_chars,
        chunk_delay=chunk_delay,
    )
    agent = tl.Agent(model, tools=TRIO_TOOLS, protocol="code", max_iterations=2)

    async def main() -> tl.RunResult[Any]:
        with trio.fail_after(10_000):  # virtual seconds: a hang fails, never blocks
            return await agent.run_async()

    result = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    records = [r for r in result.records.values() if r.id.startswith("c1.")]
    ended = [e["data"]["error"] for e in result.errors if e["data"].get("call") is None]
    kind = "final" if result.iterations == 1 else "none"
    error_type, error_line, also = "", 0, set()
    if ended:
        [error] = ended
        kind, error_line = "error", int(error["line"])
        error_type = error["message"].split("`: ", 1)[1].split(":")[0]
        found = ALSO_RAN.search(error["message"])
        also = set(found.group(1).split(", ")) if found else set()
    by_id = {r.id: r for r in records}
    return Observed(
        calls=[call_key(str(r.tool), r.params) for r in records if r.id not in also],
        variables=dict(result.state),
        printed=result.printed.get(1, []),
        kind=kind,
        value=result.output,
        error_type=error_type,
        error_line=error_line,
        also_ran=[
            (
                *call_key(str(by_id[i].tool), by_id[i].params),
                i in by_id and by_id[i].tool in READ_ONLY,
            )
            for i in also
        ],
    )


@settings(max_examples=40, deadline=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(
    source=programs(),
    seed=st.integers(0, 2**32),
    chunk_chars=st.sampled_from([1, 7, 40, 10_000]),
    chunk_delay=st.sampled_from([0.0, 0.1, 1.0]),
)
def test_a_program_through_the_trio_driver_means_what_cpython_does(
    source: str, seed: int, chunk_chars: int, chunk_delay: float
) -> None:
    latency_seed[0] = seed
    reference = run_reference(source, message=lambda m: f"ValueError: {m}")
    if reference.kind == "result":
        reference.kind, reference.value = "none", None  # shown to the model, not the output
    ours = run_agent(source, chunk_chars, chunk_delay)
    assert_same(reference, ours, source)

# DEV FAKE (not committed): a tiny stand-in for code-eval's machine, to test the driver.
from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import TickloopError


class CodeError(TickloopError):
    def __init__(self, message, line=None, construct=None):
        super().__init__(message)
        self.line = line
        self.construct = construct


class ToolError(TickloopError):
    pass


def compile_program(source, tools=None):
    try:
        ast.parse(source)
    except SyntaxError as e:
        raise CodeError(str(e), line=e.lineno) from None


from ._stream import ProgramStream, Statement  # noqa


@dataclass(frozen=True)
class CodeTool:
    name: str
    tool: str
    params: tuple
    defaults: Mapping
    read_only: bool


class Globals:
    def __init__(self):
        self.variables = {}

    def to_json(self):
        return {}

    @classmethod
    def from_json(cls, data):
        return cls()


@dataclass
class Limits:
    max_calls: int = 1000
    max_steps: int = 200000


@dataclass(frozen=True)
class MakeCall:
    call_id: str
    tool: str
    params: dict
    line: int
    read_only: bool


@dataclass(frozen=True)
class Printed:
    line: int
    text: str


@dataclass(frozen=True)
class Commit:
    statement_index: int
    line: int
    writes: dict
    deletes: list


@dataclass
class ProgramOutcome:
    kind: str
    value: Any = None
    error: Any = None
    printed: list = field(default_factory=list)


_PENDING = object()


class ProgramMachine:
    def __init__(self, *, iteration, tools, globals, task_input, limits):
        self.iteration = iteration
        self.tools = tools
        self.g = globals
        self.vars = dict(globals.variables)
        self.stmts = []  # [stmt, state, call_id, var]
        self.closed = False
        self.results = {}
        self.committed = 0
        self._outcome = None
        self.printed = []
        self.stopped = False

    @property
    def globals(self):
        self.g.variables = dict(self.vars)
        return self.g

    def add_statement(self, s):
        self.stmts.append({"s": s, "state": "new", "id": None})

    def close(self):
        self.closed = True

    def call_finished(self, call_id, value=None, error=None):
        self.results[call_id] = (value, error)

    def stop_for_limit(self, limit):
        self.stopped = True

    def _val(self, node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in self.vars:
                return _PENDING
            return self.vars[node.id]
        if isinstance(node, ast.List):
            vals = [self._val(e) for e in node.elts]
            return _PENDING if any(v is _PENDING for v in vals) else vals
        return ast.literal_eval(node)

    def step(self):
        acts = []
        if self._outcome:
            return acts
        for k, st in enumerate(self.stmts):
            if st["state"] != "new":
                continue
            tree = ast.parse(st["s"].source).body[0]
            call = tree.value if isinstance(tree, (ast.Assign, ast.Expr)) else None
            if isinstance(call, ast.Await):
                call = call.value
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id in self.tools
            ):
                tool = self.tools[call.func.id]
                params = {kw.arg: self._val(kw.value) for kw in call.keywords}
                if any(v is _PENDING for v in params.values()):
                    continue
                if not tool.read_only and any(o["state"] != "done" for o in self.stmts[:k]):
                    continue
                cid = f"c{self.iteration}.{k}"
                st["id"] = cid
                st["state"] = "made"
                acts.append(MakeCall(cid, tool.tool, params, st["s"].line, tool.read_only))
            else:
                st["state"] = "plain"
        # finish/commit in order
        while self.committed < len(self.stmts):
            st = self.stmts[self.committed]
            tree = ast.parse(st["s"].source).body[0]
            if st["state"] == "made":
                if st["id"] not in self.results:
                    break
                value, error = self.results[st["id"]]
                if error:
                    self._outcome = ProgramOutcome(
                        "error",
                        error={
                            "type": "runtime",
                            "message": f"ToolError: {error['message']}",
                            "line": st["s"].line,
                            "text": st["s"].source,
                            "also_ran": [],
                        },
                        printed=self.printed,
                    )
                    return acts
                if isinstance(tree, ast.Assign):
                    name = tree.targets[0].id
                    self.vars[name] = value
                    acts.append(Commit(self.committed, st["s"].line, {name: value}, []))
                st["state"] = "done"
            elif st["state"] == "plain":
                call = tree.value if isinstance(tree, ast.Expr) else None
                if isinstance(call, ast.Call) and call.func.id == "final_answer":
                    v = self._val(call.args[0])
                    if v is _PENDING:
                        break
                    self._outcome = ProgramOutcome("final", v, printed=self.printed)
                    return acts
                if isinstance(call, ast.Call) and call.func.id == "print":
                    v = self._val(call.args[0])
                    if v is _PENDING:
                        break
                    self.printed.append(str(v))
                    acts.append(Printed(st["s"].line, str(v)))
                elif isinstance(tree, ast.Assign):
                    v = self._val(tree.value)
                    if v is _PENDING:
                        break
                    self.vars[tree.targets[0].id] = v
                    acts.append(Commit(self.committed, st["s"].line, {tree.targets[0].id: v}, []))
                st["state"] = "done"
            else:
                break
            self.committed += 1
        if self.closed and self.committed == len(self.stmts) and not self._outcome:
            self._outcome = ProgramOutcome("none", printed=self.printed)
        return acts

    @property
    def finished(self):
        return self._outcome is not None

    def outcome(self):
        return self._outcome

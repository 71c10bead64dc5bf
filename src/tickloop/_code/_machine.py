"""The program machine: statements in, calls and commits out (PROTOCOL §14), sans-IO.

Owns running one program: each complete top-level statement is a plain Python coroutine
(driven by `.send()`; it only ever yields a `Wait`), started when it arrives. A statement
reads a variable as the last earlier statement that may write it left it (static
may-write sets, dynamic reads); calls are made as soon as their parameters are known,
non-read-only ones behind the side-effect barrier; a statement whose lazy pass met one
of its own calls failed runs again strictly with its calls reused by id; statements
commit (prints, writes) in program order. No clock, no I/O, no randomness: the same
statements and call outcomes give the same commits, whatever order calls end in.
"""

from __future__ import annotations

import ast
import bisect
import contextlib
import heapq
import sys
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any

from .._core._paths import is_call_path
from .._errors import CodeError
from ._builtins import BUILTINS
from ._check import check_statement
from ._evaluator import Evaluator, Helper, ToolRef
from ._exceptions import (
    EndProgram,
    LimitExceeded,
    OutsideLanguage,
    ProgramRaise,
    Reevaluate,
    ToolError,
)
from ._frame import Wait
from ._modules import module_named
from ._names import MISSING
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
from ._scope import Sites, helper_effects, loop_depths, may_call_helper, may_end, may_write
from ._stream import Statement
from ._values import CallState, Lazy, Meter, copy_value, leave

__all__ = ["ProgramMachine"]

_STEPS_PER_STEP = 1_000  # §14: the evaluator yields to the driver at least this often
_RECURSION_LIMIT = 8_000  # Python frames while stepping: helper depth 100 x nesting

Result = tuple[str, Any]  # ("ok", value) | ("raise", ProgramRaise) | ("end", EndProgram) | ...


class _Statement:
    """One top-level statement in the machine: its tree, static facts, current pass."""

    def __init__(self, statement: Statement, tree: ast.Module, writes: set[str]) -> None:
        self.index = statement.index
        self.line = statement.line
        self.source = statement.source
        self.tree = tree
        self.writes = writes  # may-write set (static, conservative)
        self.ends_program = False  # may call final_answer / reset / return
        self.strict = False
        self.evaluator: Evaluator | None = None
        self.coroutine: Coroutine[Wait, None, Result] | None = None
        self.waiting: Wait | None = None
        self.result: Result | None = None  # set when the current pass ended

    @property
    def ended(self) -> bool:
        return self.result is not None


class ProgramMachine:
    """Runs one program of a run; see the module docstring and docs/code.md."""

    def __init__(
        self,
        *,
        iteration: int,
        tools: Mapping[str, CodeTool],
        globals: Globals,
        task_input: Any = None,
        limits: Limits | None = None,
    ) -> None:
        self.iteration = iteration
        self.tools: Mapping[str, CodeTool] = dict(tools)
        self.limits = limits or Limits()
        self.meter = Meter(self.limits.max_steps)
        self._given = Globals.from_json(globals.to_json())
        self._task_input = task_input
        self._statements: list[_Statement] = []
        self._writers: dict[str, list[int]] = {}
        self._ending: list[int] = []  # statements that may end the program, in order
        self._calls: dict[str, CallState] = {}
        self._call_waiters: dict[str, list[int]] = {}  # call id -> statements waiting
        self._end_waiters: dict[int, list[int]] = {}  # statement -> statements waiting
        self._commit_waiters: list[tuple[int, int]] = []  # heap: (barrier index, statement)
        self._ready: list[int] = []  # heap of statement indexes to resume
        self._actions: list[CodeAction] = []
        self._committed = 0  # statements < this have committed
        self._closed = False
        self._refused: CodeError | None = None  # a statement outside the language
        self._outcome: ProgramOutcome | None = None
        self._printed: list[str] = []
        self._partial_line = ""  # printed text not ended by a newline yet
        self._partial_at = 0  # the line of the print that wrote it
        self._lines: dict[int, str] = {}
        self._sites = Sites()
        self._helper_effects: set[str] = set()
        self._helpers_end = False
        self._base: dict[str, Any] = {}
        self._load_globals()

    # -- the interface ---------------------------------------------------------------------------

    def add_statement(self, statement: Statement) -> None:
        """A complete statement arrived (in order). One outside the language ends the
        program there (the statements before it go on)."""
        if self._closed or self._refused is not None or self._outcome is not None:
            return
        if statement.index != len(self._statements):
            raise ValueError(f"statement {statement.index} arrived out of order")
        for offset, text in enumerate(statement.source.splitlines()):
            self._lines[statement.line + offset] = text
        try:
            tree = check_statement(statement.source, statement.line)
        except CodeError as error:
            self._refused = error
            self._try_commit()
            return
        self._sites.number(tree)
        nodes = list(ast.walk(tree))
        writes = may_write(tree, nodes)
        calls_helpers = may_call_helper(tree, self.tools, nodes)
        if calls_helpers:
            writes |= self._helper_effects
        record = _Statement(statement, tree, writes)
        record.ends_program = may_end(tree, nodes) or (calls_helpers and self._helpers_end)
        self._learn_helpers(nodes)
        for name in writes:
            self._writers.setdefault(name, []).append(record.index)
        if record.ends_program:
            self._ending.append(record.index)
        self._statements.append(record)
        self._start_pass(record, strict=False)

    def close(self) -> None:
        """No more statements."""
        self._closed = True
        self._try_commit()

    def tool_sites(self) -> dict[str, str]:
        """The sites of the statements so far that call a tool by its name, outside
        helpers, as call paths with `[*]` for each loop index (`c2.4[*]`), each with its
        tool's name: what a plan review may decide by site before the site has made a
        call (PROTOCOL §15). A tool name the program rebinds is no tool's site."""
        sites: dict[str, str] = {}
        for record in self._statements:
            for call, depth in loop_depths(record.tree):
                func = call.func
                if not isinstance(func, ast.Name) or func.id not in self.tools:
                    continue
                site = self._sites.site(call)
                if site is None or func.id in self._writers:
                    continue
                sites[f"c{self.iteration}.{site}" + "[*]" * depth] = self.tools[func.id].tool
        return sites

    def call_finished(
        self, call_id: str, value: Any = None, error: Mapping[str, Any] | None = None
    ) -> None:
        """A call ended: `value` its JSON result, or `error` {"type", "message", "status"}."""
        call = self._calls.get(call_id)
        if call is None or call.ended:
            raise ValueError(f"call_finished for {call_id!r}, which is not a running call")
        if error is None:
            call.status, call.value = "ok", value
        else:
            call.status = "failed"
            call.error = ToolError(
                str(error.get("message", "")),
                type=str(error.get("type", "runtime")),
                status=str(error.get("status", "failed")),
                call_id=call_id,
            )
        for index in self._call_waiters.pop(call_id, []):
            heapq.heappush(self._ready, index)

    def step(self) -> list[CodeAction]:
        """Run every statement that can go on until all block (or about 1,000 steps);
        return the actions since the last step."""
        with _stack_for_helpers():
            self._step()
        actions, self._actions = self._actions, []
        return actions

    def _step(self) -> None:
        start = self.meter.steps
        while self._outcome is None:
            self._try_commit()  # a commit may wake statements waiting at the barrier
            if not self._ready or self.meter.steps - start >= _STEPS_PER_STEP:
                break
            index = heapq.heappop(self._ready)
            record = self._statements[index]
            if record.ended or (record.waiting is not None and not self._satisfied(record)):
                continue
            self._resume(record)

    def stop_for_limit(self, limit: str) -> None:
        """The driver measured a limit the machine cannot (`max_eval_seconds`)."""
        if self._outcome is None:
            index = min(self._committed, len(self._statements) - 1)
            line = self._statements[index].line if self._statements else 0
            self._end_with_error("limit", f"the program passed its {limit} limit", line, index)

    @property
    def runnable(self) -> bool:
        """Whether `step()` has work without any call ending (it returned after ~1,000
        steps): the driver calls it again, measuring evaluator time between."""
        return self._outcome is None and bool(self._ready)

    @property
    def finished(self) -> bool:
        """The program ended and every call it made ended."""
        return self._outcome is not None and all(c.ended for c in self._calls.values())

    def outcome(self) -> ProgramOutcome:
        if self._outcome is None:
            raise RuntimeError("the program has not ended yet")
        return self._outcome

    @property
    def globals(self) -> Globals:
        """What carries over to the run's next program (after this one ended)."""
        return Globals.from_json(self._given.to_json())

    # -- statements -------------------------------------------------------------------------------

    def _start_pass(self, record: _Statement, *, strict: bool) -> None:
        if record.coroutine is not None:
            record.coroutine.close()
        record.strict = strict
        record.result = None
        record.waiting = None
        evaluator = Evaluator(self, record.index, strict=strict, sites=self._sites,
                              source=record.source)  # fmt: skip
        record.evaluator = evaluator
        record.coroutine = self._run(evaluator, record.tree)
        heapq.heappush(self._ready, record.index)

    async def _run(self, evaluator: Evaluator, tree: ast.Module) -> Result:
        try:
            return ("ok", await evaluator.run(tree))
        except ProgramRaise as raised:
            return ("raise", raised)
        except EndProgram as end:
            return ("end", end)
        except Reevaluate:
            return ("reevaluate", None)
        except LimitExceeded as limit:
            return ("limit", limit)
        except OutsideLanguage as outside:
            return ("structural", outside)

    def _resume(self, record: _Statement) -> None:
        assert record.coroutine is not None
        try:
            wait = record.coroutine.send(None)
        except StopIteration as stop:
            record.coroutine = None
            record.waiting = None
            self._pass_ended(record, stop.value)
            return
        record.waiting = wait
        self._park(record, wait)

    def _park(self, record: _Statement, wait: Wait) -> None:
        """Queue a blocked statement where the event it waits for will find it."""
        if wait.kind == "pause" or self._satisfied(record):
            self.meter.paused()
            heapq.heappush(self._ready, record.index)
        elif wait.kind == "call":
            assert wait.call is not None
            self._call_waiters.setdefault(wait.call.id, []).append(record.index)
        elif wait.kind == "ended":
            self._end_waiters.setdefault(wait.index, []).append(record.index)
        else:
            heapq.heappush(self._commit_waiters, (wait.index, record.index))

    def _satisfied(self, record: _Statement) -> bool:
        wait = record.waiting
        if wait is None or wait.kind == "pause":
            return True
        if wait.kind == "call":
            assert wait.call is not None
            return wait.call.ended
        if wait.kind == "ended":
            return self._statements[wait.index].ended
        return self._committed >= wait.index

    def _pass_ended(self, record: _Statement, result: Result) -> None:
        if result[0] == "reevaluate":
            self._start_pass(record, strict=True)
            return
        record.result = result
        for index in self._end_waiters.pop(record.index, []):
            heapq.heappush(self._ready, index)

    # -- the Host interface the evaluator uses ---------------------------------------------------

    async def earlier(self, index: int, name: str) -> Any:
        writers = self._writers.get(name, [])
        position = bisect.bisect_left(writers, index) - 1
        while position >= 0:
            record = self._statements[writers[position]]
            if not record.ended:
                await Wait("ended", index=record.index)
            assert record.evaluator is not None
            scope = record.evaluator.scope
            if name in scope.deleted:
                return MISSING
            value = scope.value_of(name)
            if value is not MISSING:
                return value
            position -= 1
        return self._base.get(name, MISSING)

    def fallback(self, name: str) -> Any:
        if name in self.tools:
            return ToolRef(name)
        return BUILTINS.get(name, MISSING)

    def make_call(
        self, index: int, call_id: str, name: str, params: dict[str, Any], line: int
    ) -> CallState:
        known = self._calls.get(call_id)
        if known is not None:
            return known  # a strict pass reuses the call its lazy pass made (same id)
        if not is_call_path(call_id):  # the grammar's owner is _core/_paths.py
            raise AssertionError(f"the machine built a call id outside §14: {call_id!r}")
        if len(self._calls) >= self.limits.max_calls:
            raise LimitExceeded(
                "max_calls", f"the program made more than max_calls={self.limits.max_calls} calls"
            )
        tool = self.tools[name]
        call = CallState(call_id, tool.tool, params, line, tool.read_only, index)
        self._calls[call_id] = call
        self._actions.append(MakeCall(call_id, tool.tool, params, line, tool.read_only))
        return call

    def must_wait_before_calls(self, index: int, read_only: bool) -> bool:
        if self._committed >= index:
            return False
        if not read_only:
            return True
        first = bisect.bisect_left(self._ending, self._committed)
        return first < len(self._ending) and self._ending[first] < index

    # -- commits ---------------------------------------------------------------------------------

    def _try_commit(self) -> None:
        while self._outcome is None:
            if self._committed == len(self._statements):
                self._maybe_finish()
                return
            record = self._statements[self._committed]
            if not record.ended:
                return
            assert record.evaluator is not None
            made = record.evaluator.made
            if not all(call.ended for call in made):
                return
            if not record.strict and any(c.status != "ok" for c in made):
                self._start_pass(record, strict=True)
                return
            self._commit(record)

    def _commit(self, record: _Statement) -> None:
        assert record.result is not None and record.evaluator is not None
        kind, payload = record.result
        evaluator = record.evaluator
        for line, text in evaluator.printed:
            self._print(line, text)
        try:
            writes, deletes = self._writes_of(record)
        except (ProgramRaise, LimitExceeded) as problem:
            if kind in ("ok", "end"):  # an error the statement met first is its error
                kind = "raise" if isinstance(problem, ProgramRaise) else "limit"
                payload = problem
            writes, deletes = {}, []
        self._apply(writes, deletes, evaluator)
        self._actions.append(Commit(record.index, record.line, writes, deletes))
        self._committed += 1
        waiters = self._commit_waiters
        while waiters and waiters[0][0] <= self._committed:
            heapq.heappush(self._ready, heapq.heappop(waiters)[1])
        if kind == "ok":
            return
        if kind == "end":
            self._end_program(payload)
        elif kind == "raise":
            message = _describe(payload.error)
            self._end_with_error("runtime", message, payload.line or record.line, record.index)
        elif kind == "limit":
            self._end_with_error("limit", payload.message, evaluator.line, record.index)
        else:
            self._end_with_error("structural", payload.message, evaluator.line, record.index)

    def _writes_of(self, record: _Statement) -> tuple[dict[str, Any], list[str]]:
        assert record.evaluator is not None
        scope = record.evaluator.scope
        writes: dict[str, Any] = {}
        deletes: list[str] = []
        for name in sorted(record.writes):
            if name in scope.deleted:
                if name in self._given.variables or name in self._given.helpers:
                    deletes.append(name)
                continue
            value = scope.value_of(name)
            if value is MISSING or isinstance(value, Helper | ToolRef) or _not_data(value):
                continue
            data = leave(_resolved(value), f"the variable {name!r}")
            if name not in self._given.variables or self._given.variables[name] != data:
                writes[name] = data
        return writes, deletes

    def _apply(self, writes: dict[str, Any], deletes: list[str], evaluator: Evaluator) -> None:
        given = self._given
        for name in deletes:
            given.variables.pop(name, None)
            given.helpers.pop(name, None)
            given.imports.pop(name, None)
        for name, value in evaluator.scope.own.items():
            if isinstance(value, Helper) and value.source:
                given.helpers[name] = {"source": value.source, "site": _first_site(value)}
                given.variables.pop(name, None)
            elif _module_path(value) is not None:
                given.imports[name] = _module_path(value)  # type: ignore[assignment]
        for name, value in writes.items():
            given.variables[name] = value
            given.helpers.pop(name, None)
            given.imports.pop(name, None)

    def _print(self, line: int, text: str) -> None:
        text = self._partial_line + text
        *complete, self._partial_line = text.split("\n")
        self._partial_at = line
        for piece in complete:
            self._printed.append(piece)
            self._actions.append(Printed(line, piece))

    def _maybe_finish(self) -> None:
        if self._refused is not None:
            error = self._refused
            self._end_with_error("structural", error.reason, error.line, len(self._statements))
            return
        if not self._closed:
            return
        self._flush_print()
        value = None
        last = self._statements[-1] if self._statements else None
        if last is not None and last.result is not None and _is_result(last.tree, self.tools):
            value = last.result[1]
        if value is None:
            self._outcome = ProgramOutcome("none", printed=list(self._printed))
            return
        try:
            data = leave(_resolved(value), "the program's result")
        except ProgramRaise as raised:
            self._end_with_error("runtime", _describe(raised.error), last.line if last else 0,
                                 len(self._statements) - 1)  # fmt: skip
            return
        self._outcome = ProgramOutcome("result", data, printed=list(self._printed))

    def _flush_print(self) -> None:
        if self._partial_line:
            self._printed.append(self._partial_line)
            self._actions.append(Printed(self._partial_at, self._partial_line))
            self._partial_line = ""

    def _end_program(self, end: EndProgram) -> None:
        self._flush_print()
        self._stop_statements()
        if end.kind == "reset":
            self._given = Globals()
            self._outcome = ProgramOutcome("reset", printed=list(self._printed))
        else:
            self._outcome = ProgramOutcome("final", end.value, printed=list(self._printed))

    def _end_with_error(self, kind: str, message: str, line: int, index: int) -> None:
        self._flush_print()
        self._stop_statements()
        kept = set()
        if index < len(self._statements):
            evaluator = self._statements[index].evaluator
            if evaluator is not None:
                kept = {c.id for c in evaluator.made} - evaluator.ran_ahead
        also_ran = [
            call.id
            for call in self._calls.values()
            if call.owner > index or (call.owner == index and call.id not in kept)
        ]
        error = {"type": kind, "message": message, "line": line,
                 "text": self._lines.get(line, "").strip(), "also_ran": also_ran}  # fmt: skip
        self._outcome = ProgramOutcome("error", error=error, printed=list(self._printed))

    def _stop_statements(self) -> None:
        for record in self._statements:
            if record.coroutine is not None:
                record.coroutine.close()
                record.coroutine = None
        self._ready.clear()

    # -- carried over from earlier programs -----------------------------------------------------

    def _load_globals(self) -> None:
        base = self._base
        for name, value in self._given.variables.items():
            base[name] = copy_value(value)
        for name, path in self._given.imports.items():
            module, _, member = path.partition(".")
            base[name] = module_named(module).members[member] if member else module_named(module)
        for name, entry in self._given.helpers.items():
            helper = _carried_helper(name, entry)
            if helper is not None:
                base[name] = helper
                self._learn_helpers(list(ast.walk(helper.node)))
        base["task_input"] = self._task_input

    def _learn_helpers(self, nodes: list[ast.AST]) -> None:
        """Remember what the helpers among `nodes` may write and whether they may end
        the program (a statement that may call a helper takes both on)."""
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                self._helper_effects |= helper_effects(node)
                if _calls_an_end(node):
                    self._helpers_end = True


@contextlib.contextmanager
def _stack_for_helpers() -> Iterator[None]:
    """Room for helper depth 100 (§14): the evaluator recurses about a dozen Python
    frames per helper call, more than the default limit of 1,000 allows. Raised only
    while the machine steps, and never lowered below what it was."""
    before = sys.getrecursionlimit()
    if before < _RECURSION_LIMIT:
        sys.setrecursionlimit(_RECURSION_LIMIT)
    try:
        yield
    finally:
        if before < _RECURSION_LIMIT:
            sys.setrecursionlimit(before)


def _calls_an_end(node: ast.AST) -> bool:
    """Whether a helper's body calls `final_answer` or `reset`."""
    return any(
        isinstance(inner, ast.Call)
        and isinstance(inner.func, ast.Name)
        and inner.func.id in ("final_answer", "reset")
        for inner in ast.walk(node)
    )


def _carried_helper(name: str, entry: Mapping[str, Any]) -> Helper | None:
    """A helper of an earlier program, from its source: its body numbered from the site
    it had (the same call ids), its defaults literals. None when it cannot be rebuilt
    (a default that is no literal): it is not carried."""
    try:
        tree = check_statement(str(entry["source"]))
        node = tree.body[0]
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return None
        args = node.args
        defaults = [ast.literal_eval(d) for d in args.defaults]
        kw_defaults = {
            arg.arg: ast.literal_eval(d)
            for arg, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
            if d is not None
        }
    except (CodeError, ValueError, TypeError, SyntaxError, KeyError, IndexError):
        return None
    sites = Sites(int(entry.get("site", 0)))
    sites.number(tree)
    first = int(entry.get("site", 0))
    return Helper(name, node, defaults, kw_defaults, None, sites, str(entry["source"]), first)


def _first_site(helper: Helper) -> int:
    return helper.first_site


def _module_path(value: Any) -> str | None:
    from ._values import Builtin, Module

    if isinstance(value, Module):
        return value.name
    if isinstance(value, Builtin):
        for module in ("datetime", "json", "math", "re", "asyncio"):
            for member, item in module_named(module).members.items():
                if item is value:
                    return f"{module}.{member}"
    return None


def _not_data(value: Any) -> bool:
    """A value that is no variable of the state (it holds a module, a function, a
    generator, a range, a regular expression): kept while the program runs, not carried
    to the next, never shown as state."""
    from ._expressions import GenValue
    from ._values import Builtin, Module

    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif type(item).__name__ in ("_Match", "_Regexp") or callable(item):
            return True
        elif isinstance(item, Module | Builtin | GenValue | range | Helper | ToolRef):
            return True
    return False


def _resolved(value: Any) -> Any:
    """A value with every (ended) lazy call value replaced by its result."""
    if isinstance(value, Lazy):
        if not value.forced:
            call = value.call
            if call.status != "ok":
                assert call.error is not None
                raise ProgramRaise(call.error)
            value.cache, value.forced = copy_value(call.value), True
        return _resolved(value.cache)
    if isinstance(value, list):
        return [_resolved(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_resolved(item) for item in value)
    if isinstance(value, dict):
        return {key: _resolved(item) for key, item in value.items()}
    return value


def _is_result(tree: ast.Module, tools: Mapping[str, CodeTool]) -> bool:
    """Whether a statement's value is the program's result (§14 "The end"): an
    expression statement that is not a call of a tool or `print`."""
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return False
    value = tree.body[0].value
    if isinstance(value, ast.Await):
        value = value.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return value.func.id != "print" and value.func.id not in tools
    return True


def _describe(error: BaseException) -> str:
    if isinstance(error, ToolError):
        where = f" (call {error.call_id})" if error.call_id else ""
        return f"ToolError: {error.message}{where}"
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__

"""One pass of the evaluator over one top-level statement (PROTOCOL §14).

Owns statements, calls and helpers: assignment with copies, control flow, `try` with the
try-body rule (leaving a `try` body, by any way, first forces every call made in it, so
a handler sees exactly the reference program's failure), tool calls (made once their
parameters are known, lazy unless the pass is strict), helpers and lambdas (call paths
`>`), `final_answer`, `reset` and a top-level `return`. A pass is lazy or strict: one
evaluator, one flag. The machine runs a statement strictly again when its lazy pass met
one of its own calls failed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from .._core._expressions import Expression, Term
from ._builtins import bind_tool_arguments
from ._exceptions import (
    EXCEPTION_CLASSES,
    EndProgram,
    LimitExceeded,
    OutsideLanguage,
    ProgramRaise,
    ToolError,
)
from ._expressions import Expressions, dispatch
from ._frame import MAX_DEPTH, Frame, Host, Wait
from ._methods import attribute_of, call_method
from ._modules import GATHER
from ._names import MISSING, FunctionScope, GlobalScope, Scope
from ._scope import MUTATING_METHODS, Sites, scope_info
from ._values import Builtin, CallState, Lazy, Module, copy_value, leave

__all__ = ["Evaluator", "Helper", "ToolRef"]


@dataclass(eq=False)
class Helper:
    """A helper (`def`, `async def`) or a lambda: its node, the defaults computed when it
    was defined, and the scope it was defined in (`None`: the module level, read as the
    statement calling it sees it). `source` is kept for top-level helpers (carried to
    later programs); `sites` numbers the calls in its body."""

    name: str
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    defaults: list[Any]
    kw_defaults: dict[str, Any]
    closure: Scope | None
    sites: Sites
    source: str = ""
    first_site: int = 0

    def __repr__(self) -> str:
        return f"<function {self.name}>"


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class Evaluator(Expressions):
    """Runs one statement once (lazy or strict) against the machine (`host`)."""

    def __init__(self, host: Host, index: int, *, strict: bool, sites: Sites, source: str) -> None:
        self.host = host
        self.meter = host.meter
        self.index = index
        self.strict = strict
        self.sites = sites
        self.source = source
        self.made: list[CallState] = []  # calls this pass made, in the order it made them
        self.made_ids: set[str] = set()
        self.try_marks: list[int] = []  # index in `made` where each enclosing try body began
        self.gathering = 0  # >0 while evaluating asyncio.gather's arguments
        # `made` index where each enclosing gather(..., return_exceptions=True) began: a
        # failure of a call made from the outermost on is caught by that gather, so a
        # barrier waits for it but does not raise it (§14 reference: it is a list item).
        self.catch_marks: list[int] = []
        # calls a gather made after its element that raised: ahead of the reference
        # program, so "also ran" if the failure is uncaught (§14 Failures)
        self.ran_ahead: set[str] = set()
        self.raised_calls: set[str] = set()  # failed calls already raised at their site
        self.handling: list[ProgramRaise] = []  # exceptions whose handler is running
        self.printed: list[tuple[int, str]] = []
        self.line = 0
        self.scope = GlobalScope(self._earlier, host.fallback, host.meter)

    async def _earlier(self, name: str) -> Any:
        return await self.host.earlier(self.index, name)

    # -- running -----------------------------------------------------------------------------

    async def run(self, tree: ast.Module) -> Any:
        """Run the statement; returns the value of an expression statement (the program's
        result when it is the last), else None."""
        frame = Frame(f"c{self.host.iteration}.", self.sites)
        value = None
        for node in tree.body:
            if isinstance(node, ast.Expr):
                self.line = node.lineno
                value = await self._expression_statement(node, frame)
            else:
                value = None
                await self.exec_stmt(node, self.scope, frame)
        return value

    async def _expression_statement(self, node: ast.Expr, frame: Frame) -> Any:
        try:
            return await self.eval(node.value, self.scope, frame)
        except _Return as returned:
            raise EndProgram("final", returned.value) from None
        except (ProgramRaise, LimitExceeded, OutsideLanguage, EndProgram):
            raise
        except RecursionError:
            raise LimitExceeded("helper depth", "the program nests too deeply") from None
        except Exception as error:
            raise ProgramRaise(error, node.lineno) from None

    async def exec_block(self, body: list[ast.stmt], scope: Scope, frame: Frame) -> None:
        for node in body:
            await self.exec_stmt(node, scope, frame)

    async def exec_stmt(self, node: ast.stmt, scope: Scope, frame: Frame) -> None:
        self.meter.charge()
        if self.meter.due:
            self.meter.paused()
            await Wait("pause")
        self.line = node.lineno
        method = dispatch(type(self), "_exec_", type(node))
        if method is None:
            raise OutsideLanguage(f"{type(node).__name__} is outside the language")
        try:
            await method(self, node, scope, frame)
        except ProgramRaise as raised:
            if not raised.line:
                raised.line = node.lineno
            raise
        except RecursionError:
            raise LimitExceeded("helper depth", "the program nests too deeply") from None
        except MemoryError:
            raise LimitExceeded("value size", "a value too large to build") from None
        except (_Break, _Continue, _Return):
            raise
        except Exception as error:  # an operation of the program raised: its exception
            raise ProgramRaise(error, node.lineno) from None

    async def _exec_Expr(self, node: ast.Expr, scope: Scope, frame: Frame) -> None:
        await self.eval(node.value, scope, frame)

    async def _exec_Pass(self, node: ast.Pass, scope: Scope, frame: Frame) -> None:
        pass

    async def _exec_Assign(self, node: ast.Assign, scope: Scope, frame: Frame) -> None:
        value = await self.eval(node.value, scope, frame)
        for target in node.targets:
            await self.assign(target, copy_value(value, self.meter), scope, frame)

    async def _exec_AnnAssign(self, node: ast.AnnAssign, scope: Scope, frame: Frame) -> None:
        if node.value is not None:
            value = await self.eval(node.value, scope, frame)
            await self.assign(node.target, copy_value(value, self.meter), scope, frame)

    async def _exec_AugAssign(self, node: ast.AugAssign, scope: Scope, frame: Frame) -> None:
        target = node.target
        if isinstance(target, ast.Name):
            current = await self.force(await scope.load(target.id))
            right = await self.value(node.value, scope, frame)
            scope.store(target.id, await self.binary(type(node.op), current, right))
            return
        if isinstance(target, ast.Subscript):
            container = await self.value(target.value, scope, frame)
            key = await self.subscript_key(target.slice, scope, frame)
            current = await self.force(self.read_item(container, key))
            right = await self.value(node.value, scope, frame)
            self.store_item(container, key, await self.binary(type(node.op), current, right))
            return
        raise OutsideLanguage("this augmented assignment target is outside the language")

    async def assign(self, target: ast.expr, value: Any, scope: Scope, frame: Frame) -> None:
        if isinstance(target, ast.Name):
            scope.store(target.id, value)
        elif isinstance(target, ast.Subscript):
            container = await self.value(target.value, scope, frame)
            key = await self.subscript_key(target.slice, scope, frame)
            self.store_item(container, key, value)
        elif isinstance(target, ast.Tuple | ast.List):
            await self._unpack(target.elts, value, scope, frame)
        elif isinstance(target, ast.Starred):
            raise OutsideLanguage("a starred assignment target must be inside a tuple")
        else:
            raise OutsideLanguage(f"assigning to {type(target).__name__} is outside the language")

    async def _unpack(
        self, targets: list[ast.expr], value: Any, scope: Scope, frame: Frame
    ) -> None:
        items = await self.iterate_all(value)
        starred = [i for i, t in enumerate(targets) if isinstance(t, ast.Starred)]
        if not starred:
            if len(items) != len(targets):
                raise ProgramRaise(
                    ValueError(f"expected {len(targets)} values to unpack, got {len(items)}")
                )
            for target, item in zip(targets, items, strict=True):
                await self.assign(target, item, scope, frame)
            return
        at = starred[0]
        after = len(targets) - at - 1
        if len(items) < len(targets) - 1:
            raise ProgramRaise(
                ValueError(f"not enough values to unpack (expected at least {len(targets) - 1})")
            )
        for target, item in zip(targets[:at], items[:at], strict=True):
            await self.assign(target, item, scope, frame)
        star = targets[at]
        assert isinstance(star, ast.Starred)
        await self.assign(star.value, list(items[at : len(items) - after]), scope, frame)
        for target, item in zip(targets[at + 1 :], items[len(items) - after :], strict=True):
            await self.assign(target, item, scope, frame)

    def store_item(self, container: Any, key: Any, value: Any) -> None:
        if isinstance(container, dict):
            container[key] = value
        elif isinstance(container, list):
            if isinstance(key, slice):
                container[key] = list(value) if not isinstance(value, list) else value
            else:
                container[key] = value
        else:
            raise ProgramRaise(
                TypeError(f"'{type(container).__name__}' object does not support item assignment")
            )

    async def _exec_Delete(self, node: ast.Delete, scope: Scope, frame: Frame) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                await scope.delete(target.id)
            elif isinstance(target, ast.Subscript):
                container = await self.value(target.value, scope, frame)
                key = await self.subscript_key(target.slice, scope, frame)
                if not isinstance(container, list | dict):
                    raise ProgramRaise(TypeError("this object does not support item deletion"))
                del container[key]
            elif isinstance(target, ast.Tuple | ast.List):
                for inner in target.elts:
                    await self._exec_Delete(ast.Delete(targets=[inner]), scope, frame)
            else:
                raise OutsideLanguage("deleting this target is outside the language")

    async def _exec_If(self, node: ast.If, scope: Scope, frame: Frame) -> None:
        if await self.truth(await self.eval(node.test, scope, frame)):
            await self.exec_block(node.body, scope, frame)
        else:
            await self.exec_block(node.orelse, scope, frame)

    async def _exec_For(self, node: ast.For, scope: Scope, frame: Frame) -> None:
        iterable = await self.value(node.iter, scope, frame)
        broke = False
        frame.indexes.append(0)
        try:
            count = 0
            async for item in self.each(iterable):
                frame.indexes[-1] = count
                count += 1
                await self.assign(node.target, copy_value(item, self.meter), scope, frame)
                try:
                    await self.exec_block(node.body, scope, frame)
                except _Break:
                    broke = True
                    break
                except _Continue:
                    continue
        finally:
            frame.indexes.pop()
        if not broke:
            await self.exec_block(node.orelse, scope, frame)

    async def _exec_While(self, node: ast.While, scope: Scope, frame: Frame) -> None:
        frame.indexes.append(0)
        count = 0
        broke = False
        while True:
            frame.indexes[-1] = count
            if not await self.truth(await self.eval(node.test, scope, frame)):
                break
            count += 1
            try:
                await self.exec_block(node.body, scope, frame)
            except _Break:
                broke = True
                break
            except _Continue:
                continue
        frame.indexes.pop()
        if not broke:
            await self.exec_block(node.orelse, scope, frame)

    async def _exec_Break(self, node: ast.Break, scope: Scope, frame: Frame) -> None:
        raise _Break

    async def _exec_Continue(self, node: ast.Continue, scope: Scope, frame: Frame) -> None:
        raise _Continue

    async def _exec_Return(self, node: ast.Return, scope: Scope, frame: Frame) -> None:
        value = None if node.value is None else await self.eval(node.value, scope, frame)
        if frame.depth == 0:
            await self.end_program("final", value)
        raise _Return(value)

    async def _exec_Global(self, node: ast.Global, scope: Scope, frame: Frame) -> None:
        pass

    async def _exec_Nonlocal(self, node: ast.Nonlocal, scope: Scope, frame: Frame) -> None:
        pass

    async def _exec_Assert(self, node: ast.Assert, scope: Scope, frame: Frame) -> None:
        if not await self.truth(await self.eval(node.test, scope, frame)):
            message = () if node.msg is None else (await self.full(node.msg, scope, frame),)
            raise ProgramRaise(AssertionError(*message), node.lineno)

    async def _exec_Raise(self, node: ast.Raise, scope: Scope, frame: Frame) -> None:
        if node.exc is None:
            if not self.handling:
                raise ProgramRaise(RuntimeError("No active exception to reraise"), node.lineno)
            raise self.handling[-1]
        error = await self.value(node.exc, scope, frame)
        if isinstance(error, type) and error in EXCEPTION_CLASSES.values():
            error = error()
        if not isinstance(error, Exception):
            raise ProgramRaise(TypeError("exceptions must derive from BaseException"))
        raise ProgramRaise(error, node.lineno)

    async def _exec_Try(self, node: ast.Try, scope: Scope, frame: Frame) -> None:
        try:
            raised = await self._try_body(node.body, scope, frame)
            if raised is not None:
                handler = await self._handler_for(node.handlers, raised, scope, frame)
                if handler is None:
                    raise raised
                await self._run_handler(handler, raised, scope, frame)
            else:
                await self.exec_block(node.orelse, scope, frame)
        except (ProgramRaise, _Break, _Continue, _Return, EndProgram):
            if node.finalbody:
                await self.exec_block(node.finalbody, scope, frame)
            raise
        if node.finalbody:
            await self.exec_block(node.finalbody, scope, frame)

    async def _try_body(
        self, body: list[ast.stmt], scope: Scope, frame: Frame
    ) -> ProgramRaise | None:
        """Run a try body; leaving it by any way but a signal first forces every call
        made in it (§14 readiness: a failure there would have left the body earlier)."""
        mark = len(self.made)
        self.try_marks.append(mark)
        try:
            await self.exec_block(body, scope, frame)
        except ProgramRaise as raised:
            self.try_marks.pop()
            await self._force_since(mark)
            return raised
        except (_Break, _Continue, _Return, EndProgram):
            self.try_marks.pop()
            await self._force_since(mark)
            raise
        except BaseException:
            self.try_marks.pop()
            raise
        self.try_marks.pop()
        await self._force_since(mark)
        return None

    async def _force_since(self, mark: int) -> None:
        """Wait for every call this pass made from `mark` on; one that failed and was
        not already raised raises (in a lazy pass: the statement reruns strictly)."""
        caught_from = self.catch_marks[0] if self.catch_marks else len(self.made)
        for position, call in enumerate(list(self.made[mark:]), mark):
            if not call.ended:
                await Wait("call", call=call)
            if call.status != "ok" and call.id not in self.raised_calls:
                if position < caught_from:
                    raise self.call_failure(call)

    async def _handler_for(
        self, handlers: list[ast.ExceptHandler], raised: ProgramRaise, scope: Scope, frame: Frame
    ) -> ast.ExceptHandler | None:
        for handler in handlers:
            if handler.type is None:
                return handler
            classes = await self.value(handler.type, scope, frame)
            wanted = classes if isinstance(classes, tuple) else (classes,)
            for cls in wanted:
                if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                    raise ProgramRaise(
                        TypeError("catching classes that do not inherit from BaseException")
                    )
            if isinstance(raised.error, wanted):
                return handler
        return None

    async def _run_handler(
        self, handler: ast.ExceptHandler, raised: ProgramRaise, scope: Scope, frame: Frame
    ) -> None:
        if handler.name:
            scope.store(handler.name, raised.error)
        self.handling.append(raised)
        try:
            await self.exec_block(handler.body, scope, frame)
        finally:
            self.handling.pop()
            if handler.name:
                try:
                    await scope.delete(handler.name)
                except ProgramRaise:
                    pass

    async def _exec_FunctionDef(self, node: ast.FunctionDef, scope: Scope, frame: Frame) -> None:
        helper = await self.make_function(node, scope, frame)
        scope.store(node.name, helper)

    async def _exec_AsyncFunctionDef(
        self, node: ast.AsyncFunctionDef, scope: Scope, frame: Frame
    ) -> None:
        scope.store(node.name, await self.make_function(node, scope, frame))

    async def make_function(self, node: Any, scope: Scope, frame: Frame) -> Helper:
        args = node.args
        defaults = [copy_value(await self.eval(d, scope, frame)) for d in args.defaults]
        kw_defaults = {
            arg.arg: copy_value(await self.eval(d, scope, frame))
            for arg, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
            if d is not None
        }
        closure = None if isinstance(scope, GlobalScope) else scope
        name = "<lambda>" if isinstance(node, ast.Lambda) else node.name
        source = ""
        if closure is None and not isinstance(node, ast.Lambda) and frame.depth == 0:
            source = ast.unparse(node)  # carried to later programs (§14), comments dropped
        numbers = [frame.sites.site(n) for n in ast.walk(node) if isinstance(n, ast.Call)]
        first = min((n for n in numbers if n is not None), default=0)
        return Helper(name, node, defaults, kw_defaults, closure, frame.sites, source, first)

    async def _exec_Import(self, node: ast.Import, scope: Scope, frame: Frame) -> None:
        from ._modules import module_named

        for alias in node.names:
            scope.store(alias.asname or alias.name, module_named(alias.name))

    async def _exec_ImportFrom(self, node: ast.ImportFrom, scope: Scope, frame: Frame) -> None:
        from ._modules import module_named

        module = module_named(node.module or "")
        for alias in node.names:
            scope.store(alias.asname or alias.name, module.members[alias.name])

    # -- ending the program ----------------------------------------------------------------------

    async def end_program(self, kind: str, value: Any) -> None:
        """`final_answer`/`return`: wait until every earlier call ended without an
        uncaught failure (every earlier statement committed, this one's calls ended)."""
        await Wait("committed", index=self.index)
        await self._force_since(0)
        value = await self.materialize(value)
        raise EndProgram(kind, leave(value, "the final answer"))

    # -- calls ------------------------------------------------------------------------------

    async def call_node(self, node: ast.Call, scope: Scope, frame: Frame) -> Any:
        func = node.func
        if isinstance(func, ast.Attribute):
            receiver = await self.value(func.value, scope, frame)
            if isinstance(receiver, Module) and receiver.members.get(func.attr) is GATHER:
                return await self._gather(node, scope, frame)
            args, kwargs = await self.arguments(node, scope, frame)
            if isinstance(
                receiver, Module | Builtin
            ):  # `math.floor`, `datetime.date.fromisoformat`
                member = await self.get_attribute(receiver, func.attr)
                return await self.call_value(member, args, kwargs, node, frame)
            if (
                isinstance(receiver, dict)
                and func.attr not in _DICT_METHODS
                and func.attr in receiver
            ):
                return await self.call_value(receiver[func.attr], args, kwargs, node, frame)
            if func.attr in MUTATING_METHODS and not _is_place(func.value):
                receiver = copy_value(receiver, self.meter)
            return await call_method(self, receiver, func.attr, args, kwargs)
        callee = await self.value(func, scope, frame)
        if callee is GATHER:
            return await self._gather(node, scope, frame)
        args, kwargs = await self.arguments(node, scope, frame)
        return await self.call_value(callee, args, kwargs, node, frame)

    async def arguments(
        self, node: ast.Call, scope: Scope, frame: Frame
    ) -> tuple[list[Any], dict[str, Any]]:
        args: list[Any] = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                args.extend(await self.iterate_all(await self.value(arg.value, scope, frame)))
            else:
                args.append(copy_value(await self.eval(arg, scope, frame), self.meter))
        kwargs: dict[str, Any] = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                extra = await self.value(keyword.value, scope, frame)
                if not isinstance(extra, dict):
                    raise ProgramRaise(TypeError("argument after ** must be a mapping"))
                for key, item in extra.items():
                    if not isinstance(key, str):
                        raise ProgramRaise(TypeError("keywords must be strings"))
                    kwargs[key] = copy_value(item, self.meter)
            else:
                kwargs[keyword.arg] = copy_value(
                    await self.eval(keyword.value, scope, frame), self.meter
                )
        return args, kwargs

    async def call_value(
        self, callee: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call | None,
        frame: Frame | None, *, item: int | None = None,
    ) -> Any:  # fmt: skip
        """Call a value of the program: a tool, a helper, a built-in, an exception class.

        `node` is the call expression (None for a method given a function: `sort(key=)`,
        whose helper has no call site, so a tool call inside it is refused); `item` the
        index of the item a built-in calls it for (§14: the built-in's site and the
        item's index)."""
        site = None if node is None or frame is None else frame.sites.site(node)
        if isinstance(callee, ToolRef):
            if node is None or frame is None or site is None:
                raise OutsideLanguage(
                    f"the tool {callee.name} is called where a call has no site "
                    "(through a method or a built-in's name): call it directly"
                )
            if item is not None:
                frame = Frame(frame.prefix, frame.sites, frame.depth, [*frame.indexes, item])
            return await self.call_tool(callee, args, kwargs, node, frame)
        if isinstance(callee, Helper):
            depth = 1 if frame is None else frame.depth + 1
            if site is None or frame is None:
                inner = Frame("", callee.sites, depth)
            else:
                inner = frame.inner(site, callee.sites, item)
            return await self.call_helper(callee, args, kwargs, inner)
        if isinstance(callee, Builtin):
            return await callee.run(self, args, kwargs, node, frame)
        if isinstance(callee, type) and callee in EXCEPTION_CLASSES.values():
            plain = [await self.materialize(a) for a in args]
            if kwargs and callee.__name__ != "ToolError":
                raise ProgramRaise(TypeError(f"{callee.__name__}() takes no keyword arguments"))
            return callee(*plain, **kwargs)
        raise ProgramRaise(TypeError(f"'{type(callee).__name__}' object is not callable"))

    async def call_tool(
        self, tool: ToolRef, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
    ) -> Any:
        site = frame.sites.site(node)
        if site is None or not frame.prefix:
            raise OutsideLanguage(
                f"the tool {tool.name} is called where a call has no site (inside a function "
                "given to a method such as sort(key=)): call it directly"
            )
        code_tool = self.host.tools[tool.name]
        bound = bind_tool_arguments(tool.name, code_tool.params, code_tool.defaults, args, kwargs)
        params = {}
        for key, value in bound.items():
            params[key] = leave(
                await self.materialize(value), f"the parameter {key!r} of {tool.name}"
            )
        call_id = frame.call_id(site)
        for expression in code_tool.depends_on:
            if not await self._present(expression):
                message = (
                    f"{tool.name} depends on {expression}, which the statements before this "
                    "call did not leave"
                )
                error = ToolError(message, type="structural", status="invalid", call_id=call_id)
                raise ProgramRaise(error, node.lineno)
        return await self._make(tool.name, code_tool.read_only, params, call_id, node.lineno)

    async def _make(
        self, name: str, read_only: bool, params: dict[str, Any], call_id: str, line: int
    ) -> Any:
        """Make a tool call past the barriers §14 puts before it; its lazy value."""
        if self.try_marks:
            await self._force_since(self.try_marks[-1])
        if self.host.must_wait_before_calls(self.index, read_only):
            await Wait("committed", index=self.index)
        if not read_only:
            await self._force_since(0)
        call = self.host.make_call(self.index, call_id, name, params, line)
        if call.id not in self.made_ids:
            self.made_ids.add(call.id)
            self.made.append(call)
        value = Lazy(call)
        if self.strict and not self.gathering:
            return await self.force(value)
        return value

    async def _present(self, expression: Expression) -> bool:
        """Whether a `depends_on` reference is present in the variables the statements
        before this one left: all its terms for `&&`, any for `||` (PROTOCOL §2, §14)."""
        found = [await self._term_present(term) for term in expression.terms]
        return all(found) if expression.op == "&&" else any(found)

    async def _term_present(self, term: Term) -> bool:
        if term.kind == "state" and term.path and isinstance(term.path[0], str):
            name, steps = term.path[0], term.path[1:]
        elif term.kind == "input":
            name, steps = "task_input", term.path
        else:
            return False  # no other kind of data is a program's
        value = await self.host.earlier(self.index, name)
        if value is MISSING:
            return False
        try:
            value = await self.materialize(value)
        except ProgramRaise:
            return False  # the call that was to write it failed
        for step in steps:
            if isinstance(step, str) and isinstance(value, dict) and step in value:
                value = value[step]
            elif isinstance(step, int) and isinstance(value, list) and step < len(value):
                value = value[step]
            else:
                return False
        return True

    async def call_helper(
        self, helper: Helper, args: list[Any], kwargs: dict[str, Any], frame: Frame
    ) -> Any:
        if frame.depth > MAX_DEPTH:
            raise LimitExceeded(
                "helper depth", f"helpers call each other deeper than {MAX_DEPTH} levels"
            )
        node = helper.node
        scope = FunctionScope(scope_info(node), helper.closure or self.scope, self.scope)
        _bind_parameters(helper, args, kwargs, scope)
        if isinstance(node, ast.Lambda):
            return await self.eval(node.body, scope, frame)
        try:
            await self.exec_block(node.body, scope, frame)
        except _Return as returned:
            return returned.value
        return None

    async def _gather(self, node: ast.Call, scope: Scope, frame: Frame) -> Any:
        """`asyncio.gather(*es, return_exceptions=)`: its calls do not wait for each
        other; a failure raises when its value is needed, here (§14)."""
        catching = _returns_exceptions(node)
        flag = _plain_flag(node)
        if flag is not None and not catching:  # a computed flag with no call: known first
            catching = bool(await self.materialize(await self.eval(flag, scope, frame)))
        self.gathering += 1
        if catching:
            self.catch_marks.append(len(self.made))
        try:
            args, kwargs = await self.arguments(node, scope, frame)
        finally:
            self.gathering -= 1
            if catching:
                self.catch_marks.pop()
        return_exceptions = bool(kwargs.pop("return_exceptions", False))
        if kwargs:
            raise ProgramRaise(
                TypeError(f"gather() got an unexpected keyword {next(iter(kwargs))!r}")
            )
        results = []
        for value in args:
            try:
                results.append(await self.force(value))
            except ProgramRaise as raised:
                if not return_exceptions:
                    self._note_ran_ahead(value)
                    raise
                results.append(raised.error)
        return results

    def _note_ran_ahead(self, failed: Any) -> None:
        """The calls made after a gather's failed element: the reference program raised
        before making them (its arguments run in order)."""
        ids = [call.id for call in self.made]
        if isinstance(failed, Lazy) and failed.call.id in ids:
            self.ran_ahead.update(ids[ids.index(failed.call.id) + 1 :])

    async def get_attribute(self, value: Any, name: str) -> Any:
        return attribute_of(value, name)


_DICT_METHODS = frozenset(
    {"get", "keys", "values", "items", "pop", "popitem", "update", "setdefault", "clear",
     "copy", "fromkeys"}
)  # fmt: skip


def _plain_flag(node: ast.Call) -> ast.expr | None:
    """A gather's `return_exceptions=` expression when it calls nothing (so evaluating
    it before the arguments changes nothing CPython would see); None otherwise."""
    for keyword in node.keywords:
        if keyword.arg == "return_exceptions":
            calls = any(isinstance(n, ast.Call | ast.Await) for n in ast.walk(keyword.value))
            return None if calls else keyword.value
    return None


def _returns_exceptions(node: ast.Call) -> bool:
    """Whether a gather says `return_exceptions=` with a true constant, known before its
    arguments run (a computed flag is only known after them: its barriers raise)."""
    return any(
        k.arg == "return_exceptions" and isinstance(k.value, ast.Constant) and bool(k.value.value)
        for k in node.keywords
    )


def _is_place(node: ast.expr) -> bool:
    """Whether an expression is a place reached through a name (`x`, `x[0]`, `r.tags`)."""
    while isinstance(node, ast.Subscript | ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


@dataclass(frozen=True)
class ToolRef:
    """A tool as a value of the program (the name it is called by)."""

    name: str

    def __repr__(self) -> str:
        return f"<tool {self.name}>"


def _bind_parameters(
    helper: Helper, args: list[Any], kwargs: dict[str, Any], scope: FunctionScope
) -> None:
    """Bind a call's arguments to a helper's parameters as Python does."""
    spec = helper.node.args
    positional = [*spec.posonlyargs, *spec.args]
    names = [a.arg for a in positional]
    values: dict[str, Any] = {}
    for name, value in zip(names, args, strict=False):
        values[name] = value
    extra = args[len(names) :]
    if extra and spec.vararg is None:
        raise ProgramRaise(
            TypeError(
                f"{helper.name}() takes {len(names)} positional arguments "
                f"but {len(args)} were given"
            )
        )
    remaining = dict(kwargs)
    for name in names[len(spec.posonlyargs) :] + [a.arg for a in spec.kwonlyargs]:
        if name in remaining:
            if name in values:
                raise ProgramRaise(
                    TypeError(f"{helper.name}() got multiple values for argument {name!r}")
                )
            values[name] = remaining.pop(name)
    if remaining and spec.kwarg is None:
        raise ProgramRaise(
            TypeError(
                f"{helper.name}() got an unexpected keyword argument {next(iter(remaining))!r}"
            )
        )
    first_default = len(names) - len(helper.defaults)
    for i, name in enumerate(names):
        if name not in values:
            if i >= first_default:
                values[name] = copy_value(helper.defaults[i - first_default])
            else:
                raise ProgramRaise(TypeError(f"{helper.name}() missing required argument {name!r}"))
    for arg in spec.kwonlyargs:
        if arg.arg not in values:
            if arg.arg not in helper.kw_defaults:
                raise ProgramRaise(
                    TypeError(f"{helper.name}() missing keyword argument {arg.arg!r}")
                )
            values[arg.arg] = copy_value(helper.kw_defaults[arg.arg])
    if spec.vararg is not None:
        values[spec.vararg.arg] = tuple(extra)
    if spec.kwarg is not None:
        values[spec.kwarg.arg] = remaining
    for name, value in values.items():
        scope.vars[name] = value

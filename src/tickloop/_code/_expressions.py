"""Expressions of the language, evaluated over values (PROTOCOL §14 "The language").

Owns what an expression node means: names, literals, operators (with sizes estimated
before a result is built), comparisons, subscripts and slices, f-strings, comprehensions
and generator expressions, and forcing: a `Lazy` call value is forced only where an
operation needs it. Calls, statements and helpers are the `Evaluator`'s (its subclass).
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import AsyncIterator
from typing import Any, Final

from ._exceptions import OutsideLanguage, ProgramRaise, Reevaluate, ToolError
from ._frame import Frame, Wait
from ._names import CompScope, Scope
from ._scope import scope_info
from ._values import (
    MAX_VALUE_BYTES,
    CallState,
    Lazy,
    Meter,
    PSet,
    check_size,
    copy_value,
    size_of,
    type_name,
)

__all__ = ["Expressions", "GenValue", "charge_size", "dispatch"]

_BINARY: Final[dict[type[ast.operator], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.BitAnd: operator.and_,
    ast.MatMult: operator.matmul,
}  # fmt: skip
_COMPARE: Final[dict[type[ast.cmpop], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b, ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}  # fmt: skip
_NUMBERS_IN_SPEC: Final = re.compile(r"\d+")
_NUMBERS: Final = frozenset({int, float, bool})
_GROWING: Final = frozenset({ast.Mult, ast.Pow, ast.LShift})  # may build a huge integer
_METHODS: dict[tuple[type, str, type], Any] = {}  # (evaluator class, prefix, node type)


def dispatch(owner: type, prefix: str, kind: type) -> Any:
    """The evaluator's method for a node type (`_eval_BinOp`), looked up once."""
    key = (owner, prefix, kind)
    method = _METHODS.get(key)
    if method is None:
        method = getattr(owner, prefix + kind.__name__, None)
        _METHODS[key] = method
    return method


def charge_size(meter: Meter, value: Any) -> None:
    """Charge the steps of an operation on `value` (§14: size n counts n): items of a
    container, 64 characters of a string."""
    if isinstance(value, str):
        meter.charge(1 + len(value) // 64)
    elif isinstance(value, list | tuple | dict | PSet):
        meter.charge(1 + len(value))
    elif isinstance(value, int):
        meter.charge(1 + value.bit_length() // 64)  # a big integer: a step a word
    else:
        meter.charge(1)


def check_spec(spec: str) -> None:
    """Refuse a format spec (`{x:>10000000000}`, `%.9999999f`) that builds a huge string."""
    for number in _NUMBERS_IN_SPEC.findall(spec):
        if len(number) > 8 or int(number) > MAX_VALUE_BYTES:
            check_size(int(number[:30]) if len(number) < 30 else 10.0**30, "a format width")


def estimate_binary(
    op: type[ast.operator], left: Any, right: Any, meter: Meter | None = None
) -> None:
    """Refuse before building a result that would pass the value-size limit."""
    if op is ast.Mult:
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, str | list | tuple) and isinstance(times, int):
                check_size(size_of(seq) * max(times, 0), "repeating a sequence")
        if isinstance(left, int) and isinstance(right, int):
            check_size((left.bit_length() + right.bit_length()) / 8, "a multiplication")
    elif op is ast.Pow and isinstance(left, int) and isinstance(right, int) and right > 0:
        check_size(right * max(left.bit_length(), 1) / 8, "a power")
        if meter is not None:
            meter.charge(right * left.bit_length() // 64)  # the result's words
    elif op is ast.LShift and isinstance(left, int) and isinstance(right, int):
        check_size((left.bit_length() + max(right, 0)) / 8, "a shift")
    elif op is ast.Add and isinstance(left, str | list | tuple):
        if isinstance(right, str | list | tuple):
            check_size(size_of(left) + size_of(right), "a concatenation")
    elif op is ast.Mod and isinstance(left, str):
        check_spec(left)


class GenValue:
    """A generator expression: items made when the consumer asks for them (one pass),
    so `any(check(u) for u in urls)` stops where CPython stops."""

    def __init__(self, items: AsyncIterator[Any]) -> None:
        self.items = items
        self.used = False

    def __repr__(self) -> str:
        return "<generator object>"


class Expressions:
    """Evaluates expression nodes. The subclass gives calls (`call_node`) and owns the
    pass: `strict` (every call forced at its site), `index` (the statement), `made`
    (calls this pass made, in order) and `meter`."""

    meter: Meter
    index: int
    strict: bool
    made: list[CallState]
    raised_calls: set[str]

    printed: list[tuple[int, str]]  # (line, text) this pass printed, in order

    async def call_node(self, node: ast.Call, scope: Scope, frame: Frame) -> Any:
        raise NotImplementedError

    async def call_value(
        self,
        callee: Any,
        args: list[Any],
        kwargs: dict[str, Any],
        node: ast.Call | None,
        frame: Frame | None,
        *,
        item: int | None = None,
    ) -> Any:
        raise NotImplementedError

    async def end_program(self, kind: str, value: Any) -> None:
        raise NotImplementedError

    async def make_function(self, node: ast.Lambda, scope: Scope, frame: Frame) -> Any:
        raise NotImplementedError

    async def get_attribute(self, value: Any, name: str) -> Any:
        raise NotImplementedError

    async def assign(self, target: ast.expr, value: Any, scope: Scope, frame: Frame) -> None:
        raise NotImplementedError

    # -- forcing --------------------------------------------------------------------------

    async def force(self, value: Any) -> Any:
        """The value itself: a `Lazy` waits for its call; a failed call raises where the
        value is needed (its own failure in a lazy pass reruns the statement strictly)."""
        if not isinstance(value, Lazy):
            return value
        if not value.forced:
            call = value.call
            if not call.ended:
                await Wait("call", call=call)
            if call.status != "ok":
                raise self.call_failure(call)
            value.cache = copy_value(call.value)
            value.forced = True
        return value.cache

    def call_failure(self, call: CallState) -> BaseException:
        """What forcing a failed call raises here."""
        if call.owner == self.index and not self.strict:
            return Reevaluate()
        assert call.error is not None
        error = call.error
        self.raised_calls.add(call.id)
        return ProgramRaise(
            ToolError(error.message, type=error.type, status=error.status, call_id=call.id)
        )

    async def materialize(self, value: Any) -> Any:
        """The value with every `Lazy` inside it forced, in place (the containers are this
        statement's own: every store was a copy)."""
        value = await self.force(value)
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, Lazy | list | dict | tuple):
                    value[i] = await self.materialize(item)
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, Lazy | list | dict | tuple):
                    value[key] = await self.materialize(item)
        elif isinstance(value, tuple) and any(isinstance(x, Lazy | list | dict) for x in value):
            value = tuple([await self.materialize(item) for item in value])
        return value

    # -- expressions ------------------------------------------------------------------------

    async def eval(self, node: ast.expr, scope: Scope, frame: Frame) -> Any:
        self.meter.charge()
        kind = type(node)
        if kind is ast.Constant:
            return await self._eval_Constant(node, scope, frame)  # type: ignore[arg-type]
        if kind is ast.Name:
            return await scope.load(node.id)  # type: ignore[attr-defined]
        method = dispatch(type(self), "_eval_", kind)
        if method is None:
            raise OutsideLanguage(f"{kind.__name__} is outside the language")
        return await method(self, node, scope, frame)

    async def value(self, node: ast.expr, scope: Scope, frame: Frame) -> Any:
        """Evaluate and force (what most operations need)."""
        return await self.force(await self.eval(node, scope, frame))

    async def full(self, node: ast.expr, scope: Scope, frame: Frame) -> Any:
        """Evaluate and force everything inside (comparisons, printing, parameters)."""
        return await self.materialize(await self.eval(node, scope, frame))

    async def _eval_Constant(self, node: ast.Constant, scope: Scope, frame: Frame) -> Any:
        if isinstance(node.value, bytes | complex) or node.value is Ellipsis:
            raise OutsideLanguage(f"the literal {node.value!r} is outside the language")
        return node.value

    async def _eval_Name(self, node: ast.Name, scope: Scope, frame: Frame) -> Any:
        return await scope.load(node.id)

    async def _eval_List(self, node: ast.List, scope: Scope, frame: Frame) -> Any:
        return await self._items(node.elts, scope, frame)

    async def _eval_Tuple(self, node: ast.Tuple, scope: Scope, frame: Frame) -> Any:
        return tuple(await self._items(node.elts, scope, frame))

    async def _eval_Set(self, node: ast.Set, scope: Scope, frame: Frame) -> Any:
        items = await self._items(node.elts, scope, frame)
        return PSet([await self.hashable(item) for item in items])

    async def _items(self, elts: list[ast.expr], scope: Scope, frame: Frame) -> list[Any]:
        items: list[Any] = []
        for elt in elts:
            if isinstance(elt, ast.Starred):
                items.extend(await self.iterate_all(await self.value(elt.value, scope, frame)))
            else:
                items.append(copy_value(await self.eval(elt, scope, frame), self.meter))
        return items

    async def hashable(self, value: Any) -> Any:
        value = await self.materialize(value)
        if isinstance(value, list | dict | PSet):
            raise ProgramRaise(TypeError(f"unhashable type: '{type_name(value)}'"))
        return value

    async def _eval_Dict(self, node: ast.Dict, scope: Scope, frame: Frame) -> Any:
        result: dict[Any, Any] = {}
        for key_node, value_node in zip(node.keys, node.values, strict=True):
            if key_node is None:
                other = await self.value(value_node, scope, frame)
                if not isinstance(other, dict):
                    raise ProgramRaise(TypeError(f"'{type_name(other)}' object is not a mapping"))
                result.update(copy_value(other, self.meter))
                continue
            key = await self.hashable(await self.eval(key_node, scope, frame))
            result[key] = copy_value(await self.eval(value_node, scope, frame), self.meter)
        return result

    async def _eval_JoinedStr(self, node: ast.JoinedStr, scope: Scope, frame: Frame) -> Any:
        parts = []
        total = 0
        for part in node.values:
            text = await self.value(part, scope, frame)
            total += len(text)
            check_size(total, "an f-string")
            parts.append(text)
        return "".join(parts)

    async def _eval_FormattedValue(
        self, node: ast.FormattedValue, scope: Scope, frame: Frame
    ) -> Any:
        value = await self.full(node.value, scope, frame)
        if node.conversion == ord("r"):
            value = self.repr_of(value)
        elif node.conversion == ord("s"):
            value = self.str_of(value)
        elif node.conversion == ord("a"):
            value = ascii(value)
        spec = "" if node.format_spec is None else await self.value(node.format_spec, scope, frame)
        check_spec(spec)
        if not spec:
            return value if isinstance(value, str) else self.str_of(value)
        return format(value, spec)

    def str_of(self, value: Any) -> str:
        """`str(value)` of a materialized value, its cost charged."""
        charge_size(self.meter, value)
        check_size(size_of(value) * 2, "str()")
        return str(value)

    def repr_of(self, value: Any) -> str:
        charge_size(self.meter, value)
        check_size(size_of(value) * 2, "repr()")
        return repr(value)

    async def _eval_BinOp(self, node: ast.BinOp, scope: Scope, frame: Frame) -> Any:
        left = await self.value(node.left, scope, frame)
        right = await self.value(node.right, scope, frame)
        return await self.binary(type(node.op), left, right)

    async def binary(self, op: type[ast.operator], left: Any, right: Any) -> Any:
        if type(left) in _NUMBERS and type(right) in _NUMBERS and op not in _GROWING:
            self.meter.charge()
            return _BINARY[op](left, right)  # the common case: small arithmetic
        if op is ast.MatMult:
            raise OutsideLanguage("the operator @ is outside the language")
        if isinstance(left, list | dict | tuple | PSet):
            left = await self.materialize(left)
        if isinstance(right, list | dict | tuple | PSet):
            right = await self.materialize(right)
        estimate_binary(op, left, right, self.meter)
        charge_size(self.meter, left)
        charge_size(self.meter, right)
        result = _BINARY[op](left, right)
        if isinstance(result, list) and op in (ast.Add, ast.Mult):
            result = copy_value(result, self.meter)  # the items of `[x] * 3` are not shared
        return result

    async def _eval_UnaryOp(self, node: ast.UnaryOp, scope: Scope, frame: Frame) -> Any:
        operand = await self.value(node.operand, scope, frame)
        if isinstance(node.op, ast.Not):
            return not await self.truth(operand)
        if isinstance(node.op, ast.USub):
            return -operand
        if isinstance(node.op, ast.UAdd):
            return +operand
        return ~operand

    async def truth(self, value: Any) -> bool:
        value = await self.force(value)
        return bool(value)

    async def _eval_BoolOp(self, node: ast.BoolOp, scope: Scope, frame: Frame) -> Any:
        is_and = isinstance(node.op, ast.And)
        result: Any = None
        for operand in node.values:
            result = await self.eval(operand, scope, frame)
            if await self.truth(result) != is_and:
                return result
        return result

    async def _eval_Compare(self, node: ast.Compare, scope: Scope, frame: Frame) -> Any:
        left = await self.full(node.left, scope, frame)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = await self.full(right_node, scope, frame)
            charge_size(self.meter, right)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True

    async def _eval_IfExp(self, node: ast.IfExp, scope: Scope, frame: Frame) -> Any:
        if await self.truth(await self.eval(node.test, scope, frame)):
            return await self.eval(node.body, scope, frame)
        return await self.eval(node.orelse, scope, frame)

    async def _eval_NamedExpr(self, node: ast.NamedExpr, scope: Scope, frame: Frame) -> Any:
        value = await self.eval(node.value, scope, frame)
        scope.store(node.target.id, copy_value(value, self.meter))
        return value

    async def _eval_Await(self, node: ast.Await, scope: Scope, frame: Frame) -> Any:
        return await self.eval(node.value, scope, frame)  # §14: `await e` means `e`

    async def _eval_Starred(self, node: ast.Starred, scope: Scope, frame: Frame) -> Any:
        raise OutsideLanguage("a starred expression here is outside the language")

    async def _eval_Lambda(self, node: ast.Lambda, scope: Scope, frame: Frame) -> Any:
        return await self.make_function(node, scope, frame)

    async def _eval_Call(self, node: ast.Call, scope: Scope, frame: Frame) -> Any:
        return await self.call_node(node, scope, frame)

    async def _eval_Attribute(self, node: ast.Attribute, scope: Scope, frame: Frame) -> Any:
        value = await self.value(node.value, scope, frame)
        return await self.get_attribute(value, node.attr)

    async def _eval_Subscript(self, node: ast.Subscript, scope: Scope, frame: Frame) -> Any:
        container = await self.value(node.value, scope, frame)
        key = await self.subscript_key(node.slice, scope, frame)
        return self.read_item(container, key)

    async def subscript_key(self, node: ast.expr, scope: Scope, frame: Frame) -> Any:
        if isinstance(node, ast.Slice):
            parts = [
                None if part is None else await self.value(part, scope, frame)
                for part in (node.lower, node.upper, node.step)
            ]
            return slice(*parts)
        return await self.hashable(await self.eval(node, scope, frame))

    def read_item(self, container: Any, key: Any) -> Any:
        if isinstance(container, PSet) or not isinstance(container, list | tuple | dict | str):
            if not hasattr(container, "__getitem__") or isinstance(container, PSet | GenValue):
                raise ProgramRaise(
                    TypeError(f"'{type_name(container)}' object is not subscriptable")
                )
        item = container[key]
        if isinstance(key, slice):
            charge_size(self.meter, item)
            item = copy_value(item, self.meter) if isinstance(item, list) else item
        return item

    async def _eval_Slice(self, node: ast.Slice, scope: Scope, frame: Frame) -> Any:
        raise OutsideLanguage("a slice outside a subscript is outside the language")

    # -- iteration and comprehensions ------------------------------------------------------

    async def iterate_all(self, value: Any) -> list[Any]:
        """Every item of an iterable (a generator expression runs to its end); a range
        too large to hold is refused before it is built."""
        value = await self.force(value)
        if isinstance(value, range):
            check_size(len(value) * 8, "materializing a range")
        return [item async for item in self.each(value)]

    async def each(self, value: Any) -> AsyncIterator[Any]:
        """The items of an iterable value, one step each."""
        value = await self.force(value)
        if isinstance(value, GenValue):
            if value.used:
                return
            value.used = True
            async for item in value.items:
                yield item
            return
        if isinstance(value, dict):
            value = list(value)
        elif not isinstance(value, list | tuple | str | PSet | range):
            raise ProgramRaise(TypeError(f"'{type_name(value)}' object is not iterable"))
        for item in value:
            self.meter.charge()
            if self.meter.due:
                self.meter.paused()
                await Wait("pause")
            yield item

    async def _eval_ListComp(self, node: ast.ListComp, scope: Scope, frame: Frame) -> Any:
        return [item async for item in self._comprehend(node, scope, frame)]

    async def _eval_SetComp(self, node: ast.SetComp, scope: Scope, frame: Frame) -> Any:
        return PSet([await self.hashable(x) async for x in self._comprehend(node, scope, frame)])

    async def _eval_DictComp(self, node: ast.DictComp, scope: Scope, frame: Frame) -> Any:
        result: dict[Any, Any] = {}
        async for key, value in self._comprehend(node, scope, frame):
            result[await self.hashable(key)] = value
        return result

    async def _eval_GeneratorExp(self, node: ast.GeneratorExp, scope: Scope, frame: Frame) -> Any:
        inner = Frame(frame.prefix, frame.sites, frame.depth, list(frame.indexes))
        first = await self.value(node.generators[0].iter, scope, frame)
        return GenValue(self._comprehend(node, scope, inner, first=first))

    async def _comprehend(
        self, node: ast.expr, scope: Scope, frame: Frame, *, first: Any = None
    ) -> AsyncIterator[Any]:
        assert isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp)
        inner = CompScope(scope_info(node), scope)
        if first is None:
            first = await self.value(node.generators[0].iter, scope, frame)
        async for item in self._clauses(node, 0, first, inner, frame):
            yield item

    async def _clauses(
        self, node: Any, level: int, iterable: Any, scope: CompScope, frame: Frame
    ) -> AsyncIterator[Any]:
        clause: ast.comprehension = node.generators[level]
        frame.indexes.append(0)
        try:
            count = 0
            async for item in self.each(iterable):
                frame.indexes[-1] = count
                count += 1
                await self.assign(clause.target, copy_value(item, self.meter), scope, frame)
                if not await self._conditions(clause.ifs, scope, frame):
                    continue
                if level + 1 < len(node.generators):
                    nested = await self.value(node.generators[level + 1].iter, scope, frame)
                    async for out in self._clauses(node, level + 1, nested, scope, frame):
                        yield out
                elif isinstance(node, ast.DictComp):
                    key = await self.eval(node.key, scope, frame)
                    yield key, copy_value(await self.eval(node.value, scope, frame), self.meter)
                else:
                    yield copy_value(await self.eval(node.elt, scope, frame), self.meter)
        finally:
            frame.indexes.pop()

    async def _conditions(self, ifs: list[ast.expr], scope: Scope, frame: Frame) -> bool:
        for condition in ifs:
            if not await self.truth(await self.eval(condition, scope, frame)):
                return False
        return True

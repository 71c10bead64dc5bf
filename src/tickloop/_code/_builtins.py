"""The built-in functions of the language (PROTOCOL §14 "Built-ins").

Owns `len sum min max sorted reversed range enumerate zip map filter any all abs round
divmod pow str int float bool list dict set tuple isinstance repr print`, `final_answer`
and `reset`, and how a tool's parameters are bound from a call's arguments. Each is an
async function of (evaluator, args, kwargs, node, frame): it may force values, and the
ones given a function call it at the built-in's site with the item's index.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._exceptions import EXCEPTION_CLASSES, ProgramRaise
from ._expressions import GenValue, charge_size, estimate_binary
from ._frame import Frame
from ._values import Builtin, PSet, copy_value, type_name

if TYPE_CHECKING:
    from ._expressions import Expressions as Evaluator

__all__ = ["BUILTINS", "bind_tool_arguments"]

_MISSING = object()


def bind_tool_arguments(
    name: str,
    params: tuple[str, ...],
    defaults: Mapping[str, Any],
    args: list[Any],
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    """A tool's parameters from a call's arguments (positional in stub order)."""
    if len(args) > len(params):
        raise ProgramRaise(
            TypeError(f"{name}() takes {len(params)} arguments but {len(args)} were given")
        )
    bound = dict(zip(params, args, strict=False))
    for key, value in kwargs.items():
        if key not in params:
            raise ProgramRaise(TypeError(f"{name}() got an unexpected keyword argument {key!r}"))
        if key in bound:
            raise ProgramRaise(TypeError(f"{name}() got multiple values for argument {key!r}"))
        bound[key] = value
    missing = [p for p in params if p not in bound and p not in defaults]
    if missing:
        raise ProgramRaise(TypeError(f"{name}() missing required argument {missing[0]!r}"))
    return bound


def _no_kwargs(name: str, kwargs: dict[str, Any], allowed: tuple[str, ...] = ()) -> None:
    for key in kwargs:
        if key not in allowed:
            raise ProgramRaise(TypeError(f"{name}() got an unexpected keyword argument {key!r}"))


async def _apply(
    ev: Evaluator, fn: Any, args: list[Any], node: ast.Call | None, frame: Frame | None, item: int
) -> Any:
    """Call a function given to a built-in, for the item at `item`."""
    return await ev.call_value(fn, args, {}, node, frame, item=item)


async def _len(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    _no_kwargs("len", kwargs)
    value = await ev.force(args[0]) if len(args) == 1 else _arity("len", 1, args)
    if isinstance(value, GenValue):
        raise ProgramRaise(TypeError("object of type 'generator' has no len()"))
    return len(value)


def _arity(name: str, count: int, args: list[Any]) -> Any:
    raise ProgramRaise(TypeError(f"{name}() takes exactly {count} argument ({len(args)} given)"))


async def _print(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    _no_kwargs("print", kwargs, ("sep", "end"))
    sep = await ev.materialize(kwargs.get("sep", " "))
    end = await ev.materialize(kwargs.get("end", "\n"))
    sep = " " if sep is None else sep
    end = "\n" if end is None else end
    if not isinstance(sep, str) or not isinstance(end, str):
        raise ProgramRaise(TypeError("sep and end must be None or a string"))
    parts = []
    for arg in args:
        value = await ev.materialize(arg)
        parts.append(value if isinstance(value, str) else ev.str_of(value))
    ev.printed.append((node.lineno, sep.join(parts) + end))
    return None


async def _final_answer(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    values = [*args, *kwargs.values()]
    if len(values) != 1:
        raise ProgramRaise(TypeError("final_answer() takes exactly one argument"))
    await ev.end_program("final", values[0])


async def _reset(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    if args or kwargs:
        raise ProgramRaise(TypeError("reset() takes no arguments"))
    await ev.end_program("reset", None)


async def _items_of(ev: Evaluator, value: Any) -> list[Any]:
    return await ev.iterate_all(value)


async def _sum(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    _no_kwargs("sum", kwargs, ("start",))
    total = kwargs.get("start", args[1] if len(args) > 1 else 0)
    total = await ev.materialize(total)
    if isinstance(total, str):
        raise ProgramRaise(TypeError("sum() can't sum strings [use ''.join(seq) instead]"))
    async for item in ev.each(args[0]):
        total = await ev.binary(ast.Add, total, await ev.materialize(item))
    return total


async def _min_max(
    ev: Evaluator, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    _no_kwargs(name, kwargs, ("key", "default"))
    items = await _items_of(ev, args[0]) if len(args) == 1 else list(args)
    items = [await ev.materialize(x) for x in items]
    if not items:
        if "default" in kwargs:
            return kwargs["default"]
        raise ProgramRaise(ValueError(f"{name}() arg is an empty sequence"))
    key = kwargs.get("key")
    keys = items if key is None else [
        await ev.materialize(await _apply(ev, key, [x], node, frame, i))
        for i, x in enumerate(items)
    ]  # fmt: skip
    ev.meter.charge(len(items))
    best = 0
    for i in range(1, len(items)):
        better = keys[i] < keys[best] if name == "min" else keys[i] > keys[best]
        if better:
            best = i
    return items[best]


async def _min(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    return await _min_max(ev, "min", args, kwargs, node, frame)


async def _max(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    return await _min_max(ev, "max", args, kwargs, node, frame)


async def _sorted(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    _no_kwargs("sorted", kwargs, ("key", "reverse"))
    items = [await ev.materialize(x) for x in await _items_of(ev, args[0])]
    return await sort_items(ev, items, kwargs, node, frame)


async def sort_items(
    ev: Evaluator,
    items: list[Any],
    kwargs: dict[str, Any],
    node: ast.Call | None,
    frame: Frame | None,
) -> list[Any]:
    """`items` sorted as `sorted`/`list.sort` do (stable; key called once per item)."""
    key = kwargs.get("key")
    reverse = bool(await ev.materialize(kwargs.get("reverse", False)))
    n = len(items)
    ev.meter.charge(n * max(1, n.bit_length()))
    if key is None:
        return sorted(items, reverse=reverse)
    keys = [
        await ev.materialize(await _apply(ev, key, [x], node, frame, i))
        for i, x in enumerate(items)
    ]
    order = sorted(range(n), key=lambda i: keys[i], reverse=reverse)
    return [items[i] for i in order]


async def _reversed(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    value = await ev.force(args[0])
    if isinstance(value, dict | PSet | GenValue):
        raise ProgramRaise(TypeError(f"'{type_name(value)}' object is not reversible"))
    return list(reversed(await _items_of(ev, value)))


async def _range(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    _no_kwargs("range", kwargs)
    return range(*[await ev.force(a) for a in args])


async def _enumerate(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    start = await ev.force(kwargs.get("start", args[1] if len(args) > 1 else 0))
    return [(start + i, x) for i, x in enumerate(await _items_of(ev, args[0]))]


async def _zip(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    _no_kwargs("zip", kwargs, ("strict",))
    columns = [await _items_of(ev, a) for a in args]
    if kwargs.get("strict") and len({len(c) for c in columns}) > 1:
        raise ProgramRaise(ValueError("zip() arguments have different lengths"))
    return list(zip(*columns, strict=False))


async def _map(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    _no_kwargs("map", kwargs)
    fn, columns = args[0], [await _items_of(ev, a) for a in args[1:]]
    rows = list(zip(*columns, strict=False))
    return [await _apply(ev, fn, list(row), node, frame, i) for i, row in enumerate(rows)]


async def _filter(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    _no_kwargs("filter", kwargs)
    fn, items = args[0], await _items_of(ev, args[1])
    kept = []
    for i, item in enumerate(items):
        verdict = item if fn is None else await _apply(ev, fn, [item], node, frame, i)
        if await ev.truth(verdict):
            kept.append(item)
    return kept


async def _any(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    async for item in ev.each(args[0]):
        if await ev.truth(item):
            return True
    return False


async def _all(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    async for item in ev.each(args[0]):
        if not await ev.truth(item):
            return False
    return True


def _plain(name: str, fn: Any, *, size_check: bool = False) -> Builtin:
    """A built-in over forced values (its arguments materialized first)."""

    async def run(
        ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
    ) -> Any:
        plain = [await ev.materialize(a) for a in args]
        named = {k: await ev.materialize(v) for k, v in kwargs.items()}
        for value in plain:
            charge_size(ev.meter, value)
        if size_check and len(plain) >= 2 and len(plain) < 3:
            estimate_binary(ast.Pow, plain[0], plain[1])
        return fn(*plain, **named)

    return Builtin(name, run)


def _typed(name: str, cls: Any, convert: Any) -> Builtin:
    async def run(
        ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
    ) -> Any:
        return await convert(ev, args, kwargs)

    return Builtin(name, run, cls)


async def _to_str(ev: Evaluator, args: list[Any], kwargs: dict[str, Any]) -> Any:
    if not args:
        return ""
    value = await ev.materialize(args[0])
    return value if isinstance(value, str) else ev.str_of(value)


async def _to_int(ev: Evaluator, args: list[Any], kwargs: dict[str, Any]) -> Any:
    plain = [await ev.materialize(a) for a in args]
    if plain and isinstance(plain[0], str):
        charge_size(ev.meter, plain[0])
    return int(*plain, **kwargs)


async def _to_float(ev: Evaluator, args: list[Any], kwargs: dict[str, Any]) -> Any:
    return float(*[await ev.materialize(a) for a in args])


async def _to_bool(ev: Evaluator, args: list[Any], kwargs: dict[str, Any]) -> Any:
    return bool(args) and await ev.truth(args[0])


async def _to_list(ev: Evaluator, args: list[Any], kwargs: dict[str, Any]) -> Any:
    return [] if not args else [copy_value(x, ev.meter) for x in await _items_of(ev, args[0])]


async def _to_tuple(ev: Evaluator, args: list[Any], kwargs: dict[str, Any]) -> Any:
    return tuple(await _to_list(ev, args, kwargs))


async def _to_set(ev: Evaluator, args: list[Any], kwargs: dict[str, Any]) -> Any:
    items = [] if not args else await _items_of(ev, args[0])
    return PSet([await ev.hashable(x) for x in items])


async def _to_dict(ev: Evaluator, args: list[Any], kwargs: dict[str, Any]) -> Any:
    result: dict[Any, Any] = {}
    if args:
        source = await ev.force(args[0])
        if isinstance(source, dict):
            result.update(copy_value(source, ev.meter))
        else:
            for pair in await _items_of(ev, source):
                key_value = await _items_of(ev, pair)
                if len(key_value) != 2:
                    raise ProgramRaise(ValueError("dictionary update sequence element has length "
                                                  f"{len(key_value)}; 2 is required"))  # fmt: skip
                result[await ev.hashable(key_value[0])] = key_value[1]
    result.update(kwargs)
    return result


async def _fromkeys_run(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    keys = await _items_of(ev, args[0])
    value = args[1] if len(args) > 1 else None
    return {await ev.hashable(key): copy_value(value, ev.meter) for key in keys}


_fromkeys = Builtin("fromkeys", _fromkeys_run)


async def _isinstance(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    if len(args) != 2:
        raise ProgramRaise(TypeError("isinstance expected 2 arguments"))
    value = await ev.force(args[0])
    wanted = args[1] if isinstance(args[1], tuple) else (args[1],)
    classes = []
    for cls in wanted:
        if isinstance(cls, Builtin) and cls.type_ is not None:
            classes.append(cls.type_)
        elif isinstance(cls, type):
            classes.append(cls)
        else:
            raise ProgramRaise(TypeError("isinstance() arg 2 must be a type or tuple of types"))
    return isinstance(value, tuple(classes))


async def _repr(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame
) -> Any:
    return ev.repr_of(await ev.materialize(args[0]))


def _pow(*args: Any) -> Any:
    if len(args) == 2:
        estimate_binary(ast.Pow, args[0], args[1])
    return pow(*args)


def _round(*args: Any) -> Any:
    return round(*args)


BUILTINS: dict[str, Any] = {
    "len": Builtin("len", _len),
    "print": Builtin("print", _print),
    "final_answer": Builtin("final_answer", _final_answer),
    "reset": Builtin("reset", _reset),
    "sum": Builtin("sum", _sum),
    "min": Builtin("min", _min),
    "max": Builtin("max", _max),
    "sorted": Builtin("sorted", _sorted),
    "reversed": Builtin("reversed", _reversed),
    "range": Builtin("range", _range),
    "enumerate": Builtin("enumerate", _enumerate),
    "zip": Builtin("zip", _zip),
    "map": Builtin("map", _map),
    "filter": Builtin("filter", _filter),
    "any": Builtin("any", _any),
    "all": Builtin("all", _all),
    "abs": _plain("abs", abs),
    "round": _plain("round", _round),
    "divmod": _plain("divmod", divmod),
    "pow": _plain("pow", _pow),
    "str": _typed("str", str, _to_str),
    "int": _typed("int", int, _to_int),
    "float": _typed("float", float, _to_float),
    "bool": _typed("bool", bool, _to_bool),
    "list": _typed("list", list, _to_list),
    "tuple": _typed("tuple", tuple, _to_tuple),
    "set": _typed("set", PSet, _to_set),
    "dict": Builtin("dict", _typed("dict", dict, _to_dict).run, dict, {"fromkeys": _fromkeys}),
    "isinstance": Builtin("isinstance", _isinstance),
    "repr": Builtin("repr", _repr),
    **EXCEPTION_CLASSES,
}

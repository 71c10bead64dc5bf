"""Methods and attributes of values (PROTOCOL §14: "the methods of str, list and dict").

Owns which attribute of which value a program may reach: the methods of `str`, `list`,
`dict`, `tuple` and sets, a dict's keys read as attributes (`r.title` is `r["title"]`),
the fields of a `ToolError`, the members of imported modules, and the few documented
attributes of datetimes and regular-expression matches. Anything else is outside the
language, refused while running. Results that could grow are estimated first.
"""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Any, Final

from ._check import format_fields_error
from ._exceptions import OutsideLanguage, ProgramRaise, ToolError
from ._expressions import charge_size, check_spec
from ._values import Builtin, Module, PSet, check_size, copy_value, size_of

if TYPE_CHECKING:
    from ._expressions import Expressions as Evaluator

__all__ = ["attribute_of", "call_method"]

_STR_METHODS: Final = frozenset(
    {
        "capitalize", "casefold", "center", "count", "endswith", "expandtabs", "find",
        "format", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit",
        "isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle",
        "isupper", "join", "ljust", "lower", "lstrip", "partition", "removeprefix",
        "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
        "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title",
        "upper", "zfill",
    }
)  # fmt: skip
_LIST_METHODS: Final = frozenset(
    {"append", "extend", "insert", "pop", "remove", "clear", "index", "count", "sort",
     "reverse", "copy"}
)  # fmt: skip
_DICT_METHODS: Final = frozenset(
    {"get", "keys", "values", "items", "pop", "popitem", "update", "setdefault", "clear",
     "copy"}
)  # fmt: skip
_SET_METHODS: Final = frozenset(
    {"add", "discard", "remove", "pop", "clear", "update", "union", "intersection",
     "difference", "symmetric_difference", "issubset", "issuperset", "isdisjoint", "copy"}
)  # fmt: skip
_DATE_ATTRIBUTES: Final = frozenset(
    {
        "year", "month", "day", "hour", "minute", "second", "microsecond", "tzinfo",
        "isoformat", "strftime", "weekday", "isoweekday", "date", "time", "replace",
        "timestamp", "days", "seconds", "microseconds", "total_seconds", "astimezone",
        "utcoffset", "isocalendar", "toordinal",
    }
)  # fmt: skip
_MATCH_ATTRIBUTES: Final = frozenset(
    {"group", "groups", "groupdict", "start", "end", "span", "string"}
)
_PATTERN_ATTRIBUTES: Final = frozenset(
    {"search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split", "pattern"}
)
_DATA_ATTRIBUTES: Final = frozenset(
    {"year", "month", "day", "hour", "minute", "second", "microsecond", "tzinfo", "days",
     "seconds", "microseconds", "string", "pattern"}
)  # fmt: skip
_ERROR_ATTRIBUTES: Final = frozenset({"args", "message", "type", "status", "call_id"})
_PADDING: Final = frozenset({"center", "ljust", "rjust", "zfill"})


def attribute_of(value: Any, name: str) -> Any:
    """`value.name` as the language allows it."""
    if name.startswith("_"):
        raise OutsideLanguage(f"the attribute {name!r} is outside the language")
    if isinstance(value, Module):
        if name not in value.members:
            raise ProgramRaise(AttributeError(f"module {value.name!r} has no attribute {name!r}"))
        return value.members[name]
    if isinstance(value, Builtin):
        from ._modules import class_member

        return class_member(value, name)
    if isinstance(value, dict) and name not in _DICT_METHODS:
        if name not in value:
            raise ProgramRaise(KeyError(name))
        return value[name]  # §14: an attribute read on a dict reads the key
    if isinstance(value, BaseException):
        if name not in _ERROR_ATTRIBUTES:
            raise OutsideLanguage(f"the attribute {name!r} of an exception is outside the language")
        if name != "args" and not isinstance(value, ToolError):
            # A ToolError's own attribute read on another error: CPython's AttributeError,
            # which the program may catch (and its `finally` runs).
            kind = type(value).__name__
            raise ProgramRaise(AttributeError(f"{kind!r} object has no attribute {name!r}"))
        return getattr(value, name)
    if _allowed(value, name):
        if name in _DATA_ATTRIBUTES:
            return getattr(value, name)  # `d.year`, `m.string`: a value, not a method
        return Builtin(name, _bound(value, name))
    kind = "set" if isinstance(value, PSet) else type(value).__name__
    raise OutsideLanguage(f"the attribute {name!r} of a {kind} is outside the language")


def _allowed(value: Any, name: str) -> bool:
    if isinstance(value, str):
        return name in _STR_METHODS
    if isinstance(value, list):
        return name in _LIST_METHODS
    if isinstance(value, dict):
        return name in _DICT_METHODS
    if isinstance(value, tuple):
        return name in ("count", "index")
    if isinstance(value, PSet):
        return name in _SET_METHODS
    if isinstance(value, _dt.date | _dt.time | _dt.timedelta | _dt.timezone):
        return name in _DATE_ATTRIBUTES
    if type(value).__name__ == "_Match":
        return name in _MATCH_ATTRIBUTES
    if type(value).__name__ == "_Regexp":
        return name in _PATTERN_ATTRIBUTES
    if isinstance(value, float):
        return name == "is_integer"
    if isinstance(value, int):
        return name == "bit_length"
    return False


def _bound(receiver: Any, name: str) -> Any:
    async def run(
        ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: Any, frame: Any
    ) -> Any:
        return await call_method(ev, receiver, name, args, kwargs)

    return run


async def call_method(
    ev: Evaluator, receiver: Any, name: str, args: list[Any], kwargs: dict[str, Any]
) -> Any:
    """`receiver.name(*args, **kwargs)`: the receiver is the value in its place (a
    mutation changes it), the arguments are copies."""
    if isinstance(receiver, dict) and name not in _DICT_METHODS:
        target = attribute_of(receiver, name)
        return await ev.call_value(target, args, kwargs, None, None)
    member = attribute_of(receiver, name)
    if not isinstance(member, Builtin) or isinstance(receiver, Module):
        return await ev.call_value(member, args, kwargs, None, None)
    if isinstance(receiver, list):
        return await _list_method(ev, receiver, name, args, kwargs)
    if isinstance(receiver, dict):
        return await _dict_method(ev, receiver, name, args, kwargs)
    if isinstance(receiver, PSet):
        return await _set_method(ev, receiver, name, args)
    if isinstance(receiver, str) and name == "join" and len(args) == 1:
        args = [await ev.iterate_all(args[0])]
    plain = [await ev.materialize(a) for a in args]
    named = {k: await ev.materialize(v) for k, v in kwargs.items()}
    if isinstance(receiver, str):
        _check_str_method(receiver, name, plain, named)
        charge_size(ev.meter, receiver)
    if name == "finditer":
        return list(getattr(receiver, name)(*plain, **named))
    return getattr(receiver, name)(*plain, **named)


def _check_str_method(text: str, name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
    """Refuse, before building, a string method result over the size limit."""
    if name in _PADDING and args and isinstance(args[0], int):
        check_size(args[0], f"str.{name}")
    elif name == "expandtabs":
        tab = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(tab, int):
            check_size(len(text) * max(tab, 1), "str.expandtabs")
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str):
        old, new = args[0], args[1]
        if isinstance(new, str):
            count = (len(text) + 1) if not old else len(text) // len(old)
            check_size(len(text) + count * len(new), "str.replace")
    elif name == "join" and args:
        items = args[0]
        if isinstance(items, list | tuple):
            check_size(size_of(items) + len(text) * len(items), "str.join")
    elif name == "format":
        problem = format_fields_error(text)
        if problem:
            raise OutsideLanguage(f"{problem}: outside the language")
        check_spec(text)
        check_size(len(text) + sum(size_of(a) for a in [*args, *kwargs.values()]), "str.format")


async def _list_method(
    ev: Evaluator, items: list[Any], name: str, args: list[Any], kwargs: dict[str, Any]
) -> Any:
    ev.meter.charge()
    if name == "append":
        items.append(args[0] if len(args) == 1 else _arity("append", 1))
        return None
    if name == "extend":
        more = await ev.iterate_all(args[0])
        check_size(size_of(items) + size_of(more), "list.extend")
        items.extend(copy_value(more, ev.meter))
        return None
    if name == "insert":
        items.insert(await ev.force(args[0]), args[1])
        return None
    if name == "pop":
        return items.pop(*[await ev.force(a) for a in args])
    if name == "copy":
        return copy_value(items, ev.meter)
    if name == "clear":
        items.clear()
        return None
    if name == "reverse":
        items.reverse()
        return None
    if name == "sort":
        from ._builtins import sort_items

        for i, item in enumerate(items):
            items[i] = await ev.materialize(item)
        items[:] = await sort_items(ev, items, kwargs, None, None)
        return None
    await ev.materialize(items)
    charge_size(ev.meter, items)
    plain = [await ev.materialize(a) for a in args]
    return getattr(items, name)(*plain)


def _arity(name: str, count: int) -> Any:
    raise ProgramRaise(TypeError(f"{name}() takes exactly {count} argument"))


async def _dict_method(
    ev: Evaluator, mapping: dict[Any, Any], name: str, args: list[Any], kwargs: dict[str, Any]
) -> Any:
    ev.meter.charge()
    if name in ("keys", "values", "items"):
        charge_size(ev.meter, mapping)
        return list(getattr(mapping, name)())
    if name == "update":
        from ._builtins import BUILTINS

        other = await BUILTINS["dict"].run(ev, args, kwargs, None, None)
        mapping.update(other)
        return None
    if name == "copy":
        return copy_value(mapping, ev.meter)
    if name == "clear":
        mapping.clear()
        return None
    keys = [await ev.hashable(args[0])] if args else []
    rest = list(args[1:])
    if name == "get":
        return mapping.get(*keys, *rest)
    if name == "pop":
        return mapping.pop(*keys, *rest)
    if name == "setdefault":
        return mapping.setdefault(*keys, *rest)
    return mapping.popitem()


async def _set_method(ev: Evaluator, items: PSet, name: str, args: list[Any]) -> Any:
    ev.meter.charge(1 + len(items))
    if name in ("add", "discard", "remove") and len(args) != 1:
        raise ProgramRaise(TypeError(f"set.{name}() takes exactly one argument"))
    if name == "add":
        items.items[await ev.hashable(args[0])] = None
        return None
    if name in ("discard", "remove"):
        key = await ev.hashable(args[0])
        if name == "remove" and key not in items.items:
            raise ProgramRaise(KeyError(key))
        items.items.pop(key, None)
        return None
    if name == "pop":
        if not items.items:
            raise ProgramRaise(KeyError("pop from an empty set"))
        first = next(iter(items.items))
        del items.items[first]
        return first
    if name == "clear":
        items.items.clear()
        return None
    if name == "copy":
        return PSet(items.items)
    others = [PSet([await ev.hashable(x) for x in await ev.iterate_all(a)]) for a in args]
    if name == "update":
        for other in others:
            items.items.update(other.items)
        return None
    result: Any = items
    for other in others:
        result = _set_binary(name, result, other)
    return result


def _set_binary(name: str, left: PSet, right: PSet) -> Any:
    if name == "union":
        return left | right
    if name == "intersection":
        return left & right
    if name == "difference":
        return left - right
    if name == "symmetric_difference":
        return left ^ right
    if name == "issubset":
        return left <= right
    if name == "issuperset":
        return left >= right
    return not (left & right).items

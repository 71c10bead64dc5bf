"""The modules a program may import (PROTOCOL §14): asyncio, json, math, re, datetime.

Owns what each gives: `asyncio.gather` (the evaluator runs it), `json.dumps`/`loads`,
`math` (sizes of factorials and powers estimated first), `re` on RE2, the linear-time
engine tool schemas use (no backreferences or lookaround), and `datetime`'s four classes
without a clock (`now`, `today` are refused: a program is deterministic). Nothing here
imports a module of the program's choosing: the names are fixed.
"""

from __future__ import annotations

import ast
import datetime as _dt
import functools
import json
import math
from typing import TYPE_CHECKING, Any, Final

from ._check import ALLOWED_IMPORTS
from ._exceptions import OutsideLanguage, ProgramRaise
from ._expressions import charge_size, estimate_binary
from ._values import Builtin, Module, check_size, size_of

if TYPE_CHECKING:
    from ._expressions import Expressions as Evaluator

__all__ = ["GATHER", "class_member", "module_named"]

_ARGS_BEFORE_FLAGS: Final = {"sub": 3, "subn": 3, "split": 2}  # others: (string, flags)
_FLAGS: Final = {"IGNORECASE": 2, "I": 2, "MULTILINE": 8, "M": 8, "DOTALL": 16, "S": 16}


def _plain(name: str, fn: Any) -> Builtin:
    async def run(
        ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: Any, frame: Any
    ) -> Any:
        plain = [await ev.materialize(a) for a in args]
        named = {k: await ev.materialize(v) for k, v in kwargs.items()}
        for value in plain:
            charge_size(ev.meter, value)
        return fn(*plain, **named)

    return Builtin(name, run)


async def _gather_placeholder(
    ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: Any, frame: Any
) -> Any:
    raise OutsideLanguage("asyncio.gather must be called directly")


GATHER: Final = Builtin("gather", _gather_placeholder)


# -- json --------------------------------------------------------------------------------------


def _dumps(value: Any, **options: Any) -> str:
    allowed = {"indent", "sort_keys", "ensure_ascii", "separators", "default"}
    unknown = set(options) - allowed
    if unknown or "default" in options:
        raise ProgramRaise(TypeError(f"json.dumps() option {sorted(unknown or {'default'})[0]!r} "
                                     "is outside the language"))  # fmt: skip
    indent = options.get("indent")
    if (isinstance(indent, str) and len(indent) > 16) or (isinstance(indent, int) and indent > 16):
        raise ProgramRaise(ValueError("json.dumps() indent over 16 is refused"))
    check_size(size_of(value) * 6, "json.dumps")
    return json.dumps(value, default=_not_json, **options)


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _loads(text: Any) -> Any:
    if not isinstance(text, str):
        raise ProgramRaise(TypeError("json.loads() takes a string"))
    return json.loads(text)


# -- math --------------------------------------------------------------------------------------


def _factorial(n: Any) -> Any:
    if isinstance(n, int) and n > 10:
        check_size(n * math.log2(n) / 8, "math.factorial")
    return math.factorial(n)


def _comb_perm(fn: Any, name: str) -> Any:
    def run(n: Any, k: Any = None) -> Any:
        if isinstance(n, int) and n > 10:
            check_size(n * math.log2(n) / 8, f"math.{name}")
        return fn(n) if k is None else fn(n, k)

    return run


def _math_pow(x: Any, y: Any) -> Any:
    return math.pow(x, y)


def _prod(items: Any, start: Any = 1) -> Any:
    total = start
    for item in items:
        estimate_binary(ast.Mult, total, item)
        total *= item
    return total


def _math_module() -> Module:
    members: dict[str, Any] = {}
    special = {
        "factorial": _factorial,
        "comb": _comb_perm(math.comb, "comb"),
        "perm": _comb_perm(math.perm, "perm"),
        "pow": _math_pow,
        "prod": _prod,
    }
    for name in ALLOWED_IMPORTS["math"]:
        fn = special.get(name, getattr(math, name))
        members[name] = fn if isinstance(fn, float) else _plain(name, fn)
    return Module("math", members)


# -- re on RE2 ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)  # thread-safe; patterns of programs, compiled once
def _compile(pattern: str, flags: int) -> Any:
    import re2  # type: ignore[import-untyped]

    prefix = "".join(letter for bit, letter in ((2, "i"), (8, "m"), (16, "s")) if flags & bit)
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(f"(?{prefix}){pattern}" if prefix else pattern, options)
    except re2.error as error:
        reason = error.args[0] if error.args else error
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        return ValueError(
            f"the pattern {pattern!r} is refused ({reason}): re runs on a linear-time "
            "engine, without backreferences or lookaround"
        )


def _pattern(pattern: Any, flags: Any = 0) -> Any:
    if not isinstance(pattern, str):
        if type(pattern).__name__ == "_Regexp":
            return pattern
        raise ProgramRaise(TypeError("a pattern must be a string"))
    compiled = _compile(pattern, int(flags))
    if isinstance(compiled, ValueError):
        raise ProgramRaise(compiled)
    return compiled


def _re_function(name: str) -> Any:
    before_flags = _ARGS_BEFORE_FLAGS.get(name, 1)

    def run(pattern: Any, *args: Any, flags: int = 0, **kwargs: Any) -> Any:
        if len(args) > before_flags:  # `re.findall(p, s, re.I)`: flags given by position
            args, flags = args[:before_flags], args[before_flags]
        compiled = _pattern(pattern, flags)
        if name in ("sub", "subn") and args and not isinstance(args[0], str):
            raise ProgramRaise(TypeError(f"re.{name}() takes a string replacement here"))
        if name in ("sub", "subn") and len(args) >= 2:
            check_size(len(args[1]) * (len(args[0]) + 1) + len(args[1]), f"re.{name}")
        result = getattr(compiled, name)(*args, **kwargs)
        return list(result) if name == "finditer" else result

    return run


def _re_module() -> Module:
    import re2

    members: dict[str, Any] = {name: _plain(name, _re_function(name)) for name in (
        "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split")}  # fmt: skip
    members["compile"] = _plain("compile", _pattern)
    members["escape"] = _plain("escape", re2.escape)
    members.update(_FLAGS)
    return Module("re", members)


# -- datetime -----------------------------------------------------------------------------------

_CLOCK: Final = frozenset({"now", "today", "utcnow", "fromtimestamp", "utcfromtimestamp"})


def _class(name: str, cls: Any, members: dict[str, Any]) -> Builtin:
    """A datetime class: callable, an `isinstance` type, with its class members
    (`datetime.fromisoformat`, `timezone.utc`)."""

    async def run(
        ev: Evaluator, args: list[Any], kwargs: dict[str, Any], node: Any, frame: Any
    ) -> Any:
        plain = [await ev.materialize(a) for a in args]
        named = {k: await ev.materialize(v) for k, v in kwargs.items()}
        return cls(*plain, **named)

    return Builtin(name, run, cls, members)


def class_member(value: Builtin, name: str) -> Any:
    """`datetime.datetime.fromisoformat` and the like, or refused."""
    if name in _CLOCK:
        raise OutsideLanguage(f"{value.name}.{name}() reads a clock: a program has none")
    if name not in value.members:
        raise OutsideLanguage(f"the attribute {name!r} of {value.name} is outside the language")
    return value.members[name]


def _datetime_module() -> Module:
    date_members = {"fromisoformat": _plain("fromisoformat", _dt.date.fromisoformat),
                    "min": _dt.date.min, "max": _dt.date.max}  # fmt: skip
    datetime_members = {
        "fromisoformat": _plain("fromisoformat", _dt.datetime.fromisoformat),
        "strptime": _plain("strptime", _dt.datetime.strptime),
        "combine": _plain("combine", _dt.datetime.combine),
        "min": _dt.datetime.min,
        "max": _dt.datetime.max,
    }
    members = {
        "date": _class("date", _dt.date, date_members),
        "datetime": _class("datetime", _dt.datetime, datetime_members),
        "timedelta": _class("timedelta", _dt.timedelta, {}),
        "timezone": _class("timezone", _dt.timezone, {"utc": _dt.UTC}),
    }
    return Module("datetime", members)


@functools.cache  # five fixed modules, built once
def module_named(name: str) -> Module:
    """The module `import name` gives (the checker allowed only these names)."""
    if name == "asyncio":
        return Module("asyncio", {"gather": GATHER})
    if name == "json":
        return Module("json", {"dumps": _plain("dumps", _dumps), "loads": _plain("loads", _loads)})
    if name == "math":
        return _math_module()
    if name == "re":
        return _re_module()
    if name == "datetime":
        return _datetime_module()
    raise OutsideLanguage(f"importing {name!r} is outside the language")

"""Where a name's value is found while a statement runs (PROTOCOL §14 "Names and the state").

Owns Python's scoping for programs: a helper's own names, its enclosing helpers' names
(closures), `global` and `nonlocal`, a comprehension's targets, and the module level,
where a statement reads a variable as the last earlier statement that may write it left
it (`Lookup`, the machine's side) and keeps what it stores until it commits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

from ._exceptions import ProgramRaise
from ._scope import ScopeInfo
from ._values import Meter, copy_value

__all__ = ["MISSING", "CompScope", "FunctionScope", "GlobalScope", "Scope"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


def _name_error(name: str) -> ProgramRaise:
    return ProgramRaise(NameError(f"name {name!r} is not defined"))


class Scope(Protocol):
    async def load(self, name: str) -> Any: ...
    def store(self, name: str, value: Any) -> None: ...
    async def delete(self, name: str) -> None: ...


class GlobalScope:
    """The module level as one statement sees it.

    `own` holds what this statement stored (its writes, uncommitted until it commits),
    `deleted` what it deleted; `read` caches a copy of each variable read from before the
    statement, so a mutation through the name (`x.append(1)`) changes this statement's
    copy only. `fallback` gives names that are no variable (built-ins, modules).
    """

    def __init__(
        self,
        earlier: Callable[[str], Awaitable[Any]],
        fallback: Callable[[str], Any],
        meter: Meter,
    ) -> None:
        self._earlier = earlier
        self._fallback = fallback
        self._meter = meter
        self.own: dict[str, Any] = {}
        self.deleted: set[str] = set()
        self.read: dict[str, Any] = {}

    async def load(self, name: str) -> Any:
        if name in self.own:
            return self.own[name]
        if name in self.deleted:
            raise _name_error(name)
        if name in self.read:
            return self.read[name]
        value = await self._earlier(name)
        if value is MISSING:
            value = self._fallback(name)
            if value is MISSING:
                raise _name_error(name)
            return value
        value = copy_value(value, self._meter)
        self.read[name] = value
        return value

    def store(self, name: str, value: Any) -> None:
        self.own[name] = value
        self.deleted.discard(name)

    async def delete(self, name: str) -> None:
        await self.load(name)  # NameError when there is nothing to delete
        self.own.pop(name, None)
        self.read.pop(name, None)
        self.deleted.add(name)

    def value_of(self, name: str) -> Any:
        """This statement's value of a variable it may have written, or MISSING."""
        if name in self.own:
            return self.own[name]
        if name in self.deleted:
            return MISSING
        return self.read.get(name, MISSING)


class FunctionScope:
    """A helper's (or lambda's) names while one call of it runs. `parent` is the scope
    of the helper it was defined in (a closure), or the module level."""

    def __init__(self, info: ScopeInfo, parent: Scope, module: Scope) -> None:
        self.info = info
        self.parent = parent
        self.module = module
        self.vars: dict[str, Any] = {}

    async def load(self, name: str) -> Any:
        if name in self.info.globals:
            return await self.module.load(name)
        if name in self.info.locals:
            if name in self.vars:
                return self.vars[name]
            raise ProgramRaise(NameError(f"local variable {name!r} referenced before assignment"))
        return await self.parent.load(name)

    def owner_of(self, name: str) -> Scope:
        """The scope a store to `name` from here goes to."""
        if name in self.info.globals:
            return self.module
        if name in self.info.nonlocals:
            scope = self.parent
            while isinstance(scope, FunctionScope | CompScope):
                if isinstance(scope, FunctionScope) and name in scope.info.locals:
                    return scope
                scope = scope.parent
            return self.module
        return self

    def store(self, name: str, value: Any) -> None:
        owner = self.owner_of(name)
        if owner is self:
            self.vars[name] = value
        else:
            owner.store(name, value)

    async def delete(self, name: str) -> None:
        owner = self.owner_of(name)
        if owner is not self:
            await owner.delete(name)
            return
        if name not in self.vars:
            raise _name_error(name)
        del self.vars[name]


class CompScope:
    """A comprehension's names: its `for` targets are its own; a walrus inside it binds
    in the scope around it (as in Python)."""

    def __init__(self, info: ScopeInfo, parent: Scope) -> None:
        self.info = info
        self.parent = parent
        self.vars: dict[str, Any] = {}

    async def load(self, name: str) -> Any:
        if name in self.info.locals:
            if name in self.vars:
                return self.vars[name]
            raise _name_error(name)
        return await self.parent.load(name)

    def store(self, name: str, value: Any) -> None:
        if name in self.info.locals:
            self.vars[name] = value
        else:
            self.parent.store(name, value)

    def bind(self, name: str, value: Any) -> None:
        self.vars[name] = value

    async def delete(self, name: str) -> None:
        await self.parent.delete(name)

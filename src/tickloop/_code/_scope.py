"""What a program's text says before it runs: call sites, scopes, and may-write sets.

Owns the static facts the machine and the evaluator rely on (PROTOCOL §14 "Call ids",
"Names and the state"): the numbering of call sites in evaluation order, which names a
helper or a comprehension binds locally, and the conservative set of variables a
top-level statement may write (stores, `del`, mutations through a name, and the effects
of any helper it may call). Writes are over-approximated, never under: a later statement
that reads a name waits for every earlier statement that may write it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

__all__ = [
    "BUILTIN_NAMES",
    "FUNCTION_TAKING",
    "MUTATING_METHODS",
    "ScopeInfo",
    "Sites",
    "helper_effects",
    "loop_depths",
    "may_call_helper",
    "may_end",
    "may_write",
    "scope_info",
]

#: Built-ins of §14 that never make a call themselves.
BUILTIN_NAMES: Final = frozenset(
    {
        "len", "sum", "min", "max", "sorted", "reversed", "range", "enumerate", "zip",
        "map", "filter", "any", "all", "abs", "round", "divmod", "pow", "str", "int",
        "float", "bool", "list", "dict", "set", "tuple", "isinstance", "repr", "print",
        "final_answer", "reset", "ToolError", "Exception", "ValueError", "TypeError",
        "KeyError", "IndexError", "ZeroDivisionError", "AssertionError", "RuntimeError",
        "NameError", "task_input",
    }
)  # fmt: skip
#: Built-ins that call what they are given: a site when given a lambda or a helper.
FUNCTION_TAKING: Final = frozenset({"map", "filter", "sorted", "min", "max"})
#: Methods that change the value they are called on (a may-write of its name).
MUTATING_METHODS: Final = frozenset(
    {
        "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
        "update", "setdefault", "popitem", "add", "discard", "difference_update",
        "intersection_update", "symmetric_difference_update",
    }
)  # fmt: skip
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


# -- call sites ---------------------------------------------------------------------------------


def _is_site(call: ast.Call) -> bool:
    """Whether a call expression can make a tool call (§14: calls of tools, helpers, and
    built-ins given a lambda or a helper)."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return False  # methods and module functions make no call of their own
    if not isinstance(func, ast.Name):
        return True  # `fs[0](x)`, `make()(x)`, `(lambda: f())()`
    if func.id not in BUILTIN_NAMES:
        return True
    if func.id not in FUNCTION_TAKING:
        return False
    given = [*call.args, *(k.value for k in call.keywords)]
    return any(_is_function_like(arg) for arg in given)


def _is_function_like(node: ast.expr) -> bool:
    if isinstance(node, ast.Starred):
        node = node.value
    if isinstance(node, ast.Lambda):
        return True
    return isinstance(node, ast.Name) and node.id not in BUILTIN_NAMES


def _in_evaluation_order(node: ast.AST) -> Iterator[ast.AST]:
    """A node's children in the order CPython evaluates them (arguments before the call
    that receives them; a comprehension's iterable before its element)."""
    if isinstance(node, ast.Assign):
        yield node.value
        yield from node.targets
    elif isinstance(node, ast.AnnAssign):
        if node.value is not None:
            yield node.value
        yield node.target
    elif isinstance(node, ast.IfExp):
        yield from (node.test, node.body, node.orelse)
    elif isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            if key is not None:
                yield key
            yield value
    elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
        yield from node.generators
        yield node.elt
    elif isinstance(node, ast.DictComp):
        yield from node.generators
        yield from (node.key, node.value)
    elif isinstance(node, ast.comprehension):
        yield from (node.iter, node.target, *node.ifs)
    elif isinstance(node, ast.For):
        yield from (node.iter, node.target, *node.body, *node.orelse)
    elif isinstance(node, ast.NamedExpr):
        yield from (node.value, node.target)
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        yield from node.args.defaults
        yield from (d for d in node.args.kw_defaults if d is not None)
        yield from node.body if isinstance(node.body, list) else [node.body]
    else:
        yield from ast.iter_child_nodes(node)


def loop_depths(tree: ast.AST) -> Iterator[tuple[ast.Call, int]]:
    """Each call expression outside helper and lambda bodies (whose calls are made one
    frame down, §14), with how many loop indexes its call id has: one for each enclosing
    `for` body or `while` loop (its test too), one for each comprehension `for` clause
    whose items it is evaluated for. A loop's or a comprehension's first iterable is
    evaluated once, outside."""
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, ast.Call):
            yield node, depth
        stack.extend(reversed(list(_children_with_depth(node, depth))))


def _children_with_depth(node: ast.AST, depth: int) -> Iterator[tuple[ast.AST, int]]:
    if isinstance(node, ast.For):
        yield node.iter, depth
        yield from ((child, depth + 1) for child in (node.target, *node.body))
        yield from ((child, depth) for child in node.orelse)
    elif isinstance(node, ast.While):
        yield from ((child, depth + 1) for child in (node.test, *node.body))
        yield from ((child, depth) for child in node.orelse)
    elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
        generators = node.generators
        yield generators[0].iter, depth
        for level, clause in enumerate(generators):
            inside = depth + level + 1
            yield from ((child, inside) for child in (clause.target, *clause.ifs))
            if level + 1 < len(generators):
                yield generators[level + 1].iter, inside
        last = depth + len(generators)
        elements = (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)
        yield from ((child, last) for child in elements)
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        yield from ((default, depth) for default in node.args.defaults)
        yield from ((d, depth) for d in node.args.kw_defaults if d is not None)
        if not isinstance(node, ast.Lambda):
            yield from ((decorator, depth) for decorator in node.decorator_list)
    else:
        yield from ((child, depth) for child in ast.iter_child_nodes(node))


class Sites:
    """The call sites of a program: site numbers by node, in source order (§14).

    Numbers continue from statement to statement of one program, so a site is the same
    whenever the statement runs. Nodes are looked up by identity; the trees are kept
    alive by the statements that own them.
    """

    def __init__(self, start: int = 0) -> None:
        self.next = start
        self._sites: dict[int, int] = {}
        self._trees: list[ast.AST] = []  # keeps the numbered nodes alive (ids stay unique)

    def number(self, tree: ast.AST) -> None:
        self._trees.append(tree)
        stack: list[tuple[ast.AST, bool]] = [(tree, False)]
        while stack:  # post-order, iteratively: deep trees never recurse here
            node, children_done = stack.pop()
            if children_done:
                if isinstance(node, ast.Call) and _is_site(node):
                    self._sites[id(node)] = self.next
                    self.next += 1
                continue
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(list(_in_evaluation_order(node))))

    def site(self, call: ast.Call) -> int | None:
        return self._sites.get(id(call))


# -- scopes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScopeInfo:
    """The names a helper, lambda or comprehension binds itself (`locals`), and those it
    declares `global` or `nonlocal`. A name in none of them is read from outside."""

    locals: frozenset[str]
    globals: frozenset[str]
    nonlocals: frozenset[str]


_SCOPES: dict[int, tuple[ast.AST, ScopeInfo]] = {}  # id(node) -> (node, facts); bounded below
_SCOPES_MAX: Final = 4096


def scope_info(node: ast.AST) -> ScopeInfo:
    """The scope facts of a function, lambda or comprehension node (cached by identity,
    the node kept with its entry so an id is never reused while cached)."""
    found = _SCOPES.get(id(node))
    if found is not None and found[0] is node:
        return found[1]
    info = _compute_scope(node)
    if len(_SCOPES) >= _SCOPES_MAX:
        _SCOPES.clear()
    _SCOPES[id(node)] = (node, info)
    return info


def _compute_scope(node: ast.AST) -> ScopeInfo:
    bound: set[str] = set()
    declared_global: set[str] = set()
    declared_nonlocal: set[str] = set()
    if isinstance(node, _FUNCTIONS):
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None:
                bound.add(arg.arg)
        body: list[ast.AST] = list(node.body) if isinstance(node.body, list) else [node.body]
    else:  # a comprehension binds its targets; walrus binds outside it
        assert isinstance(node, _COMPREHENSIONS)
        for generator in node.generators:
            bound |= set(_target_names(generator.target))
        return ScopeInfo(frozenset(bound), frozenset(), frozenset())
    for child in _own_nodes(body):
        if isinstance(child, ast.Global):
            declared_global |= set(child.names)
        elif isinstance(child, ast.Nonlocal):
            declared_nonlocal |= set(child.names)
        elif (name := _bound_name(child)) is not None:
            bound.add(name)
    bound -= declared_global | declared_nonlocal
    return ScopeInfo(frozenset(bound), frozenset(declared_global), frozenset(declared_nonlocal))


def _own_nodes(body: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """The nodes of a scope's body, not descending into nested functions (their names
    are their own) nor comprehension targets (but a walrus in a comprehension is ours)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _FUNCTIONS):
            if not isinstance(node, ast.Lambda):
                stack.extend(node.args.defaults)
            continue
        if isinstance(node, _COMPREHENSIONS):
            stack.extend(n for n in ast.walk(node) if isinstance(n, ast.NamedExpr))
            continue
        stack.extend(ast.iter_child_nodes(node))


def _target_names(target: ast.AST) -> Iterator[str]:
    for node in ast.walk(target):
        if isinstance(node, ast.Name):
            yield node.id


# -- may-write sets ------------------------------------------------------------------------------


def _mutated_names(nodes: Iterable[ast.AST]) -> set[str]:
    """Names whose value a store into a part, `del` of a part, an augmented assignment
    or a mutating method may change (every name the changed place is reached through)."""
    names: set[str] = set()
    for node in nodes:
        place: ast.AST | None = None
        if isinstance(node, ast.Subscript | ast.Attribute) and not isinstance(node.ctx, ast.Load):
            place = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in MUTATING_METHODS:
                place = node.func.value
        if place is not None:
            names |= {n.id for n in ast.walk(place) if isinstance(n, ast.Name)}
    return names


def may_write(tree: ast.Module, nodes: list[ast.AST] | None = None) -> set[str]:
    """The variables a top-level statement may write by itself (not counting helpers it
    calls: the machine adds their effects). `nodes`: `list(ast.walk(tree))`, if known."""
    nodes = list(ast.walk(tree)) if nodes is None else nodes
    written = set(scope_info_module(tree))
    written |= _mutated_names(nodes)
    for node in nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            written |= helper_effects(node)
    return written


def scope_info_module(tree: ast.Module) -> set[str]:
    """Names a top-level statement binds at module level."""
    return {name for node in _own_nodes(tree.body) if (name := _bound_name(node)) is not None}


def _bound_name(node: ast.AST) -> str | None:
    """The name `node` binds in the scope it belongs to (an assignment target, a `def`, an
    `except ... as`, an import, a `:=`), or None when it binds none."""
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        return node.id
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name
    if isinstance(node, ast.ExceptHandler) and node.name:
        return node.name
    if isinstance(node, ast.alias):
        return (node.asname or node.name).split(".")[0]
    if isinstance(node, ast.NamedExpr):
        return node.target.id
    return None


def helper_effects(node: ast.AST) -> set[str]:
    """Variables a helper may write when called: its `global` names, and names it
    mutates that are not its own (at any depth of nested helpers)."""
    effects: set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, _FUNCTIONS):
            info = scope_info(inner)
            body = inner.body if isinstance(inner.body, list) else [inner.body]
            mutated = _mutated_names(n for b in body for n in ast.walk(b))
            effects |= set(info.globals) | (mutated - set(info.locals))
    return effects


def may_call_helper(
    tree: ast.AST, tools: Iterable[str], nodes: list[ast.AST] | None = None
) -> bool:
    """Whether a statement may run a helper (then every helper's effects are its own)."""
    known = BUILTIN_NAMES | set(tools)
    for node in ast.walk(tree) if nodes is None else nodes:
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id not in known:
                return True
            if not isinstance(func, ast.Name | ast.Attribute):
                return True
            if isinstance(func, ast.Name) and _is_site(node) and func.id in FUNCTION_TAKING:
                return True
    return False


def may_end(tree: ast.AST, nodes: list[ast.AST] | None = None) -> bool:
    """Whether a statement itself may end the program (`final_answer`, `reset`, or a
    top-level `return`); a helper it calls may too (the machine asks each helper)."""
    for node in ast.walk(tree) if nodes is None else nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("final_answer", "reset"):
                return True
    return any(isinstance(node, ast.Return) for node in _own_nodes(getattr(tree, "body", [])))

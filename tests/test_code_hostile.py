"""Hostile programs (PROTOCOL §14 "The language", "Limits"): each is a clear error —
`tl.CodeError` before anything runs, or an Error Message naming the limit — bounded in
memory (tracemalloc, ru_maxrss) and time (a generous alarm guards against a hang; no
wall-clock assert), and nothing outside the language is ever executed."""

from __future__ import annotations

import resource
import signal
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tickloop as tl
from tickloop._code import CodeTool, Globals, Limits, MakeCall, ProgramMachine, split_statements

GUARD_SECONDS = 120  # a hang fails the test instead of blocking the suite


@pytest.fixture(autouse=True)
def _guard() -> Iterator[None]:
    def hang(signum: int, frame: Any) -> None:
        raise TimeoutError(f"a hostile program ran for more than {GUARD_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(GUARD_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@tl.tool(read_only=True)
def ping(x: int) -> int:
    """Echo a number."""
    return x


def program_error(source: str) -> dict[str, Any]:
    """Run a program with `tl.run_program`; return the Error Message that ended it."""
    result = tl.run_program(source, tools=[ping])
    ended = [e["data"]["error"] for e in result.errors if e["data"].get("call") is None]
    assert len(ended) == 1, f"expected the program to end with an error: {result.errors}"
    return dict(ended[0])


def machine_outcome(source: str, limits: Limits | None = None) -> Any:
    """Drive the sans-IO machine alone (calls answered at once); return its outcome."""
    machine = ProgramMachine(
        iteration=1,
        tools={"ping": CodeTool("ping", "ping", ("x",), {}, read_only=True)},
        globals=Globals(),
        limits=limits or Limits(),
    )
    for statement in split_statements(source):
        machine.add_statement(statement)
    machine.close()
    while not machine.finished:
        for action in machine.step():
            if isinstance(action, MakeCall):
                machine.call_finished(action.call_id, action.params["x"])
    return machine.outcome()


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- outside the language: refused before anything runs ----------------------------------


def _writes(path: Path) -> dict[str, str]:
    return {
        "import os": f"import os\nos.system('touch {path}')\n",
        "from os import": f"from os import system\nsystem('touch {path}')\n",
        "__import__": f"__import__('os').system('touch {path}')\n",
        "importlib": f"import importlib\nimportlib.import_module('os').remove('{path}')\n",
        "open": f"open('{path}', 'w').write('x')\n",
        "getattr": f"getattr(ping, '__globals__')['open']('{path}', 'w')\n",
        "class walk": "x = ().__class__.__bases__[0].__subclasses__()\n",
        "__dict__": "x = {}\ny = x.__dict__\n",
        "format walk": "y = '{0.__class__.__init__.__globals__}'.format(ping)\n",
        "f-string walk": "x = 1\ny = f'{x!r:{x.__class__}}'\n",
        "lambda globals": "f = lambda: 0\ng = f.__globals__\n",
        "class": "class A:\n    pass\n",
        "with": "with ping(1) as x:\n    pass\n",
        "yield": "def g():\n    yield 1\n",
        "nested parens": "x = " + "(" * 1000 + "1" + ")" * 1000 + "\n",
        "nested lists": "x = " + "[" * 1000 + "]" * 1000 + "\n",
    }


@pytest.mark.parametrize("case", list(_writes(Path("/x"))))
def test_a_program_outside_the_language_is_refused_and_nothing_runs(
    case: str, tmp_path: Path
) -> None:
    target = tmp_path / "pwned"
    source = "a = ping(1)\n" + _writes(target)[case]
    with pytest.raises(tl.CodeError) as error:
        tl.compile_program(source, tools=[ping])
    assert error.value.line is not None and error.value.line >= 2
    assert str(error.value).startswith(f"line {error.value.line}:")
    with pytest.raises(tl.CodeError):
        tl.run_program(source, tools=[ping])  # refused before the first call is made
    assert not target.exists()


@pytest.mark.parametrize(
    "source",
    [
        "f = '{0.__class__.__init__.__globals__}'\ny = f.format(1)\nprint(y)\n",
        "f = '{0[0]}'\ny = f.format([1])\nprint(y)\n",
    ],
    ids=["attribute", "item"],
)
def test_a_format_string_built_at_run_time_cannot_walk_attributes(source: str) -> None:
    error = program_error(source)
    assert error["line"] == 2
    assert "format field" in error["message"] and "outside the language" in error["message"]
    result = tl.run_program(source, tools=[ping])
    assert result.printed == {1: []}  # the print after it never ran


# -- limits: refused before the value is built ---------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "x = 'a' * 10**10\n",
        "x = 10**10**10\n",
        "x = [0] * 10**9\n",
        "x = 2**10**8\n",
        "x = 'ab' * 6_000_000\n",
    ],
)
def test_a_huge_value_is_refused_before_it_is_built(source: str) -> None:
    tracemalloc.start()
    try:
        outcome = machine_outcome(source)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert outcome.kind == "error" and outcome.error["type"] == "limit"
    assert "10 MB" in outcome.error["message"] and outcome.error["line"] == 1
    assert peak < 20 * 2**20  # never built: far below the value it would have been
    error = program_error(source)
    assert "10 MB" in error["message"] and error["line"] == 1


@pytest.mark.parametrize(
    "source",
    [
        "s = 'a'\nwhile True:\n    s = s + s\n",
        "s = [1]\nwhile True:\n    s = s + s\n",
        "s = [1]\nwhile True:\n    s.extend(s)\n",
        "x = 3\nwhile True:\n    x = x * x\n",
    ],
    ids=["string", "list", "extend", "integer"],
)
def test_a_value_growing_in_a_loop_stops_at_a_limit(source: str) -> None:
    before = rss_mb()
    outcome = machine_outcome(source)
    assert outcome.kind == "error" and outcome.error["type"] == "limit"
    assert "10 MB" in outcome.error["message"] or "max_steps" in outcome.error["message"]
    assert rss_mb() - before < 200


# -- limits: time, depth, size -------------------------------------------------------------


def test_an_infinite_loop_ends_at_max_steps_in_the_machine() -> None:
    outcome = machine_outcome("x = ping(1)\nwhile True:\n    pass\n")
    assert outcome.kind == "error" and outcome.error["type"] == "limit"
    assert "max_steps" in outcome.error["message"] and outcome.error["line"] in (2, 3)


def test_an_infinite_loop_ends_at_a_limit_through_run_program() -> None:
    error = program_error("x = ping(1)\nwhile True:\n    pass\n")
    assert error["line"] in (2, 3)  # the loop's line or its body's
    assert "max_eval_seconds" in error["message"] or "max_steps" in error["message"]


def test_deep_recursion_ends_at_helper_depth() -> None:
    source = "def f(n):\n    return f(n + 1)\nf(0)\n"
    outcome = machine_outcome(source)
    assert outcome.kind == "error" and outcome.error["type"] == "limit"
    assert "100 levels" in outcome.error["message"]
    assert "100 levels" in program_error(source)["message"]


def test_recursion_through_a_builtin_key_ends_at_helper_depth() -> None:
    outcome = machine_outcome("def f(x):\n    return sorted([1, 2], key=f)\nf(1)\n")
    assert outcome.kind == "error" and "100 levels" in outcome.error["message"]


def test_ten_thousand_calls_end_at_max_calls() -> None:
    source = "".join(f"a{i} = ping({i})\n" for i in range(10_000))
    before = rss_mb()
    outcome = machine_outcome(source)
    assert outcome.kind == "error" and outcome.error["type"] == "limit"
    assert "max_calls=1000" in outcome.error["message"]
    assert outcome.error["line"] == 1001
    assert rss_mb() - before < 300


def test_a_ten_thousand_line_program_is_bounded() -> None:
    """Plain statements: it finishes, or stops at max_eval_seconds; either way bounded."""
    source = "x = 0\n" + "x += 1\n" * 10_000
    assert len(tl.compile_program(source)) == 10_001
    before = rss_mb()
    result = tl.run_program(source)
    ended = [e["data"]["error"] for e in result.errors if e["data"].get("call") is None]
    if ended:
        assert "max_eval_seconds" in ended[0]["message"]
    else:
        assert result.state == {"x": 10_000}
    assert rss_mb() - before < 300

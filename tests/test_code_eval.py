"""The program machine of code plans (PROTOCOL §14), driven directly: statements in,
calls finished in a chosen order, actions and the outcome out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tickloop as tl
from tickloop._code import (
    CodeTool,
    Commit,
    Globals,
    Limits,
    MakeCall,
    Printed,
    ProgramMachine,
    ProgramOutcome,
    ProgramStream,
    split_statements,
)
from tickloop._core._paths import is_call_path

TOOLS = {
    "fetch": CodeTool("fetch", "fetch", ("url",), {}, read_only=True),
    "search": CodeTool("search", "search", ("query", "limit"), {"limit": 3}, read_only=True),
    "charge": CodeTool("charge", "charge", ("customer", "cents"), {}, read_only=False),
}


def default_result(call: MakeCall) -> Any:
    """fetch(url) → url*2; search(query) → three urls; charge → receipt; "bad" fails."""
    if "bad" in str(call.params.values()):
        return RuntimeError(f"{call.tool} failed")
    if call.tool == "fetch":
        return str(call.params["url"]) * 2
    if call.tool == "search":
        return [f"{call.params['query']}-{i}" for i in range(3)]
    return {"ok": True, "cents": call.params.get("cents")}


@dataclass
class Run:
    machine: ProgramMachine
    actions: list[Any] = field(default_factory=list)
    waves: list[list[str]] = field(default_factory=list)  # call ids made per step

    @property
    def calls(self) -> list[MakeCall]:
        return [a for a in self.actions if isinstance(a, MakeCall)]

    @property
    def ids(self) -> list[str]:
        return [c.call_id for c in self.calls]

    @property
    def commits(self) -> list[Any]:
        return [a for a in self.actions if isinstance(a, Commit | Printed)]

    @property
    def outcome(self) -> ProgramOutcome:
        return self.machine.outcome()

    @property
    def printed(self) -> list[str]:
        return [a.text for a in self.actions if isinstance(a, Printed)]

    def variables(self) -> dict[str, Any]:
        return self.machine.globals.variables


def drive(
    source: str,
    results: Callable[[MakeCall], Any] = default_result,
    *,
    pick: Callable[[list[MakeCall]], int] = lambda pending: 0,
    globals: Globals | None = None,
    limits: Limits | None = None,
    task_input: Any = None,
    iteration: int = 1,
    on_make: Callable[[MakeCall], None] = lambda call: None,
    on_end: Callable[[str], None] = lambda call_id: None,
) -> Run:
    """Run a program on the machine; `pick` chooses which running call ends next."""
    machine = ProgramMachine(
        iteration=iteration, tools=TOOLS, globals=globals or Globals(),
        task_input=task_input, limits=limits or Limits(),
    )  # fmt: skip
    for statement in split_statements(source):
        machine.add_statement(statement)
    machine.close()
    run = Run(machine)
    running: list[MakeCall] = []
    for _ in range(100_000):
        actions = machine.step()
        run.actions += actions
        made = [a for a in actions if isinstance(a, MakeCall)]
        for call in made:
            on_make(call)
        run.waves.append([c.call_id for c in made])
        running += made
        if machine.finished:
            return run
        if not running:
            assert machine.runnable, "nothing runs and no call is running: a deadlock"
            continue  # paused after 1,000 steps
        call = running.pop(pick(running) % len(running))
        result = results(call)
        on_end(call.call_id)
        if isinstance(result, Exception):
            error = {"type": "runtime", "message": str(result), "status": "failed"}
            machine.call_finished(call.call_id, error=error)
        else:
            machine.call_finished(call.call_id, result)
    raise AssertionError("the program never finished")


def reversed_pick(pending: Sequence[MakeCall]) -> int:
    return len(pending) - 1


# -- the stream -------------------------------------------------------------------------------


def test_statements_complete_as_the_answer_streams() -> None:
    stream = ProgramStream()
    seen = []
    text = "Plan:\n```python\nx = fetch('a')\nif x:\n    y = 1\nelse:\n    y = 2\nz = 3\n```\n"
    for char in text:
        seen += [(s.line, s.source) for s in stream.feed(char)]
        if char == "z":  # `if` completes when the next statement starts at column 0
            assert seen == [(1, "x = fetch('a')\n"), (2, "if x:\n    y = 1\nelse:\n    y = 2\n")]
    seen += [(s.line, s.source) for s in stream.close()]
    assert seen[-1] == (6, "z = 3\n")
    assert stream.prose == "Plan:\n"


def test_text_after_the_closing_fence_is_ignored_and_a_second_block_flagged() -> None:
    stream = ProgramStream()
    out = stream.feed("```py\na = 1\n```\nmore\n```python\nb = 2\n```\n") + stream.close()
    assert [s.source for s in out] == ["a = 1\n"]
    assert stream.second_block


def test_an_answer_without_a_fence_is_the_program_at_the_end() -> None:
    stream = ProgramStream()
    assert stream.feed("a = 1\nb = 2\n") == []  # held: a fence may still open
    assert [s.source for s in stream.close()] == ["a = 1\n", "b = 2\n"]


# -- data flow --------------------------------------------------------------------------------


def test_independent_statements_make_their_calls_in_the_same_step() -> None:
    run = drive("a = fetch('x')\nb = fetch('y')\nc = fetch(a + b)\n")
    assert run.waves[0] == ["c1.0", "c1.1"]  # both at once, c1.2 waits for a and b
    assert "c1.2" not in run.waves[0]
    assert run.variables() == {"a": "xx", "b": "yy", "c": "xxyyxxyy"}


def test_a_loop_makes_all_its_calls_at_once() -> None:
    run = drive("pages = [fetch(u) for u in ['a', 'b', 'c']]\nfor u in 'de':\n    fetch(u)\n")
    assert run.waves[0] == ["c1.0[0]", "c1.0[1]", "c1.0[2]", "c1.1[0]", "c1.1[1]"]
    assert run.variables()["pages"] == ["aa", "bb", "cc"]


def test_a_dependent_statement_waits_for_the_value_it_reads() -> None:
    run = drive("a = fetch('x')\nb = fetch(a)\n")
    assert run.waves[0] == ["c1.0"]
    assert run.waves[1] == ["c1.1"]
    assert run.calls[1].params == {"url": "xx"}


def test_storing_a_call_value_does_not_wait_for_it() -> None:
    run = drive("pages = []\nfor u in ['a', 'b']:\n    pages.append(fetch(u))\nn = len(pages)\n")
    assert run.waves[0] == ["c1.0[0]", "c1.0[1]"]
    assert run.variables() == {"pages": ["aa", "bb"], "u": "b", "n": 2}


# -- the side-effect barrier --------------------------------------------------------------------


def test_a_call_with_side_effects_waits_for_every_earlier_call_to_end_ok() -> None:
    run = drive("a = fetch('x')\ncharge(customer='c', cents=5)\nb = fetch('y')\n")
    assert run.waves[0] == ["c1.0", "c1.2"]  # the read-only call after it does not wait
    assert run.waves[1] == ["c1.1"]


def test_a_call_with_side_effects_is_never_made_after_an_uncaught_failure() -> None:
    run = drive("a = fetch('bad')\ncharge(customer='c', cents=5)\nb = fetch('y')\n")
    assert "c1.1" not in run.ids
    error = run.outcome.error
    assert error is not None and error["line"] == 1 and error["type"] == "runtime"
    assert "ToolError: fetch failed (call c1.0)" in error["message"]
    assert error["also_ran"] == ["c1.2"]  # the read-only call that had started
    assert error["text"] == "a = fetch('bad')"


def test_try_catches_a_failed_call_and_the_program_goes_on() -> None:
    source = (
        "try:\n    r = fetch('bad')\n    print('not here')\nexcept ToolError as e:\n"
        "    r = None\n    print('caught', e.call_id, e.type)\ncharge(customer='c', cents=1)\n"
    )
    run = drive(source)
    assert run.printed == ["caught c1.0 runtime"]
    assert run.outcome.kind == "none"
    assert run.variables() == {"r": None}
    assert "c1.1" in run.ids  # the barrier holds: the failure was caught


def test_inside_a_try_a_call_waits_for_the_calls_before_it_in_the_body() -> None:
    run = drive("try:\n    a = fetch('bad')\n    b = fetch('y')\nexcept ToolError:\n    b = 0\n")
    assert run.ids == ["c1.0"]  # the failure leaves the body before c1.1 is made
    assert run.variables() == {"b": 0}


def test_an_uncaught_failure_discards_later_statements() -> None:
    run = drive("print('one')\nx = fetch('bad')\nprint('two')\ny = 1\n")
    assert run.printed == ["one"]
    assert "y" not in run.variables()
    assert run.outcome.kind == "error"


def test_a_failure_in_a_dropped_value_still_raises_at_its_site() -> None:
    run = drive("fetch('bad')\nx = 1\n")
    error = run.outcome.error
    assert run.outcome.kind == "error" and error is not None and error["line"] == 1
    assert run.variables() == {}


# -- call ids ---------------------------------------------------------------------------------


def test_call_ids_for_nested_loops_helpers_and_map() -> None:
    source = (
        "def get(u):\n    return fetch(u)\n"
        "grid = [[fetch(a + b) for b in 'xy'] for a in 'pq']\n"
        "i = 0\nwhile i < 2:\n    get(str(i))\n    i += 1\n"
        "m = list(map(lambda u: fetch(u), ['s', 't']))\n"
        "srt = sorted(['b', 'a'], key=get)\n"
    )
    run = drive(source)
    assert all(is_call_path(call_id) for call_id in run.ids)
    assert sorted(run.ids) == sorted(
        ["c1.1[0][0]", "c1.1[0][1]", "c1.1[1][0]", "c1.1[1][1]", "c1.2[0]>0", "c1.2[1]>0",
         "c1.4[0]>3", "c1.4[1]>3", "c1.5[0]>0", "c1.5[1]>0"]
    )  # fmt: skip
    assert run.variables()["srt"] == ["a", "b"]
    assert run.variables()["m"] == ["ss", "tt"]


def test_call_ids_never_depend_on_timing() -> None:
    source = "xs = [fetch(u) for u in 'abc']\ny = [fetch(x) for x in xs if len(x) > 0]\n"
    first = drive(source)
    second = drive(source, pick=reversed_pick)
    assert sorted(first.ids) == sorted(second.ids)
    assert first.commits == second.commits


# -- commits in program order -------------------------------------------------------------------


PROGRAM = """
import math
results = {}
def score(text, bonus=0):
    return len(text) * 2 + bonus
for u in ['a', 'bb', 'ccc']:
    page = fetch(u)
    results[u] = score(page, bonus=1)
    print(f"{u}: {results[u]}")
hits = search('q')
texts = [fetch(h) for h in hits]
try:
    bad = fetch('bad')
except ToolError as error:
    print('failed:', error.message)
total = sum(results.values()) + len(texts)
print('total', total, math.floor(total / 3))
final_answer({"total": total, "texts": texts})
"""


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=50), min_size=30, max_size=30))
def test_commits_and_prints_are_in_program_order_under_any_finish_order(
    choices: list[int],
) -> None:
    picks = iter(choices * 10)
    run = drive(PROGRAM, pick=lambda pending: next(picks))
    reference = drive(PROGRAM)
    assert run.commits == reference.commits
    assert sorted(run.ids) == sorted(reference.ids)
    assert run.outcome == reference.outcome
    assert run.outcome.kind == "final"
    assert run.printed[:3] == ["a: 5", "bb: 9", "ccc: 13"]
    assert run.printed[3].startswith("failed: fetch failed")


# -- the end -----------------------------------------------------------------------------------


def test_final_answer_waits_for_earlier_calls_and_stops_later_ones() -> None:
    run = drive("a = fetch('x')\nfinal_answer(a)\nb = fetch('never')\n")
    assert run.ids == ["c1.0"]
    assert run.outcome.kind == "final" and run.outcome.value == "xx"


def test_the_last_expression_is_the_result() -> None:
    run = drive("x = fetch('a')\n{'x': x, 'n': len(x)}\n")
    assert run.outcome.kind == "result" and run.outcome.value == {"x": "aa", "n": 2}
    assert drive("fetch('a')\n").outcome.kind == "none"  # a tool call is no result


def test_a_top_level_return_ends_the_program_with_its_value() -> None:
    run = drive("await fetch('a')\nreturn [1, 2]\nprint('no')\n")
    assert run.outcome.kind == "final" and run.outcome.value == [1, 2]
    assert run.printed == []


def test_gather_makes_its_calls_together_and_returns_exceptions() -> None:
    source = (
        "import asyncio\n"
        "rs = await asyncio.gather(fetch('a'), fetch('bad'), return_exceptions=True)\n"
        "kinds = [isinstance(r, ToolError) for r in rs]\n"
    )
    run = drive(source)
    assert run.waves[0] == ["c1.0", "c1.1"]
    assert run.variables()["kinds"] == [False, True]


# -- globals across programs --------------------------------------------------------------------


def test_variables_helpers_and_imports_carry_to_the_next_program() -> None:
    first = drive("import math\ndef double(x):\n    return x * 2\nn = 3\n")
    carried = Globals.from_json(first.machine.globals.to_json())
    assert carried.variables == {"n": 3}
    second = drive("m = double(math.floor(n + 0.5))\n", globals=carried, iteration=2)
    assert second.variables()["m"] == 6
    third = drive("reset()\n", globals=second.machine.globals, iteration=3)
    assert third.outcome.kind == "reset"
    assert third.machine.globals.variables == {}


def test_values_are_copies_not_references() -> None:
    run = drive("a = [1]\nb = a\nb.append(2)\nc = {'k': a}\nc['k'].append(3)\n")
    assert run.variables() == {"a": [1], "b": [1, 2], "c": {"k": [1, 3]}}


def test_attribute_read_on_a_dict_reads_the_key() -> None:
    run = drive("r = {'title': 'T'}\nt = r.title\nu = r.get('title')\n")
    assert run.variables()["t"] == "T" and run.variables()["u"] == "T"


def test_a_state_commit_names_only_changed_variables() -> None:
    run = drive("x = 1\nx = 1\ny = [x]\ndel x\n")
    commits = [a for a in run.actions if isinstance(a, Commit)]
    assert [c.writes for c in commits] == [{"x": 1}, {}, {"y": [1]}, {}]
    assert commits[3].deletes == ["x"]


def test_a_failure_met_late_reruns_the_statement_strictly() -> None:
    source = "out = []\nfor u in ['a', 'bad', 'c']:\n    out.append(fetch(u))\n    print(u)\n"
    run = drive(source, pick=reversed_pick)
    assert run.waves[0] == ["c1.0[0]", "c1.0[1]", "c1.0[2]"]  # all at once, lazily
    assert run.printed == ["a"]  # as the reference: it raised at c1.0[1]
    error = run.outcome.error
    assert error is not None and error["line"] == 3
    assert error["also_ran"] == ["c1.0[2]"]
    assert run.variables() == {"out": ["aa"], "u": "bad"}  # as the reference left them


def test_a_handler_sees_the_first_failure_of_its_body_in_program_order() -> None:
    source = (
        "try:\n    a = fetch('bad1')\n    b = 1 / 0\nexcept ZeroDivisionError:\n    r = 'zero'\n"
        "except ToolError as e:\n    r = e.message\n"
    )
    run = drive(source, results=lambda c: RuntimeError(str(c.params["url"])))
    assert run.variables()["r"] == "bad1"


# -- limits: hostile programs end with a clear error, quickly -----------------------------------


def _error_of(source: str, **options: Any) -> dict[str, Any]:
    run = drive(source, **options)
    assert run.outcome.kind == "error", run.outcome
    assert run.outcome.error is not None
    return run.outcome.error


@pytest.mark.parametrize(
    ("source", "limit", "words"),
    [
        ("while True:\n    pass\n", "limit", "max_steps"),
        ("x = 'a' * 10**10\n", "limit", "10 MB"),
        ("x = 10**10**10\n", "limit", "10 MB"),
        ("x = [0] * 10**9\n", "limit", "10 MB"),
        ("x = list(range(10**9))\n", "limit", "10 MB"),
        ("x = [[1] * 1000] * 1000\n", "limit", "10 MB"),
        ("x = 'a'.ljust(10**10)\n", "limit", "10 MB"),
        ("x = f'{1:>10000000000}'\n", "limit", "10 MB"),
        ("x = 1 << 10**10\n", "limit", "10 MB"),
        ("import math\nx = math.factorial(10**8)\n", "limit", "10 MB"),
        ("s = 'ab'\nwhile True:\n    s = s + s\n", "limit", ""),
        ("x = [i for i in range(10**12)]\n", "limit", "max_steps"),
        ("a = 2**(8 * 5_000_000)\nb = a * a\n", "limit", "max_steps"),
        ("import json\nx = json.loads('[' * 100000 + ']' * 100000)\n", "limit", ""),
        ("x = []\nfor i in range(100000):\n    x = [x]\n", "limit", ""),
        ("def f(n):\n    return f(n + 1)\nf(0)\n", "limit", "deeper than 100"),
        ("x = ().__class__\n", "structural", "'__class__'"),
        ("x = {}.__class__.__subclasses__()\n", "structural", "outside the language"),
        ("x = '{0.__class__}'.format(1)\n", "structural", "format field"),
        ("t = '{0.__globals__}'\nx = t.format(1)\n", "structural", "format field"),
        ("try:\n    1/0\nexcept Exception as e:\n    t = e.__traceback__\n", "structural", ""),
        ("import os\n", "structural", "importing 'os'"),
        ("import datetime\nx = datetime.datetime.now()\n", "structural", "clock"),
        ("class A:\n    pass\n", "structural", "'class'"),
        ("with open('f') as f:\n    pass\n", "structural", "'with'"),
        ("def g():\n    yield 1\n", "structural", "'yield'"),
        ("x = getattr(1, 'real')\n", "runtime", "NameError"),
        ("import re\nx = re.search(r'(a)\\1', 'aa')\n", "runtime", "linear-time"),
        ("x = 2**70\n", "runtime", "2**63"),
    ],
)
def test_a_hostile_program_is_a_clear_error(source: str, limit: str, words: str) -> None:
    error = _error_of(source)
    assert error["type"] == limit
    assert words in error["message"]
    assert error["line"] >= 1 and error["also_ran"] == []


def test_a_limit_is_not_caught_by_try() -> None:
    error = _error_of("try:\n    x = 'a' * 10**10\nexcept Exception:\n    x = 'caught'\n")
    assert error["type"] == "limit" and error["line"] == 2


def test_max_calls_stops_the_program_at_the_statement_that_passes_it() -> None:
    error = _error_of("xs = [fetch(str(i)) for i in range(10)]\n", limits=Limits(max_calls=4))
    assert error["type"] == "limit" and "max_calls=4" in error["message"]


def test_the_machine_yields_every_thousand_steps_and_stops_for_a_driver_limit() -> None:
    machine = ProgramMachine(iteration=1, tools=TOOLS, globals=Globals())
    for statement in split_statements("while True:\n    pass\n"):
        machine.add_statement(statement)
    machine.close()
    for _ in range(5):
        before = machine.meter.steps
        machine.step()
        assert 0 < machine.meter.steps - before < 1_100
    machine.stop_for_limit("max_eval_seconds")
    assert machine.finished
    error = machine.outcome().error
    assert error is not None and "max_eval_seconds" in error["message"]


def test_deep_helpers_within_the_depth_limit_run() -> None:
    run = drive("def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\nx = f(95)\n")
    assert run.variables() == {"x": 95}


def test_a_syntax_error_ends_the_program_at_its_statement_and_earlier_ones_go_on() -> None:
    run = drive("a = fetch('x')\nb = (\nc = 1\n")
    error = run.outcome.error
    assert error is not None and error["type"] == "structural" and error["line"] == 2
    assert run.variables() == {"a": "xx"}


def test_compile_program_names_the_construct_and_a_close_match() -> None:
    with pytest.raises(tl.CodeError) as caught:
        tl.compile_program("x = 1\ny = serch(query='a')\n", tools=TOOLS)
    assert caught.value.line == 2 and caught.value.construct == "name"
    assert "'search'" in str(caught.value)
    with pytest.raises(tl.CodeError) as caught:
        tl.compile_program("import subprocess\n")
    assert caught.value.construct == "import" and isinstance(caught.value, tl.TickloopError)
    assert len(tl.compile_program("def f(x):\n    return fetch(x)\nf('a')\n", tools=TOOLS)) == 2


FAILING = """
seen = []
for u in ['a', 'b', 'c']:
    seen.append(fetch(u))
    print('got', u)
charge(customer='x', cents=len(seen))
more = [fetch(v) for v in 'de']
bad = fetch('bad')
print('never')
charge(customer='y', cents=1)
"""


def _site(call_id: str) -> int:
    """The top-level site of a call id (`c1.7[3]>1` → 7): program order in FAILING."""
    return int(call_id.split(".")[1].split("[")[0].split(">")[0])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=50), min_size=20, max_size=20))
def test_an_uncaught_failure_gives_the_same_commits_under_any_finish_order(
    choices: list[int],
) -> None:
    picks = iter(choices * 10)
    made: list[str] = []
    ended: set[str] = set()

    def check_barrier(call: MakeCall) -> None:
        if not call.read_only:  # every call before it in program order has ended
            before = [other for other in made if _site(other) < _site(call.call_id)]
            assert all(other in ended for other in before), (call.call_id, made, ended)
        made.append(call.call_id)

    run = drive(FAILING, pick=lambda p: next(picks), on_make=check_barrier, on_end=ended.add)
    reference = drive(FAILING)
    assert run.commits == reference.commits
    assert run.outcome.error is not None and run.outcome.error["line"] == 8
    assert run.printed == ["got a", "got b", "got c"]
    assert "c1.4" not in run.ids  # the charge after the failure is never made
    charge = next(c for c in run.calls if c.call_id == "c1.1")
    assert charge.params == {"customer": "x", "cents": 3}


def test_a_carried_helper_keeps_its_defaults_and_its_call_ids() -> None:
    first = drive("x = fetch('a')\ndef get(u, suffix='!'):\n    return fetch(u + suffix)\n")
    carried = Globals.from_json(first.machine.globals.to_json())
    assert set(carried.helpers) == {"get"}
    second = drive("y = get('b')\n", globals=carried, iteration=2)
    assert second.calls[0].params == {"url": "b!"}
    assert second.ids == ["c2.0>1"]  # the body's site as numbered in program 1


def test_the_allowed_modules_work_without_a_clock_and_on_re2() -> None:
    source = (
        "import json, math, re, datetime\nfrom datetime import date, timedelta\n"
        "j = json.loads(json.dumps({'a': [1, 2.5]}))\n"
        "m = [math.floor(2.7), math.gcd(12, 18), round(math.pi, 2)]\n"
        "r = re.findall(r'a+', 'aAa b AA', re.I)\n"
        "s = re.sub(r'\\s+', ' ', 'a   b')\n"
        "d = (date(2024, 3, 1) - timedelta(days=1)).isoformat()\n"
        "t = datetime.datetime.fromisoformat('2024-01-02T03:04:05').year\n"
        "k = dict.fromkeys('ab', 0)\n"
    )
    assert drive(source).variables() == {
        "j": {"a": [1, 2.5]},
        "m": [2, 6, 3.14],
        "r": ["aAa", "AA"],
        "s": "a b",
        "d": "2024-02-29",
        "t": 2024,
        "k": {"a": 0, "b": 0},
    }


def test_helpers_closures_and_scopes_follow_python() -> None:
    source = (
        "def outer(n):\n    def inner(m):\n        return n * m\n    return inner\n"
        "nine = outer(3)(3)\n"
        "count = 0\ndef bump(by=1, *rest, **named):\n    global count\n"
        "    count += by + len(rest) + len(named)\n    return count\n"
        "bump()\nbump(2, 3, x=4)\n"
        "fs = [lambda x, i=i: x + i for i in range(3)]\nr = [f(10) for f in fs]\n"
        "if (n := len('hello')) > 3:\n    big = n\n"
    )
    assert drive(source).variables() == {"nine": 9, "count": 5, "r": [10, 11, 12], "n": 5, "big": 5}


def test_printed_lines_are_whole_lines_in_program_order() -> None:
    run = drive("print('a', 1, sep='-')\nprint('b', end='')\nprint('c')\nprint('d', end='')\n")
    printed = [(a.line, a.text) for a in run.actions if isinstance(a, Printed)]
    assert printed == [(1, "a-1"), (3, "bc"), (4, "d")]
    assert run.outcome.printed == ["a-1", "bc", "d"]

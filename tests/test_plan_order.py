"""Plan order (PROTOCOL §3, §4, §5): a plan means what it says, whatever order calls end.

The property test runs random plans on a virtual clock with random tool latencies and
compares them with a one-by-one run of the same plan in list order (each call run alone,
to the end, before the next arrives): every call's resolved parameters, every status and
the final state must agree (serial equivalence). Its size comes from the hypothesis
profile (tests/conftest.py): small in CI, `HYPOTHESIS_PROFILE=large` for a local soak.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from trio.testing import MockClock

import tickloop as tl
from tickloop._core._scheduler_io import OpenTick
from tickloop._durable._codec import event_from_dict, event_to_dict

# -- tools of the random plans: deterministic, with a latency the plan chooses ----------


@tl.tool
async def emit(value: Any = None, seconds: float = 0) -> Any:
    """Return `value` after `seconds` (virtual)."""
    await trio.sleep(seconds)
    return value


@tl.tool
async def crash(value: Any = None, seconds: float = 0) -> Any:
    """Fail after `seconds`."""
    await trio.sleep(seconds)
    raise RuntimeError("crash")


@tl.tool(requires_approval=lambda params: params.get("value") == "deny-me")
async def gated(value: Any = None, seconds: float = 0) -> Any:
    """Denied when asked to return "deny-me"."""
    await trio.sleep(seconds)
    return value


TOOLS = [emit, crash, gated]


def deny_some(call: tl.PendingCall) -> Any:
    return tl.Deny("no")


PATHS = ["a", "a.x", "a.y", "b", "b.x", "list"]
METHODS = ["set", "merge", "assign", "push", "concat"]


@st.composite
def plans(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Random plans: fan-out, fan-in, chains, overlapping and nested paths, every method,
    denied and failing calls. Every read names a path an earlier call writes, so no plan
    has a forward reference."""
    size = draw(st.integers(min_value=2, max_value=8))
    calls: list[dict[str, Any]] = []
    written: list[str] = []
    for index in range(size):
        tool = draw(st.sampled_from(["emit", "emit", "emit", "crash", "gated"]))
        value: Any = draw(
            st.one_of(
                st.integers(0, 9),
                st.sampled_from(["s", "t"]),
                st.builds(lambda n: {"k": n}, st.integers(0, 9)),
                st.builds(lambda n: [n], st.integers(0, 9)),
            )
        )
        if tool == "gated" and draw(st.booleans()):
            value = "deny-me"
        elif written and draw(st.booleans()):
            read = f"†state.{draw(st.sampled_from(written))}"
            if draw(st.integers(0, 3)) == 0:  # now and then a fallback or a join
                other = f"†state.{draw(st.sampled_from(written))}"
                read = f"{read} {draw(st.sampled_from(['||', '&&']))} {other}"
            value = read if draw(st.booleans()) else {"v": read}
        call: dict[str, Any] = {
            "_tool": tool,
            "value": value,
            "seconds": draw(st.integers(0, 4)),
            "_id": f"k{index}",
        }
        if draw(st.integers(0, 9)) > 0:  # now and then a fire-and-forget call
            path = draw(st.sampled_from(PATHS))
            call["_outputPath"] = f"†state.{path}"
            written.append(path)
            if tool != "gated" and draw(st.integers(0, 4)) == 0:  # a fan-out
                second = draw(st.sampled_from(PATHS))
                call["_outputPath"] += f" && †state.{second}"
                written.append(second)
            call["_outputMethod"] = draw(st.sampled_from(METHODS))
        calls.append(call)
    return calls


def _execute(
    calls: list[dict[str, Any]],
    schedule: str = "critical_path",
    limit: int | None = None,
    tools: list[tl.Tool] = TOOLS,
) -> tl.ExecutionResult:
    return trio.run(
        partial(
            tl.execute,
            calls,
            tools=tools,
            approve=deny_some,
            schedule=schedule,
            max_concurrency=limit,
        ),
        clock=MockClock(autojump_threshold=0),
    )


# The same tools, one of them allowed one call at a time (a tool's own limit).
ONE_EMIT_AT_A_TIME = [
    tl.Tool("emit", emit.description, handler=emit.handler, max_concurrency=1),
    crash,
    gated,
]


def _one_by_one(calls: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The reference: each call alone, in list order, on the state the ones before left."""
    state: Any = {}
    params: dict[str, Any] = {}
    statuses: dict[str, Any] = {}
    for call in calls:
        result = _execute_on(call, state)
        record = result.records[call["_id"]]
        statuses[call["_id"]] = record.status
        params[call["_id"]] = record.params
        state = result.state
    return params, statuses, state


def _execute_on(call: dict[str, Any], state: Any) -> tl.ExecutionResult:
    return trio.run(
        partial(tl.execute, [call], tools=TOOLS, approve=deny_some, state=state),
        clock=MockClock(autojump_threshold=0),
    )


@pytest.mark.parametrize(
    ("schedule", "limit", "tools"),
    [
        ("critical_path", None, TOOLS),
        ("critical_path", 1, TOOLS),
        ("critical_path", 2, TOOLS),
        ("critical_path", 3, ONE_EMIT_AT_A_TIME),
        ("fifo", None, TOOLS),
        ("fifo", 2, TOOLS),
        ("fifo", None, ONE_EMIT_AT_A_TIME),
    ],
    ids=[
        "critical_path",
        "critical_path-1",
        "critical_path-2",
        "critical_path-3-tool-1",
        "fifo",
        "fifo-2",
        "fifo-tool-1",
    ],
)
@given(plans())
def test_every_plan_is_serially_equivalent(
    schedule: str, limit: int | None, tools: list[tl.Tool], calls: list[dict[str, Any]]
) -> None:
    """Under either order of starts and any limit (PROTOCOL §13 changes when calls start,
    never what they read or what the run returns)."""
    together = _execute(calls, schedule, limit, tools)
    params, statuses, state = _one_by_one(calls)
    assert {i: r.status for i, r in together.records.items()} == statuses
    for call_id, record in together.records.items():
        if statuses[call_id] not in ("invalid", "skipped"):
            assert record.params == params[call_id], call_id
    assert (together.state or {}) == (state or {})


# -- the repros of issue 10, and what plan order promises besides ----------------------


def test_push_fan_in_lists_in_plan_order_every_time() -> None:
    for seconds in ([3, 2, 1], [1, 2, 3], [2, 3, 1]):
        calls: list[dict[str, Any]] = [
            {
                "_tool": "emit",
                "value": name,
                "seconds": delay,
                "_outputPath": "†state.docs",
                "_outputMethod": "push",
            }
            for name, delay in zip("abc", seconds, strict=True)
        ]
        calls.append({"_tool": "emit", "value": "†state.docs", "_outputPath": "†state.all"})
        result = _execute(calls)
        assert result.state == {"docs": ["a", "b", "c"], "all": ["a", "b", "c"]}


def test_a_forward_reference_still_waits_for_a_later_writer() -> None:
    result = _execute(
        [
            {"_tool": "emit", "value": "†state.late", "_outputPath": "†state.seen"},
            {"_tool": "emit", "value": 7, "seconds": 2, "_outputPath": "†state.late"},
        ]
    )
    assert result.state == {"late": 7, "seen": 7}
    assert result.records["c1.0"].started == 2


def test_a_reader_of_a_path_whose_earlier_writer_failed_is_unresolved_at_once() -> None:
    """Not a forward reference: an earlier call writes it. The later writer is not read."""
    result = _execute(
        [
            {"_tool": "crash", "seconds": 1, "_outputPath": "†state.a"},
            {"_tool": "emit", "value": "†state.a", "_outputPath": "†state.seen"},
            {"_tool": "emit", "value": 1, "seconds": 5, "_outputPath": "†state.a"},
        ]
    )
    assert result.records["c1.1"].status == "invalid"
    assert "c1.0 (crash)" in result.records["c1.1"].error["message"]
    assert result.records["c1.1"].finished is None or True
    assert result.state == {"a": 1}


@pytest.mark.parametrize("seconds", [0, 1, 3])
@pytest.mark.parametrize(
    ("value", "named"),
    [
        (["†state.a || †state.b", "†state.nobody"], "†state.a || †state.b"),
        ("†state.b && †state.nobody", "†state.b && †state.nobody"),
    ],
)
def test_a_call_with_several_unresolved_references_names_the_first_whenever_its_writer_ends(
    seconds: float, value: Any, named: str
) -> None:
    """Its first reference (or term of an `&&`) waits for a later writer that fails; the
    second reads what nothing writes. One by one in plan order the first is found dead
    first, so that is the one named, however long the writer takes (the second was named
    when the writer ended after the stream closed)."""
    result = _execute(
        [
            {"_tool": "emit", "value": value},
            {"_tool": "crash", "seconds": seconds, "_outputPath": "†state.b"},
        ]
    )
    error = result.records["c1.0"].error
    assert result.records["c1.0"].status == "invalid"
    assert error["reference"] == named, error
    assert "c1.1 (crash)" in error["message"], error


@pytest.mark.parametrize("seconds", [0, 2])
def test_a_later_writer_that_fails_is_not_named_for_a_path_the_calls_before_left_absent(
    seconds: float,
) -> None:
    """c1.2 reads †state.a.x, which the calls before it leave absent (c1.1 replaces `a`):
    no call it would read from failed, so none is named, whether the later c1.3, which
    fails writing `a`, ended before c1.2 was settled (it was named then) or after."""
    result = _execute(
        [
            {"_tool": "emit", "value": 1, "_outputPath": "†state.a.x"},
            {"_tool": "emit", "value": 0, "seconds": 1, "_outputPath": "†state.a"},
            {"_tool": "emit", "value": "†state.a.x"},
            {"_tool": "crash", "seconds": seconds, "_outputPath": "†state.a"},
        ]
    )
    error = result.records["c1.2"].error
    assert result.records["c1.2"].status == "invalid"
    assert "writer" not in error, error
    # What the calls before it leave: `a` is c1.1's 0, whatever c1.3 did.
    assert error["message"].endswith(
        "†state.a is a number, which has no key 'x', and no call will write it"
    ), error


def test_a_hold_never_waits_on_its_own_forward_reader() -> None:
    """c0 reads †state.cfg.url forward and writes under cfg; c1 writes cfg: c1's write is
    not held behind c0, which waits for it (PROTOCOL §4)."""
    result = _execute(
        [
            {"_tool": "emit", "value": "†state.cfg.url", "_outputPath": "†state.cfg.page"},
            {"_tool": "emit", "value": {"url": "u"}, "seconds": 1, "_outputPath": "†state.cfg"},
        ]
    )
    assert result.state == {"cfg": {"url": "u", "page": "u"}}
    assert result.records["c1.0"].started == 1


def test_a_cycle_through_a_forward_reference_is_still_an_error_naming_it() -> None:
    result = _execute(
        [
            {"_tool": "emit", "value": "†state.b", "_outputPath": "†state.a"},
            {"_tool": "emit", "value": "†state.a", "_outputPath": "†state.b"},
        ]
    )
    assert {r.status for r in result.records.values()} == {"invalid"}
    assert "c1.0 -> c1.1 -> c1.0" in result.records["c1.0"].error["message"]


def test_a_hold_on_a_cycle_through_a_forward_reference_is_released_not_deadlocked() -> None:
    """c0 waits forward on c2's write; c1 reads docs, which c0 writes; c2 writes docs.b
    and x. Plan order cannot hold (c2 would wait on c1, c1 on c0, c0 on c2): the run ends,
    every call done (forward references aside)."""
    result = _execute(
        [
            {"_tool": "emit", "value": "†state.x", "_outputPath": "†state.docs.a"},
            {"_tool": "emit", "value": "†state.docs", "_outputPath": "†state.seen"},
            {
                "_tool": "emit",
                "value": 1,
                "seconds": 1,
                "_outputPath": "†state.x && †state.docs.b",
            },
        ]
    )
    assert {r.status for r in result.records.values()} == {"done"}
    assert result.state["docs"] == {"a": 1, "b": 1}


# -- durable runs: a held write is journaled and replayed in plan order ------------------


@tl.tool(requires_approval=True)
async def pay(value: str) -> str:
    return value


def _defer(call: tl.PendingCall) -> Any:
    return tl.Defer()


def test_a_held_write_survives_a_pause_and_applies_in_plan_order(tmp_path: Path) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    plan = [
        {"_tool": "pay", "value": "first", "_outputPath": "†state.x"},
        {"_tool": "emit", "value": "second", "_outputPath": "†state.x"},
    ]
    model = tl.ScriptedModel([{"calls": plan, "output": None}, {"calls": [], "output": "ok"}])
    agent = tl.Agent(model, tools=[pay, emit], approve=_defer, store=store)
    paused = agent.run(run_id="r1")
    assert paused.status == "paused"
    assert "x" not in (paused.state or {})  # c1.1's result is held behind the deferred c1.0
    resumed = agent.resume("r1", decisions={"c1.0": tl.Approve()})
    assert resumed.status == "done"
    assert resumed.state["x"] == "second"
    written = [m["data"]["x"] for m in resumed.messages if m.get("kind") == "state"]
    assert written == ["first", "second"]


def test_a_held_write_survives_a_crash_and_applies_in_plan_order(tmp_path: Path) -> None:
    """The process stops while c1.0 runs and c1.1's result is held: on resume c1.0 runs
    again (idempotent), then the journaled c1.1 result applies after it."""
    runs: list[str] = []

    @tl.tool(idempotent=True)
    async def slow(value: str) -> str:
        runs.append(value)
        await trio.sleep(5)
        return value

    store = tl.SQLiteStore(tmp_path / "runs.db")
    plan = [
        {"_tool": "slow", "value": "first", "_outputPath": "†state.x"},
        {"_tool": "emit", "value": "second", "seconds": 1, "_outputPath": "†state.x"},
    ]

    def agent() -> tl.Agent:
        model = tl.ScriptedModel([{"calls": plan, "output": None}, {"calls": [], "output": "ok"}])
        return tl.Agent(model, tools=[slow, emit], store=store)

    async def crash_at_two_seconds() -> None:
        with trio.move_on_after(2):
            await agent().run_async(run_id="r2")

    trio.run(crash_at_two_seconds, clock=MockClock(autojump_threshold=0))
    assert runs == ["first"]
    resumed = trio.run(partial(agent().resume_async, "r2"), clock=MockClock(autojump_threshold=0))
    assert runs == ["first", "first"]
    assert resumed.status == "done"
    written = [m["data"]["x"] for m in resumed.messages if m.get("kind") == "state"]
    assert written == ["first", "second"]
    assert resumed.state["x"] == "second"


def test_every_tick_of_a_journal_keeps_plan_order() -> None:
    """A version 2 journal holds no tick from before plan order (the migration from
    version 1 refuses one: tests/test_store_versions.py)."""
    new = event_to_dict(OpenTick(2, "d"))
    assert event_from_dict(new) == OpenTick(2, "d", plan_order=True)


@pytest.mark.parametrize("plan_order", [True, False])
def test_the_old_rule_is_kept_for_replayed_ticks(plan_order: bool) -> None:
    """A tick journaled before plan order replays as it ran: a reader read what was there."""
    from tickloop._core._log import ContextLog
    from tickloop._core._scheduler import Scheduler
    from tickloop._core._scheduler_io import CloseStream, FinishCall, ReceiveCall, StartCall
    from tickloop._core._tools import ToolSet

    log = ContextLog([{"type": "data", "kind": "state", "data": {"x": "old"}}])
    scheduler = Scheduler(ToolSet([emit]), log)
    scheduler.handle(OpenTick(1, plan_order=plan_order))
    started = []
    for call in (
        {"_tool": "emit", "value": "new", "_outputPath": "†state.x"},
        {"_tool": "emit", "value": "†state.x", "_outputPath": "†state.seen"},
    ):
        started += [a for a in scheduler.handle(ReceiveCall(call)) if isinstance(a, StartCall)]
    scheduler.handle(CloseStream())
    assert [a.id for a in started] == (["c1.0"] if plan_order else ["c1.0", "c1.1"])
    scheduler.handle(FinishCall("c1.0", "new"))
    if not plan_order:
        scheduler.handle(FinishCall("c1.1", "old"))
    assert scheduler.records["c1.1"].params["value"] == ("new" if plan_order else "old")


def test_the_plan_order_example_in_the_concepts_runs_as_written() -> None:
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "concepts.md").read_text()
    example = next(
        block for block in re.findall(r"```python\n(.*?)```", text, re.S) if "†state.docs" in block
    )
    namespace: dict[str, Any] = {}
    exec(compile(example, "concepts.md", "exec"), namespace)
    assert namespace["result"].state["docs"] == ["a", "b", "c"]


def test_a_replacement_keeps_its_place_in_the_plan_for_later_readers() -> None:
    """c1.0 is replaced by a call that writes †state.b: c1.1, written after it, now reads
    what the replacement leaves, not the later c1.2's value (PROTOCOL §3, §6)."""

    async def replace(call: tl.PendingCall) -> Any:  # answered at once, in the task
        return tl.Replace(
            {"_tool": "emit", "value": "early", "seconds": 3, "_outputPath": "†state.b"}
        )

    result = trio.run(
        partial(
            tl.execute,
            [
                {"_tool": "gated", "value": "deny-me", "_outputPath": "†state.a"},
                {"_tool": "emit", "value": "†state.b", "_outputPath": "†state.seen"},
                {"_tool": "emit", "value": "late", "seconds": 1, "_outputPath": "†state.b"},
            ],
            tools=TOOLS,
            approve=replace,
        ),
        clock=MockClock(autojump_threshold=0),
    )
    assert result.state == {"b": "late", "seen": "early"}


# -- issue 29, item 4: writes to one path finishing in reverse are not cubic -------------


@pytest.mark.parametrize("method", ["push", "set", "merge"])
def test_writes_to_one_path_finishing_in_reverse_take_work_linear_in_their_number(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """N writes to one path, the last finishing first, each held until the ones before it
    apply: the scheduler compares plan positions a bounded number of times per call, not
    once per other writer of the path for every write that ends (which made this shape
    cubic: 88 s at N=1,000). Work is counted, not timed."""
    from tickloop._core._scheduler import Scheduler

    compared = [0]
    seq_of = Scheduler._seq_of

    def counted(self: Scheduler, call_id: str) -> int:
        compared[0] += 1
        return seq_of(self, call_id)

    monkeypatch.setattr(Scheduler, "_seq_of", counted)
    n = 300
    values = [{f"k{i}": i} if method == "merge" else i for i in range(n)]
    calls = [
        {
            "_tool": "emit",
            "value": values[i],
            "seconds": n - i,  # virtual: the last call finishes first
            "_outputPath": "†state.out",
            "_outputMethod": method,
        }
        for i in range(n)
    ]
    result = trio.run(
        partial(tl.execute, calls, tools=[emit]), clock=MockClock(autojump_threshold=0)
    )
    expected = {"push": list(range(n)), "set": n - 1}.get(method)
    if method == "merge":
        expected = {f"k{i}": i for i in range(n)}
    assert result.state == {"out": expected}
    assert compared[0] <= 20 * n

"""The order of starts under a concurrency limit (PROTOCOL §13).

When a limit holds ready calls back, the next call to start is the one with the longest
path, in expected seconds, to the end of the plan known so far; ties go to the call that
became ready first, then to plan order. `schedule="fifo"` keeps arrival order. Timed
tests run on trio's MockClock (virtual seconds); the rest drive the scheduler with events.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from trio.testing import MockClock

import tickloop as tl
from tickloop._core._log import ContextLog
from tickloop._core._scheduler import Scheduler
from tickloop._core._scheduler_io import (
    Action,
    FinishCall,
    OpenTick,
    ReceiveCall,
    StartCall,
)
from tickloop._core._tools import ToolSet
from tickloop._engine._durations import MEASURED

# -- tools: each sleeps the virtual seconds it is given -----------------------------------


@tl.tool(expected_duration=1)
async def lookup(q: Any = None, seconds: float = 1) -> Any:
    """An independent lookup."""
    await trio.sleep(seconds)
    return q


@tl.tool(expected_duration=1)
async def step(x: Any = None, seconds: float = 1) -> Any:
    """One step of a chain."""
    await trio.sleep(seconds)
    return x


@tl.tool(expected_duration=1, max_concurrency=1)
async def search(x: Any = None, seconds: float = 1) -> Any:
    """A tool that allows one call at a time."""
    await trio.sleep(seconds)
    return x


@tl.tool(expected_duration=1, requires_approval=True)
async def gated(x: Any = None, seconds: float = 1) -> Any:
    """Asked about before it runs."""
    await trio.sleep(seconds)
    return x


TOOLS = [lookup, step, search, gated]


def run(calls: list[dict[str, Any]], **options: Any) -> tl.ExecutionResult:
    options.setdefault("tools", [lookup, step, search])
    return trio.run(partial(tl.execute, calls, **options), clock=MockClock(autojump_threshold=0))


def lookups(count: int, tool: str = "lookup") -> list[dict[str, Any]]:
    return [
        {"_tool": tool, "q": i, "_id": f"l{i}", "_outputPath": f"†state.l{i}"} for i in range(count)
    ]


def chain(length: int, tool: str = "step", prefix: str = "c") -> list[dict[str, Any]]:
    calls = [{"_tool": tool, "x": 0, "_id": f"{prefix}0", "_outputPath": f"†state.{prefix}0"}]
    calls += [
        {
            "_tool": "step",
            "x": f"†state.{prefix}{i - 1}",
            "_id": f"{prefix}{i}",
            "_outputPath": f"†state.{prefix}{i}",
        }
        for i in range(1, length)
    ]
    return calls


def started(result: tl.ExecutionResult | tl.RunResult) -> dict[str, float]:
    return {call_id: record.started or 0.0 for call_id, record in result.records.items()}


def makespan(result: tl.ExecutionResult) -> float:
    return max(record.finished or 0.0 for record in result.records.values())


# -- the order under a run's limit ----------------------------------------------------------


def test_a_long_chains_head_starts_before_lookups_listed_earlier() -> None:
    plan = lookups(6) + chain(4)
    result = run(plan, max_concurrency=2)
    times = started(result)
    # l0 and l1 started on arrival (eager); at t=1 a slot frees: the chain's head goes
    # first (4 seconds behind it), and each next step as soon as it is ready.
    assert (times["c0"], times["c1"], times["c2"], times["c3"]) == (1, 2, 3, 4)
    assert (times["l0"], times["l1"]) == (0, 0)
    assert sorted(times[f"l{i}"] for i in range(2, 6)) == [1, 2, 3, 4]
    assert makespan(result) == 5  # = max(critical path 1 + 4, work 10 / 2): optimal
    assert result.state == {**{f"l{i}": i for i in range(6)}, **{f"c{i}": 0 for i in range(4)}}


def test_fifo_starts_held_back_calls_in_arrival_order() -> None:
    plan = lookups(6) + chain(4)
    result = run(plan, max_concurrency=2, schedule="fifo")
    times = started(result)
    order = sorted(times, key=lambda call_id: (times[call_id], list(times).index(call_id)))
    assert order[:7] == ["l0", "l1", "l2", "l3", "l4", "l5", "c0"]
    assert times["c0"] == 3
    assert makespan(result) == 7
    assert result.state == run(plan, max_concurrency=2).state  # the order changes no value


def test_no_limit_starts_everything_on_arrival_under_either_schedule() -> None:
    plan = lookups(6) + chain(3)
    for schedule in ("critical_path", "fifo"):
        times = started(run(plan, schedule=schedule))
        assert times == {**{f"l{i}": 0 for i in range(6)}, "c0": 0, "c1": 1, "c2": 2}


def test_a_tools_own_limit_uses_the_order_too() -> None:
    # No run limit: `search` allows one call at a time. The head of a chain of searches
    # starts before the lone searches listed before it; fifo keeps their order.
    plan = [
        {"_tool": "search", "x": i, "_id": f"s{i}", "_outputPath": f"†state.s{i}"} for i in range(3)
    ] + chain(3, tool="search")
    ranked = started(run(plan))
    assert ranked["s0"] == 0 and ranked["c0"] == 1  # s0 took the slot on arrival
    assert ranked["c1"] == 2 and sorted([ranked["s1"], ranked["s2"]]) == [2, 3]
    fifo = started(run(plan, schedule="fifo"))
    assert (fifo["s0"], fifo["s1"], fifo["s2"], fifo["c0"]) == (0, 1, 2, 3)


def test_calls_start_the_moment_a_slot_is_free() -> None:
    """Eager dispatch is kept: no slot idles while a call could start in it."""
    plan = lookups(5) + chain(3)
    result = run(plan, max_concurrency=3)
    records = result.records

    def ready_at(call_id: str) -> float:  # a chain step: when the step before it ended
        if not call_id.startswith("c") or call_id == "c0":
            return 0.0
        return records[f"c{int(call_id[1:]) - 1}"].finished or 0.0

    for moment in {0.0, *(record.finished or 0.0 for record in records.values())}:
        running = [
            r for r in records.values() if (r.started or 0.0) <= moment < (r.finished or 0.0)
        ]
        held = [i for i, r in records.items() if ready_at(i) <= moment < (r.started or 0.0)]
        if held:
            assert len(running) == 3, (moment, held)
    # l0-l2 took every slot on arrival; at t=1 the chain's head starts with l3 and l4.
    assert makespan(result) == 4 and records["c0"].started == 1


# -- expected durations ---------------------------------------------------------------------


def test_declared_durations_decide_and_a_measured_mean_stands_in_for_none() -> None:
    """A tool's declared `expected_duration` weighs its calls; a tool that declares none
    weighs the mean of its calls measured in this process, or 1 before any."""

    @tl.tool(name="measured_probe")
    async def probe(seconds: float = 1) -> float:
        await trio.sleep(seconds)
        return seconds

    @tl.tool(name="declared_probe", expected_duration=0.5)
    async def declared(seconds: float = 1) -> float:
        await trio.sleep(seconds)
        return seconds

    tools = [probe, declared, lookup, step]
    # One blocker holds the only slot; then a probe call, a declared call and a chain of
    # two steps (2 expected seconds) are held back.
    plan = [
        {"_tool": "lookup", "q": 0, "seconds": 1, "_id": "blocker"},
        {"_tool": "measured_probe", "seconds": 1, "_id": "p"},
        {"_tool": "declared_probe", "seconds": 1, "_id": "d"},
        *chain(2),
    ]
    first = started(run(plan, tools=tools, max_concurrency=1))
    assert first["c0"] < first["p"] < first["d"]  # unmeasured probe weighs 1 > 0.5

    # Both probes are measured again at 10 seconds; only the one that declares nothing
    # ranks by what was measured.
    run(
        [{"_tool": "measured_probe", "seconds": 10}, {"_tool": "declared_probe", "seconds": 10}],
        tools=tools,
    )
    assert MEASURED.mean("measured_probe") == (1 + 10) / 2  # every call in this process
    second = started(run(plan, tools=tools, max_concurrency=1))
    assert second["p"] < second["c0"] < second["d"]


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), "2", True])
def test_a_bad_expected_duration_is_refused_when_the_tool_is_made(bad: Any) -> None:
    with pytest.raises(tl.ConfigurationError, match="expected_duration"):
        tl.Tool("t", parameters={"type": "object"}, expected_duration=bad)


@pytest.mark.parametrize("bad", ["lifo", "", None, 1])
def test_an_unknown_schedule_is_refused_before_anything_runs(bad: Any) -> None:
    with pytest.raises(tl.ConfigurationError, match="schedule"):
        run(lookups(1), schedule=bad)
    with pytest.raises(tl.ConfigurationError, match="schedule"):
        tl.Agent(tl.ScriptedModel([]), tools=TOOLS, schedule=bad)


# -- ties and a plan that grows: the scheduler alone, driven by events ----------------------


def scheduler(limit: int | None, schedule: str = "critical_path") -> Scheduler:
    made = Scheduler(ToolSet(TOOLS), ContextLog([]), max_concurrency=limit, schedule=schedule)
    made.handle(OpenTick(1))
    return made


def receive(made: Scheduler, *calls: dict[str, Any]) -> list[str]:
    actions: list[Action] = []
    for call in calls:
        actions += made.handle(ReceiveCall(call))
    return starts(actions)


def finish(made: Scheduler, call_id: str, value: Any = 0) -> list[str]:
    return starts(made.handle(FinishCall(call_id, value)))


def starts(actions: list[Action]) -> list[str]:
    return [action.id for action in actions if isinstance(action, StartCall)]


def test_a_call_arriving_later_raises_an_earlier_calls_rank() -> None:
    def held_back() -> Scheduler:
        made = scheduler(1)
        assert receive(made, {"_tool": "lookup", "_id": "blocker"}) == ["blocker"]
        receive(
            made,
            {"_tool": "lookup", "_id": "x", "_outputPath": "†state.x"},
            {"_tool": "step", "_id": "h", "_outputPath": "†state.h"},
        )
        return made

    alone = held_back()  # x and h both weigh 1: x became ready first
    assert finish(alone, "blocker") == ["x"]

    grown = held_back()  # a call reading h arrives: h now has 2 seconds behind it
    assert receive(grown, {"_tool": "step", "x": "†state.h", "_id": "t"}) == []
    assert finish(grown, "blocker") == ["h"]


def test_a_forward_reference_counts_once_its_writer_arrives() -> None:
    made = scheduler(1)
    receive(
        made,
        {"_tool": "lookup", "_id": "blocker"},
        {"_tool": "step", "x": "†state.later", "_id": "reader"},  # read when written
        {"_tool": "lookup", "_id": "x", "_outputPath": "†state.x"},
        {"_tool": "step", "_id": "writer", "_outputPath": "†state.later"},
    )
    assert finish(made, "blocker") == ["writer"]


def test_a_tools_depends_on_counts() -> None:
    @tl.tool(expected_duration=1)
    def login(x: Any = None) -> Any:
        return x

    @tl.tool(expected_duration=1, depends_on=["login"])
    def fetch(x: Any = None) -> Any:
        return x

    made = Scheduler(ToolSet([lookup, login, fetch]), ContextLog([]), max_concurrency=1)
    made.handle(OpenTick(1))
    receive(
        made,
        {"_tool": "lookup", "_id": "blocker"},
        {"_tool": "lookup", "_id": "x"},
        {"_tool": "login", "_id": "in"},
        {"_tool": "fetch", "_id": "f"},  # waits for every earlier login call
    )
    assert finish(made, "blocker") == ["in"]


def test_ties_go_to_the_call_ready_first_then_to_plan_order() -> None:
    made = scheduler(1)
    receive(
        made,
        {"_tool": "lookup", "_id": "blocker", "_outputPath": "†state.b"},
        {"_tool": "lookup", "_id": "waiter", "q": "†state.b"},  # ready when blocker ends
        {"_tool": "lookup", "_id": "early"},  # ready on arrival, listed later
    )
    assert finish(made, "blocker") == ["early"]
    made = scheduler(1)
    receive(
        made,
        {"_tool": "lookup", "_id": "blocker", "_outputPath": "†state.b"},
        {"_tool": "lookup", "_id": "second", "q": "†state.b"},
        {"_tool": "lookup", "_id": "first", "q": "†state.b"},
    )
    # Both became ready when the blocker's write landed: plan order decides.
    assert finish(made, "blocker") == ["second"]
    assert finish(made, "second") == ["first"]


def test_fifo_ignores_ranks() -> None:
    made = scheduler(1, schedule="fifo")
    receive(
        made,
        {"_tool": "lookup", "_id": "blocker"},
        {"_tool": "lookup", "_id": "x", "_outputPath": "†state.x"},
        {"_tool": "step", "_id": "h", "_outputPath": "†state.h"},
        {"_tool": "step", "x": "†state.h", "_id": "t"},
    )
    assert finish(made, "blocker") == ["x"]


# -- approvals keep ready order; only starts are reordered ----------------------------------


def test_approval_questions_keep_ready_order_while_starts_follow_ranks() -> None:
    asked: list[str] = []

    async def approve(call: tl.PendingCall) -> tl.Approve:  # on trio: answered at once
        asked.append(call.id)
        return tl.Approve()

    plan = [
        {"_tool": "lookup", "q": 0, "_id": "blocker"},
        {"_tool": "gated", "x": 1, "_id": "alone", "_outputPath": "†state.alone"},
        {"_tool": "gated", "x": 2, "_id": "head", "_outputPath": "†state.head"},
        {"_tool": "step", "x": "†state.head", "_id": "tail"},
    ]
    result = run(plan, tools=TOOLS, max_concurrency=1, approve=approve)
    assert asked == ["alone", "head"]
    times = started(result)
    # head has tail behind it; then alone and tail tie, and alone was ready first.
    assert (times["blocker"], times["head"], times["alone"], times["tail"]) == (0, 1, 2, 3)


# -- a durable run resumes on the starts it recorded ----------------------------------------


@tl.tool(name="resume_lookup")
async def resume_lookup(q: Any = None, seconds: float = 0) -> Any:
    await trio.sleep(seconds)
    return q


@tl.tool(name="resume_step")
async def resume_step(x: Any = None) -> Any:
    await trio.sleep(1)
    return x


@tl.tool(name="resume_pay", requires_approval=True)
async def resume_pay(x: Any = None) -> Any:
    return x


def test_a_paused_run_resumes_on_the_starts_it_recorded(tmp_path: Path) -> None:
    """A resume replays the journal: its starts must be the ones the run made, whatever
    this process has measured since (a durable run ranks on declared durations or 1)."""
    plan = [
        # Holds the only slot until the whole plan has arrived.
        {"_tool": "resume_lookup", "q": 0, "seconds": 1, "_outputPath": "†state.a"},
        {"_tool": "resume_lookup", "q": 1, "_outputPath": "†state.b"},
        {"_tool": "resume_step", "x": 2, "_outputPath": "†state.h"},
        {"_tool": "resume_step", "x": "†state.h", "_outputPath": "†state.t"},
        {"_tool": "resume_pay", "x": "†state.t", "_outputPath": "†state.paid"},
    ]

    def agent() -> tl.Agent:
        model = tl.ScriptedModel([{"calls": plan, "output": None}, {"calls": [], "output": "ok"}])
        return tl.Agent(
            model,
            tools=[resume_lookup, resume_step, resume_pay],
            approve=lambda call: tl.Defer(),
            store=tmp_path / "runs.db",
            max_concurrency=1,
        )

    paused = trio.run(
        partial(agent().run_async, {}, run_id="r"), clock=MockClock(autojump_threshold=0)
    )
    assert paused.status == "paused"
    times = started(paused)
    assert times["c1.2"] < times["c1.1"]  # the chain's head went before the lookup
    # Measured means now rank the lookups far above the chain: a replay that ranked on
    # them would start other calls than the journal records, and fail.
    MEASURED.add_many("resume_lookup", 1000.0, 1)
    MEASURED.add_many("resume_step", 0.001, 1)
    pay_id = paused.pending[0].id
    resumed = agent().resume("r", decisions={pay_id: tl.Approve()})
    assert resumed.status == "done" and resumed.output == "ok"
    assert resumed.state == {"a": 0, "b": 1, "h": 2, "t": 2, "paid": 2}


def test_ranking_a_growing_plan_costs_a_flat_amount_per_input() -> None:
    """A chain that grows while a limit holds calls back raises every earlier step's rank
    on each arrival; ranking afresh at every choice would walk the whole chain each time
    (quadratic). Ranks are worked out afresh only as the calls queued pay for it."""
    from tickloop._core._ranks import CREDIT_PER_CALL

    made = scheduler(1)
    receive(made, {"_tool": "lookup", "_id": "blocker", "q": 0, "seconds": 0})
    running = "blocker"
    for i in range(1500):
        reads = f"†state.c{i - 1}" if i else 0
        receive(
            made,
            {"_tool": "lookup", "_id": f"l{i}"},
            {"_tool": "step", "_id": f"c{i}", "x": reads, "_outputPath": f"†state.c{i}"},
        )
        (running,) = finish(made, running)  # a choice with the chain grown by one
    ranks = made._run_queue.ranks
    assert ranks is not None
    assert ranks.visits <= CREDIT_PER_CALL * made._run_queue.pushed
    assert ranks.visits > 1500  # it did rank
    # Each step had the next one behind it when a slot freed: the chain went first, but
    # for the few choices made on kept ranks (a step whose successor arrived since ties
    # with the lookups, which were ready before it).
    assert made.status("c1400") == "done"
    assert made.status("l100") == "queued"


_queue_ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from(["a", "b", "c"])),
        st.tuples(st.just("start"), st.sampled_from([None, 1, 2, 3])),
        st.tuples(st.just("finish"), st.integers(0, 10)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(_queue_ops, st.sampled_from(["critical_path", "fifo"]))
def test_no_slot_idles_while_a_call_could_take_it(ops: list[tuple[str, Any]], order: str) -> None:
    """After every `start`, under either order and any mix of the run's limit and tools'
    own (`c` allows one at a time), a queued call waits only because every slot it could
    take is in use: ordering by rank never holds back a call eager dispatch would start."""
    from types import SimpleNamespace

    from tickloop._core._ranks import ranks_for
    from tickloop._core._run_queue import RunQueue

    limits = {"a": None, "b": None, "c": 1}
    calls: dict[str, Any] = {}
    waiting_on: dict[str, list[str]] = {}  # a random graph: each call waits on some others
    plan = SimpleNamespace(dependents=lambda call_id, seq, writes: list(waiting_on[call_id]))
    queue = RunQueue(ranks_for(order, calls, calls, plan, {}))  # type: ignore[arg-type]
    running: list[Any] = []
    for seq, (op, arg) in enumerate(ops):
        if op == "push":
            tool = SimpleNamespace(name=arg, max_concurrency=limits[arg], expected_duration=seq)
            call = SimpleNamespace(
                id=f"k{seq}",
                seq=seq,
                tool=tool,
                fire_and_forget=False,
                writes=(),
                status="queued",
                ready_at=0,
            )
            waiting_on[call.id] = [other for other in calls if int(other[1:]) % 3 == seq % 3]
            calls[call.id] = call
            queue.push(call)  # type: ignore[arg-type]
        elif op == "start":
            running += queue.start(arg)
            by_tool = {name: sum(c.tool.name == name for c in running) for name in limits}
            if queue.queued:
                queued_tools = {
                    c.tool.name
                    for c in calls.values()
                    if c not in running and c.id not in queue.running
                }
                free_tools = [t for t in queued_tools if limits[t] is None or by_tool[t] < 1]
                assert not free_tools or (arg is not None and len(queue.running) >= arg)
        elif running:
            call = running.pop(arg % len(running))
            queue.finish(call)
            del calls[call.id]

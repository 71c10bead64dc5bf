"""Tests of the sans-IO scheduler, driven by events with no trio and no clock.

What a driver relies on: the same events give the same actions (so a durable run can
replay them), a call starts in the very `handle` that made it ready, approvals are asked
one at a time in ready order, settling waits for the stream to close, and every Error
Message is appended when the tick ends, in the order the errors happened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tickloop as tl
from tickloop._core._log import ContextLog
from tickloop._core._scheduler import Scheduler
from tickloop._core._scheduler_io import (
    Action,
    AskApproval,
    CloseStream,
    Decide,
    FinishCall,
    Flush,
    NoteMessage,
    NoteReady,
    NoteSettled,
    NoteTickEnded,
    OpenTick,
    ReceiveCall,
    ReportFault,
    StartCall,
)
from tickloop._core._status import FINAL_STATUSES, TRANSITIONS, CallStatus
from tickloop._core._tools import ToolSet
from tickloop._errors import SchedulerUsageError


@tl.tool
def work(x: Any = None) -> Any:
    """Return x (the scheduler never runs it: the test is the driver)."""
    return x


@tl.tool(requires_approval=True)
def pay(x: Any = None) -> Any:
    return x


@tl.tool(max_concurrency=1)
def single(x: Any = None) -> Any:
    return x


@tl.tool
def login(x: Any = None) -> Any:
    return x


@tl.tool(depends_on=["login"])
def fetch(x: Any = None) -> Any:
    return x


note = tl.Tool(name="note", parameters={"type": "object"}, output={"type": "string"})

TOOLS = [work, pay, single, login, fetch, note]


def make(state: dict[str, Any] | None = None, max_concurrency: int | None = None) -> Scheduler:
    messages = [] if state is None else [{"type": "data", "kind": "state", "data": state}]
    return Scheduler(ToolSet(TOOLS), ContextLog(messages), max_concurrency=max_concurrency)


def opened(state: dict[str, Any] | None = None, **options: Any) -> Scheduler:
    scheduler = make(state, **options)
    scheduler.handle(OpenTick(1))
    return scheduler


def receive(scheduler: Scheduler, *calls: Any) -> list[Action]:
    actions: list[Action] = []
    for call in calls:
        actions.extend(scheduler.handle(ReceiveCall(call)))
    return actions


def starts(actions: list[Action]) -> list[str]:
    return [action.id for action in actions if isinstance(action, StartCall)]


def asked(actions: list[Action]) -> list[str]:
    return [action.pending.id for action in actions if isinstance(action, AskApproval)]


def settled(actions: list[Action]) -> dict[str, str]:
    return {action.id: action.status for action in actions if isinstance(action, NoteSettled)}


def tick_end(actions: list[Action]) -> NoteTickEnded | None:
    ends = [action for action in actions if isinstance(action, NoteTickEnded)]
    assert len(ends) <= 1
    return ends[0] if ends else None


def call(x: Any = None, out: str | None = None, tool: str = "work", **meta: Any) -> dict:
    wire: dict[str, Any] = {"_tool": tool, "x": x}
    if out is not None:
        wire["_outputPath"] = out
    wire.update({f"_{key}": value for key, value in meta.items()})
    return wire


# -- starting --------------------------------------------------------------------------------


def test_a_ready_call_starts_in_the_handle_that_received_it_while_the_stream_is_open() -> None:
    scheduler = opened()
    actions = receive(scheduler, call(1, "†state.a"))
    assert [type(action).__name__ for action in actions] == [
        "NoteAccepted",
        "NoteReady",
        "StartCall",
    ]
    start = actions[-1]
    assert isinstance(start, StartCall)
    assert (start.id, start.tool, start.params) == ("c1.0", "work", {"x": 1})
    assert start.call == {"_tool": "work", "x": 1, "_outputPath": "†state.a", "_id": "c1.0"}


def test_a_finished_call_writes_then_starts_its_readers_in_the_same_handle() -> None:
    scheduler = opened()
    first = receive(scheduler, call(1, "†state.a"), call("†state.a", "†state.b"))
    assert starts(first) == ["c1.0"]
    actions = scheduler.handle(FinishCall("c1.0", value=41))
    assert [type(action).__name__ for action in actions] == [
        "NoteMessage",
        "NoteSettled",
        "NoteReady",
        "StartCall",
    ]
    written = actions[0]
    assert isinstance(written, NoteMessage)
    assert written.message["data"] == {"a": 41}
    assert written.message["_call"]["_id"] == "c1.0"
    assert isinstance(actions[2], NoteReady) and actions[2].params == {"x": 41}


def test_a_ready_call_names_the_calls_it_waited_on_as_it_became_ready() -> None:
    """`NoteReady.waits_on` (what the store's rows and the timeline draw as arrows): the
    writers of what it reads and the earlier calls of a tool it depends on, in arrival
    order, and not a call that writes the same path after it read. Only a scheduler made
    with `arrows=True` (a driver with a journal) works them out."""
    plain = opened()
    actions = receive(plain, call(1, "†state.a"), call("†state.a"))
    actions += plain.handle(FinishCall("c1.0", value=1))
    assert [a.waits_on for a in actions if isinstance(a, NoteReady)] == [(), ()]
    scheduler = Scheduler(ToolSet(TOOLS), ContextLog([]), arrows=True)
    scheduler.handle(OpenTick(1))
    first = receive(
        scheduler,
        call(1, "†state.a"),  # c1.0
        call(2, "†state.b"),  # c1.1
        call("†state.a", "†state.r"),  # c1.2 reads a
        call("†state.b", "†state.a"),  # c1.3 reads b, then writes a again (after c1.2)
        call(0, tool="login"),  # c1.4
        call(0, tool="fetch"),  # c1.5 depends on login
    )
    readies = {a.id: list(a.waits_on) for a in first if isinstance(a, NoteReady)}
    assert readies == {"c1.0": [], "c1.1": [], "c1.4": []}
    actions = scheduler.handle(FinishCall("c1.1", value=2))
    actions += scheduler.handle(FinishCall("c1.0", value=1))
    actions += scheduler.handle(FinishCall("c1.4", value=0))
    readies = {a.id: list(a.waits_on) for a in actions if isinstance(a, NoteReady)}
    assert readies == {"c1.3": ["c1.1"], "c1.2": ["c1.0"], "c1.5": ["c1.4"]}
    actions = scheduler.handle(FinishCall("c1.2", value=1))
    actions += scheduler.handle(FinishCall("c1.3", value=2))
    assert not any(isinstance(a, NoteReady) for a in actions)
    # A later reader of a path two calls wrote names both, in arrival order; one of a
    # path written once names that writer.
    later = receive(scheduler, call("†state.a"), call("†state.r"))
    readies = {a.id: list(a.waits_on) for a in later if isinstance(a, NoteReady)}
    assert readies == {"c1.6": ["c1.0", "c1.3"], "c1.7": ["c1.2"]}


def test_an_or_reference_does_not_fall_back_before_the_stream_closes() -> None:
    scheduler = opened(state={"b": "fallback"})
    assert starts(receive(scheduler, call("†state.a || †state.b"))) == []
    actions = scheduler.handle(CloseStream())
    assert starts(actions) == ["c1.0"]
    assert scheduler.records["c1.0"].params == {"x": "fallback"}


def test_an_or_reference_waits_for_a_running_writer_of_its_first_term() -> None:
    scheduler = opened(state={"b": "fallback"})
    receive(scheduler, call(1, "†state.a"), call("†state.a || †state.b", "†state.c"))
    assert starts(scheduler.handle(CloseStream())) == []
    assert starts(scheduler.handle(FinishCall("c1.0", value="first"))) == ["c1.1"]
    assert scheduler.records["c1.1"].params == {"x": "first"}


def test_a_write_below_or_above_a_read_path_wakes_the_reader() -> None:
    scheduler = opened()
    receive(scheduler, call({"k": 1}, "†state.page"), call("†state.page.k", "†state.x"))
    assert starts(scheduler.handle(FinishCall("c1.0", value={"k": 2}))) == ["c1.1"]
    assert scheduler.records["c1.1"].params == {"x": 2}


def test_a_sibling_path_with_a_common_prefix_is_not_a_writer() -> None:
    # state.b is not a prefix of state.base: the reader of state.b is unresolved at once.
    scheduler = opened()
    receive(scheduler, call(1, "†state.base"), call("†state.b", "†state.x"))
    actions = scheduler.handle(CloseStream())
    assert settled(actions) == {"c1.1": "invalid"}


# -- limits ----------------------------------------------------------------------------------


def test_the_global_limit_caps_the_calls_started_and_frees_a_slot_per_finish() -> None:
    scheduler = opened(max_concurrency=2)
    assert starts(receive(scheduler, *(call(i) for i in range(4)))) == ["c1.0", "c1.1"]
    assert starts(scheduler.handle(FinishCall("c1.1", value=1))) == ["c1.2"]
    assert starts(scheduler.handle(FinishCall("c1.0", value=0))) == ["c1.3"]


def test_a_tool_limit_queues_its_calls_without_holding_back_other_tools() -> None:
    scheduler = opened()
    actions = receive(
        scheduler, call(0, tool="single"), call(1, tool="single"), call(2), call(3, tool="single")
    )
    assert starts(actions) == ["c1.0", "c1.2"]
    assert starts(scheduler.handle(FinishCall("c1.0", value=0))) == ["c1.1"]
    assert starts(scheduler.handle(FinishCall("c1.1", value=0))) == ["c1.3"]


def test_under_the_global_limit_queued_calls_start_in_arrival_order_across_tools() -> None:
    scheduler = opened(max_concurrency=1)
    receive(scheduler, call(0), call(1, tool="single"), call(2), call(3, tool="single"))
    order = []
    for _ in range(3):
        running = next(i for i, r in scheduler.records.items() if r.status == "running")
        order += starts(scheduler.handle(FinishCall(running, value=None)))
    assert order == ["c1.1", "c1.2", "c1.3"]


# -- tool-name dependencies ------------------------------------------------------------------


def test_a_tool_dependency_waits_only_for_earlier_calls_and_accepts_any_ending() -> None:
    scheduler = opened()
    actions = receive(
        scheduler, call(0, tool="login"), call(1, tool="fetch"), call(2, tool="login")
    )
    assert starts(actions) == ["c1.0", "c1.2"]  # fetch waits for c1.0, not for c1.2
    failed = scheduler.handle(
        FinishCall("c1.0", error={"type": "runtime", "message": "RuntimeError: no"})
    )
    assert settled(failed) == {"c1.0": "failed"}
    assert starts(failed) == ["c1.1"]


# -- approval --------------------------------------------------------------------------------


def test_approvals_are_asked_one_at_a_time_in_ready_order_while_others_run() -> None:
    scheduler = opened()
    actions = receive(scheduler, call("†state.a", tool="pay"), call(2, tool="pay"))
    assert asked(actions) == ["c1.1"]  # c1.0 is blocked: never shown yet
    actions = receive(scheduler, call(3, "†state.a"), call(4, tool="pay"))
    assert starts(actions) == ["c1.2"]  # no approval needed: does not wait for the hook
    assert asked(actions) == []  # one question at a time
    actions = scheduler.handle(FinishCall("c1.2", value=1))  # c1.0 becomes ready
    assert asked(actions) == []
    actions = scheduler.handle(Decide("c1.1", tl.Approve()))
    assert starts(actions) == ["c1.1"]
    assert asked(actions) == ["c1.3"]  # ready before c1.0
    assert asked(scheduler.handle(Decide("c1.3", tl.Approve()))) == ["c1.0"]
    pending = scheduler.handle(CloseStream())
    assert asked(pending) == []


def test_calls_ready_at_the_same_moment_are_asked_about_in_arrival_order() -> None:
    scheduler = opened()
    receive(scheduler, call(0, "†state.a"), call("†state.a", tool="pay"), call(5, tool="work"))
    receive(scheduler, call("†state.a", tool="pay"))
    actions = scheduler.handle(FinishCall("c1.0", value=7))
    assert asked(actions) == ["c1.1"]
    assert asked(scheduler.handle(Decide("c1.1", tl.Deny("no")))) == ["c1.3"]


def test_the_hook_sees_resolved_parameters_and_the_wire_call() -> None:
    scheduler = opened(state={"amount": 500})
    actions = receive(scheduler, call({"cents": "†state.amount"}, tool="pay", id="charge-1"))
    [request] = [action for action in actions if isinstance(action, AskApproval)]
    assert request.pending.id == "charge-1"
    assert request.pending.tool == "pay"
    assert request.pending.params == {"x": {"cents": 500}}
    assert request.pending.call["x"] == {"cents": "†state.amount"}


def test_a_blocked_call_that_never_resolves_is_never_shown() -> None:
    scheduler = opened()
    receive(scheduler, call("†state.nowhere", tool="pay"))
    actions = scheduler.handle(CloseStream())
    assert asked(actions) == []
    assert settled(actions)["c1.0"] == "invalid"


def test_respond_writes_the_value_without_starting_the_call() -> None:
    scheduler = opened()
    receive(scheduler, call(1, "†state.r", tool="pay"))
    actions = scheduler.handle(Decide("c1.0", tl.Respond("by hand")))
    assert starts(actions) == []
    assert settled(actions) == {"c1.0": "done"}
    assert scheduler.log.view("state") == {"r": "by hand"}


def test_edit_starts_the_call_with_the_edited_parameters() -> None:
    scheduler = opened()
    receive(scheduler, call(1, tool="pay"))
    actions = scheduler.handle(Decide("c1.0", tl.Edit({"x": 2})))
    [start] = [action for action in actions if isinstance(action, StartCall)]
    assert start.params == {"x": 2}


def test_defer_parks_the_call_and_its_readers_and_the_tick_ends_paused() -> None:
    scheduler = opened()
    receive(
        scheduler,
        call(1, "†state.r", tool="pay"),
        call("†state.r", "†state.s"),
        call(9, "†state.n"),
    )
    scheduler.handle(CloseStream())
    actions = scheduler.handle(Decide("c1.0", tl.Defer()))
    assert tick_end(actions) is None  # c1.2 still runs, and writes
    actions = scheduler.handle(FinishCall("c1.2", value=9))
    end = tick_end(actions)
    assert end is not None and end.paused == ["c1.0"]
    assert scheduler.status("c1.1") == "waiting"
    assert [p.id for p in scheduler.deferred] == ["c1.0"]
    # A decision that arrives later picks the run up again.
    assert starts(scheduler.handle(Decide("c1.0", tl.Approve()))) == ["c1.0"]
    assert starts(scheduler.handle(FinishCall("c1.0", value=3))) == ["c1.1"]
    end = tick_end(scheduler.handle(FinishCall("c1.1", value=3)))
    assert end is not None and end.paused == []


# -- settling --------------------------------------------------------------------------------


def test_nothing_is_settled_before_the_stream_closes() -> None:
    scheduler = opened()
    actions = receive(scheduler, call("†state.never"), call("†state.x", "†state.y"))
    assert settled(actions) == {}
    assert settled(scheduler.handle(CloseStream())) == {"c1.0": "invalid", "c1.1": "invalid"}


def test_the_readers_of_an_untaken_branch_are_skipped_and_so_are_theirs() -> None:
    scheduler = opened()
    receive(
        scheduler,
        call(1, "†state.ok || †state.failed"),
        call("†state.failed", "†state.report"),
        call("†state.report", "†state.final"),
        call("†state.ok", "†state.shown"),
    )
    scheduler.handle(CloseStream())
    actions = scheduler.handle(FinishCall("c1.0", value="fine"))
    assert settled(actions) == {"c1.0": "done", "c1.1": "skipped", "c1.2": "skipped"}
    assert starts(actions) == ["c1.3"]
    end = tick_end(scheduler.handle(FinishCall("c1.3", value="fine")))
    assert end is not None and end.errors == []


def test_a_branch_not_taken_by_an_earlier_request_skips_nothing_in_a_later_one() -> None:
    # Skipping is how an if/else plan works within one request; a later request that reads
    # what an earlier one did not write made a mistake the model must be told about.
    scheduler = opened()
    receive(scheduler, call(1, "†state.ok || †state.bad"), call("boom", "†state.lost"))
    scheduler.handle(CloseStream())
    scheduler.handle(FinishCall("c1.1", error={"type": "runtime", "message": "boom"}))
    assert tick_end(scheduler.handle(FinishCall("c1.0", value="fine"))) is not None
    scheduler.handle(OpenTick(2))
    receive(scheduler, call("†state.bad.detail", "†state.u"), call("†state.lost", "†state.v"))
    actions = scheduler.handle(CloseStream())
    assert settled(actions) == {"c2.0": "invalid", "c2.1": "invalid"}
    end = tick_end(actions)
    assert end is not None
    assert [e["data"]["error"] for e in end.errors] == [
        {
            "type": "structural",
            "message": "unresolved reference †state.bad.detail in parameter x: no call wrote "
            "it, and none will",
            "reference": "†state.bad.detail",
        },
        {
            "type": "structural",
            "message": "unresolved reference †state.lost in parameter x: no call wrote it, "
            "and none will",
            "reference": "†state.lost",
        },
    ]


def test_a_cycle_is_settled_when_nothing_else_can_move_and_names_its_calls() -> None:
    scheduler = opened()
    receive(
        scheduler, call("†state.b", "†state.a"), call("†state.a", "†state.b"), call(1, "†state.c")
    )
    actions = scheduler.handle(CloseStream())
    assert settled(actions) == {}  # c1.2 is running: it might still have changed things
    actions = scheduler.handle(FinishCall("c1.2", value=1))
    assert settled(actions) == {"c1.2": "done", "c1.0": "invalid", "c1.1": "invalid"}
    end = tick_end(actions)
    assert end is not None
    messages = [error["data"]["error"]["message"] for error in end.errors]
    assert (
        messages
        == ["cycle: c1.0 -> c1.1 -> c1.0 (each call waits on what the next one writes)"] * 2
    )


# -- errors at the end of the tick -----------------------------------------------------------


def test_error_messages_are_appended_at_the_end_of_the_tick_in_the_order_they_happened() -> None:
    scheduler = opened()
    actions = receive(
        scheduler,
        call(1, "†state.a"),
        call(2, "†state.b"),
        {"_tool": "nope"},
        call("†state.a", "†state.c"),
    )
    actions += scheduler.handle(CloseStream())
    actions += scheduler.handle(
        FinishCall("c1.1", error={"type": "runtime", "message": "ValueError: b"})
    )
    actions += scheduler.handle(
        FinishCall("c1.0", error={"type": "runtime", "message": "ValueError: a"})
    )
    appended = [a.message for a in actions if isinstance(a, NoteMessage)]
    assert actions[-1] == tick_end(actions)
    # No error is in the log before the tick ends; then all of them, in order.
    assert len(scheduler.log.messages) == len(appended) == 4
    order = [(m["data"]["call"]["_id"], m["data"]["error"]["type"]) for m in appended]
    assert order == [
        ("c1.2", "structural"),  # unknown tool, on arrival
        ("c1.1", "runtime"),
        ("c1.0", "runtime"),
        ("c1.3", "structural"),  # unresolved: its writer c1.0 failed
    ]
    assert "call c1.0 (work)" in appended[3]["data"]["error"]["message"]
    end = tick_end(actions)
    assert end is not None and end.errors == appended


def test_a_fault_of_the_iteration_itself_is_reported_with_the_tick_errors() -> None:
    scheduler = opened()
    receive(scheduler, {"_tool": "nope"})
    fault = {"type": "structural", "message": "the solution is not valid JSON"}
    assert scheduler.handle(ReportFault(fault)) == []  # kept until the tick ends
    end = tick_end(scheduler.handle(CloseStream()))
    assert end is not None
    assert [(e["data"]["call"], e["data"]["error"]["message"]) for e in end.errors] == [
        (
            {"_tool": "nope", "_id": "c1.0"},
            "unknown tool 'nope'; the tools are: work, pay, single, login, fetch, note",
        ),
        (None, "the solution is not valid JSON"),
    ]


def test_a_fire_and_forget_call_does_not_hold_the_tick_and_its_late_error_is_flushed() -> None:
    scheduler = opened()
    actions = receive(scheduler, call(1), call(2, "†state.a"))
    actions += scheduler.handle(CloseStream())
    end = tick_end(scheduler.handle(FinishCall("c1.1", value=2)))
    assert end is not None and end.errors == []
    assert scheduler.busy
    after = scheduler.handle(
        FinishCall("c1.0", error={"type": "runtime", "message": "OSError: gone"})
    )
    assert [a for a in after if isinstance(a, NoteMessage)] == []  # not until flushed
    flushed = scheduler.handle(Flush())
    [late] = [a.message for a in flushed if isinstance(a, NoteMessage)]
    assert late["data"]["error"]["message"] == "OSError: gone"
    assert not scheduler.busy


def test_a_fire_and_forget_call_of_an_earlier_tick_holds_back_no_later_one() -> None:
    scheduler = opened()
    receive(scheduler, call(1))  # fire-and-forget: it runs on after its tick ends
    assert tick_end(scheduler.handle(CloseStream())) is not None
    scheduler.handle(OpenTick(2))
    receive(scheduler, call("†state.y", "†state.x"), call("†state.x", "†state.y"))
    actions = scheduler.handle(CloseStream())
    # Nothing in flight can write: the cycle is settled and the tick ends at once.
    assert settled(actions) == {"c2.0": "invalid", "c2.1": "invalid"}
    end = tick_end(actions)
    assert end is not None
    assert [e["data"]["error"]["cycle"] for e in end.errors] == ["c2.0 -> c2.1 -> c2.0"] * 2
    assert scheduler.status("c1.0") == "running" and scheduler.busy


def test_a_fire_and_forget_call_holds_the_tick_only_while_a_call_waits_for_its_tool() -> None:
    scheduler = opened()
    receive(scheduler, call(0))  # fire-and-forget, left running by tick 1
    scheduler.handle(CloseStream())
    scheduler.handle(OpenTick(2))
    receive(
        scheduler,
        call(1, tool="login"),  # fire-and-forget, but c2.1 waits for it by tool name
        call(2, "†state.f", tool="fetch"),
        call("†state.b", "†state.a"),
        call("†state.a", "†state.b"),
        call(3),  # fire-and-forget, nothing waits for it
    )
    actions = scheduler.handle(CloseStream())
    assert settled(actions) == {} and tick_end(actions) is None  # c2.0 may unblock c2.1
    actions = scheduler.handle(FinishCall("c2.0", value=None))
    assert starts(actions) == ["c2.1"] and tick_end(actions) is None
    actions = scheduler.handle(FinishCall("c2.1", value=2))
    assert settled(actions) == {"c2.1": "done", "c2.2": "invalid", "c2.3": "invalid"}
    end = tick_end(actions)
    assert end is not None and end.paused == []
    assert (scheduler.status("c1.0"), scheduler.status("c2.4")) == ("running", "running")


# -- misuse by a driver ----------------------------------------------------------------------


def test_events_out_of_place_are_driver_bugs_and_raise() -> None:
    scheduler = make()
    with pytest.raises(ValueError, match="no request stream is open"):
        scheduler.handle(ReceiveCall(call(1)))
    scheduler.handle(OpenTick(1))
    with pytest.raises(ValueError, match="already open"):
        scheduler.handle(OpenTick(2))
    receive(scheduler, call("†state.a"), call(1, tool="pay"))
    with pytest.raises(ValueError, match="was not running"):
        scheduler.handle(FinishCall("c1.0", value=1))
    with pytest.raises(ValueError, match="not awaiting a decision"):
        scheduler.handle(Decide("c1.0", tl.Approve()))
    with pytest.raises(ValueError, match="unknown call"):
        scheduler.handle(Decide("c9.9", tl.Approve()))
    with pytest.raises(TypeError):
        scheduler.handle("not an event")  # type: ignore[arg-type]


def test_a_driver_mistake_names_the_input_the_call_and_its_status() -> None:
    """A driver bug gets its own exception (still a ValueError), saying what it fed and
    where the call was, so the fault is found in the driver and not in the model."""
    scheduler = opened()
    receive(scheduler, call("†state.a"))
    with pytest.raises(SchedulerUsageError) as caught:
        scheduler.handle(FinishCall("c1.0", value=1))
    assert isinstance(caught.value, tl.TickloopError) and isinstance(caught.value, ValueError)
    assert str(caught.value) == "FinishCall: call 'c1.0' (waiting) finished but was not running"
    with pytest.raises(SchedulerUsageError, match=r"^Decide: call 'c1.0' \(waiting\) is not"):
        scheduler.handle(Decide("c1.0", tl.Approve()))
    with pytest.raises(SchedulerUsageError, match=r"^OpenTick: a tick is already open"):
        scheduler.handle(OpenTick(2))


def test_an_ended_call_keeps_its_status_and_driver_mistakes_about_it_name_it() -> None:
    """An ended call leaves the scheduler's working state (a plan of 100,000 calls keeps
    no parsed reference of the ones done), but a driver still gets its status and the
    same errors about it, from its record."""
    scheduler = opened()
    receive(scheduler, call(1, "†state.a"), call("†state.a", "†state.b"), {"_tool": "nope"})
    scheduler.handle(FinishCall("c1.0", value=1))
    scheduler.handle(FinishCall("c1.1", value=2))
    assert scheduler.status("c1.0") == CallStatus.DONE
    assert scheduler.status("c1.2") == CallStatus.INVALID
    assert scheduler.status("c9.9") is None
    assert scheduler._calls == {}  # nothing of an ended call is kept but its record
    with pytest.raises(SchedulerUsageError) as caught:
        scheduler.handle(FinishCall("c1.0", value=1))
    assert str(caught.value) == "FinishCall: call 'c1.0' (done) finished but was not running"
    for call_id, status in (("c1.1", "done"), ("c1.2", "invalid")):
        with pytest.raises(SchedulerUsageError) as caught:
            scheduler.handle(Decide(call_id, tl.Approve()))
        assert str(caught.value) == (
            f"Decide: call {call_id!r} ({status}) is not awaiting a decision"
        )
    with pytest.raises(SchedulerUsageError, match=r"^Decide: decision for unknown call 'c9.9'"):
        scheduler.handle(Decide("c9.9", tl.Approve()))


def test_a_reader_of_a_failed_replacement_names_the_tool_the_writer_ran_as() -> None:
    """The writer has ended (and left the working state); its reader's error still names
    the tool it was called as, though its record names the replacement's tool."""
    scheduler = opened()
    receive(scheduler, call(1, "†state.a", tool="pay"), call("†state.a", "†state.b"))
    actions = scheduler.handle(Decide("c1.0", tl.Replace({"_tool": "nope", "x": 1})))
    scheduler.handle(CloseStream())
    assert settled(actions)["c1.0"] == "invalid"
    assert scheduler.records["c1.0"].tool == "nope"
    reader = scheduler.records["c1.1"]
    assert reader.status == "invalid" and reader.error is not None
    assert (
        "call c1.0 (pay), which should have written it, ended invalid" in (reader.error["message"])
    )


def test_every_status_move_the_scheduler_makes_is_in_the_transition_table() -> None:
    """Statuses are the strings stored before, and a final status never moves again."""
    assert {status.value for status in CallStatus} == {
        "waiting", "approving", "deferred", "queued", "running", "held",
        "done", "failed", "denied", "skipped", "invalid",
    }  # fmt: skip
    assert all(not TRANSITIONS[status] for status in FINAL_STATUSES)
    assert CallStatus.DONE == "done" and f"{CallStatus.DONE}" == "done"
    assert json.dumps({"status": CallStatus.HELD}) == '{"status": "held"}'
    scheduler = opened()
    receive(scheduler, call(1))
    record = scheduler.records["c1.0"]
    assert record.status == "running" and scheduler.status("c1.0") is CallStatus.RUNNING
    scheduler.handle(FinishCall("c1.0", value=1))
    assert record.status == "done"


# -- determinism and the end of every call ---------------------------------------------------

KEYS = ("a", "b", "c", "d")
_terms = st.sampled_from(KEYS).map(lambda key: f"†state.{key}")
_values = st.one_of(
    st.integers(0, 3),
    st.just("boom"),
    _terms,
    st.tuples(_terms, _terms).map(" || ".join),
    st.tuples(_terms, _terms).map(" && ".join),
    _terms.map(lambda term: {"nested": [term]}),
)
_outputs = st.one_of(
    st.none(),
    _terms,
    st.tuples(_terms, _terms).filter(lambda t: t[0] != t[1]).map(" || ".join),
    st.tuples(_terms, _terms).map(" && ".join),
)
_calls = st.builds(
    lambda tool, x, out, method: {
        "_tool": tool,
        "x": x,
        **({} if out is None else {"_outputPath": out}),
        **({} if method == "set" else {"_outputMethod": method}),
    },
    st.sampled_from(["work", "work", "pay", "single", "login", "fetch"]),
    _values,
    _outputs,
    st.sampled_from(["set", "set", "push", "merge"]),
)
_decisions = st.lists(
    st.sampled_from(
        ["approve", "deny", "respond", "edit", "bad-edit", "replace", "bad-path", "bad-params"]
    ),
    min_size=1,
    max_size=5,
)


def _decision(name: str) -> tl.Decision:
    return {
        "approve": tl.Approve(),
        "deny": tl.Deny("no"),
        "respond": tl.Respond("by hand"),
        "edit": tl.Edit({"x": "edited"}),
        "bad-edit": tl.Edit({"y": 1}),
        "replace": tl.Replace({"_tool": "work", "x": "†state.a", "_outputPath": "†state.d"}),
        "bad-path": tl.Replace({"_tool": "work", "x": 1, "_outputPath": "state"}),
        "bad-params": tl.Replace({"_tool": "work", "y": 1, "_outputPath": "†state.d"}),
    }[name]


def drive(plan: list[Any], decisions: list[str]) -> tuple[list[Action], Scheduler]:
    """A whole tick with a simple driver: calls finish in the order they started (a call
    whose x is "boom" fails), approvals are answered first, from `decisions` in turn."""
    scheduler = make(state={"a": 0})
    actions: list[Action] = []
    running: deque[StartCall] = deque()
    asking: deque[str] = deque()
    answers = iter(decisions * (len(plan) + 1))

    def feed(event: Any) -> None:
        out = scheduler.handle(event)
        actions.extend(out)
        running.extend(a for a in out if isinstance(a, StartCall))
        asking.extend(asked(out))

    feed(OpenTick(1, "t0"))
    for wire in plan:
        feed(ReceiveCall(wire, "t1"))
    feed(CloseStream("t2"))
    while asking or running:
        if asking:
            feed(Decide(asking.popleft(), _decision(next(answers)), "t3"))
        else:
            started = running.popleft()
            if started.params.get("x") == "boom":
                feed(FinishCall(started.id, error={"type": "runtime", "message": "boom"}))
            else:
                feed(FinishCall(started.id, value=started.params.get("x"), date="t4"))
    feed(Flush("t5"))  # the run ends: errors of fire-and-forget calls that came late
    return actions, scheduler


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_calls, max_size=12), _decisions)
def test_same_events_same_actions_and_every_call_ends_with_one_status(
    plan: list[Any], decisions: list[str]
) -> None:
    first, scheduler = drive(plan, decisions)
    second, _ = drive(plan, decisions)
    assert first == second
    [end] = [index for index, action in enumerate(first) if isinstance(action, NoteTickEnded)]
    # After the tick, only fire-and-forget calls (explicit, no output path) may finish.
    for action in first[end + 1 :]:
        if isinstance(action, NoteSettled):
            wire = scheduler.records[action.id].call
            assert "_outputPath" not in wire and wire["_tool"] != "note", action
    assert len(scheduler.records) == len(plan)
    for record in scheduler.records.values():
        assert record.status in FINAL_STATUSES, record
    finals = [a for a in first if isinstance(a, NoteSettled)]
    assert sorted(a.id for a in finals) == sorted(scheduler.records)  # settled exactly once
    appended = [
        a.message["data"]["call"]["_id"]
        for a in first
        if isinstance(a, NoteMessage) and a.message["kind"] == "error"
    ]
    assert appended == [a.id for a in finals if a.error is not None]


_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {tests!r})
    from test_scheduler import drive
    plan = json.loads({plan!r})
    actions, _ = drive(plan, ["approve", "replace", "deny", "respond"])
    print("\\n".join(repr(action) for action in actions))
    """
)


def test_actions_do_not_depend_on_the_hash_seed() -> None:
    # Sets of ids are everywhere in the scheduler; none may decide the order of actions.
    plan = [
        {"_tool": "pay", "x": "†state.b", "_outputPath": "†state.c"},
        {"_tool": "work", "x": 1, "_outputPath": "†state.b || †state.e"},
        {"_tool": "fetch", "x": "†state.e", "_outputPath": "†state.f"},
        {"_tool": "login", "x": 2, "_outputPath": "†state.g"},
        {"_tool": "work", "x": "†state.h", "_outputPath": "†state.i"},
        {"_tool": "work", "x": "†state.i", "_outputPath": "†state.h"},
        {"_tool": "pay", "x": "†state.g && †state.b", "_outputPath": "†state.d"},
        {"_tool": "work", "x": "†state.d", "_outputPath": "†state.j"},
        {"_tool": "single", "x": "boom", "_outputPath": "†state.k"},
        {"_tool": "work", "x": "†state.k || †state.a", "_outputPath": "†state.l"},
    ]
    script = _SCRIPT.format(tests=str(Path(__file__).parent), plan=json.dumps(plan))
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        for seed in ("1", "2")
    ]
    outputs = [process.communicate(timeout=60)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0]
    assert outputs[0] == outputs[1]
    assert "cycle: c1.4 -> c1.5 -> c1.4" in outputs[0]


# -- robustness: bad values from the model, a tool, a hook or a Python caller ----------------


def nested(depth: int, leaf: Any = 1) -> Any:
    """`depth` lists inside each other: nested(2) == [[1]]."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def closed_tick(scheduler: Scheduler) -> NoteTickEnded:
    end = tick_end(scheduler.handle(CloseStream()))
    assert end is not None
    json.dumps(scheduler.log.messages, allow_nan=False)  # every Error Message can be stored
    return end


def test_a_branch_that_is_not_a_string_fails_the_call_naming_the_terms() -> None:
    scheduler = opened()
    receive(scheduler, call(1, "†state.ok || †state.failed"), call("†state.ok", "†state.r"))
    scheduler.handle(CloseStream())
    actions = scheduler.handle(FinishCall("c1.0", value=5, branch=123))  # type: ignore[arg-type]
    assert settled(actions)["c1.0"] == "failed"
    error = scheduler.records["c1.0"].error
    assert error is not None and error["type"] == "runtime"
    assert error["message"] == (
        "the activity chose branch 123 (int), which is not a term: return Branch(term, value) "
        "with term one of †state.ok, †state.failed, as a string"
    )
    assert scheduler.log.view("state") is None  # nothing written
    assert scheduler.records["c1.1"].status == "invalid"  # its reader settles by §5


@pytest.mark.parametrize(
    ("branch", "fragment"),
    [
        ("†state.other", "chose branch '†state.other', which is not one of †state.ok, "),
        ("†error", "chose branch '†error', which is not one of †state.ok, †state.failed"),
        ("state.ok", "malformed branch: expected '†' to start a term, found 's' at position 0"),
        ("†state.ok || †state.failed", "malformed branch: expected a single term"),
        ("†state.x[" + "9" * 5000 + "]", "malformed branch: index too large (5000 digits"),
    ],
)
def test_a_branch_string_that_is_not_one_of_the_terms_fails_the_call(
    branch: str, fragment: str
) -> None:
    scheduler = opened()
    receive(scheduler, call(1, "†state.ok || †state.failed"))
    actions = scheduler.handle(FinishCall("c1.0", value=5, branch=branch))
    assert settled(actions) == {"c1.0": "failed"}
    error = scheduler.records["c1.0"].error
    assert error is not None and fragment in error["message"]
    assert len(error["message"]) < 500  # a long branch is pointed at, not repeated
    assert scheduler.log.view("state") is None


@pytest.mark.parametrize(
    "wire",
    [
        call("†state.x[" + "9" * 5000 + "]", "†state.y"),
        call(1, "†state.x[" + "9" * 5000 + "]"),
        call(1, "†state.x[" + "1" * 19 + "]"),
    ],
)
def test_an_index_with_too_many_digits_is_a_structural_error(wire: dict[str, Any]) -> None:
    scheduler = opened()
    actions = receive(scheduler, wire)
    assert settled(actions)["c1.0"] == "invalid"
    error = scheduler.records["c1.0"].error
    assert error is not None and error["type"] == "structural"
    assert "index too large" in error["message"] and "at most 18" in error["message"]
    assert "at position 9" in error["message"]
    assert len(error["message"]) < 400


def test_a_path_of_too_many_steps_is_a_structural_error_and_the_state_stays_renderable() -> None:
    scheduler = opened()
    long_path = "†state." + ".".join(["k"] * 2000)
    actions = receive(scheduler, call(1, long_path), call(long_path, "†state.b"))
    assert settled(actions) == {"c1.0": "invalid", "c1.1": "invalid"}
    for call_id in ("c1.0", "c1.1"):
        error = scheduler.records[call_id].error
        assert error is not None and "path deeper than 64 steps at position 134" in error["message"]
    # 64 steps is the limit, not an error: the write lands and the state renders.
    receive(scheduler, call(1, "†state." + ".".join(["k"] * 63)))
    scheduler.handle(FinishCall("c1.2", value=nested(60)))
    assert scheduler.records["c1.2"].status == "done"
    closed_tick(scheduler)
    json.dumps(scheduler.log.view("state"))


@pytest.mark.parametrize("depth", [65, 500, 50_000])
def test_a_parameter_nested_too_deep_is_a_structural_error_naming_it(depth: int) -> None:
    scheduler = opened()
    actions = receive(scheduler, {"_tool": "work", "x": nested(depth), "_outputPath": "†state.a"})
    assert settled(actions)["c1.0"] == "invalid"
    record = scheduler.records["c1.0"]
    assert record.error == {
        "type": "structural",
        "message": "parameter x nests deeper than 64 levels of arrays and objects "
        "(shown cut at 64 levels)",
        "parameter": "x",
    }
    end = closed_tick(scheduler)
    [message] = end.errors
    shown = message["data"]["call"]
    assert shown["_id"] == "c1.0" and shown["_outputPath"] == "†state.a"
    assert shown["x"] == nested(64, "<cut: nested too deep>")
    assert record.call == shown and record.params == {"x": shown["x"]}


def test_values_nested_64_deep_are_accepted_and_resolved() -> None:
    scheduler = opened(state={"deep": nested(20)})
    actions = receive(scheduler, call(nested(64)), call(nested(40, "†state.deep")))
    assert starts(actions) == ["c1.0", "c1.1"]
    [ready] = [a for a in actions if isinstance(a, NoteReady) and a.id == "c1.1"]
    assert ready.params == {"x": nested(60)}


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (
            {"_tool": "note", "_output": nested(100), "_outputPath": "†state.n"},
            "meta key _output nests deeper than 64 levels of arrays and objects",
        ),
        (
            {"_tool": "work", "_reasoningForCall": nested(100)},
            "meta key _reasoningForCall nests deeper than 64 levels",
        ),
        (nested(1000), "a call must be a JSON object, got an array (shown cut at 64 levels)"),
    ],
)
def test_any_value_of_a_call_nested_too_deep_is_reported_and_shown_cut(
    wire: Any, message: str
) -> None:
    scheduler = opened()
    assert settled(receive(scheduler, wire)) == {"c1.0": "invalid"}
    error = scheduler.records["c1.0"].error
    assert error is not None and message in error["message"]
    closed_tick(scheduler)


def test_a_call_that_contains_itself_is_reported_not_walked_forever() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    loop.append(loop)  # copied whole, it would be 2**64 lists
    scheduler = opened()
    assert settled(receive(scheduler, call(loop))) == {"c1.0": "invalid"}
    end = closed_tick(scheduler)
    assert "parameter x nests deeper than 64" in end.errors[0]["data"]["error"]["message"]


def test_a_fault_that_shows_a_deep_value_shows_it_cut() -> None:
    # The agent reports an invalid output with the output itself, which the model may
    # have nested 1,000 deep: logging the Error Message must not recurse.
    scheduler = opened()
    fault = {"type": "structural", "message": "output does not match the schema"}
    scheduler.handle(ReportFault(fault, {"output": nested(1000)}))
    end = closed_tick(scheduler)
    [message] = end.errors
    assert message["data"]["error"]["message"] == (
        "output does not match the schema (shown cut at 64 levels)"
    )
    assert message["data"]["call"]["output"] == nested(64, "<cut: nested too deep>")


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        ({"_tool": "work", "x": 1, 1: 2}, "call keys must be strings, got 1 (int)"),
        ({"_tool": "work", ("a",): 2}, "call keys must be strings, got ('a',) (tuple)"),
        (
            {"_tool": "work", "x": {"a": [{2: "b"}]}},
            "parameter x has an object key that is not a string: 2 (int)",
        ),
    ],
)
def test_a_key_that_is_not_a_string_is_a_structural_error_naming_the_call(
    wire: dict[Any, Any], message: str
) -> None:
    scheduler = opened()
    actions = receive(scheduler, wire)
    assert settled(actions)["c1.0"] == "invalid"
    record = scheduler.records["c1.0"]
    assert record.error is not None and record.error["message"] == message
    end = closed_tick(scheduler)
    assert end.errors[0]["data"]["call"]["_id"] == "c1.0"


def test_a_replacement_or_an_edit_with_bad_keys_or_depth_is_invalid() -> None:
    scheduler = opened()
    receive(scheduler, call(1, "†state.a", tool="pay"), call(2, "†state.b", tool="pay"))
    scheduler.handle(CloseStream())
    actions = scheduler.handle(Decide("c1.0", tl.Replace({"_tool": "work", 1: 2})))
    assert settled(actions)["c1.0"] == "invalid"
    error = scheduler.records["c1.0"].error
    assert error is not None
    assert error["type"] == "hook"  # the reviewer's fault, not the model's
    actions = scheduler.handle(Decide("c1.1", tl.Edit({"x": nested(500)})))
    assert settled(actions) == {"c1.1": "invalid"}
    error = scheduler.records["c1.1"].error
    assert error is not None and error["type"] == "hook"
    assert tick_end(actions) is not None
    json.dumps(scheduler.log.messages)


def test_a_result_or_response_too_deep_to_store_fails_the_call_and_writes_nothing() -> None:
    scheduler = opened()
    receive(scheduler, call(1, "†state.a"), call(2, "†state.b", tool="pay"))
    actions = scheduler.handle(FinishCall("c1.0", value=nested(5000)))
    assert settled(actions) == {"c1.0": "failed"}
    error = scheduler.records["c1.0"].error
    assert error == {
        "type": "runtime",
        "message": "cannot set a value that nests deeper than 254 levels of arrays and objects "
        "at †state.a",
    }
    actions = scheduler.handle(Decide("c1.1", tl.Respond({"deep": nested(300)})))
    assert settled(actions) == {"c1.1": "failed"}
    assert scheduler.log.view("state") is None
    closed_tick(scheduler)


_RECURSIVE = {
    "$defs": {
        "n": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#/$defs/n"}}]}
    },
    "type": "object",
    "properties": {"x": {"$ref": "#/$defs/n"}},
}
tree = tl.Tool(
    name="tree",
    parameters=_RECURSIVE,
    output={"$defs": _RECURSIVE["$defs"], "$ref": "#/$defs/n"},
    handler=lambda x: x,
)


def test_values_too_deep_for_the_schema_check_are_errors_of_the_call_not_crashes() -> None:
    # Each value is within its limit (a state value of 250, read 60 deep into a call; a
    # result of 250), yet a recursive schema needs more stack than Python has for them.
    state = {"deep": nested(250)}
    scheduler = Scheduler(
        ToolSet([*TOOLS, tree]),
        ContextLog([{"type": "data", "kind": "state", "data": state}]),
    )
    scheduler.handle(OpenTick(1))
    actions = receive(
        scheduler,
        {"_tool": "tree", "x": nested(60, "†state.deep"), "_outputPath": "†state.t"},
        {"_tool": "tree", "x": 1, "_outputPath": "†state.u"},
        {"_tool": "work", "x": 1, "_outputPath": "†state.v"},
    )
    assert settled(actions)["c1.0"] == "invalid"
    error = scheduler.records["c1.0"].error
    assert error is not None and error["message"] == (
        "resolved parameters nest too deeply to copy or check against the schema of 'tree'; "
        "read a less deeply nested part of the state"
    )
    actions = scheduler.handle(FinishCall("c1.1", value=nested(250)))
    assert settled(actions) == {"c1.1": "failed"}
    error = scheduler.records["c1.1"].error
    assert error is not None and error["message"] == (
        "output of 'tree' nests too deeply to check against its schema"
    )
    actions = scheduler.handle(FinishCall("c1.2", value=nested(250)))
    assert settled(actions) == {"c1.2": "done"}  # `work` has no output schema to check
    closed_tick(scheduler)


@pytest.mark.parametrize("path", ["†error", "†error.x", "†state.a && †error", "†input.user"])
def test_a_call_may_not_write_to_the_error_or_input_kinds(path: str) -> None:
    scheduler = opened()
    actions = receive(scheduler, call(1, path))
    assert settled(actions)["c1.0"] == "invalid"
    error = scheduler.records["c1.0"].error
    assert error is not None and error["type"] == "structural"
    kind = "error" if "error" in path else "input"
    assert f"no call may write to the kind {kind!r}" in error["message"]
    end = closed_tick(scheduler)
    assert [message["data"]["error"]["type"] for message in end.errors] == ["structural"]


@pytest.mark.parametrize("path", ["†error", "†state.ok || †error.bad", "†input.x"])
def test_a_tool_may_not_prescribe_an_output_path_in_the_error_or_input_kinds(path: str) -> None:
    with pytest.raises(tl.ConfigurationError, match=r"output_path .* a reserved kind"):
        tl.Tool(name="t", parameters={"type": "object"}, handler=lambda: 1, output_path=path)

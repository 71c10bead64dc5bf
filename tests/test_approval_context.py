"""What a person deciding a call is shown (run id, where its values came from, what waits
on it) and partial edits: `Edit(cents=...)` changes one parameter and keeps the rest."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest

import tickloop as tl
from tickloop._core._decisions import decision_from_dict, decision_to_dict


@tl.tool
def fetch(n: int) -> int:
    return n


@tl.tool(requires_approval=True)
def charge(customer: str, cents: int, api_key: str = "") -> dict:
    return {"customer": customer, "cents": cents, "key_len": len(api_key)}


@tl.tool
def email(receipt: dict) -> str:
    return f"sent {receipt['cents']}"


PLAN = [
    {"_tool": "fetch", "n": 250, "_outputPath": "†state.amount"},
    {"_tool": "fetch", "n": 7, "_outputPath": "†state.other"},
    {
        "_tool": "charge",
        "customer": "ada",
        "cents": "†state.amount",
        "api_key": "sk-secret",
        "_outputPath": "†state.receipt",
    },
    {"_tool": "email", "receipt": "†state.receipt", "_outputPath": "†state.mail"},
]


def test_a_pending_call_shows_where_its_values_came_from_and_what_waits_on_it() -> None:
    seen: list[tl.PendingCall] = []

    def hook(call: tl.PendingCall) -> tl.Decision:
        seen.append(call)
        return tl.Approve()

    result = tl.run_calls(PLAN, tools=[fetch, charge, email], approve=hook)
    assert result.state["mail"] == "sent 250"
    [pending] = seen
    assert pending.waits_on == ["c1.0"]  # not c1.1: the call reads only state.amount
    assert pending.dependents == ["c1.3"]
    assert pending.run_id is None  # run_calls is not a named run
    assert pending.schema == charge.parameters
    assert pending.output_schema == charge.output


def test_pending_calls_of_an_agent_run_carry_its_run_id_and_so_does_the_call_context() -> None:
    contexts: list[str | None] = []

    @tl.tool(requires_approval=True)
    def pay(cents: int, ctx: tl.CallContext) -> str:
        contexts.append(ctx.run_id)
        return "ok"

    seen: list[tl.PendingCall] = []

    def hook(call: tl.PendingCall) -> bool:
        seen.append(call)
        return True

    model = tl.ScriptedModel(
        [{"calls": [{"_tool": "pay", "cents": 1, "_outputPath": "†state.p"}], "output": "x"}]
    )
    agent = tl.Agent(model, tools=[pay], approve=hook)
    result = agent.run({}, run_id="order-7")
    assert result.output == "x"
    assert [call.run_id for call in seen] == ["order-7"]
    assert contexts == ["order-7"]


def test_a_partial_edit_changes_only_the_named_parameters() -> None:
    def hook(call: tl.PendingCall) -> tl.Decision:
        return tl.Edit(cents=call.params["cents"] - 50)

    result = tl.run_calls(PLAN, tools=[fetch, charge, email], approve=hook)
    # The secret the hook never named is kept, as is the customer.
    assert result.state["receipt"] == {"customer": "ada", "cents": 200, "key_len": 9}
    assert result.records["c1.2"].params["api_key"] == "sk-secret"


def test_a_whole_edit_still_replaces_every_parameter() -> None:
    result = tl.run_calls(
        PLAN,
        tools=[fetch, charge, email],
        approve=lambda call: tl.Edit({"customer": "bob", "cents": 1}),
    )
    assert result.state["receipt"] == {"customer": "bob", "cents": 1, "key_len": 0}


def test_a_partial_edit_is_checked_against_the_schema(caplog: pytest.LogCaptureFixture) -> None:
    result = tl.run_calls(
        PLAN, tools=[fetch, charge, email], approve=lambda call: tl.Edit(cents="lots")
    )
    assert result.records["c1.2"].status == "invalid"
    # The reviewer's mistake: the developer reads the detail in the log (issue 16 item 6).
    assert result.errors[0]["data"]["error"]["type"] == "hook"
    assert any("edited parameters" in record.getMessage() for record in caplog.records)


def test_edit_takes_a_dict_or_keywords_but_not_both_nor_nothing() -> None:
    with pytest.raises(TypeError, match="not both"):
        tl.Edit({"a": 1}, b=2)
    with pytest.raises(TypeError, match="needs the new parameters"):
        tl.Edit()
    assert tl.Edit(a=1) == tl.Edit(a=1) != tl.Edit({"a": 1})
    assert repr(tl.Edit(cents=5)) == "Edit(cents=5)"
    with pytest.raises(AttributeError):
        tl.Edit(a=1).params = {}  # type: ignore[misc]


@pytest.mark.parametrize("edit", [tl.Edit({"a": 1}), tl.Edit(a=1), tl.Edit(params=3)])
def test_edits_survive_the_store_round_trip_copies_and_pickles(edit: tl.Edit) -> None:
    assert decision_from_dict(decision_to_dict(edit)) == edit
    assert copy.deepcopy(edit) == edit
    assert pickle.loads(pickle.dumps(edit)) == edit


def test_a_partial_edit_decided_for_a_stored_run_keeps_the_secret(tmp_path: Path) -> None:
    model = tl.ScriptedModel([{"calls": PLAN, "output": None}, {"calls": [], "output": "ok"}])
    agent = tl.Agent(
        model, tools=[fetch, charge, email], approve=lambda c: tl.Defer(), store=tmp_path / "r.db"
    )
    paused = agent.run({}, run_id="r1")
    assert paused.status == "paused"
    [pending] = paused.pending
    assert (pending.run_id, pending.waits_on, pending.dependents) == ("r1", ["c1.0"], ["c1.3"])
    tl.SQLiteStore(tmp_path / "r.db").decide("r1", "c1.2", tl.Edit(cents=99))
    done = agent.resume("r1")
    assert done.status == "done"
    assert done.state["receipt"] == {"customer": "ada", "cents": 99, "key_len": 9}

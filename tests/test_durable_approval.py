"""Deferred approval: a run pauses in one process and is decided and resumed in another.

Also the refusals users rely on: a decision for an unknown call, for a call that is not
waiting, a second decision for one call, and resuming a finished run are refused before
anything runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import tickloop as tl
from tickloop._cli._main import main

CHILD = r'''
"""A billing agent whose hook defers every payment to a person."""
import json
import os
import sys

import tickloop as tl


def count(name):
    fd = os.open(os.path.join(os.environ["APPROVAL_DIR"], "counts"),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (name + "\n").encode())
    os.close(fd)


@tl.tool
async def fetch(n: int) -> int:
    count(f"fetch:{n}")
    return n


@tl.tool(requires_approval=True)
async def pay(cents: int) -> str:
    count(f"pay:{cents}")
    return f"receipt-{cents}"


@tl.tool
async def email(receipt: str) -> str:
    count(f"email:{receipt}")
    return "sent"


@tl.tool(requires_approval=True)
async def refund(cents: int) -> str:
    count(f"refund:{cents}")
    return "refunded"


PLAN = [
    {"_tool": "fetch", "n": 1, "_outputPath": "†state.a"},
    {"_tool": "fetch", "n": 250, "_outputPath": "†state.amount"},
    {"_tool": "pay", "cents": "†state.amount", "_outputPath": "†state.receipt"},
    {"_tool": "email", "receipt": "†state.receipt", "_outputPath": "†state.mail"},
    {"_tool": "refund", "cents": 7, "_outputPath": "†state.refund"},
    {"_tool": "fetch", "n": 3, "_outputPath": "†state.c"},
]


def ask_a_person(call):
    return tl.Defer()


def make_agent(store=None):
    model = tl.ScriptedModel([{"calls": PLAN, "output": None}, {"calls": [], "output": "ok"}])
    return tl.Agent(model, tools=[fetch, pay, email, refund], approve=ask_a_person, store=store)


if __name__ == "__main__":
    result = make_agent(sys.argv[1]).run({"customer": "ada"}, run_id=sys.argv[2])
    print(json.dumps({"status": result.status, "pending": [p.id for p in result.pending],
                      "state": result.state}))
'''


@pytest.fixture
def child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "approvalchild.py").write_text(CHILD, encoding="utf-8")
    monkeypatch.setenv("APPROVAL_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("approvalchild", None)
    import approvalchild  # type: ignore[import-not-found]

    return approvalchild


def _pause_in_another_process(tmp_path: Path, run_id: str = "bill-1") -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(tmp_path / "approvalchild.py"), str(tmp_path / "runs.db"), run_id],
        env={**os.environ},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def _counts(tmp_path: Path) -> Counter[str]:
    return Counter((tmp_path / "counts").read_text().split())


def _journal_length(db: Path, run_id: str) -> int:
    return len(tl.SQLiteStore(db).journal(run_id))


def test_a_deferred_run_pauses_after_the_independent_work_then_resumes_elsewhere(
    tmp_path: Path, child: Any
) -> None:
    paused = _pause_in_another_process(tmp_path)
    assert paused["status"] == "paused"
    assert paused["pending"] == ["c1.2", "c1.4"]
    # Everything not depending on a deferred call finished before the pause.
    assert paused["state"] == {"a": 1, "amount": 250, "c": 3}
    assert _counts(tmp_path) == Counter({"fetch:1": 1, "fetch:250": 1, "fetch:3": 1})

    store = tl.SQLiteStore(tmp_path / "runs.db")
    assert [(p.id, p.tool, p.params) for p in store.pending("bill-1")] == [
        ("c1.2", "pay", {"cents": 250}),
        ("c1.4", "refund", {"cents": 7}),
    ]
    agent = child.make_agent(store)
    # A partial answer: the run continues what it can, then pauses again.
    again = agent.resume("bill-1", decisions={"c1.2": tl.Approve()})
    assert again.status == "paused" and [p.id for p in again.pending] == ["c1.4"]
    assert again.state["mail"] == "sent" and "refund" not in again.state
    assert again.output is None

    result = agent.resume("bill-1", decisions={"c1.4": tl.Deny("refunds need a ticket")})
    assert result.status == "done" and result.output == "ok" and result.pending == []
    assert result.records["c1.4"].status == "denied"
    assert any(e["data"]["error"]["message"] == "refunds need a ticket" for e in result.errors)
    assert _counts(tmp_path) == Counter(
        {"fetch:1": 1, "fetch:250": 1, "fetch:3": 1, "pay:250": 1, "email:receipt-250": 1}
    )
    with pytest.raises(tl.ResumeError, match="finished"):
        agent.resume("bill-1", decisions={"c1.4": tl.Approve()})


def test_decisions_from_the_command_line_then_a_resume_from_a_third_process(
    tmp_path: Path, child: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _pause_in_another_process(tmp_path, "bill-2")
    db = str(tmp_path / "runs.db")

    assert main(["runs", "--store", db]) == 0
    line = capsys.readouterr().out.strip()
    assert line.split()[:2] == ["bill-2", "paused"] and line.endswith("6 calls")

    assert main(["pending", "bill-2", "--store", db]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:2] == ["c1.2", "pay"] and '"cents": 250' in out

    assert main(["approve", "bill-2", "c1.2", "--store", db]) == 0
    assert main(["deny", "bill-2", "c1.4", "--reason", "not today", "--store", db]) == 0
    capsys.readouterr()
    # A second decision for the same call, and a call that is not waiting, are refused.
    assert main(["deny", "bill-2", "c1.2", "--store", db]) == 2
    assert "already has a decision (approve)" in capsys.readouterr().err
    assert main(["approve", "bill-2", "c1.0", "--store", db]) == 2
    assert "not waiting for a decision (it is done)" in capsys.readouterr().err
    assert main(["approve", "bill-2", "c7.7", "--store", db]) == 2
    assert "has no call 'c7.7'" in capsys.readouterr().err
    # The grammar of paths (PROTOCOL §11, §14): a malformed one says what is wrong.
    assert main(["approve", "bill-2", "c1.2//c1.0", "--store", db]) == 2
    assert "bad path 'c1.2//c1.0': an id must not be empty" in capsys.readouterr().err
    assert main(["pending", "bill-2", "--store", db]) == 0
    assert "(decided: approve; resume to apply)" in capsys.readouterr().out

    tickloop = Path(sys.executable).parent / "tickloop"
    command = [str(tickloop)] if tickloop.exists() else [sys.executable, "-m", "tickloop._cli"]
    resumed = subprocess.run(
        [*command, "resume", "bill-2", "--agent", "approvalchild:make_agent", "--store", db],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines() == ["run bill-2: done after 2 iterations", '"ok"']
    assert _counts(tmp_path)["pay:250"] == 1 and "refund:7" not in _counts(tmp_path)
    assert main(["runs", "--store", db]) == 0
    assert capsys.readouterr().out.split()[:2] == ["bill-2", "done"]


def test_bad_decisions_are_refused_before_anything_runs(tmp_path: Path, child: Any) -> None:
    _pause_in_another_process(tmp_path, "bill-3")
    db = tmp_path / "runs.db"
    agent = child.make_agent(tl.SQLiteStore(db))
    before = (_counts(tmp_path), _journal_length(db, "bill-3"))

    refusals = [
        (
            {"c9.9": tl.Approve()},
            "has no call 'c9.9'; the calls waiting for a decision are c1.2, c1.4",
        ),
        ({"c1.0": tl.Approve()}, "not waiting for a decision \\(it is done\\)"),
        ({"c1.3": tl.Approve()}, "not waiting for a decision \\(it is waiting\\)"),
        # One bad decision refuses the whole set: the good one is not recorded either.
        ({"c1.2": tl.Approve(), "c1.0": tl.Deny()}, "it is done"),
        ({"c1.2": "yes"}, "is not a decision"),
        ({"c1.2": tl.Defer()}, "cannot be Defer"),
        ({"c1.2/": tl.Approve()}, "a decision names no call: bad path 'c1.2/'"),
        ({"c1[0]": tl.Approve()}, "'c1\\[0\\]' holds '\\[', '\\]' or '>'"),
    ]
    for decisions, message in refusals:
        with pytest.raises(tl.ResumeError, match=message):
            agent.resume("bill-3", decisions=decisions)
    with pytest.raises(tl.ResumeError, match="no run 'nope'"):
        agent.resume("nope")
    with pytest.raises(tl.ResumeError, match="has no store"):
        child.make_agent().resume("bill-3")
    assert (_counts(tmp_path), _journal_length(db, "bill-3")) == before
    assert tl.SQLiteStore(db).pending("bill-3")[0].decision is None

    # A decision recorded first (as `tickloop approve` does) cannot be contradicted.
    tl.SQLiteStore(db).decide("bill-3", "c1.2", tl.Approve())
    with pytest.raises(tl.ResumeError, match="already has a decision \\(approve\\)"):
        agent.resume("bill-3", decisions={"c1.2": tl.Deny()})
    assert (_counts(tmp_path), _journal_length(db, "bill-3")) == before
    # ... and the next resume applies it.
    result = agent.resume("bill-3", decisions={"c1.4": True})
    assert result.status == "done"
    assert _counts(tmp_path)["pay:250"] == 1 and _counts(tmp_path)["refund:7"] == 1


def test_run_ids_name_runs_and_are_not_reused(tmp_path: Path, child: Any) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    agent = child.make_agent(store)
    paused = agent.run({"customer": "bo"}, run_id="order-42")
    assert paused.run_id == "order-42" and paused.status == "paused"
    with pytest.raises(tl.ResumeError, match=r"already exists \(paused\).*agent\.resume"):
        agent.run({"customer": "bo"}, run_id="order-42")
    generated = {agent.run({"customer": "cy"}).run_id for _ in range(3)}
    assert len(generated) == 3 and all(run_id.startswith("run-") for run_id in generated)
    assert {run.run_id for run in store.runs()} == {"order-42", *generated}


def test_without_a_store_a_deferred_run_still_pauses_and_names_its_pending_calls(
    child: Any,
) -> None:
    result = child.make_agent().run({"customer": "dee"})
    assert result.status == "paused" and result.run_id
    assert [(p.id, p.tool, p.params) for p in result.pending] == [
        ("c1.2", "pay", {"cents": 250}),
        ("c1.4", "refund", {"cents": 7}),
    ]


@tl.tool(requires_approval=True)
async def pay_once(cents: int) -> str:
    return f"paid {cents}"


def _two_payments(store: tl.SQLiteStore, protocol: str) -> tl.Agent:
    if protocol == "tools":
        calls = [{"name": "pay_once", "arguments": {"cents": n}} for n in (1, 2)]
        responses: list[Any] = [{"tool_calls": calls}, "ok"]
    else:
        plan = [
            {"_tool": "pay_once", "cents": 1, "_outputPath": "†state.a"},
            {"_tool": "pay_once", "cents": 2, "_outputPath": "†state.b"},
        ]
        responses = [{"calls": plan, "output": None}, {"calls": [], "output": "ok"}]
    return tl.Agent(
        tl.ScriptedModel(responses),
        tools=[pay_once],
        approve=lambda call: tl.Defer(),
        store=store,
        protocol=protocol,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("protocol", ["solution", "tools"])
@pytest.mark.parametrize("first", [tl.Deny("no"), tl.Respond("paid by hand")], ids=repr)
def test_a_resume_that_settles_one_call_before_approving_another_goes_on(
    tmp_path: Path, protocol: str, first: tl.Decision
) -> None:
    """A decision that settles its call at once (Deny, Respond) applied before an Approve
    must not end the resumed tick: the run goes on, it is not left paused on nothing."""
    store = tl.SQLiteStore(tmp_path / "runs.db")
    paused = _two_payments(store, protocol).run({}, run_id="r")
    assert paused.status == "paused"
    [first_id, second_id] = [p.id for p in paused.pending]

    result = _two_payments(store, protocol).resume(
        "r", decisions={first_id: first, second_id: tl.Approve()}
    )
    assert (result.status, result.pending, result.output) == ("done", [], "ok")
    assert result.records[second_id].status == "done"
    assert store.run("r").status == "done" and store.pending("r") == []

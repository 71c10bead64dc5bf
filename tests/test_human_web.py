"""The approval page's security and checks, over HTTP (no browser needed).

Every request needs the token; decisions are POSTs from this origin only, made once, and
checked against the tool's schema on the server whatever the page's script did. Values
are escaped and secrets redacted.
"""

from __future__ import annotations

import builtins
import html
import io
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import tickloop as tl
from tickloop._human._common import CallView, Refused, decision_from_answer
from tickloop._observe._events import Redactor

XSS = "</script><img src=x onerror=alert(1)>"


@tl.tool(requires_approval=True)
def charge(customer: str, cents: int, api_key: str = "") -> dict:
    return {"customer": customer, "cents": cents, "key": api_key}


@pytest.fixture
def approval() -> Iterator[tl.BrowserApproval]:
    with tl.BrowserApproval(output=io.StringIO()) as hook:
        yield hook


def _pending_run(hook: tl.BrowserApproval, **params: Any) -> tuple[threading.Thread, dict]:
    box: dict[str, Any] = {}
    call = {"_tool": "charge", "_outputPath": "†state.r", **params}

    def go() -> None:
        box["result"] = tl.run_calls([call], tools=[charge], approve=hook)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not hook.snapshot()[1]:
        assert time.monotonic() < deadline, "the call never reached the page"
        time.sleep(0.01)
    return thread, box


def _split(url: str) -> tuple[str, str]:
    base, token = url.split("/?token=")
    return base, token


def test_the_url_is_local_with_a_token_and_every_route_needs_it(
    approval: tl.BrowserApproval,
) -> None:
    base, token = _split(approval.url)
    assert base.startswith("http://127.0.0.1:")
    assert len(token) >= 24
    for path in ("/", "/runs/x", "/runs/x/timeline", "/events"):
        assert httpx.get(base + path).status_code == 403
        assert httpx.get(base + path, params={"token": token + "x"}).status_code == 403
    assert (
        httpx.post(base + "/decide", data={"call": "c1.0", "action": "approve"}).status_code == 403
    )
    page = httpx.get(base + "/", params={"token": token})
    assert page.status_code == 200
    assert "script-src 'nonce-" in page.headers["content-security-policy"]
    assert page.headers["referrer-policy"] == "no-referrer"
    assert httpx.get(base + "/decide", params={"token": token}).status_code == 405


def test_a_decision_from_another_origin_is_refused(approval: tl.BrowserApproval) -> None:
    thread, box = _pending_run(approval, customer="ada", cents=5)
    base, token = _split(approval.url)
    form = {"token": token, "run": "", "call": "c1.0", "action": "approve"}
    refused = httpx.post(base + "/decide", data=form, headers={"Origin": "http://evil.test"})
    assert refused.status_code == 403
    assert approval.snapshot()[1], "still waiting after the refused request"
    assert httpx.post(base + "/decide", data=form, headers={"Origin": base}).status_code == 303
    thread.join(10)
    assert box["result"].records["c1.0"].status == "done"


def test_a_second_decision_is_refused_visibly(approval: tl.BrowserApproval) -> None:
    thread, box = _pending_run(approval, customer="ada", cents=5)
    base, token = _split(approval.url)
    form = {"token": token, "run": "", "call": "c1.0"}
    assert httpx.post(base + "/decide", data={**form, "action": "deny", "reason": "no"}).is_redirect
    again = httpx.post(base + "/decide", data={**form, "action": "approve"})
    assert again.status_code == 409
    assert "c1.0 is already decided (deny); a call is decided once" in again.text
    thread.join(10)
    assert box["result"].records["c1.0"].status == "denied"
    assert box["result"].errors[0]["data"]["error"]["message"] == "no"


def test_edits_and_responses_are_checked_on_the_server(approval: tl.BrowserApproval) -> None:
    thread, box = _pending_run(approval, customer="ada", cents=5, api_key="sk-9")
    base, token = _split(approval.url)
    form = {"token": token, "run": "", "call": "c1.0"}
    headers = {"Accept": "application/json"}
    bad = [
        ({"action": "edit", "params": '{"customer": "ada", "cents": "five"}'}, "at cents"),
        ({"action": "edit", "params": "[1]"}, "must be a JSON object"),
        ({"action": "edit", "params": "{nope"}, "not JSON"),
        ({"action": "respond", "value": '"a string"'}, "response do not match"),
        ({"action": "launch"}, "unknown action"),
    ]
    for extra, complaint in bad:
        answer = httpx.post(base + "/decide", data={**form, **extra}, headers=headers)
        assert answer.status_code == 409, extra
        assert complaint in answer.json()["error"], (extra, answer.json())
    good = '{"customer": "bob", "cents": 6, "api_key": "[redacted]"}'
    answer = httpx.post(
        base + "/decide", data={**form, "action": "edit", "params": good}, headers=headers
    )
    assert answer.json() == {"message": "edited c1.0"}
    thread.join(10)
    # The placeholder the person saw was put back to the real secret.
    assert box["result"].state["r"] == {"customer": "bob", "cents": 6, "key": "sk-9"}


def test_values_are_escaped_and_secrets_redacted(approval: tl.BrowserApproval) -> None:
    thread, _ = _pending_run(approval, customer=XSS, cents=5, api_key="sk-hidden")
    base, token = _split(approval.url)
    page = httpx.get(base + "/", params={"token": token}).text
    assert XSS not in page
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert "sk-hidden" not in page and "[redacted]" in page
    httpx.post(
        base + "/decide", data={"token": token, "run": "", "call": "c1.0", "action": "approve"}
    )
    thread.join(10)


def test_a_respond_writes_the_persons_value(approval: tl.BrowserApproval) -> None:
    thread, box = _pending_run(approval, customer="ada", cents=5)
    base, token = _split(approval.url)
    answer = httpx.post(
        base + "/decide",
        data={
            "token": token,
            "run": "",
            "call": "c1.0",
            "action": "respond",
            "value": '{"id": "manual"}',
        },
        headers={"Accept": "application/json"},
    )
    assert answer.json() == {"message": "answered c1.0"}
    thread.join(10)
    assert box["result"].state["r"] == {"id": "manual"}


def test_closing_the_page_denies_what_still_waits() -> None:
    hook = tl.BrowserApproval(output=io.StringIO())
    thread, box = _pending_run(hook, customer="ada", cents=5)
    hook.close()
    thread.join(10)
    assert box["result"].records["c1.0"].status == "denied"
    assert "closed" in box["result"].errors[0]["data"]["error"]["message"]


def test_without_the_web_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_starlette(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("starlette"):
            raise ImportError("No module named 'starlette'", name="starlette")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_starlette)
    with pytest.raises(tl.ConfigurationError, match=r"pip install 'tickloop\[web\]'"):
        tl.BrowserApproval(output=io.StringIO())


# -- answers for stored runs (no real parameters in this process) --------------------------


def _stored_view() -> CallView:
    return CallView(
        run_id="r",
        id="c1.1",
        tool="charge",
        params={"customer": "ada", "cents": 5, "api_key": "[redacted]"},
        schema=charge.parameters,
        output_schema=charge.output,
    )


def test_a_stored_edit_changes_only_what_differs_and_keeps_the_hidden_secret() -> None:
    decision = decision_from_answer(
        _stored_view(),
        "edit",
        text='{"customer": "ada", "cents": 9, "api_key": "[redacted]"}',
        redactor=Redactor(),
    )
    assert decision == tl.Edit(cents=9)


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ('{"customer": "ada", "cents": 5, "api_key": "[redacted]"}', "nothing was changed"),
        ('{"customer": "ada", "api_key": "[redacted]"}', "not removed"),
        ('{"customer": "ada", "cents": "x", "api_key": "[redacted]"}', "at cents"),
    ],
)
def test_a_stored_edit_that_cannot_be_applied_is_refused(text: str, complaint: str) -> None:
    with pytest.raises(Refused, match=complaint):
        decision_from_answer(_stored_view(), "edit", text=text, redactor=Redactor())


def test_a_stored_edit_may_not_write_the_placeholder_into_a_secret() -> None:
    view = _stored_view()
    view.params = {"customer": "ada", "cents": 5, "auth": {"token": "[redacted]", "n": 1}}
    view.schema = None
    with pytest.raises(Refused, match="where a secret was"):
        decision_from_answer(
            view,
            "edit",
            text='{"customer": "ada", "cents": 5, "auth": {"token": "[redacted]", "n": 2}}',
            redactor=Redactor(),
        )


def test_a_call_nobody_answers_in_time_is_denied() -> None:
    with tl.BrowserApproval(output=io.StringIO(), timeout=0.05) as hook:
        result = tl.run_calls(
            [{"_tool": "charge", "customer": "ada", "cents": 1}], tools=[charge], approve=hook
        )
    assert result.records["c1.0"].status == "denied"
    assert "nobody answered" in result.errors[0]["data"]["error"]["message"]


def test_serve_refuses_a_store_that_does_not_exist(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from tickloop._cli._main import main

    assert main(["serve", "--store", str(tmp_path / "none.db")]) == 2
    assert "no store at" in capsys.readouterr().err


def test_the_inbox_resumes_a_run_only_once_every_deferred_call_is_decided(tmp_path: Any) -> None:
    import trio

    from tickloop._human._inbox import StoreInbox

    @tl.tool(requires_approval=True)
    def refund(cents: int) -> str:
        return "refunded"

    plan = [
        {"_tool": "charge", "customer": "ada", "cents": 5, "_outputPath": "†state.r"},
        {"_tool": "refund", "cents": 3, "_outputPath": "†state.f"},
    ]
    model = tl.ScriptedModel([{"calls": plan, "output": None}, {"calls": [], "output": "ok"}])
    store = tl.SQLiteStore(tmp_path / "runs.db")
    agent = tl.Agent(model, tools=[charge, refund], approve=lambda c: tl.Defer(), store=store)
    assert agent.run({}, run_id="r").status == "paused"
    inbox = StoreInbox(store, agent, log=io.StringIO())

    async def settled() -> None:
        while inbox._resuming:
            await trio.sleep(0.01)

    async def main() -> None:
        with trio.fail_after(30):  # a safety net only
            async with trio.open_nursery() as nursery:
                inbox._nursery = nursery
                await inbox.decide("r", "c1.0", "approve", "", "")
                await settled()
                assert store.run("r").status == "paused"  # c1.1 is still undecided
                await inbox.decide("r", "c1.1", "deny", "not today", "")
                await settled()
                assert store.run("r").status == "done"

    trio.run(main)
    assert store.run("r").output == "ok"


def test_a_long_lived_page_keeps_its_most_recent_runs(approval: tl.BrowserApproval) -> None:
    import trio

    from tickloop._observe._events import RunStarted

    async def many_runs() -> None:
        for n in range(60):
            approval.on_run_event(RunStarted(run_id=f"run-{n}", time=trio.current_time()))

    trio.run(many_runs)
    runs, _ = approval.snapshot()
    assert len(runs) == 50
    assert runs[0].run_id == "run-59" and runs[-1].run_id == "run-10"


def test_the_run_goes_on_while_the_page_waits_for_a_person(
    approval: tl.BrowserApproval,
) -> None:
    ran = threading.Event()

    @tl.tool
    def independent() -> str:
        ran.set()
        return "ok"

    box: dict[str, Any] = {}
    calls = [
        {"_tool": "charge", "customer": "ada", "cents": 5, "_outputPath": "†state.r"},
        {"_tool": "independent", "_outputPath": "†state.i"},
    ]
    thread = threading.Thread(
        target=lambda: box.update(
            result=tl.run_calls(calls, tools=[charge, independent], approve=approval)
        ),
        daemon=True,
    )
    thread.start()
    # Nobody has answered c1.0 (only this test answers), yet the other call ran.
    assert ran.wait(10), "the independent call waited for the person"
    deadline = time.monotonic() + 10
    while not approval.snapshot()[1]:  # the question reaches the page
        assert time.monotonic() < deadline
        time.sleep(0.01)
    base, token = _split(approval.url)
    httpx.post(
        base + "/decide", data={"token": token, "run": "", "call": "c1.0", "action": "approve"}
    )
    thread.join(10)
    assert box["result"].state == {"r": {"customer": "ada", "cents": 5, "key": ""}, "i": "ok"}


def test_concurrent_run_calls_with_the_same_call_ids_are_each_shown_and_decided(
    approval: tl.BrowserApproval,
) -> None:
    """Two `run_calls` at once (no run id) both have a call c1.0: the page shows both and
    a person decides each; neither is hidden behind the other and left waiting."""
    first, first_box = _pending_run(approval, customer="ada", cents=1)
    second, second_box = _pending_run_after(approval, 2, customer="bo", cents=2)
    base, token = _split(approval.url)
    page = httpx.get(base + "/", params={"token": token}).text
    assert len(set(re.findall(r'name="slot" value="([^"]+)"', page))) == 2  # one per card
    assert "&quot;customer&quot;: &quot;ada&quot;" in page
    assert "&quot;customer&quot;: &quot;bo&quot;" in page

    # Without telling them apart, a decision for "c1.0" is refused, not guessed.
    form = {"token": token, "run": "", "call": "c1.0"}
    refused = httpx.post(base + "/decide", data={**form, "action": "approve"})
    assert refused.status_code == 409 and "several calls c1.0" in html.unescape(refused.text)

    views = {view.params["customer"]: view for view in approval.snapshot()[1]}
    ada, bo = str(views["ada"].slot), str(views["bo"].slot)
    assert httpx.post(base + "/decide", data={**form, "slot": bo, "action": "approve"}).is_redirect
    deny = {**form, "slot": ada, "action": "deny", "reason": "not ada"}
    assert httpx.post(base + "/decide", data=deny).is_redirect
    first.join(10)
    second.join(10)
    assert not first.is_alive() and not second.is_alive()
    assert first_box["result"].records["c1.0"].status == "denied"
    assert second_box["result"].state == {"r": {"customer": "bo", "cents": 2, "key": ""}}
    again = httpx.post(base + "/decide", data={**form, "slot": bo, "action": "deny"})
    assert again.status_code == 409 and "already decided" in again.text


def _pending_run_after(
    hook: tl.BrowserApproval, count: int, **params: Any
) -> tuple[threading.Thread, dict]:
    """`_pending_run` for the `count`-th call waiting at once on the page."""
    box: dict[str, Any] = {}
    call = {"_tool": "charge", "_outputPath": "†state.r", **params}
    thread = threading.Thread(
        target=lambda: box.update(result=tl.run_calls([call], tools=[charge], approve=hook)),
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + 10
    while len(hook.snapshot()[1]) < count:
        assert time.monotonic() < deadline, f"{count} calls never waited on the page at once"
        time.sleep(0.01)
    return thread, box


def test_the_inbox_shows_a_deferred_budget_question_and_grants_more_there(
    tmp_path: Any,
) -> None:
    import trio

    from tickloop._human._inbox import StoreInbox
    from tickloop._human._page import render_index

    @tl.tool
    def note(text: str) -> str:
        """Note something down."""
        return text

    plan = {"calls": [{"_tool": "note", "text": "<b>ada</b>"}]}
    model = tl.ScriptedModel([plan, plan, {"calls": [], "output": "ok"}])
    store = tl.SQLiteStore(tmp_path / "runs.db")

    def agent(**options: Any) -> tl.Agent:
        return tl.Agent(model, tools=[note], store=store, budget=tl.Budget(requests=1), **options)

    assert agent(on_budget=lambda r: tl.Defer()).run({}, run_id="r<1>").status == "paused"
    inbox = StoreInbox(store, agent(), log=io.StringIO())
    runs, pending = inbox.snapshot()
    [question] = pending
    assert (question.budget, question.id) == ("requests", "budget:requests")
    page = render_index(title="inbox", runs=runs, pending=pending, token="t", nonce="n", flash=None)
    assert 'value="grant"' in page and 'value="budget:requests"' in page
    assert "r<1>" not in page and "r&lt;1&gt;" in page  # escaped
    assert [view.id for view in inbox.run_page("r<1>")[2]] == ["budget:requests"]

    async def settled() -> None:
        while inbox._resuming:
            await trio.sleep(0.01)

    async def main() -> None:
        with trio.fail_after(30):  # a safety net only
            async with trio.open_nursery() as nursery:
                inbox._nursery = nursery
                for text in ("abc", "-1", "1.5"):
                    with pytest.raises(Refused):
                        await inbox.decide("r<1>", "budget:requests", "grant", "", text)
                with pytest.raises(Refused, match="no budget question about cost"):
                    await inbox.decide("r<1>", "budget:cost", "grant", "", "1")
                said = await inbox.decide("r<1>", "budget:requests", "grant", "", "5")
                assert "added 5 to requests" in said
                await settled()
                nursery.cancel_scope.cancel()

    trio.run(main)
    assert store.run("r<1>").status == "done" and store.run("r<1>").output == "ok"
    assert inbox.snapshot()[1] == []  # answered: nothing waits any more


def test_the_inbox_shows_a_plan_as_a_graph_and_approves_all_of_it_in_one_decision(
    tmp_path: Any,
) -> None:
    import trio

    from tickloop._human._inbox import StoreInbox
    from tickloop._human._page import render_run

    @tl.tool
    def note(value: Any) -> Any:
        return value

    plan = [
        {"_tool": "charge", "customer": "ada", "cents": 5, "_outputPath": "†state.a"},
        {"_tool": "charge", "customer": "†state.a.customer", "cents": 6, "_outputPath": "†state.b"},
        {"_tool": "note", "value": "†state.a.cents", "_outputPath": "†state.n"},
        {
            "_tool": "charge",
            "customer": "<b>bob</b>",
            "cents": "†state.n",
            "_outputPath": "†state.c",
        },
    ]
    model = tl.ScriptedModel([{"calls": plan}, {"calls": [], "output": "ok"}])
    store = tl.SQLiteStore(tmp_path / "runs.db")
    asked: list[str] = []

    def later(call: tl.PendingCall) -> tl.Decision:
        asked.append(call.id)
        return tl.Defer()

    agent = tl.Agent(model, tools=[charge, note], approve=later, store=store)
    assert agent.run({}, run_id="r").status == "paused"
    assert asked == ["c1.0"]  # the others wait for what it writes
    inbox = StoreInbox(store, agent, log=io.StringIO())
    page = inbox.run_page("r")
    assert page is not None
    run, calls, views = page
    [view] = views
    assert view.downstream == ["c1.1", "c1.3"]  # the gated readers, through `note` too
    assert sorted(view.arrows) == [("c1.0", "c1.1"), ("c1.0", "c1.2"), ("c1.2", "c1.3")]
    text = render_run(title="t", run=run, calls=calls, pending=views, token="k", nonce="n")
    graph = re.search(r'<ul class="plan-graph">(.*?)</ul>', text)
    assert graph is not None
    shown = re.findall(r"<code>([^<]*)</code> → <code>([^<]*)</code>", graph.group(1))
    assert sorted(shown) == sorted(view.arrows)
    assert 'value="approve_all"' in text and "Approve all of these (3 calls)" in text

    async def main() -> None:
        with trio.fail_after(30):  # a safety net only
            async with trio.open_nursery() as nursery:
                inbox._nursery = nursery
                said = await inbox.decide("r", "c1.0", "approve_all", "", "")
                assert said.startswith("approved with the calls that read it c1.0")
                while inbox._resuming or store.run("r").status == "paused":
                    await trio.sleep(0.01)

    trio.run(main)
    # One decision approved the branch: the resumed run asked nobody about c1.1 or c1.3.
    assert asked == ["c1.0"]
    assert store.run("r").status == "done"
    assert {c.id: c.status for c in store.calls("r")} == {
        "c1.0": "done",
        "c1.1": "done",
        "c1.2": "done",
        "c1.3": "done",
    }


def test_the_live_page_approves_a_call_and_all_that_reads_it_at_once(
    approval: tl.BrowserApproval,
) -> None:
    box: dict[str, Any] = {}

    @tl.tool
    def who() -> str:
        return "ada"

    # c1.0 is asked once `who` has answered: the whole plan is known by then.
    calls = [
        {"_tool": "charge", "customer": "†state.who", "cents": 5, "_outputPath": "†state.a"},
        {"_tool": "charge", "customer": "†state.a.customer", "cents": 6, "_outputPath": "†state.b"},
        {"_tool": "who", "_outputPath": "†state.who"},
    ]

    def go() -> None:
        box["result"] = tl.run_calls(calls, tools=[charge, who], approve=approval)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not approval.snapshot()[1]:
        assert time.monotonic() < deadline, "the call never reached the page"
        time.sleep(0.01)
    [view] = approval.snapshot()[1]
    assert view.id == "c1.0" and view.downstream == ["c1.1"]
    base, token = _split(approval.url)
    page = httpx.get(base + "/", params={"token": token}).text
    assert "<code>c1.0</code> → <code>c1.1</code>" in page
    assert "Approve all of these (2 calls)" in page
    answer = httpx.post(
        base + "/decide",
        data={"token": token, "run": "", "call": "c1.0", "action": "approve_all"},
        headers={"Accept": "application/json"},
    )
    assert answer.json() == {"message": "approved with the calls that read it c1.0"}
    thread.join(10)  # c1.1 never waits on the page: its approval came with c1.0's
    assert not thread.is_alive()
    assert box["result"].state["b"] == {"customer": "ada", "cents": 6, "key": ""}

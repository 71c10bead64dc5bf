"""The approval page and the inbox, driven in a real browser (headless Chromium).

One browser session serves the module. Chromium and chromedriver come from Debian
(`.ci/run` installs them when missing), so these tests run in CI rather than skip.

Screenshots: each test saves its PNG in its tmp_path; with TICKLOOP_DOCS_SCREENSHOTS=1
they are written to docs/ instead (docs/approvals.md shows them):
`TICKLOOP_DOCS_SCREENSHOTS=1 python -m pytest tests/test_human_browser.py`.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import tickloop as tl

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DOCS = Path(__file__).resolve().parent.parent / "docs"
XSS = "</script><img src=x onerror=window.pwned=1>"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail(
            "the browser tests need Debian's chromium and chromium-driver "
            "(apt-get install -y chromium chromium-driver; .ci/run does this)"
        )
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium must not look for downloads
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--window-size=1100,900",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(condition: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except Exception:  # an element between renders
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _screenshot(driver: Any, tmp_path: Path, name: str) -> Path:
    target = DOCS / name if os.environ.get("TICKLOOP_DOCS_SCREENSHOTS") else tmp_path / name
    driver.save_screenshot(str(target))
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return target


def _card(driver: Any, call_id: str) -> Any:
    from selenium.webdriver.common.by import By

    for card in driver.find_elements(By.CSS_SELECTOR, "article.call"):
        if card.find_element(By.CSS_SELECTOR, "code.id").text == call_id:
            return card
    return None


# --------------------------------------------------------------------------------------
# A live run: BrowserApproval


@tl.tool
def lookup(customer: str) -> dict:
    return {"customer": customer, "note": XSS}


@tl.tool(requires_approval=True)
def charge(customer: str, cents: int, api_key: str = "", memo: str = "") -> dict:
    """Charge a customer."""
    return {"customer": customer, "cents": cents, "key_len": len(api_key)}


@tl.tool(requires_approval=True)
def refund(customer: str, cents: int) -> str:
    return f"refunded {cents}"


PLAN = [
    {"_tool": "lookup", "customer": "ada", "_outputPath": "†state.profile"},
    {
        "_tool": "charge",
        "customer": "†state.profile.customer",
        "cents": 2500,
        "api_key": "sk-live-secret",
        "memo": "†state.profile.note",  # a tool's output, hostile: shown as text
        "_outputPath": "†state.receipt",
    },
    {
        "_tool": "refund",
        "customer": "†state.profile.customer",
        "cents": 700,
        "_outputPath": "†state.refund",
    },
]


def _run_in_background(agent: tl.Agent, run_id: str) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["result"] = agent.run({"customer": "ada"}, run_id=run_id)
        except BaseException as error:  # shown by the test that joins
            box["error"] = error

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, box


def test_approve_one_call_and_edit_the_other_in_the_browser(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    with tl.BrowserApproval(output=open(os.devnull, "w")) as approval:
        model = tl.ScriptedModel(
            [{"calls": PLAN, "output": None}, {"calls": [], "output": "finished"}]
        )
        agent = tl.Agent(model, tools=[lookup, charge, refund], approve=approval)
        thread, box = _run_in_background(agent, "order-42")
        browser.get(approval.url)
        _wait(lambda: _card(browser, "c1.1"), "the first gated call on the page")
        card = _card(browser, "c1.1")
        text = card.text
        # What a person reads: resolved parameters (secret redacted), and their sources.
        assert '"customer": "ada"' in text and '"api_key": "[redacted]"' in text
        assert "sk-live-secret" not in browser.page_source
        assert "values from" in text and "c1.0" in text
        assert XSS in text  # the hostile output read into a parameter is text
        assert browser.find_elements(By.CSS_SELECTOR, "img") == []
        # One question at a time: the second gated call arrives once the first is answered.
        card.find_element(By.CSS_SELECTOR, "button.approve").click()
        _wait(lambda: _card(browser, "c1.2"), "the second gated call")
        assert _card(browser, "c1.1") is None
        card = _card(browser, "c1.2")
        card.find_element(By.CSS_SELECTOR, "details.edit summary").click()
        editor = card.find_element(By.CSS_SELECTOR, "details.edit textarea")
        editor.clear()
        editor.send_keys('{"customer": "ada", "cents": "seven hundred"}')
        card.find_element(By.CSS_SELECTOR, "details.edit button").click()
        problem = _wait(
            lambda: card.find_element(By.CSS_SELECTOR, "details.edit .problem").text,
            "the schema error",
        )
        assert "cents" in problem and "integer" in problem
        _screenshot(browser, tmp_path, "approvals_browser.png")
        editor.clear()
        editor.send_keys('{"customer": "ada", "cents": 650}')
        card.find_element(By.CSS_SELECTOR, "details.edit button").click()
        thread.join(30)
        assert "error" not in box, box.get("error")
        result = box["result"]
        assert result.output == "finished"
        assert result.state["receipt"] == {"customer": "ada", "cents": 2500, "key_len": 14}
        assert result.state["refund"] == "refunded 650"
        assert result.records["c1.2"].params == {"customer": "ada", "cents": 650}

        # The run page: the run live, its calls and timeline; the hostile output is text.
        browser.get(approval.url.replace("/?", "/runs/order-42?"))
        _wait(lambda: "done" in browser.find_element(By.ID, "summary").text, "the run's status")
        assert XSS in browser.find_element(By.ID, "calls").text
        assert browser.find_elements(By.CSS_SELECTOR, "img") == []
        assert browser.execute_script("return window.pwned") is None
        browser.switch_to.frame(browser.find_element(By.ID, "timeline"))
        _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "g.call"), "the timeline's bars")
        assert len(browser.find_elements(By.CSS_SELECTOR, "g.call")) == 3
        browser.switch_to.default_content()
        _screenshot(browser, tmp_path, "approvals_run.png")


def test_a_deny_reason_typed_in_the_browser_reaches_the_model(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    with tl.BrowserApproval(output=open(os.devnull, "w")) as approval:
        model = tl.ScriptedModel(
            [
                {
                    "calls": [
                        {
                            "_tool": "refund",
                            "customer": "bob",
                            "cents": 90_000,
                            "_outputPath": "†state.refund",
                        }
                    ],
                    "output": None,
                },
                {"calls": [], "output": "gave up"},
            ]
        )
        agent = tl.Agent(model, tools=[refund], approve=approval)
        thread, box = _run_in_background(agent, "refund-9")
        browser.get(approval.url)
        card = _wait(lambda: _card(browser, "c1.0"), "the refund on the page")
        card.find_element(By.CSS_SELECTOR, "input[name=reason]").send_keys(
            "refunds over 500 need a manager"
        )
        card.find_element(By.CSS_SELECTOR, "button.deny").click()
        thread.join(30)
        assert box["result"].records["c1.0"].status == "denied"
        second_request = json.dumps(model.requests[1], ensure_ascii=False)
        assert "refunds over 500 need a manager" in second_request
        flash = _wait(lambda: browser.find_element(By.ID, "flash").text, "the confirmation")
        assert "denied c1.0" in flash


# --------------------------------------------------------------------------------------
# Stored runs: the inbox of `tickloop serve`

AGENT_MODULE = textwrap.dedent(
    """
    import tickloop as tl

    @tl.tool
    def fetch(n: int) -> int:
        return n

    @tl.tool(requires_approval=True)
    def pay(cents: int) -> str:
        return f"receipt-{cents}"

    @tl.tool
    def email(receipt: str) -> str:
        return "sent " + receipt

    PLAN = [
        {"_tool": "fetch", "n": 250, "_outputPath": "†state.amount"},
        {"_tool": "pay", "cents": "†state.amount", "_outputPath": "†state.receipt"},
        {"_tool": "email", "receipt": "†state.receipt", "_outputPath": "†state.mail"},
    ]

    def make_agent():
        model = tl.ScriptedModel([{"calls": PLAN, "output": None},
                                  {"calls": [], "output": "paid"}])
        return tl.Agent(model, tools=[fetch, pay, email], approve=lambda call: tl.Defer())
    """
)


@pytest.fixture
def paused_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "billing_agent.py").write_text(AGENT_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("billing_agent", None)
    import billing_agent  # type: ignore[import-not-found]

    db = tmp_path / "runs.db"
    agent = billing_agent.make_agent()
    agent.store = tl.SQLiteStore(db)
    result = agent.run({}, run_id="bill-1")
    assert result.status == "paused" and [p.id for p in result.pending] == ["c1.1"]
    agent.store.close()
    return db


def _serve(tmp_path: Path, db: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tickloop._cli", "serve", "--store", str(db), *extra],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", line)
    if match is None:
        process.kill()
        raise AssertionError(f"serve printed {line!r}; stderr: {process.stderr.read()}")
    return process, match.group(1)


def test_a_deferred_call_approved_in_the_inbox_is_resumed_by_serve_agent(
    browser: Any, tmp_path: Path, paused_store: Path
) -> None:
    from selenium.webdriver.common.by import By

    process, url = _serve(tmp_path, paused_store, "--agent", "billing_agent:make_agent")
    try:
        browser.get(url)
        card = _wait(lambda: _card(browser, "c1.1"), "the deferred call in the inbox")
        assert "run bill-1" in card.text and '"cents": 250' in card.text
        assert "values from" in card.text and "waiting on it" in card.text
        assert "c1.2" in card.find_element(By.CSS_SELECTOR, "dl.links").text
        row = browser.find_element(By.CSS_SELECTOR, "#runs tbody tr")
        assert "bill-1" in row.text and "paused" in row.text
        _screenshot(browser, tmp_path, "approvals_inbox.png")
        card.find_element(By.CSS_SELECTOR, "button.approve").click()
        # serve --agent resumes the run once nothing it waits on is undecided.
        _wait(
            lambda: tl.SQLiteStore(paused_store).run("bill-1").status == "done",
            "the run to be resumed and finished",
            timeout=30,
        )
        _wait(
            lambda: "done" in browser.find_element(By.CSS_SELECTOR, "#runs tbody tr").text,
            "the inbox to show the run done",
        )
        with tl.SQLiteStore(paused_store) as store:
            assert store.run("bill-1").output == "paid"
            calls = {call.id: call for call in store.calls("bill-1")}
        assert calls["c1.1"].decision == {"decision": "approve"}
        assert calls["c1.2"].status == "done"
    finally:
        process.terminate()
        process.wait(10)


def test_the_inbox_records_decisions_as_tickloop_approve_does(
    tmp_path: Path, paused_store: Path
) -> None:
    """Without --agent: the decision is stored for a later resume, and only once."""
    process, url = _serve(tmp_path, paused_store)
    try:
        base, token = url.split("/?token=")
        form = {"token": token, "run": "bill-1", "call": "c1.1", "action": "approve"}
        # Edits need the tool's schema, which only --agent brings.
        edit = httpx.post(
            f"{base}/decide",
            data={**form, "action": "edit", "params": '{"cents": 1}'},
            headers={"Accept": "application/json"},
        )
        assert edit.status_code == 409 and "--agent" in edit.json()["error"]
        first = httpx.post(f"{base}/decide", data=form, headers={"Origin": base})
        assert first.status_code == 303
        assert tl.SQLiteStore(paused_store).pending("bill-1")[0].decision == {"decision": "approve"}
        second = httpx.post(f"{base}/decide", data=form, headers={"Origin": base})
        assert second.status_code == 409
        assert "already decided (approve)" in html.unescape(second.text)
    finally:
        process.terminate()
        process.wait(10)
    done = tl.SQLiteStore(paused_store).run("bill-1")
    assert done.status == "paused"  # nothing resumed it


BUDGET_MODULE = textwrap.dedent(
    """
    import tickloop as tl

    @tl.tool
    def fetch(n: int) -> int:
        return n

    PLAN = {"calls": [{"_tool": "fetch", "n": 1, "_outputPath": "†state.a"}]}

    def make_agent(on_budget=None):
        model = tl.ScriptedModel([PLAN, PLAN, {"calls": [], "output": "enough"}])
        return tl.Agent(model, tools=[fetch], budget=tl.Budget(requests=1),
                        on_budget=on_budget)
    """
)


def test_a_budget_question_is_answered_with_more_room_in_the_inbox(
    browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from selenium.webdriver.common.by import By

    (tmp_path / "budget_agent.py").write_text(BUDGET_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("budget_agent", None)
    import budget_agent  # type: ignore[import-not-found]

    db = tmp_path / "runs.db"
    agent = budget_agent.make_agent(on_budget=lambda request: tl.Defer())
    agent.store = tl.SQLiteStore(db)
    assert agent.run({}, run_id="cap-<1>").status == "paused"
    agent.store.close()
    process, url = _serve(tmp_path, db, "--agent", "budget_agent:make_agent")
    try:
        browser.get(url)
        card = _wait(lambda: _card(browser, "requests"), "the budget question in the inbox")
        assert "run cap-<1>" in card.text and "used up" in card.text  # shown as text
        card.find_element(By.CSS_SELECTOR, "input[name=value]").send_keys("3")
        card.find_element(By.CSS_SELECTOR, "button.approve").click()
        _wait(
            lambda: tl.SQLiteStore(db).run("cap-<1>").status == "done",
            "the run to be resumed with more room and finished",
            timeout=30,
        )
        _wait(lambda: _card(browser, "requests") is None, "the question to leave the inbox")
        assert tl.SQLiteStore(db).run("cap-<1>").output == "enough"
    finally:
        process.terminate()
        process.wait(10)


# --------------------------------------------------------------------------------------
# The console hook, rendered for the docs


def test_the_console_transcript_renders_for_the_docs(browser: Any, tmp_path: Path) -> None:
    script = tmp_path / "console_demo.py"
    script.write_text(
        textwrap.dedent(
            """
            import tickloop as tl

            @tl.tool
            def lookup(customer: str) -> dict:
                return {"customer": customer, "plan": "pro"}

            @tl.tool(requires_approval=True)
            def charge(customer: str, cents: int, api_key: str = "") -> dict:
                return {"customer": customer, "cents": cents}

            @tl.tool
            def email(receipt: dict) -> str:
                return "sent"

            result = tl.run_calls(
                [{"_tool": "lookup", "customer": "ada", "_outputPath": "†state.profile"},
                 {"_tool": "charge", "customer": "†state.profile.customer", "cents": 2500,
                  "api_key": "sk-live", "_outputPath": "†state.receipt"},
                 {"_tool": "email", "receipt": "†state.receipt", "_outputPath": "†state.mail"}],
                tools=[lookup, charge, email], approve=tl.ConsoleApproval())
            print(result.state["receipt"])
            """
        ),
        encoding="utf-8",
    )
    typed = 'x\ne\n{"customer": "ada", "cents": "2,000"}\n{"customer": "ada", "cents": 2000}\n'
    done = subprocess.run(
        [sys.executable, str(script)], input=typed, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "{'customer': 'ada', 'cents': 2000}" in done.stdout
    shown = done.stderr  # piped answers are echoed: it reads like the terminal session
    assert "? e\n" in shown
    page = tmp_path / "console.html"
    page.write_text(
        "<!doctype html><meta charset=utf-8><body style='margin:0;background:#1d2733'>"
        "<pre style='color:#e6edf3;font:14px/1.45 monospace;padding:14px 18px;margin:0'>"
        f"$ python pay.py\n{html.escape(shown)}</pre>",
        encoding="utf-8",
    )
    browser.get(page.as_uri())
    browser.set_window_size(900, 560)
    try:
        _screenshot(browser, tmp_path, "approvals_console.png")
    finally:
        browser.set_window_size(1100, 900)

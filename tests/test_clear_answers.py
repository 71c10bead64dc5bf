"""Issue 16: every mistake a new user (or an attacker) makes gets a clear answer.

Each test names the item of the issue it covers; each failed on main before the fix.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import logging
import math
import re
import uuid
from pathlib import Path
from typing import Any

import pydantic
import pytest
import trio
import trio.testing

import tickloop as tl


@tl.tool
async def echo(text: str) -> str:
    return text


def _answer(calls: list[dict[str, Any]] | None = None, output: Any = "ok") -> dict[str, Any]:
    return {"calls": calls or [], "output": output}


# -- item 3: an on_event callback that raises -------------------------------------------


def test_a_raising_on_event_callback_is_logged_counted_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    seen: list[str] = []

    def broken(event: tl.RunEvent) -> None:
        seen.append(event.kind)
        raise RuntimeError("dashboard down")

    calls = [{"_tool": "echo", "text": "hi", "_outputPath": "†state.x"}]
    agent = tl.Agent(
        tl.ScriptedModel([_answer(calls), _answer()]),
        tools=[echo],
        store=tmp_path / "runs.db",
    )
    caplog.set_level(logging.ERROR, logger="tickloop")
    result = agent.run({"q": 1}, run_id="r1", on_event=broken)
    assert result.status == "done"
    assert result.state == {"x": "hi"}
    assert "run.started" in seen and "run.ended" in seen
    messages = [r.getMessage() for r in caplog.records if r.name == "tickloop"]
    assert any("on_event" in m and "run.started" in m for m in messages)
    # The run is not left claimed: it is done in the store.
    assert tl.SQLiteStore(tmp_path / "runs.db").run("r1").status == "done"


def test_on_event_that_is_not_callable_is_refused_at_construction() -> None:
    with pytest.raises(tl.ConfigurationError, match="on_event"):
        tl.Agent(tl.ScriptedModel([]), on_event="x")  # type: ignore[arg-type]
    agent = tl.Agent(tl.ScriptedModel([_answer()]))
    with pytest.raises(tl.ConfigurationError, match="on_event"):
        agent.run({}, on_event=5)  # type: ignore[arg-type]


# -- item 5: run_calls and tools= given the wrong shape ----------------------------------


@pytest.mark.parametrize(
    ("calls", "match"),
    [
        ({"_tool": "echo", "text": "a"}, r"\[call\]"),
        ('[{"_tool": "echo"}]', "json.loads"),
        (None, "NoneType"),
    ],
)
def test_run_calls_refuses_what_is_not_a_list_of_calls(calls: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        tl.run_calls(calls, tools=[echo])


@pytest.mark.parametrize("tools", [echo, "echo"])
def test_tools_must_be_a_list(tools: Any) -> None:
    with pytest.raises(tl.ConfigurationError, match=r"tools= expects a list"):
        tl.run_calls([], tools=tools)
    with pytest.raises(tl.ConfigurationError, match=r"tools= expects a list"):
        tl.Agent(tl.ScriptedModel([]), tools=tools)


# -- item 7: options checked when defined -----------------------------------------------


def test_tool_options_are_checked_at_definition() -> None:
    def f(x: int) -> int:
        return x

    with pytest.raises(tl.ConfigurationError, match="timeout"):
        tl.tool(f, timeout=math.nan)
    with pytest.raises(tl.ConfigurationError, match=r"depends_on=\['other'\]"):
        tl.tool(f, depends_on="other")
    with pytest.raises(tl.ConfigurationError, match="idempotent"):
        tl.tool(f, idempotent="no")  # type: ignore[arg-type]
    with pytest.raises(tl.ConfigurationError, match="name="):
        tl.tool(lambda x: x)
    assert tl.tool(lambda x: x, name="ident").name == "ident"


def test_agent_and_run_calls_options_are_checked() -> None:
    with pytest.raises(tl.ConfigurationError, match="instructions"):
        tl.Agent(tl.ScriptedModel([]), instructions=5)  # type: ignore[arg-type]
    with pytest.raises(tl.ConfigurationError, match="state"):
        tl.run_calls([], tools=[echo], state=[1, 2])  # type: ignore[arg-type]


def test_run_calls_inside_trio_says_use_execute() -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"await tl\.execute"):
            tl.run_calls([], tools=[echo])

    trio.run(main)


# -- item 1: input and state converted like tool results ------------------------------


class Color(enum.Enum):
    RED = "red"


class Order(pydantic.BaseModel):
    id: uuid.UUID
    at: datetime.datetime
    total: decimal.Decimal
    color: Color
    tags: set[str]


@dataclasses.dataclass
class Box:
    order: Order


ORDER = Order(
    id=uuid.UUID(int=7),
    at=datetime.datetime(2026, 1, 2, 3, 4, 5),
    total=decimal.Decimal("1.50"),
    color=Color.RED,
    tags={"a"},
)
ORDER_JSON = {
    "id": "00000000-0000-0000-0000-000000000007",
    "at": "2026-01-02T03:04:05",
    "total": "1.50",
    "color": "red",
    "tags": ["a"],
}


@pytest.mark.parametrize("with_store", [False, True])
def test_agent_input_is_converted_like_a_tool_result(with_store: bool, tmp_path: Path) -> None:
    model = tl.ScriptedModel(
        [
            _answer([{"_tool": "echo", "text": "†input.order.total", "_outputPath": "†state.t"}]),
            _answer(),
        ]
    )
    store = tmp_path / "runs.db" if with_store else None
    agent = tl.Agent(model, tools=[echo], store=store)
    result = agent.run(Box(ORDER))
    assert result.state == {"t": "1.50"}
    first = "\n".join(m["content"] for m in model.requests[0]["messages"])
    assert json.dumps({"order": ORDER_JSON}) in first  # the JSON form, not a repr
    assert "Order(" not in first


def test_run_calls_input_and_state_are_converted() -> None:
    result = tl.run_calls(
        [{"_tool": "echo", "text": "†input.color", "_outputPath": "†state.c"}],
        tools=[echo],
        input=ORDER,
        state={"when": datetime.date(2026, 1, 2)},
    )
    assert result.state == {"when": "2026-01-02", "c": "red"}
    assert result.errors == []


@pytest.mark.parametrize("bad", [{"x": math.nan}, {"x": object()}, math.inf])
def test_input_without_a_json_form_is_refused_before_anything_runs(bad: Any) -> None:
    model = tl.ScriptedModel([_answer()])
    with pytest.raises(tl.ConfigurationError, match="no JSON form"):
        tl.Agent(model).run(bad)
    assert model.requests == []
    with pytest.raises(tl.ConfigurationError, match="no JSON form"):
        tl.run_calls([], tools=[echo], input=bad)
    with pytest.raises(tl.ConfigurationError, match="no JSON form"):
        tl.run_calls([], tools=[echo], state={"s": bad})


# -- item 4: a bound parameter whose input key is missing ----------------------------


@tl.tool(bind={"user": "user_id"})
async def whoami(user: str) -> str:
    return user


def test_a_missing_bound_input_is_the_developers_error_before_the_run() -> None:
    model = tl.ScriptedModel([_answer()])
    agent = tl.Agent(model, tools=[whoami])
    with pytest.raises(tl.ConfigurationError, match=r"'user'.*'user_id'"):
        agent.run({"question": "who?"})
    assert model.requests == []
    with pytest.raises(tl.ConfigurationError, match=r"'user'.*'user_id'"):
        tl.run_calls([{"_tool": "whoami"}], tools=[whoami])
    # A run that never calls the tool, or has the key, is fine.
    assert tl.run_calls([], tools=[whoami]).errors == []
    done = tl.run_calls([{"_tool": "whoami"}], tools=[whoami], input={"user_id": "ann"})
    assert done.records["c1.0"].output == "ann"


# -- item 9: retries are not silent ----------------------------------------------------


class _Overloaded:
    """A solution model whose every request fails with a retryable 503."""

    def __init__(self) -> None:
        self.calls = 0

    async def stream_solution(self, request: Any) -> Any:
        self.calls += 1
        raise tl.ModelError("503 overloaded", status=503)
        yield  # pragma: no cover


def test_retries_are_logged_and_the_error_counts_attempts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="tickloop")
    model = _Overloaded()
    agent = tl.Agent(model, max_llm_retries=3)
    with pytest.raises(tl.ExecuteError, match="after 3 attempts"):
        trio.run(agent.run_async, {}, clock=trio.testing.MockClock(autojump_threshold=0))
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2 and "attempt 1 of 3" in retries[0]


def test_a_hosted_client_without_a_key_says_so_when_built(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    caplog.set_level(logging.WARNING, logger="tickloop")
    tl.OpenAIChat("gpt-x")
    tl.Anthropic("claude-x")
    tl.OpenAIResponses("gpt-x")
    warned = [r.getMessage() for r in caplog.records if "no API key" in r.getMessage()]
    assert len(warned) == 3 and "OPENAI_API_KEY" in warned[0]
    caplog.clear()
    tl.OpenAIChat("local", base_url="http://127.0.0.1:8000/v1")
    assert not [r for r in caplog.records if "no API key" in r.getMessage()]


# -- item 6: a hook's own bug is the developer's, not the model's -------------------------


@tl.tool(requires_approval=True)
async def charge(customer: str, cents: int) -> int:
    return cents


@pytest.mark.parametrize(
    ("answer", "status", "model_told"),
    [
        (tl.Edit({"customer": "ann"}), "invalid", "a reviewer changed this call"),
        (tl.Edit("x"), "invalid", "a reviewer changed this call"),  # type: ignore[arg-type]
        (tl.Replace(None), "invalid", "a reviewer changed this call"),  # type: ignore[arg-type]
        (tl.Approve, "denied", "a reviewer refused this call"),
        (RuntimeError("policy bug"), "denied", "a reviewer refused this call"),
    ],
)
def test_a_hook_bug_fails_closed_warns_the_developer_and_does_not_blame_the_model(
    answer: Any, status: str, model_told: str, caplog: pytest.LogCaptureFixture
) -> None:
    def hook(call: tl.PendingCall) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    caplog.set_level(logging.WARNING, logger="tickloop")
    result = tl.run_calls(
        [{"_tool": "charge", "customer": "ann", "cents": 5}], tools=[charge], approve=hook
    )
    assert result.records["c1.0"].status == status
    [error] = result.errors
    assert error["data"]["error"]["type"] == "hook"
    assert error["data"]["error"]["message"].startswith(model_told)
    warnings = [r.getMessage() for r in caplog.records if "approval hook bug" in r.getMessage()]
    assert len(warnings) == 1


# -- item 10: the command line and the timeline ---------------------------------------


def _stored_run(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    calls = [{"_tool": "echo", "text": "hi", "_outputPath": "†state.x"}]
    agent = tl.Agent(tl.ScriptedModel([_answer(calls), _answer()]), tools=[echo], store=path)
    agent.run({}, run_id="r1")
    return path


def test_trace_html_to_an_unwritable_path_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tickloop._cli._main import main

    store = _stored_run(tmp_path)
    target = tmp_path / "no-such-dir" / "t.html"
    assert main(["trace", "r1", "--store", str(store), "--html", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write" in err and "Traceback" not in err


def test_ctrl_c_in_a_command_is_quiet_with_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tickloop._cli import _main

    def interrupted(arguments: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(_main, "_demo", interrupted)
    assert _main.main(["demo"]) == 130
    assert "Traceback" not in capsys.readouterr().err


def test_timeline_of_an_unknown_run_is_a_store_error(tmp_path: Path) -> None:
    from tickloop._observe._timeline import timeline_html

    store = _stored_run(tmp_path)
    with pytest.raises(tl.StoreError, match="nope"):
        timeline_html(store, "nope")


def test_a_run_live_elsewhere_says_wait_not_resume(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    seen: list[str] = []

    async def main() -> None:
        release = trio.Event()

        @tl.tool
        async def hold(text: str) -> str:
            await release.wait()
            return text

        calls = [{"_tool": "hold", "text": "x"}]
        agent = tl.Agent(tl.ScriptedModel([_answer(calls), _answer()]), tools=[hold], store=path)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: agent.run_async({}, run_id="busy"))
            await trio.sleep(1)
            try:
                await agent.run_async({}, run_id="busy")
            except tl.ResumeError as error:
                seen.append(str(error))
            release.set()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(seen) == 1 and "wait for it" in seen[0] and "agent.resume" not in seen[0]


# -- item 12: the HTML timeline ----------------------------------------------------------


def test_an_invalid_call_that_waited_on_a_denied_call_has_its_arrow(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"

    @tl.tool(requires_approval=True)
    async def pay(n: int) -> int:
        return n

    @tl.tool
    async def use(n: int) -> int:
        return n

    calls = [
        {"_tool": "pay", "n": 1, "_outputPath": "†state.p"},
        {"_tool": "use", "n": "†state.p", "_outputPath": "†state.u"},
    ]
    agent = tl.Agent(
        tl.ScriptedModel([_answer(calls), _answer()]),
        tools=[pay, use],
        approve=lambda call: tl.Deny("no"),
        store=path,
    )
    agent.run({}, run_id="r")
    page = tl.timeline_html(path, "r")
    assert 'data-deps="c1.0"' in page
    assert page.count('class="dep') == 1


def test_the_resumed_label_is_not_clipped_at_the_right_edge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tickloop._observe import _timeline

    store = _stored_run(tmp_path)
    original = _timeline._requests

    def resumed_at_the_end(journal: Any) -> Any:
        requests, _ = original(journal)
        return requests, [max(at for _, at, _, _ in journal)]  # resumed as the run ended

    monkeypatch.setattr(_timeline, "_requests", resumed_at_the_end)
    page = _timeline.timeline_html(store, "r1")
    [label] = re.findall(r'<text class="resume-label"[^>]*>', page)
    x = float(re.search(r'x="([0-9.]+)"', label).group(1))  # type: ignore[union-attr]
    width = _timeline._LABEL + _timeline._PLOT + 30
    assert 'text-anchor="end"' in label or x + _timeline._RESUMED_LABEL_WIDTH <= width
    assert 'text-anchor="end"' in label and x <= width

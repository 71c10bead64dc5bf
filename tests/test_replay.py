"""Replay and fork a stored run (API.md "Replay and fork", docs/replay.md).

Record once, replay forever: a stored run is answered again from its journal, with no
handler called; a fork re-runs exactly the calls named, the calls of the tools named and
what reads them, and asks the model again only from the first request that changed.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

import tickloop as tl
from tickloop.models import TextDelta

RAN: Counter[str] = Counter()


@tl.tool
def fetch(url: str) -> str:
    """Fetch a page."""
    RAN["fetch"] += 1
    return f"page of {url}"


@tl.tool
def summarize(text: str) -> str:
    """Summarize a text."""
    RAN["summarize"] += 1
    return f"summary({text})" if not SUMMARY_V2 else f"summary v2({text})"


@tl.tool
def count_words(text: str) -> int:
    """Count words."""
    RAN["count_words"] += 1
    return len(text.split())


@tl.tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish a text."""
    RAN["publish"] += 1
    return f"published {len(text)} chars"


SUMMARY_V2 = False

SCRIPT: list[Any] = [
    {
        "calls": [
            {"_tool": "fetch", "url": "https://a.example", "_outputPath": "†state.a"},
            {"_tool": "fetch", "url": "https://b.example", "_outputPath": "†state.b"},
            {"_tool": "summarize", "text": "†state.a", "_outputPath": "†state.sa"},
            {"_tool": "count_words", "text": "†state.b", "_outputPath": "†state.nb"},
            {"_tool": "count_words", "text": "†state.sa", "_outputPath": "†state.nsa"},
        ],
        "output": None,
    },
    {
        "calls": [{"_tool": "publish", "text": "†state.sa", "_outputPath": "†state.receipt"}],
        "output": None,
    },
    {"calls": [], "output": {"receipt": "†state.receipt", "words": "†state.nb"}},
]

APPROVALS: list[str] = []


def approve(call: tl.PendingCall) -> bool:
    APPROVALS.append(call.id)
    return True


def make_agent(model: Any = None) -> tl.Agent:
    return tl.Agent(
        model or tl.ScriptedModel(SCRIPT),
        tools=[fetch, summarize, count_words, publish],
        approve=approve,
    )


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    global SUMMARY_V2
    RAN.clear()
    APPROVALS.clear()
    SUMMARY_V2 = False
    yield
    SUMMARY_V2 = False


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[tl.SQLiteStore, tl.RunResult]:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    agent = tl.Agent(
        tl.ScriptedModel(SCRIPT),
        tools=[fetch, summarize, count_words, publish],
        approve=approve,
        store=store,
    )
    first = agent.run({"topic": "trio"}, run_id="order-42")
    RAN.clear()
    APPROVALS.clear()
    return store, first


def test_a_replay_with_recorded_tools_returns_the_same_output_and_runs_no_handler(
    recorded: tuple[tl.SQLiteStore, tl.RunResult],
) -> None:
    store, first = recorded
    summary = "summary(page of https://a.example)"
    assert first.output == {"receipt": f"published {len(summary)} chars", "words": 3}
    again = make_agent(tl.ScriptedModel([])).replay("order-42", store=store)
    assert again.output == first.output
    assert again.state == first.state
    assert sum(RAN.values()) == 0  # no handler ran
    assert APPROVALS == []  # the recorded decision was reused, nobody asked
    assert {k: r.status for k, r in again.records.items()} == {
        k: r.status for k, r in first.records.items()
    }
    # Nothing was written to the store: still one run.
    assert [run.run_id for run in store.runs()] == ["order-42"]


def test_a_replay_with_live_tools_runs_the_handlers_against_the_recorded_model(
    recorded: tuple[tl.SQLiteStore, tl.RunResult],
) -> None:
    store, first = recorded
    again = make_agent(tl.ScriptedModel([])).replay("order-42", store=store, tools="live")
    assert again.output == first.output
    assert RAN == Counter(fetch=2, summarize=1, count_words=2, publish=1)


def test_the_replay_model_answers_a_new_run_of_the_same_agent(
    recorded: tuple[tl.SQLiteStore, tl.RunResult],
) -> None:
    store, first = recorded
    result = make_agent(tl.ReplayModel(store, "order-42", strict=True)).run({"topic": "trio"})
    assert result.output == first.output


def test_a_strict_replay_model_names_the_first_difference_of_a_changed_request(
    recorded: tuple[tl.SQLiteStore, tl.RunResult],
) -> None:
    store, _ = recorded
    with pytest.raises(tl.ExecuteError, match=r"request 1 differs from the one recorded.*trio"):
        make_agent(tl.ReplayModel(store, "order-42", strict=True)).run({"topic": "asyncio"})
    # Not strict: the recorded answers are given whatever the request.
    loose = make_agent(tl.ReplayModel(store, "order-42")).run({"topic": "asyncio"})
    assert loose.output is not None


def test_a_fork_reruns_one_tool_and_its_dependents_and_reuses_the_rest(
    recorded: tuple[tl.SQLiteStore, tl.RunResult],
) -> None:
    global SUMMARY_V2
    store, first = recorded
    SUMMARY_V2 = True  # summarize changed: its calls and what reads them run again
    live = tl.ScriptedModel(SCRIPT)
    fixed = make_agent(live).fork("order-42", "order-42b", store=store, rerun_tools=["summarize"])
    # summarize ran once; count_words of its summary ran again, count_words of page b
    # did not; fetch never ran again. publish reads the summary: re-run and asked again.
    assert RAN == Counter(summarize=1, count_words=1, publish=1)
    assert APPROVALS == ["c2.0"]
    assert fixed.state["sa"] == "summary v2(page of https://a.example)"
    assert fixed.state["nb"] == first.state["nb"]
    # The first request was unchanged (reused); the second saw a new state: asked again.
    assert len(live.requests) == 2  # requests 2 and 3, not 1
    assert fixed.output == {"receipt": f"published {len(fixed.state['sa'])} chars", "words": 3}
    assert {run.run_id for run in store.runs()} == {"order-42", "order-42b"}
    assert store.run("order-42b").status == "done"


def test_a_fork_of_named_calls_reruns_them_and_what_reads_them(
    recorded: tuple[tl.SQLiteStore, tl.RunResult],
) -> None:
    store, first = recorded
    fixed = make_agent(tl.ScriptedModel(SCRIPT)).fork(
        "order-42", "order-42c", store=store, rerun=["c1.1"]
    )
    # fetch b and count_words of it ran again; the rest was reused, and the unchanged
    # state means every request was the recorded one: the model was never asked.
    assert RAN == Counter(fetch=1, count_words=1)
    assert APPROVALS == []
    assert fixed.output == first.output


def test_a_fork_naming_a_call_the_run_does_not_have_is_refused_before_anything_runs(
    recorded: tuple[tl.SQLiteStore, tl.RunResult],
) -> None:
    store, _ = recorded
    with pytest.raises(tl.ConfigurationError, match=r"no call 'c9\.9'"):
        make_agent().fork("order-42", "x", store=store, rerun=["c9.9"])
    assert {run.run_id for run in store.runs()} == {"order-42"}


def test_replaying_a_run_the_store_does_not_have_is_refused(
    recorded: tuple[tl.SQLiteStore, tl.RunResult],
) -> None:
    store, _ = recorded
    with pytest.raises(tl.ResumeError, match="no run 'nope'"):
        make_agent().replay("nope", store=store)


AGENT_MODULE = '''
import os
import tickloop as tl

def _count(name):
    with open(os.environ["FORK_COUNTS"], "a") as f:
        f.write(name + "\\n")

@tl.tool
def fetch(url: str) -> str:
    """Fetch a page."""
    _count("fetch")
    return "page of " + url

@tl.tool
def count_words(text: str) -> int:
    """Count words."""
    _count("count_words")
    return len(text.split())

SCRIPT = [
    {"calls": [{"_tool": "fetch", "url": "a", "_outputPath": "†state.a"},
               {"_tool": "fetch", "url": "b", "_outputPath": "†state.b"},
               {"_tool": "count_words", "text": "†state.a", "_outputPath": "†state.n"}],
     "output": None},
    {"calls": [], "output": "†state.n"},
]

def agent():
    return tl.Agent(tl.ScriptedModel(SCRIPT), tools=[fetch, count_words])
'''


def test_tickloop_fork_on_the_command_line_reruns_the_call_named_and_what_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tickloop._cli._main import main

    (tmp_path / "forkagent.py").write_text(AGENT_MODULE, encoding="utf-8")
    counts = tmp_path / "counts"
    monkeypatch.setenv("FORK_COUNTS", str(counts))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import forkagent

    store = tl.SQLiteStore(tmp_path / "runs.db")
    agent = forkagent.agent()
    agent.store = store
    assert agent.run(run_id="r1").output == 3
    counts.write_text("")
    db = str(tmp_path / "runs.db")
    code = main(
        ["fork", "r1", "r2", "--rerun", "c1.0", "--agent", "forkagent:agent", "--store", db]
    )
    assert code == 0, capsys.readouterr().err
    assert "run r2: done after 2 iterations" in capsys.readouterr().out
    assert sorted(counts.read_text().split()) == ["count_words", "fetch"]
    assert (
        main(["fork", "r1", "r3", "--rerun", "c7.7", "--agent", "forkagent:agent", "--store", db])
        == 2
    )
    assert "no call 'c7.7'" in capsys.readouterr().err


def test_a_tools_protocol_run_replays_and_forks_too(tmp_path: Path) -> None:
    def turn_call(name: str, arguments: dict[str, Any], id: str) -> dict[str, Any]:
        return {"id": id, "name": name, "arguments": arguments}

    script: list[Any] = [
        {
            "tool_calls": [
                turn_call("fetch", {"url": "a"}, "p0"),
                turn_call("fetch", {"url": "b"}, "p1"),
            ]
        },
        {"tool_calls": [turn_call("count_words", {"text": "x y z"}, "p2")]},
        "Done: 3 words.",
    ]
    store = tl.SQLiteStore(tmp_path / "runs.db")
    agent = tl.Agent(
        tl.ScriptedModel(script), tools=[fetch, count_words], protocol="tools", store=store
    )
    first = agent.run("count", run_id="t1")
    assert first.output == "Done: 3 words."
    RAN.clear()
    offline = tl.Agent(tl.ScriptedModel([]), tools=[fetch, count_words], protocol="tools")
    again = offline.replay("t1", store=store)
    assert again.output == first.output and sum(RAN.values()) == 0
    live = tl.ScriptedModel(script)
    forked = tl.Agent(live, tools=[fetch, count_words], protocol="tools").fork(
        "t1", "t2", store=store, rerun=["c2.0"]
    )
    # count_words ran again; its result is the same, so the last request was the
    # recorded one too: the model was never asked.
    assert RAN == Counter(count_words=1) and live.requests == []
    assert forked.output == first.output
    with pytest.raises(tl.ConfigurationError, match="protocol='tools'"):
        make_agent().replay("t1", store=store)


class _RacingModel:
    """Streams one plan in two pieces: a call of `explode`, then a call of an unknown tool.

    `explode_first`: the second piece comes only after `explode` has failed, as when a real
    server is slower than the tool; else `explode` fails only after the whole plan came.
    Either way the tick has the same two errors, in the other order (PROTOCOL §7)."""

    model = "racing"

    def __init__(self, explode_first: bool) -> None:
        self.explode_first = explode_first
        self.requests: list[dict[str, Any]] = []
        self.exploded: trio.Event | None = None
        self.streamed: trio.Event | None = None

    async def stream_solution(self, request: Any) -> Any:
        self.requests.append(request.to_dict())
        if request.iteration > 1:
            yield TextDelta('{"calls": [], "output": "done"}')
            return
        self.exploded, self.streamed = trio.Event(), trio.Event()
        yield TextDelta('{"calls": [{"_tool": "explode", "_outputPath": "†state.x"}')
        if self.explode_first:
            await self.exploded.wait()
        yield TextDelta(', {"_tool": "nope"}], "output": null}')
        self.streamed.set()

    async def explode(self) -> str:
        assert self.exploded is not None and self.streamed is not None
        if not self.explode_first:
            await self.streamed.wait()
        self.exploded.set()
        raise RuntimeError("boom")


def test_a_tick_s_errors_give_the_same_request_whatever_order_they_happened_in() -> None:
    """A call that fails while the model still writes races the plan's own errors; the
    next request must not depend on who won, or a strict replay and a fork of a real run
    see a request that differs from the recorded one (found recording tests/recordings)."""
    requests, orders = [], []
    for explode_first in (True, False):
        model = _RacingModel(explode_first)
        explode = tl.tool(model.explode, name="explode", description="Fail.")
        result = tl.Agent(model, tools=[explode]).run("go")
        assert result.output == "done"
        orders.append([e["data"]["error"]["type"] for e in result.errors])
        requests.append(model.requests[1])
    assert orders == [["runtime", "structural"], ["structural", "runtime"]]  # the race
    assert requests[0] == requests[1]


def test_the_replay_model_answers_a_tools_protocol_run_in_its_recorded_wire_format(
    tmp_path: Path,
) -> None:
    script: list[Any] = [
        {"tool_calls": [{"id": "p0", "name": "fetch", "arguments": {"url": "a"}}]},
        {"tool_calls": [{"id": "p1", "name": "count_words", "arguments": {"text": "x y"}}]},
        "Done: 2 words.",
    ]
    store = tl.SQLiteStore(tmp_path / "runs.db")
    tools = [fetch, count_words]
    first = tl.Agent(tl.ScriptedModel(script), tools=tools, protocol="tools", store=store).run(
        "count", run_id="t1"
    )
    RAN.clear()
    replay = tl.ReplayModel(store, "t1", strict=True)
    assert replay.turn_format == "scripted"  # the recording client's, not a guess
    again = tl.Agent(replay, tools=tools, protocol="tools").run("count")
    # The tools ran for real and their results went back as the recording client sent
    # them: every request was the recorded one.
    assert again.output == first.output == "Done: 2 words."
    assert RAN == Counter(fetch=1, count_words=1)
    with pytest.raises(tl.ExecuteError, match=r"request 1 differs .*'t1'.*count"):
        tl.Agent(tl.ReplayModel(store, "t1", strict=True), tools=tools, protocol="tools").run(
            "tally"
        )
    with pytest.raises(tl.ExecuteError, match="protocol='tools'"):
        make_agent(tl.ReplayModel(store, "t1")).run({"topic": "trio"})


def _tree(store: tl.SQLiteStore | None = None) -> tl.Agent:
    """A writer whose researcher (a sub-agent) fetches and summarizes (PROTOCOL §11)."""
    researcher = tl.Agent(
        tl.ScriptedModel(
            [
                {
                    "calls": [
                        {"_tool": "fetch", "url": "†input.task", "_outputPath": "†state.page"},
                        {"_tool": "summarize", "text": "†state.page", "_outputPath": "†state.s"},
                    ]
                },
                {"calls": [], "output": "†state.s"},
            ]
        ),
        tools=[fetch, summarize],
        name="researcher",
        description="Research a topic.",
    )
    return tl.Agent(
        tl.ScriptedModel(
            [
                {
                    "calls": [
                        {"_tool": "researcher", "task": "trio", "_outputPath": "†state.notes"},
                        {"_tool": "count_words", "text": "†state.notes", "_outputPath": "†state.n"},
                        {"_tool": "fetch", "url": "elsewhere", "_outputPath": "†state.other"},
                    ]
                },
                {"calls": [], "output": {"notes": "†state.notes", "n": "†state.n"}},
            ]
        ),
        tools=[researcher, count_words, fetch],
        store=store,
    )


def test_a_tree_replays_by_path_and_forks_re_running_a_childs_call_and_what_reads_it(
    tmp_path: Path,
) -> None:
    global SUMMARY_V2
    store = tl.SQLiteStore(tmp_path / "runs.db")
    first = _tree(store).run(run_id="tree")
    assert first.output == {"notes": "summary(page of trio)", "n": 3}
    RAN.clear()
    again = _tree().replay("tree", store=store)
    assert again.output == first.output and sum(RAN.values()) == 0
    assert set(again.records) == set(first.records) >= {"c1.0/c1.0", "c1.0/c1.1"}

    SUMMARY_V2 = True  # the child's summarize changed: it, its agent call and the count
    forked = _tree().fork("tree", "tree-b", store=store, rerun=["c1.0/c1.1"])
    assert RAN == Counter(summarize=1, count_words=1)  # no fetch: the child reused its own
    assert forked.output == {"notes": "summary v2(page of trio)", "n": 4}
    RAN.clear()
    whole = _tree().fork("tree", "tree-c", store=store, rerun=["c1.0"])
    # The agent call named: its whole child runs again, and what reads it.
    assert RAN == Counter(fetch=1, summarize=1, count_words=1)
    assert whole.output == forked.output


def _approving_tree(store: tl.SQLiteStore | None = None, approve: Any = None) -> tl.Agent:
    """A writer whose researcher publishes what it fetched (publish asks approval)."""
    researcher = tl.Agent(
        tl.ScriptedModel(
            [
                {
                    "calls": [
                        {"_tool": "fetch", "url": "†input.task", "_outputPath": "†state.page"},
                        {"_tool": "publish", "text": "†state.page", "_outputPath": "†state.r"},
                    ]
                },
                {"calls": [], "output": "†state.r"},
            ]
        ),
        tools=[fetch, publish],
        name="researcher",
        description="Research and publish.",
    )
    return tl.Agent(
        tl.ScriptedModel(
            [
                {"calls": [{"_tool": "researcher", "task": "trio", "_outputPath": "†state.r"}]},
                {"calls": [], "output": "†state.r"},
            ]
        ),
        tools=[researcher, fetch],
        store=store,
        approve=approve,
    )


def test_a_replay_needs_no_hook_when_every_decision_is_recorded(tmp_path: Path) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    first = _approving_tree(store, approve).run(run_id="tree")
    assert APPROVALS == ["c1.0/c1.1"] and first.output == "published 12 chars"
    APPROVALS.clear()
    RAN.clear()
    again = _approving_tree().replay("tree", store=store)  # no approve= at all
    assert again.output == first.output and APPROVALS == [] and sum(RAN.values()) == 0
    live = _approving_tree().replay("tree", store=store, tools="live")
    assert live.output == first.output and RAN["publish"] == 1 and APPROVALS == []


def _replayed_tree(store: tl.SQLiteStore, strict_child: bool = True) -> tl.Agent:
    """The tree of `_tree`, every model a `ReplayModel` of run "tree"."""
    tree = _tree()
    tree.model = tl.ReplayModel(store, "tree", strict=True)
    child = tree.tools["researcher"].agent
    child.model = tl.ReplayModel(store, "tree", strict=strict_child)
    return tree


def test_the_replay_model_answers_each_run_of_a_tree_with_its_own_record(
    tmp_path: Path,
) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    first = _tree(store).run(run_id="tree")
    RAN.clear()
    again = _replayed_tree(store).run()
    # The child got the child's answers: it fetched and summarized, as recorded.
    assert again.output == first.output
    assert RAN == Counter(fetch=2, summarize=1, count_words=1)
    # A changed request inside the child is named as the child's: its call fails, and
    # the root's next request, which shows that, differs from the recorded one.
    global SUMMARY_V2
    SUMMARY_V2 = True
    with pytest.raises(tl.ExecuteError, match="request 2 differs") as stopped:
        _replayed_tree(store).run()
    failure = str(stopped.value.messages)
    assert "request 2 (sub-agent run c1.0) differs from the one recorded" in failure


def test_a_run_whose_journal_was_emptied_is_refused_by_fork_replay_and_resume(
    recorded: tuple[tl.SQLiteStore, tl.RunResult],
) -> None:
    import sqlite3

    store, _ = recorded
    with sqlite3.connect(store.path) as connection:
        connection.execute("DELETE FROM journal WHERE run_id = 'order-42'")
        connection.execute("UPDATE runs SET status = 'paused' WHERE run_id = 'order-42'")
    agent = make_agent()
    agent.store = store
    for attempt, doing in [
        (lambda: agent.fork("order-42", "order-42b", store=store), "replay or fork"),
        (lambda: agent.replay("order-42", store=store), "replay or fork"),
        (lambda: agent.resume("order-42"), "resume"),
    ]:
        with pytest.raises(tl.ResumeError, match=f"empty journal.*nothing to {doing}"):
            attempt()
    assert sum(RAN.values()) == 0
    assert [run.run_id for run in store.runs()] == ["order-42"]
    assert store.run("order-42").status == "paused"


def test_a_fork_paused_inside_a_child_resumes_reusing_the_childs_record(tmp_path: Path) -> None:
    store = tl.SQLiteStore(tmp_path / "runs.db")
    first = _approving_tree(store, approve).run(run_id="tree")
    RAN.clear()
    later = _approving_tree(store, lambda call: tl.Defer())
    later.model = tl.ScriptedModel([])  # nothing to answer: every answer is the record's
    later.tools["researcher"].agent.model = tl.ScriptedModel([])
    paused = later.fork("tree", "tree-b", store=store, rerun=["c1.0/c1.1"])
    assert paused.status == "paused" and [c.id for c in paused.pending] == ["c1.0/c1.1"]
    assert RAN == Counter()  # the child's fetch was reused
    done = later.resume("tree-b", decisions={"c1.0/c1.1": tl.Approve()})
    # On resume the tree still reuses its record: only the call re-run runs, and every
    # answer, the child's next one included, is the recorded one.
    assert RAN == Counter(publish=1)
    assert done.output == first.output

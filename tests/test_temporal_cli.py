"""`tickloop temporal pending/trace/approve` against a real Temporal dev server (issue 29,
items 3 and 11): what the model chose is shown escaped, and a run no worker serves is a
clear refusal after a timeout, never a silent hang."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

import tickloop as tl
from tickloop import temporal as tlt
from tickloop._cli._main import main as cli_main

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests import temporal_agents as agents

ROOT = Path(__file__).resolve().parent.parent
# Terminal control in an id the model chose (no "[": PROTOCOL §14 refuses such an id).
SPOOF = "c1\x1bc\r\x1b8\u202e"


@pytest.fixture(scope="module")
def temporal_address() -> Iterator[str]:
    with tlt.dev_server() as address:
        yield address


def _spoofing_agent(name: str) -> tl.Agent:
    calls = [
        {
            "_tool": "charge",
            "customer": "\u202eevil\x9b\x1b]0;title\x07",
            "cents": 9_999_999,
            "_id": SPOOF,
            "_outputPath": "†state.a",
        }
    ]
    script = [{"calls": calls, "output": None}, {"calls": [], "output": "done"}]
    return tl.Agent(
        tl.ScriptedModel(script), tools=[agents.charge], approve=tlt.ask_person, name=name
    )


def test_pending_and_trace_escape_what_the_model_chose(
    temporal_address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = _spoofing_agent("spoofing_cli")
    queue = f"q-{uuid.uuid4().hex[:10]}"

    async def main() -> None:
        client = await Client.connect(temporal_address)
        async with tlt.worker(client, [agent], task_queue=queue):
            handle = await tlt.start(client, agent, None, task_queue=queue, run_id=queue)
            for _ in range(200):
                if await handle.pending():
                    break
                await asyncio.sleep(0.05)
            for command in ("pending", "trace"):
                code = await asyncio.to_thread(
                    cli_main, ["temporal", command, queue, "--address", temporal_address]
                )
                assert code == 0
            await handle.decide(SPOOF, tl.Deny("no"))
            await handle.result()

    asyncio.run(main())
    out = capsys.readouterr().out
    for character in "\x1b\r\u202e\x9b\x07":
        assert character not in out
    assert "c1\\x1bc\\x0d\\x1b8\\u202e" in out  # the id, as escapes, in both listings
    assert out.count("c1\\x1bc") == 2


@pytest.mark.parametrize("command", ["pending", "trace", "approve"])
def test_a_run_no_worker_serves_is_refused_after_the_timeout(
    temporal_address: str, command: str
) -> None:
    agent = _spoofing_agent("unserved_cli")
    queue = f"q-{uuid.uuid4().hex[:10]}"

    async def start() -> None:
        client = await Client.connect(temporal_address)
        await tlt.start(client, agent, None, task_queue=queue, run_id=queue)

    asyncio.run(start())
    argv = ["temporal", command, queue, *(["c1.0"] if command == "approve" else [])]
    process = subprocess.run(
        [sys.executable, "-m", "tickloop", *argv, "--address", temporal_address, "--timeout", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert process.returncode == 2, process.stderr
    assert "Fatal Python error" not in process.stderr
    assert "no worker" in process.stderr and queue in process.stderr
    assert "Traceback" not in process.stderr

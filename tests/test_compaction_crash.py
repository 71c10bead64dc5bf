"""A compacting run SIGKILLed, then resumed: the journaled compaction is reused, never
asked for again (PROTOCOL §16 "Ownership")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import tickloop as tl

CHILD = r"""
import os
import sys

import trio

import tickloop as tl

DIR = os.environ["CRASH_DIR"]
HANG_AT = int(os.environ.get("HANG_AT", "0"))


def count(name):
    fd = os.open(os.path.join(DIR, "counts"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (name + "\n").encode())
    os.close(fd)


async def answer(request):
    system = str(request["messages"][0]["content"])
    if system.startswith("You compact"):
        count("compaction")
        return "summary of the earlier turns"
    turn = request["iteration"]
    count(f"program:{turn}")
    if turn == HANG_AT:
        await trio.sleep_forever()
    if turn >= 30:
        return '```python\nfinal_answer("finished")\n```'
    return '```python\nprint("turn %d: " + "%s")\n```' % (turn, "x" * 400)


def make_agent(store):
    return tl.Agent(
        tl.FunctionModel(answer), protocol="code", store=store, max_iterations=40,
        context_window=3000,
    )


if __name__ == "__main__":
    make_agent(sys.argv[1]).run({"task": "chat"}, run_id="long")
"""


def test_a_resumed_run_reuses_its_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "compactcrash.py").write_text(CHILD, encoding="utf-8")
    db = tmp_path / "runs.db"
    counts_file = tmp_path / "counts"
    env = {**os.environ, "CRASH_DIR": str(tmp_path), "HANG_AT": "30"}
    child = subprocess.Popen(
        [sys.executable, str(tmp_path / "compactcrash.py"), str(db)],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not (counts_file.exists() and "program:30" in counts_file.read_text()):
            if child.poll() is not None:
                assert child.stderr is not None
                raise AssertionError(f"the child exited early: {child.stderr.read().decode()}")
            assert time.monotonic() < deadline, "the child never reached turn 30"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        assert child.stderr is not None
        child.stderr.close()
    before = Counter(counts_file.read_text().split())
    assert before["compaction"] >= 1  # it compacted before it was killed

    monkeypatch.setenv("CRASH_DIR", str(tmp_path))
    monkeypatch.setenv("HANG_AT", "0")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("compactcrash", None)
    import compactcrash  # type: ignore[import-not-found]

    result = compactcrash.make_agent(tl.SQLiteStore(db)).resume("long")
    assert result.status == "done" and result.output == "finished"
    after = Counter(counts_file.read_text().split())
    assert after["compaction"] == before["compaction"]  # not compacted again
    assert after["program:30"] == 2  # only the interrupted request was asked again
    compactions = [m for m in result.messages if m["type"] == "compaction"]
    assert len(compactions) == before["compaction"]


PROTOCOLS_CHILD = r"""
import os
import sys

import trio

import tickloop as tl

DIR = os.environ["CRASH_DIR"]
HANG_AT = int(os.environ.get("HANG_AT", "0"))
PROTOCOL = os.environ["PROTOCOL"]


def count(name):
    fd = os.open(os.path.join(DIR, "counts"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (name + "\n").encode())
    os.close(fd)


async def answer(request):
    system = request.get("system") or request["messages"][0]["content"]
    if str(system).startswith("You compact"):
        count("compaction")
        return "summary of the earlier turns"
    turn = request["iteration"]
    count(f"request:{turn}")
    if turn == HANG_AT:
        await trio.sleep_forever()
    if PROTOCOL == "solution":
        return {"calls": [], "output": "finished"}
    if turn >= 30:
        return "finished"
    return {"tool_calls": [{"name": "chatter", "arguments": {"turn": turn}}]}


@tl.tool
def chatter(turn: int) -> str:
    return "turn %d: " % turn + "x" * 400


# The plan protocol's request grows by the chat a log carries: forty earlier messages.
CHAT = [{"type": "data", "kind": "input", "data": {"task": "chat"}}] + [
    {"type": "text", "role": ("user", "assistant")[i % 2], "text": "said %d: " % i + "z" * 400}
    for i in range(40)
]


def make_agent(store):
    return tl.Agent(
        tl.FunctionModel(answer), tools=[chatter], protocol=PROTOCOL, store=store,
        max_iterations=40, context_window=3000,
    )


if __name__ == "__main__":
    agent = make_agent(sys.argv[1])
    if PROTOCOL == "solution":
        agent.run(messages=CHAT, run_id="long")
    else:
        agent.run("chat", run_id="long")
"""


@pytest.mark.parametrize(("protocol", "hang_at"), [("solution", 1), ("tools", 30)])
def test_a_resumed_run_of_any_protocol_reuses_its_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, protocol: str, hang_at: int
) -> None:
    name = f"compactcrash_{protocol}"
    (tmp_path / f"{name}.py").write_text(PROTOCOLS_CHILD, encoding="utf-8")
    db = tmp_path / "runs.db"
    counts_file = tmp_path / "counts"
    env = {**os.environ, "CRASH_DIR": str(tmp_path), "HANG_AT": str(hang_at), "PROTOCOL": protocol}
    child = subprocess.Popen(
        [sys.executable, str(tmp_path / f"{name}.py"), str(db)],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )
    hung = f"request:{hang_at}"
    try:
        deadline = time.monotonic() + 60
        while not (counts_file.exists() and hung in counts_file.read_text().split()):
            if child.poll() is not None:
                assert child.stderr is not None
                raise AssertionError(f"the child exited early: {child.stderr.read().decode()}")
            assert time.monotonic() < deadline, f"the child never reached {hung}"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        assert child.stderr is not None
        child.stderr.close()
    before = Counter(counts_file.read_text().split())
    assert before["compaction"] >= 1  # it compacted before it was killed

    monkeypatch.setenv("CRASH_DIR", str(tmp_path))
    monkeypatch.setenv("HANG_AT", "0")
    monkeypatch.setenv("PROTOCOL", protocol)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    module = __import__(name)

    result = module.make_agent(tl.SQLiteStore(db)).resume("long")
    assert result.status == "done" and result.output == "finished"
    after = Counter(counts_file.read_text().split())
    assert after["compaction"] == before["compaction"]  # not compacted again
    assert after[hung] == 2  # only the interrupted request was asked again
    compactions = [m for m in result.messages if m["type"] == "compaction"]
    assert len(compactions) == before["compaction"]

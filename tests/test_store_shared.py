"""Processes sharing one store file: no committed write is lost, no approved call runs twice.

Each writer process holds several connections to the store at once (a store kept open
beside one made per run, as an app that reads while it runs does, and as `tickloop
serve` always does), a reader process opens and closes the store over and over (as
`tickloop runs` does), and processes are killed with SIGKILL. SQLite's locks are POSIX
locks, held per process and dropped when *any* descriptor of the process on the file is
closed; a store that opened and closed one of its own on the file would leave its other
connections unlocked, and a closing reader would then fold and delete the WAL they still
write to (issue 29).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

import tickloop as tl
from tickloop._cli._main import main

WORKER = r'''
"""Writers, a reader and a billing agent sharing one store (tests/test_store_shared.py)."""
import os
import sys

import tickloop as tl


def log(path, line):
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, (line + "\n").encode())
    finally:
        os.close(descriptor)


@tl.tool
async def add(a: int, b: int) -> int:
    return a + b


@tl.tool(requires_approval=True)
async def charge(order: str) -> str:
    log(os.environ["SHARED_CHARGES"], order)  # not idempotent: at most once per order
    return "charged " + order


PLAN = [
    {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.x"},
    {"_tool": "add", "a": "†state.x", "b": 3, "_outputPath": "†state.y"},
]
BILL = [{"_tool": "charge", "order": "†input.order", "_outputPath": "†state.receipt"}]


def adder(store):
    model = tl.ScriptedModel([{"calls": PLAN, "output": None}, {"calls": [], "output": "ok"}])
    return tl.Agent(model, tools=[add], store=store)


def make_agent(store=None):
    model = tl.ScriptedModel([{"calls": BILL, "output": None}, {"calls": [], "output": "ok"}])
    return tl.Agent(model, tools=[charge], approve=lambda call: tl.Defer(), store=store)


def write(path, name, log_path, count):
    """Finish `count` runs, logging each one's id once it is committed `done`."""
    kept = [tl.SQLiteStore(path), tl.SQLiteStore(path)]  # connections open all along
    for store in kept:
        store.runs()
    for number in range(count):
        with tl.SQLiteStore(path) as store:  # a new store per run, beside the kept ones
            result = adder(store).run({"n": number}, run_id=f"{name}-{number}")
            assert result.status == "done", result
        log(log_path, f"{name}-{number}")
        kept[number % 2].runs()  # read while the other keeps its connection


def read(path, stop):
    """Open the store, list its runs and close it, until told to stop."""
    while not os.path.exists(stop):
        with tl.SQLiteStore(path) as store:
            store.runs()


def pause(path, count):
    """Make `count` runs that each wait for a decision on a charge."""
    with tl.SQLiteStore(path) as store:
        for number in range(count):
            result = make_agent(store).run({"order": f"o{number}"}, run_id=f"bill-{number}")
            assert result.status == "paused" and [p.id for p in result.pending] == ["c1.0"]


if __name__ == "__main__":
    mode, *argv = sys.argv[1:]
    if mode == "write":
        write(argv[0], argv[1], argv[2], int(argv[3]))
    elif mode == "read":
        read(argv[0], argv[1])
    elif mode == "pause":
        pause(argv[0], int(argv[1]))
'''

WRITERS = 3
RUNS_PER_WRITER = 30
BILLS = 10


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    script = tmp_path / "sharedworker.py"
    script.write_text(WORKER, encoding="utf-8")
    monkeypatch.setenv("SHARED_CHARGES", str(tmp_path / "charges"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("sharedworker", None)
    yield script
    sys.modules.pop("sharedworker", None)


def _start(*argv: str, cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *argv], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _wait_for(
    condition: Callable[[], bool],
    what: str,
    processes: Sequence[subprocess.Popen[bytes]],
    timeout: float = 30.0,
) -> None:
    """Poll until `condition` holds; fail at once, with its stderr, if a process died."""
    deadline = time.monotonic() + timeout
    while not condition():
        for process in processes:
            if process.poll() is not None:
                _, error = process.communicate()
                raise AssertionError(
                    f"{process.args!r} exited with {process.returncode} while waiting for "
                    f"{what}:\n{error.decode(errors='replace')[-2000:]}"
                )
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _integrity(path: Path) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        return [row[0] for row in connection.execute("PRAGMA integrity_check")]
    finally:
        connection.close()


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait()


def test_writers_with_several_connections_and_a_reader_lose_no_committed_run(
    tmp_path: Path, worker: Path
) -> None:
    db = tmp_path / "runs.db"
    log, stop = tmp_path / "committed", tmp_path / "stop"
    with tl.SQLiteStore(db) as store:
        store.runs()  # the file exists before the processes race to open it
    reader = _start(str(worker), "read", str(db), str(stop), cwd=tmp_path)
    writers = [
        _start(str(worker), "write", str(db), f"w{n}", str(log), str(RUNS_PER_WRITER), cwd=tmp_path)
        for n in range(WRITERS)
    ]
    try:
        # Kill one writer mid-way, at a moment of its own choosing (SIGKILL: no cleanup).
        _wait_for(
            lambda: sum(line.startswith("w0-") for line in _lines(log)) >= 5,
            "w0's runs",
            [*writers, reader],
        )
        writers[0].send_signal(signal.SIGKILL)
        for process in writers[1:]:
            _, error = process.communicate(timeout=60)
            assert process.returncode == 0, error.decode()
        stop.touch()
        _, error = reader.communicate(timeout=30)
        assert reader.returncode == 0, error.decode()
    finally:
        for process in [*writers, reader]:
            _stop(process)

    assert _integrity(db) == ["ok"]
    committed = _lines(log)
    assert len(committed) >= 5 + (WRITERS - 1) * RUNS_PER_WRITER
    with tl.SQLiteStore(db) as store:
        stored = {run.run_id: run.status for run in store.runs()}
    lost = [run_id for run_id in committed if stored.get(run_id) != "done"]
    assert lost == [], f"{len(lost)} committed runs lost or not done: {lost[:5]}"


def _serve(db: Path, cwd: Path) -> subprocess.Popen[bytes]:
    serve = _start(
        "-m", "tickloop._cli", "serve", "--store", str(db), "--agent", "sharedworker:make_agent",
        cwd=cwd,
    )  # fmt: skip
    assert serve.stdout is not None
    assert serve.stdout.readline().startswith(b"tickloop serve: http://127.0.0.1:")
    return serve


def _statuses(db: Path) -> dict[str, str]:
    with tl.SQLiteStore(db) as store:
        return {run.run_id: run.status for run in store.runs()}


def test_serve_and_approve_from_other_processes_run_each_approved_charge_once(
    tmp_path: Path, worker: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tickloop serve --agent` resumes runs as `tickloop approve` (another process)
    decides them, while a reader opens and closes the store; the first serve is killed
    as its charges run, a second one takes over. A charge that ran is never run again."""
    db = tmp_path / "runs.db"
    stop, charges = tmp_path / "stop", tmp_path / "charges"
    subprocess.run(
        [sys.executable, str(worker), "pause", str(db), str(BILLS)], cwd=tmp_path, check=True
    )
    bills = [f"bill-{n}" for n in range(BILLS)]
    for run_id in bills[: BILLS // 2]:  # decided before serve starts: resumed at once
        assert main(["approve", run_id, "c1.0", "--store", str(db)]) == 0
    reader = _start(str(worker), "read", str(db), str(stop), cwd=tmp_path)
    serves = [_serve(db, tmp_path)]
    try:
        for run_id in bills[BILLS // 2 :]:  # `tickloop approve` as serve runs
            assert main(["approve", run_id, "c1.0", "--store", str(db)]) == 0
        capsys.readouterr()
        _wait_for(lambda: len(_lines(charges)) >= BILLS // 2, "half the charges", [*serves, reader])
        serves[0].send_signal(signal.SIGKILL)  # as it resumes: some charges cut short
        serves[0].wait()
        serves.append(_serve(db, tmp_path))  # resumes the runs still paused and decided
        _wait_for(
            lambda: "paused" not in _statuses(db).values(),
            "the second serve to resume every decided run",
            [serves[1], reader],
        )
        serves[1].send_signal(signal.SIGKILL)  # what it committed must outlive it
        serves[1].wait()
        stop.touch()
        _, error = reader.communicate(timeout=30)
        assert reader.returncode == 0, error.decode()
    finally:
        for process in [*serves, reader]:
            _stop(process)

    assert _integrity(db) == ["ok"]
    import sharedworker  # type: ignore[import-not-found]

    with tl.SQLiteStore(db) as store:
        # A run whose finished charge was lost would be paused again with its decision
        # recorded: resuming it would charge twice. A charge cut short by the kill is
        # not run again (not idempotent): the run goes on with it failed.
        agent = sharedworker.make_agent(store)
        for run_id, status in _statuses(db).items():
            if status != "done":
                assert agent.resume(run_id).status == "done"
        charged = Counter(_lines(charges))
        for number, run_id in enumerate(bills):
            [call] = store.calls(run_id)
            ran = charged[f"o{number}"]
            assert ran <= 1, f"{run_id}: charged {ran} times"
            if call.status == "done":
                assert ran == 1, f"{run_id}: a charge recorded done never ran"
    assert _statuses(db) == dict.fromkeys(bills, "done")
    assert set(charged) <= {f"o{n}" for n in range(BILLS)}

"""Hostile inputs and broken disks (issue 17): each fault is a clear error, a store is
never lost, no secret leaks."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

import tickloop as tl


def statuses(result: Any) -> dict[str, str]:
    return {call_id: record.status for call_id, record in result.records.items()}


@tl.tool
def add(a: int, b: int) -> int:
    return a + b


# -- 3, 5: what a tool or hook raises is that call's error ---------------------------------


class Custom(BaseException):
    pass


@pytest.mark.parametrize(
    "raised",
    [asyncio.CancelledError(), Custom("boom"), "foreign-cancel"],
    ids=["asyncio-cancelled", "custom-base-exception", "foreign-trio-cancelled"],
)
def test_a_tool_raising_a_base_exception_fails_only_its_call(raised: Any) -> None:
    @tl.tool
    async def bad() -> int:
        if raised == "foreign-cancel":
            with trio.CancelScope() as scope:
                scope.cancel()
                try:
                    await trio.sleep(1)
                except trio.Cancelled as cancelled:
                    error = cancelled
            raise error  # re-raised outside the scope it belongs to
        raise raised

    @tl.tool
    async def slow() -> int:
        await trio.sleep(0.01)
        return 7

    result = tl.run_calls(
        [
            {"_tool": "bad", "_outputPath": "†state.a"},
            {"_tool": "slow", "_outputPath": "†state.b"},
            {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.c"},
        ],
        tools=[bad, slow, add],
    )
    assert statuses(result) == {"c1.0": "failed", "c1.1": "done", "c1.2": "done"}
    assert result.state == {"b": 7, "c": 3}
    assert result.records["c1.0"].error["type"] == "runtime"


@pytest.mark.parametrize("raised", [asyncio.CancelledError(), Custom("boom")])
def test_a_hook_raising_a_base_exception_denies_its_call(raised: BaseException) -> None:
    def hook(call: tl.PendingCall) -> tl.Decision:
        raise raised

    @tl.tool(requires_approval=True)
    def pay(cents: int) -> int:
        return cents

    result = tl.run_calls(
        [
            {"_tool": "pay", "cents": 5, "_outputPath": "†state.p"},
            {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.c"},
        ],
        tools=[pay, add],
        approve=hook,
    )
    assert statuses(result) == {"c1.0": "denied", "c1.1": "done"}


def test_a_tool_that_cancels_the_engine_is_never_reported_as_a_finished_tick() -> None:
    @tl.tool
    async def rogue() -> int:
        trio.lowlevel.current_task().parent_nursery.cancel_scope.cancel()
        await trio.sleep(0)
        return 1

    @tl.tool
    async def slow() -> int:
        await trio.sleep(1)
        return 7

    with pytest.raises(RuntimeError, match="cancelled the engine"):
        tl.run_calls(
            [{"_tool": "rogue", "_outputPath": "†state.a"}, {"_tool": "slow"}],
            tools=[rogue, slow],
        )


def test_a_durable_run_whose_tool_cancels_the_engine_is_not_stored_done(tmp_path: Path) -> None:
    @tl.tool
    async def rogue() -> int:
        trio.lowlevel.current_task().parent_nursery.cancel_scope.cancel()
        await trio.sleep(0)
        return 1

    model = tl.ScriptedModel(
        [
            {"calls": [{"_tool": "rogue", "_outputPath": "†state.a"}], "output": None},
            {"calls": [], "output": "ok"},
        ]
    )
    store = tl.SQLiteStore(tmp_path / "runs.db")
    agent = tl.Agent(model, tools=[rogue], store=store)
    with pytest.raises(RuntimeError):
        agent.run("go", run_id="r1")
    assert store.run("r1").status == "failed"


# -- 1: lone surrogates --------------------------------------------------------------------


def test_a_lone_surrogate_in_a_call_is_a_structural_error_on_arrival() -> None:
    result = tl.run_calls(
        [
            {"_tool": "add", "a": 1, "b": 2, "note": "\ud800", "_outputPath": "†state.x"},
            {"_tool": "add", "a": 1, "b": 2, "\udc80": 1},
            {"_tool": "add", "a": 2, "b": 2, "_outputPath": "†state.y"},
        ],
        tools=[add],
    )
    assert statuses(result) == {"c1.0": "invalid", "c1.1": "invalid", "c1.2": "done"}
    assert result.errors[0]["data"]["error"]["type"] == "structural"
    assert "lone surrogate" in result.errors[0]["data"]["error"]["message"]
    json.dumps(result.errors, ensure_ascii=False).encode("utf-8")  # the log stays encodable


@pytest.mark.parametrize(
    ("odd", "said"),
    [
        ({"\udc80": 1}, "lone surrogate"),
        ({3: 1}, "keys must be strings"),
        ({"a": json.loads("[" * 70 + "]" * 70)}, "nests deeper"),
    ],
    ids=["surrogate-key", "int-key", "too-deep"],
)
def test_a_call_with_a_bad_id_and_a_bad_shape_is_refused_for_its_shape(
    odd: dict[Any, Any], said: str
) -> None:
    # The id used to be checked first, and its error logged the call as it came: a run
    # the model could end with a `"\ud800"` key and an empty `_id`.
    result = tl.run_calls(
        [{"_tool": "add", "_id": "", "b": 2, **odd}, {"_tool": "add", "a": 1, "b": 2}],
        tools=[add],
    )
    assert statuses(result) == {"c1.0": "invalid", "c1.1": "done"}
    assert result.errors[0]["data"]["error"]["type"] == "structural"
    assert said in result.errors[0]["data"]["error"]["message"]
    json.dumps(result.errors, ensure_ascii=False).encode("utf-8")  # the log stays encodable


def test_a_lone_surrogate_in_the_models_json_is_a_structural_error() -> None:
    seen: list[str] = []

    @tl.tool
    def echo(note: str) -> str:
        seen.append(note)
        return note

    model = tl.ScriptedModel(
        [
            '{"calls": [{"_tool": "echo", "note": "a\\ud800"}, {"_tool": "echo", "note": "b"}],'
            ' "output": null}',
            {"calls": [], "output": "ok"},
        ]
    )
    result = tl.Agent(model, tools=[echo]).run("go")
    assert seen == ["b"]
    assert {call_id: r.status for call_id, r in result.records.items()} == {
        "c1.0": "invalid",
        "c1.1": "done",
    }


def test_a_lone_surrogate_in_a_result_is_a_runtime_error() -> None:
    @tl.tool
    def listing() -> Any:
        return ["ok", os.fsdecode(b"bad\xff")]  # os.listdir of a name that is not UTF-8

    @tl.tool
    def keyed() -> Any:
        return {"\udcff": 1}

    result = tl.run_calls(
        [{"_tool": "listing", "_outputPath": "†state.a"}, {"_tool": "keyed"}],
        tools=[listing, keyed],
    )
    assert statuses(result) == {"c1.0": "failed", "c1.1": "failed"}
    for error in result.errors:
        assert error["data"]["error"]["type"] == "runtime"
        assert "surrogate" in error["data"]["error"]["message"]


def test_a_durable_run_with_a_lone_surrogate_finishes_and_resumes(tmp_path: Path) -> None:
    @tl.tool
    def listing() -> Any:
        return [os.fsdecode(b"bad\xff")]

    @tl.tool(requires_approval=True)
    def pay(cents: int) -> int:
        return cents

    calls = [
        {"_tool": "listing", "_outputPath": "†state.a"},
        {"_tool": "add", "a": 1, "b": 2, "x": "\ud800", "_outputPath": "†state.b"},
        {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.c"},
        {"_tool": "pay", "cents": 5, "_id": "p", "_outputPath": "†state.p"},
    ]
    model = tl.ScriptedModel([{"calls": calls, "output": None}, {"calls": [], "output": "ok"}])
    store = tl.SQLiteStore(tmp_path / "runs.db")
    agent = tl.Agent(model, tools=[listing, add, pay], store=store, approve=lambda call: tl.Defer())
    assert agent.run("go", run_id="r1").status == "paused"
    seqs = [entry[0] for entry in store.journal("r1")]
    assert seqs == list(range(1, len(seqs) + 1))
    result = agent.resume("r1", decisions={"p": tl.Approve()})
    assert result.status == "done" and result.output == "ok"
    assert {call.id: call.status for call in store.calls("r1")} == {
        "c1.0": "failed",
        "c1.1": "invalid",
        "c1.2": "done",
        "p": "done",
    }


def test_a_failed_append_leaves_no_gap_in_the_journal(tmp_path: Path) -> None:
    from tickloop._durable._writer import create_run

    store = tl.SQLiteStore(tmp_path / "runs.db")
    writer = create_run(store, "r1", "solution")
    writer.append([(1.0, "note", '{"a": 1}')])
    with pytest.raises(tl.StoreError, match="not Unicode"):
        writer.append([(2.0, "note", '{"a": "\ud800"}')])
    writer.append([(3.0, "note", '{"a": 3}')])
    assert [entry[0] for entry in store.journal("r1")] == [1, 2]
    writer.release()


# -- 10: a duplicated key ------------------------------------------------------------------


def test_a_solution_with_two_calls_arrays_is_refused() -> None:
    from tickloop._json._stream import SolutionStream

    stream = SolutionStream()
    text = (
        '{"calls": [{"_tool": "pay", "cents": 100000}], '
        '"calls": [{"_tool": "pay", "cents": 1}], "output": null}'
    )
    emitted = stream.feed(text)
    outcome = stream.close()
    assert emitted == [{"_tool": "pay", "cents": 100000}]  # what ran is what streamed first
    assert outcome.solution is None
    assert "duplicate key 'calls'" in outcome.error


def test_a_duplicated_key_inside_a_call_is_refused() -> None:
    from tickloop._json._stream import SolutionStream

    stream = SolutionStream()
    emitted = stream.feed('{"calls": [{"_tool": "pay", "cents": 1, "cents": 100000}], "output": 1}')
    assert emitted == []
    assert "duplicate key 'cents'" in stream.close().error


def test_an_agent_run_with_two_calls_arrays_logs_what_ran() -> None:
    ran: list[int] = []

    @tl.tool
    def pay(cents: int) -> int:
        ran.append(cents)
        return cents

    model = tl.ScriptedModel(
        [
            '{"calls": [{"_tool": "pay", "cents": 100000, "_outputPath": "†state.paid"}], '
            '"calls": [{"_tool": "pay", "cents": 1, "_outputPath": "†state.paid"}], '
            '"output": null}',
            {"calls": [], "output": "ok"},
        ]
    )
    result = tl.Agent(model, tools=[pay]).run("go")
    assert ran == [100000]
    logged = [m for m in result.messages if m.get("type") == "solution"]
    assert all('cents": 1,' not in json.dumps(m) for m in logged)
    errors = [m for m in result.messages if m.get("kind") == "error"]
    assert any("duplicate key 'calls'" in json.dumps(m) for m in errors)


# -- 4: a run input that cannot be stored ----------------------------------------------------


def test_a_run_whose_input_cannot_be_stored_leaves_no_row(tmp_path: Path) -> None:
    model = tl.ScriptedModel([{"calls": [], "output": "ok"}, {"calls": [], "output": "ok"}])
    store = tl.SQLiteStore(tmp_path / "runs.db")
    agent = tl.Agent(model, tools=[add], store=store)
    # A lone surrogate has no UTF-8 form: refused before anything runs (issue 16 converts
    # datetimes and the like, so they are storable now).
    with pytest.raises(tl.ConfigurationError, match="lone surrogate"):
        agent.run({"when": "\ud800"}, run_id="r1")
    assert store.runs() == []
    with pytest.raises(tl.ResumeError, match="no run"):
        agent.resume("r1")
    assert agent.run({"when": "2026-01-01"}, run_id="r1").output == "ok"  # the id is free


# -- 6: damage quick_check cannot see; a reused process id ------------------------------------


def _paused_store(tmp_path: Path) -> tuple[tl.Agent, tl.SQLiteStore, Path]:
    @tl.tool(requires_approval=True)
    def pay(cents: int) -> int:
        return cents

    calls = [
        {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.c"},
        {"_tool": "pay", "cents": 5, "_id": "p", "_outputPath": "†state.p"},
    ]
    model = tl.ScriptedModel([{"calls": calls, "output": None}, {"calls": [], "output": "ok"}])
    path = tmp_path / "runs.db"
    store = tl.SQLiteStore(path)
    agent = tl.Agent(model, tools=[add, pay], store=store, approve=lambda call: tl.Defer())
    assert agent.run("go", run_id="r1").status == "paused"
    return agent, store, path


@pytest.mark.parametrize("table", ["journal", "calls"])
def test_a_row_that_is_not_json_is_a_store_error_naming_the_path(
    tmp_path: Path, table: str
) -> None:
    agent, store, path = _paused_store(tmp_path)
    store.close()
    with sqlite3.connect(path) as connection:
        column = "body" if table == "journal" else "params"
        connection.execute(f"UPDATE {table} SET {column} = '{{not json'")
    fresh = tl.SQLiteStore(path)
    reads = [
        lambda: fresh.journal("r1"),
        lambda: fresh.calls("r1"),
        lambda: tl.timeline_html(fresh, "r1"),
        lambda: agent.resume("r1", decisions={"p": tl.Approve()}),
    ]
    agent.store = fresh
    failed = 0
    for read in reads:
        try:
            read()
        except tl.StoreError as error:
            assert str(path) in str(error) and "damaged" in str(error)
            failed += 1
    assert failed >= 2  # journal+timeline+resume, or calls+timeline(+pending)


def test_a_journal_entry_of_the_wrong_shape_is_a_store_error(tmp_path: Path) -> None:
    agent, store, path = _paused_store(tmp_path)
    store.close()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE journal SET body = '[1, 2]' WHERE kind = 'event'")
    agent.store = tl.SQLiteStore(path)
    with pytest.raises(tl.StoreError, match="damaged"):
        agent.resume("r1", decisions={"p": tl.Approve()})


@pytest.mark.parametrize(
    "body",
    ['{"type": "Flush"}', "[1, 2]", '[[1.0, "event"]]', '[[1.0, "batch", []]]', '[["x", 1, {}]]'],
)
def test_a_journal_row_of_entries_of_the_wrong_shape_is_a_store_error(
    tmp_path: Path, body: str
) -> None:
    """A row holding a commit's entries (`batch`) that is not a list of [at, kind, body]:
    damage, named as such, from a resume and from `journal`."""
    agent, store, path = _paused_store(tmp_path)
    store.close()
    with sqlite3.connect(path) as connection:
        (batches,) = connection.execute(
            "SELECT count(*) FROM journal WHERE kind = 'batch'"
        ).fetchone()
        assert batches > 0
        connection.execute("UPDATE journal SET body = ? WHERE kind = 'batch'", (body,))
    fresh = tl.SQLiteStore(path)
    with pytest.raises(tl.StoreError, match="damaged"):
        fresh.journal("r1")
    agent.store = fresh
    with pytest.raises(tl.StoreError, match="damaged"):
        agent.resume("r1", decisions={"p": tl.Approve()})


def test_resume_force_takes_over_a_run_whose_process_id_was_reused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket
    import sys

    from tickloop._cli._main import main

    agent, store, path = _paused_store(tmp_path)
    store.decide("r1", "p", tl.Approve())
    alive = os.getppid()  # a live process that is not running the run
    with sqlite3.connect(path) as connection:
        connection.execute(
            "UPDATE runs SET status = 'running', owner = ?",
            (f"{socket.gethostname()}:{alive}",),
        )
    store.close()
    module = type(sys)("hostile_agent_module")
    module.agent = agent  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hostile_agent_module", module)
    argv = ["resume", "r1", "--agent", "hostile_agent_module:agent", "--store", str(path)]
    assert main(argv) == 2
    refused = capsys.readouterr().err
    assert "is running in another process" in refused
    assert refused.endswith(f"(the process: {socket.gethostname()}:{alive})\n")
    assert main([*argv, "--force"]) == 0
    captured = capsys.readouterr()
    assert "warning: taking over run r1" in captured.err
    assert "run r1: done" in captured.out


# -- 9: terminal spoofing ----------------------------------------------------------------------


def test_cli_lines_escape_control_and_bidi_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tickloop._cli._main import main

    @tl.tool(requires_approval=True)
    def charge(cents: int, memo: str) -> int:
        return cents

    spoof = "c1\x1bc\r\x1b8"  # no "[": an id holding one is refused (PROTOCOL §14)
    calls = [
        {"_tool": "charge", "cents": 9_999_999, "memo": "\u202eevil\x9b", "_id": spoof},
    ]
    model = tl.ScriptedModel([{"calls": calls, "output": None}, {"calls": [], "output": "ok"}])
    path = tmp_path / "runs.db"
    agent = tl.Agent(model, tools=[charge], store=path, approve=lambda call: tl.Defer())
    run_id = "r1\x1b[8m; rm -rf ~"
    agent.run("go", run_id=run_id)
    for argv in (
        ["runs"],
        ["pending", run_id],
        ["trace", run_id],
        ["approve", run_id, spoof],
    ):
        assert main([*argv, "--store", str(path)]) == 0
        out = capsys.readouterr().out
        for character in "\x1b\r\u202e\x9b":
            assert character not in out
    assert "c1\\x1bc\\x0d\\x1b8" in out
    assert "tickloop resume 'r1\\x1b[8m; rm -rf ~' --agent" in out


# -- 8: store files ----------------------------------------------------------------------------


def test_a_fifo_at_the_store_path_is_refused_without_hanging(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    os.mkfifo(path)
    with pytest.raises(tl.StoreError, match=r"not a regular file.*FIFO"):
        tl.SQLiteStore(path)


def test_a_device_at_the_store_path_is_refused_and_never_chmodded(tmp_path: Path) -> None:
    link = tmp_path / "runs.db"
    link.symlink_to("/dev/null")
    mode = os.stat("/dev/null").st_mode
    with pytest.raises(tl.StoreError, match="symbolic link"):
        tl.SQLiteStore(link)
    assert os.stat("/dev/null").st_mode == mode
    if os.geteuid() != 0:
        return
    device = tmp_path / "null"  # a device node of our own: never chmod the real one
    os.mknod(device, 0o666 | __import__("stat").S_IFCHR, os.makedev(1, 3))
    with pytest.raises(tl.StoreError, match="character device"):
        tl.SQLiteStore(device)
    assert oct(os.stat(device).st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_an_empty_file_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a file owned by another user needs root (os.chown)")
    path = tmp_path / "runs.db"
    path.touch()
    os.chmod(path, 0o666)
    os.chown(path, 4242, 4242)
    with pytest.raises(tl.StoreError, match="owned by another user"):
        tl.SQLiteStore(path)
    model = tl.ScriptedModel([{"calls": [], "output": "ok"}])
    with pytest.raises(tl.StoreError, match="owned by another user"):
        tl.Agent(model, tools=[add], store=path).run("go")
    assert os.stat(path).st_mode & 0o777 == 0o666 and os.path.getsize(path) == 0


def test_an_empty_file_that_cannot_be_restricted_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.db"
    path.touch()
    os.chmod(path, 0o666)

    def refuse(*args: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", refuse)
    monkeypatch.setattr(os, "chmod", refuse)
    with pytest.raises(tl.StoreError, match="cannot restrict"):
        tl.Agent(tl.ScriptedModel([{"calls": [], "output": "ok"}]), tools=[add], store=path).run(
            "go"
        )


# -- 2: disk full ------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    """A 1 MB tmpfs: a disk that fills up. Mounting needs root (CI and the dev box run the
    tests as root); elsewhere the test is skipped with that reason."""
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("filling a disk needs a small tmpfs, and mounting one needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace')}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_store_that_filled_the_disk_resumes_once_space_is_freed(small_disk: Path) -> None:
    ran: list[int] = []

    @tl.tool
    def blob(i: int) -> str:
        ran.append(i)
        return f"{i}:" + "x" * 20_000

    calls = [{"_tool": "blob", "i": i, "_outputPath": f"†state.b{i}"} for i in range(40)]
    model = tl.ScriptedModel([{"calls": calls, "output": None}, {"calls": [], "output": "ok"}])
    path = small_disk / "runs.db"
    store = tl.SQLiteStore(path)
    agent = tl.Agent(model, tools=[blob], store=store)
    filler = small_disk / "filler"
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    filler.write_bytes(b"\0" * (free - 300_000))
    with pytest.raises(tl.StoreError, match="full"):
        agent.run("go", run_id="r1")
    store.close()
    filler.unlink()
    agent.store = reopened = tl.SQLiteStore(path)  # the WAL holds what the file lacks
    result = agent.resume("r1")
    assert result.status == "done" and result.output == "ok"
    assert sorted(ran) == sorted(set(ran))  # no call ran twice
    assert {call.status for call in reopened.calls("r1")} <= {"done", "failed"}
    reopened.close()


# -- 11: the timeline's selectors ----------------------------------------------------------------


def test_the_timeline_script_handles_ids_with_quotes(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import urllib.parse

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("needs chromium (apt-get install chromium)")
    calls = [
        {"_tool": "add", "a": 1, "b": 2, "_id": 'a"b\\', "_outputPath": "†state.x"},
        {"_tool": "add", "a": "†state.x", "b": 1, "_id": "z", "_outputPath": "†state.y"},
    ]
    model = tl.ScriptedModel([{"calls": calls, "output": None}, {"calls": [], "output": "ok"}])
    path = tmp_path / "runs.db"
    tl.Agent(model, tools=[add], store=path).run("go", run_id="r1")
    page = tmp_path / "timeline.html"
    page.write_text(tl.timeline_html(path, "r1"), encoding="utf-8")
    url = page.as_uri() + "?focus=" + urllib.parse.quote('a"b\\')
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
    dom = subprocess.run(
        [chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120
    ).stdout
    assert 'data-ready="2"' in dom  # the script ran to its end
    assert 'class="call done focus"' in dom
    assert 'class="call done related"' in dom  # the hover arrows found the other row


# -- 7: secrets --------------------------------------------------------------------------------

SECRET = "sk-live-0123456789abcdef"


def test_redaction_covers_escaped_and_encoded_echoes() -> None:
    from tickloop._models._http import redact

    escaped = "".join(f"\\u{ord(c):04x}" for c in SECRET)
    mixed = SECRET[:4] + "".join(f"\\u{ord(c):04X}" for c in SECRET[4:10]) + SECRET[10:]
    encoded = "".join(f"%{ord(c):02X}" for c in SECRET)
    for text in (
        f'{{"error": "bad key {escaped}"}}',
        f'{{"error": "bad key {mixed}"}}',
        f"GET /v1?key={encoded}",
        f"header was b'Bearer {SECRET}\\n'",
    ):
        cleaned = redact(text, [SECRET + "\n"])
        assert "***" in cleaned
        assert SECRET not in cleaned and SECRET not in json.dumps(cleaned)
        try:
            assert SECRET not in json.loads(cleaned)["error"]
        except ValueError:
            pass


def test_a_secret_straddling_the_cut_leaks_no_prefix() -> None:
    from tickloop._models._base import ModelError
    from tickloop._models._http import load_event

    data = "x" * 190 + SECRET + " and then not JSON"
    with pytest.raises(ModelError) as caught:
        load_event(data, what="request", secrets=[SECRET])
    assert SECRET[:6] not in str(caught.value)


def test_a_key_with_a_trailing_newline_is_stripped_and_never_chained() -> None:
    import traceback

    import httpx

    seen: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization", ""))
        raise httpx.ConnectError(f"refused, with {request.headers['authorization']}")

    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    model = tl.OpenAIChat(
        "m", base_url="http://127.0.0.1:9/v1", api_key=SECRET + "\n", client=client
    )
    agent = tl.Agent(model, tools=[add], max_llm_retries=1)
    with pytest.raises(tl.ExecuteError) as caught:
        agent.run("go")
    assert seen and seen[0] == f"Bearer {SECRET}"
    text = "".join(traceback.format_exception(caught.value))
    assert SECRET not in text and "***" in text


def test_default_patterns_hide_common_credential_names() -> None:
    redactor = tl.Agent(tl.ScriptedModel([]), tools=[add]).redact
    params = {
        "authorization": "Bearer v-a",
        "client_secret": "v-b",
        "cookie": "v-c",
        "passwd": "v-d",
        "credentials": {"user": "v-e"},
        "headers": {"Authorization": "Bearer v-f", "Accept": "json"},
        "query": "fine",
    }
    shown = redactor(params)
    assert shown["query"] == "fine" and shown["headers"]["Accept"] == "json"
    for value in ("v-a", "v-b", "v-c", "v-d", "v-e", "v-f"):
        assert value not in json.dumps(shown)


# -- 12: runaway inputs ------------------------------------------------------------------------


def _peak_per_character(function: Any, text: str) -> float:
    import tracemalloc

    tracemalloc.start()
    try:
        try:
            function(text)
        except ValueError:
            pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak / len(text)


@pytest.mark.parametrize("text", ["†a" + ".b" * 1_000_000, "†a" + "[1]" * 700_000])
def test_a_huge_path_is_refused_with_memory_bounded_and_a_short_message(text: str) -> None:
    assert _peak_per_character(tl.parse_expression, text) < 4
    with pytest.raises(tl.ReferenceSyntaxError, match="deeper than 64 steps") as caught:
        tl.parse_expression(text)
    assert len(str(caught.value)) < 400
    assert caught.value.text == text  # the whole text is still there for a program


@pytest.mark.parametrize(
    "unit", ["[", "[]", '["', '[\\"', '"[\\', "[]]"], ids=lambda unit: repr(unit)
)
def test_resilient_json_parse_memory_is_a_small_multiple_of_the_input(unit: str) -> None:
    from tickloop._json._stream import resilient_json_parse

    text = unit * (300_000 // len(unit))  # large enough that fixed costs vanish
    assert _peak_per_character(resilient_json_parse, text) < 48

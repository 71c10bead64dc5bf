"""`tickloop serve` as a person and an attacker meet it: a real process over HTTP.

Ctrl-C ends it quietly; a run id holding `/` (or anything else) has its page; a 404 page
cannot be read as markup; a request naming another host (DNS rebinding) is refused; the
hint it prints quotes the run id for the shell; a store it cannot write says so.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

import tickloop as tl
from tickloop._cli._main import main

RUN_ID = "team/a b;$(touch pwned)"


@tl.tool(requires_approval=True)
def charge(cents: int) -> str:
    return f"charged {cents}"


def _paused_store(path: Path, run_id: str = RUN_ID) -> None:
    model = tl.ScriptedModel(
        [
            {"calls": [{"_tool": "charge", "cents": 5, "_outputPath": "†state.c"}], "output": None},
            {"calls": [], "output": "ok"},
        ]
    )
    with tl.SQLiteStore(path) as store:
        agent = tl.Agent(model, tools=[charge], approve=lambda call: tl.Defer(), store=store)
        assert agent.run({}, run_id=run_id).status == "paused"


def _start_serve(store: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tickloop._cli", "serve", "--store", str(store), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    if not line.startswith("tickloop serve: http://"):
        process.kill()
        raise AssertionError(f"serve did not start: {line!r} {process.communicate()[1]!r}")
    return process, line.split(": ", 1)[1].strip()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, subprocess.Popen[bytes]]]:
    store = tmp_path / "runs.db"
    _paused_store(store)
    process, url = _start_serve(store)
    base, token = url.split("/?token=")
    try:
        yield base, token, process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def test_ctrl_c_ends_serve_quietly(served: tuple[str, str, subprocess.Popen[bytes]]) -> None:
    base, token, process = served
    assert httpx.get(base + "/", params={"token": token}).status_code == 200
    process.send_signal(signal.SIGINT)
    _, error = process.communicate(timeout=20)
    assert process.returncode in (0, 130), error.decode()
    assert b"Traceback" not in error and b"KeyboardInterrupt" not in error


def test_a_run_id_holding_a_slash_has_its_page_and_timeline(
    served: tuple[str, str, subprocess.Popen[bytes]],
) -> None:
    base, token, _ = served
    index = httpx.get(base + "/", params={"token": token}).text
    link = f"/runs/{quote(RUN_ID, safe='')}"
    assert f'href="{link}?token=' in index  # the page links to it so
    page = httpx.get(base + link, params={"token": token})
    assert page.status_code == 200 and "charge" in page.text
    timeline = httpx.get(base + link + "/timeline", params={"token": token})
    assert timeline.status_code == 200 and "<svg" in timeline.text.lower()
    # An id ending in "/timeline" is still that run's page, not another run's timeline.
    other = httpx.get(base + f"/runs/{quote('team/timeline', safe='')}", params={"token": token})
    assert other.status_code == 404


def test_a_404_page_cannot_be_read_as_markup(
    served: tuple[str, str, subprocess.Popen[bytes]],
) -> None:
    base, token, _ = served
    evil = quote("<script>alert(1)</script>", safe="")
    for path in (f"/runs/{evil}", f"/runs/{evil}/timeline"):
        missing = httpx.get(base + path, params={"token": token})
        assert missing.status_code == 404
        assert missing.headers["x-content-type-options"] == "nosniff"
        assert "default-src 'none'" in missing.headers["content-security-policy"]
        assert missing.headers["content-type"].startswith("text/plain")
        assert "<script>" not in missing.text


def test_a_request_for_another_host_is_refused(
    served: tuple[str, str, subprocess.Popen[bytes]],
) -> None:
    """DNS rebinding: a page of evil.test whose name now points at 127.0.0.1 reaches the
    port with `Host: evil.test`; only the loopback names the server is bound to pass."""
    base, token, _ = served
    port = base.rsplit(":", 1)[1]
    for host in (f"evil.test:{port}", "evil.test", f"127.0.0.1.evil.test:{port}"):
        refused = httpx.get(base + "/", params={"token": token}, headers={"Host": host})
        assert refused.status_code == 403, host
        assert "not this server" in refused.text
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST"):
        assert httpx.get(base + "/", params={"token": token}, headers={"Host": host}).is_success


def test_the_resume_hint_quotes_the_run_id_for_the_shell(
    served: tuple[str, str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    base, token, _ = served
    answer = httpx.post(
        base + "/decide",
        data={"token": token, "run": RUN_ID, "call": "c1.0", "action": "approve"},
        headers={"Accept": "application/json"},
    )
    message = answer.json()["message"]
    command = message.split("continue it with: ", 1)[1]
    assert shlex.split(command) == ["tickloop", "resume", RUN_ID, "--agent", "MODULE:ATTR"]


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A directory holding a store that cannot be written: by mode for a user, by a
    read-only mount for root (whom modes do not stop; CI and the dev box run as root)."""
    if os.geteuid() != 0:
        directory = tmp_path / "ro"
        directory.mkdir()
        _paused_store(directory / "runs.db", "r")
        (directory / "runs.db").chmod(0o400)
        directory.chmod(0o500)
        yield directory
        directory.chmod(0o700)
        return
    directory = tmp_path / "disk"
    directory.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(directory)], capture_output=True
    )
    assert mounted.returncode == 0, mounted.stderr
    try:
        _paused_store(directory / "runs.db", "r")
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(directory)])
        assert remounted.returncode == 0
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def test_a_read_only_store_is_named_as_read_only(
    read_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = read_only / "runs.db"
    assert main(["serve", "--store", str(path)]) == 2
    error = capsys.readouterr().err
    assert f"{path}: the store is read-only" in error
    assert "unable to open database file" not in error.split("(")[0]
    with pytest.raises(tl.StoreError, match="the store is read-only"):
        tl.SQLiteStore(path).runs()

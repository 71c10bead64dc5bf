"""`tickloop sessions [ID] --store PATH`: list a store's sessions, or show one.

A line per session: its id, how many runs it holds, how it stands (idle, running,
paused, crashed) and when it was last changed; with an id, its runs in order, each with
its status, input and answer. It reads the store only. Refusals print one line and exit
with 2, as the other store commands do.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from .._durable._sessions import Session
from .._errors import ResumeError, SessionBusy, StoreError
from ._runs import DEFAULT_STORE, EXIT_REFUSED, _existing_store, _safe, _when

__all__ = ["add_sessions_command", "run_sessions"]

_SHOWN = 80  # characters of an input or answer a line shows


def add_sessions_command(commands: Any) -> None:
    sessions = commands.add_parser(
        "sessions",
        help="list sessions, one per line: id, runs, status, last change; or show one",
        description="Without ID, list the store's sessions (PROTOCOL §16); with ID, show its "
        "runs in order: id, status, input and answer.",
    )
    sessions.add_argument("session", metavar="ID", nargs="?")
    sessions.add_argument(
        "--store", default=DEFAULT_STORE, metavar="PATH", help=f"the store file ({DEFAULT_STORE})"
    )


def run_sessions(arguments: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        store = _existing_store(arguments.store)
        if arguments.session is None:
            return _list(store.sessions(), out, store.path)
        session = store.session(arguments.session)
        if not session.run_ids:
            raise ResumeError(f"no session {arguments.session!r} in {store.path}")
        return _show(session, out)
    except (ResumeError, StoreError, SessionBusy) as error:
        print(f"tickloop sessions: {_safe(error)}", file=sys.stderr)
        return EXIT_REFUSED


def _list(sessions: list[Session], out: TextIO, path: Any) -> int:
    if not sessions:
        print(f"no sessions in {path}", file=sys.stderr)
        return 0
    ids = [_safe(session.id) for session in sessions]
    width = max(len(session_id) for session_id in ids)
    for session_id, session in zip(ids, sessions, strict=True):
        runs = session.runs
        changed = _when(max(run.updated for run in runs)) if runs else "-"
        out.write(f"{session_id:<{width}}  {len(runs):>4}  {session.status:<8}  {changed}\n")
    return 0


def _show(session: Session, out: TextIO) -> int:
    answers = {entry["run_id"]: entry for entry in session.history}
    out.write(f"session {_safe(session.id)}: {session.status}\n")
    for run in session.runs:
        entry = answers.get(run.run_id)
        status = "crashed" if run.status == "interrupted" else run.status
        out.write(f"  {_safe(run.run_id)}  {status}  {_when(run.created)}\n")
        if entry is not None:
            out.write(f"    input:  {_short(entry['input'])}\n")
            out.write(f"    answer: {_short(entry['output'])}\n")
    return 0


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = _safe(text)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"

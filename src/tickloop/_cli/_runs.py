"""The command line for durable runs: list, inspect, decide, resume, trace.

`runs`, `pending`, `approve`, `deny`, `budget` and `trace` read and write the store only, so an
operator can answer an approval from a shell without the agent's code; `resume` loads
the agent (`--agent module:attr`) because continuing a run means running its tools.
Refusals (an unknown run or call, a second decision) print one line and exit with 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from .._core._budget import LIMIT_NAMES, Budget
from .._core._decisions import Approve, Deny
from .._core._suggest import did_you_mean
from .._durable._rows import ROW_LAG
from .._durable._store import SQLiteStore
from .._errors import ConfigurationError, ResumeError, StoreError, TickloopError
from .._human._budget import open_budget_questions
from .._observe._timeline import guardrail_verdicts, run_origin
from .._observe._tree_order import depth_of, in_tree_order
from .._terminal import one_line

__all__ = ["COMMANDS", "add_commands", "run_command"]

COMMANDS = ("runs", "pending", "approve", "deny", "resume", "trace", "budget")
DEFAULT_STORE = "runs.db"
EXIT_REFUSED = 2


def _safe(text: Any) -> str:
    """Text for one terminal line: every control or bidi character shown as an escape."""
    return one_line(text)


def _quoted(run_id: str) -> str:
    """A run id as a shell word, safe to show (for the hints that say what to type)."""
    return shlex.quote(_safe(run_id))


def add_commands(commands: Any) -> None:
    """Add the durable-run subcommands to the `tickloop` parser's subparsers."""

    def store_option(parser: argparse.ArgumentParser, default: str | None = DEFAULT_STORE) -> None:
        parser.add_argument(
            "--store",
            default=default,
            metavar="PATH",
            help=(
                f"the store file (default: {DEFAULT_STORE})"
                if default is not None
                else f"the store file (default: the agent's own store, else {DEFAULT_STORE})"
            ),
        )

    runs = commands.add_parser(
        "runs", help="list stored runs, one per line: id, status, started, calls"
    )
    store_option(runs)
    pending = commands.add_parser("pending", help="show the calls a paused run waits on")
    pending.add_argument("run", metavar="RUN")
    store_option(pending)
    approve = commands.add_parser("approve", help="approve a deferred call of a paused run")
    approve.add_argument("run", metavar="RUN")
    approve.add_argument("call", metavar="CALL")
    store_option(approve)
    deny = commands.add_parser("deny", help="deny a deferred call of a paused run")
    deny.add_argument("run", metavar="RUN")
    deny.add_argument("call", metavar="CALL")
    deny.add_argument("--reason", default="denied from the command line", help="told to the model")
    store_option(deny)
    resume = commands.add_parser(
        "resume",
        help="continue a paused or interrupted run",
        description="Continue a run with the agent found at MODULE:ATTR (an Agent, or a "
        "function returning one). Decisions recorded with approve/deny are applied.",
    )
    resume.add_argument("run", metavar="RUN")
    resume.add_argument("--agent", required=True, metavar="MODULE:ATTR")
    resume.add_argument(
        "--force",
        action="store_true",
        help="take over a run whose recorded process id now belongs to another process "
        "(only when you know the run's own process is gone)",
    )
    store_option(resume, default=None)
    budget = commands.add_parser(
        "budget",
        help="give a paused or stopped run more budget, added on its next resume",
        description="Add room to a run's budget (PROTOCOL §12): each --add NAME=AMOUNT is "
        "added to what the run has left when it is next resumed (tickloop resume). Names: "
        "requests, input_tokens, output_tokens, total_tokens, tool_calls, per_tool.TOOL, "
        "cost, wall_time.",
    )
    budget.add_argument("run", metavar="RUN")
    budget.add_argument(
        "--add", action="append", required=True, metavar="NAME=AMOUNT", help="e.g. cost=1.00"
    )
    store_option(budget)
    trace = commands.add_parser("trace", help="show a run's timeline (text, or --html FILE)")
    trace.add_argument("run", metavar="RUN")
    trace.add_argument("--html", metavar="FILE", help="write a self-contained HTML timeline")
    store_option(trace)


def run_command(arguments: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        if arguments.command == "resume":
            return _resume(arguments, out)
        store = _existing_store(arguments.store)
        if arguments.command == "runs":
            return _runs(store, out)
        if arguments.command == "pending":
            return _pending(store, arguments.run, out)
        if arguments.command in ("approve", "deny"):
            decision = Approve() if arguments.command == "approve" else Deny(arguments.reason)
            store.decide(arguments.run, arguments.call, decision)
            verb = "approved" if arguments.command == "approve" else "denied"
            out.write(
                f"{verb} {_safe(arguments.call)} of run {_safe(arguments.run)}; continue it "
                f"with: tickloop resume {_quoted(arguments.run)} --agent MODULE:ATTR\n"
            )
            return 0
        if arguments.command == "trace":
            return _trace(store, arguments.run, arguments.html, out)
        if arguments.command == "budget":
            grant = parse_budget(arguments.add)
            _check_per_tool_grant(store, arguments.run, grant)
            store.add_budget(arguments.run, grant)
            out.write(
                f"added {_safe(', '.join(arguments.add))} to run {_safe(arguments.run)}; "
                f"continue it with: tickloop resume {_quoted(arguments.run)} --agent MODULE:ATTR\n"
            )
            return 0
    except (ResumeError, StoreError) as error:
        # The process running the run is the operator's to know (kept out of the message).
        process = getattr(error, "process", None)
        where = f" (the process: {_safe(process)})" if process else ""
        print(f"tickloop {arguments.command}: {_safe(error)}{where}", file=sys.stderr)
        return EXIT_REFUSED
    raise AssertionError(f"not a run command: {arguments.command}")


def parse_budget(items: list[str]) -> Budget:
    """`["cost=1.00", "per_tool.charge=2"]` as a `tl.Budget`; a bad item is a
    `ResumeError` naming it (nothing is recorded)."""
    fields: dict[str, Any] = {}
    per_tool: dict[str, int] = {}
    for item in items:
        name, _, amount = item.partition("=")
        name = name.strip()
        try:
            if name in ("cost", "wall_time"):
                fields[name] = float(amount)
            elif name.startswith("per_tool.") and len(name) > len("per_tool."):
                per_tool[name[len("per_tool.") :]] = int(amount)
            elif name in LIMIT_NAMES:
                fields[name] = int(amount)
            else:
                raise ValueError(f"no limit is called {name!r}")
            Budget(per_tool=per_tool, **fields)  # each item checked on its own, named
        except (ValueError, ConfigurationError) as error:
            raise ResumeError(f"--add {item!r}: {error}") from None
    return Budget(per_tool=per_tool, **fields)


def _check_per_tool_grant(store: SQLiteStore, run_id: str, grant: Budget) -> None:
    """A `per_tool.TOOL` grant adds to the run's limit on TOOL; on a tool the run has no
    limit on it would change nothing (a typo giving no room): a `ResumeError` naming it
    and the close match, before anything is recorded."""
    if not grant.per_tool:
        return
    from .._agent._session import journaled_budget  # the run's budget: its session's note

    store.run(run_id)  # an unknown run is named as such first
    budget = journaled_budget(store.journal(run_id))
    limited = set(budget.per_tool) if budget is not None else set()
    for tool in grant.per_tool:
        if tool not in limited:
            raise ResumeError(
                f"run {run_id!r} has no per_tool limit on {tool!r}"
                f"{did_you_mean(tool, limited)}, so adding to it would change nothing; its "
                f"per_tool limits: {', '.join(sorted(limited)) or 'none'}"
            )


def _existing_store(path: str) -> SQLiteStore:
    """Reading commands never create a store: a missing file is a mistake worth naming."""
    if not Path(path).exists():
        raise StoreError(f"no store at {path} (give --store PATH)")
    return SQLiteStore(path)


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _runs(store: SQLiteStore, out: TextIO) -> int:
    runs = store.runs()
    if not runs:
        print(f"no runs in {store.path}", file=sys.stderr)
        return 0
    ids = [_safe(run.run_id) for run in runs]
    width = max(len(run_id) for run_id in ids)
    for run_id, run in zip(ids, runs, strict=True):
        out.write(f"{run_id:<{width}}  {run.status:<11}  {_when(run.created)}  {run.calls} calls\n")
    return 0


def _pending(store: SQLiteStore, run_id: str, out: TextIO) -> int:
    run = store.run(run_id)
    waiting = store.pending(run_id)
    questions = open_budget_questions(store, run_id) if run.status == "paused" else []
    for limit in questions:  # a deferred budget question (PROTOCOL §12)
        quoted = shlex.quote(run_id)
        out.write(
            f"budget:{_safe(limit)}  waits for more room: tickloop budget {_safe(quoted)} "
            f"--add {_safe(limit)}=AMOUNT\n"
        )
    if not waiting:
        if not questions:
            print(f"run {_safe(run_id)} ({run.status}) waits on no decision", file=sys.stderr)
        return 0
    ids = [_safe(call.id) for call in waiting]
    width = max(len(call_id) for call_id in ids)
    for call_id, call in zip(ids, waiting, strict=True):
        params = json.dumps(call.params, ensure_ascii=False)
        line = f"{call_id:<{width}}  {_safe(call.tool or '?')}  {_safe(params)}"
        if call.decision is not None:
            line += f"  (decided: {_safe(call.decision.get('decision'))}; resume to apply)"
        out.write(line + "\n")
    return 0


def _trace(store: SQLiteStore, run_id: str, html: str | None, out: TextIO) -> int:
    if html is not None:
        from .._durable._timeline import timeline_html

        page = timeline_html(store, run_id)
        try:
            Path(html).write_text(page, encoding="utf-8")
        except OSError as error:
            raise StoreError(f"cannot write {html}: {error.strerror or error}") from None
        out.write(f"wrote {html}\n")
        return 0
    calls = in_tree_order(store.calls(run_id))  # a sub-agent's calls under its call
    behind = store.rows_behind(run_id)
    if behind is not None:
        status = store.run(run_id).status
        why = "is running now" if status == "running" else f"is {status}"
        out.write(
            f"note: run {_safe(run_id)} {why}: these rows were written at journal entry "
            f"{behind[0]} of {behind[1]}, so they may miss up to the last "
            f"{ROW_LAG:g} s of its calls' changes; resuming it rewrites them from the "
            "journal\n"
        )
    journal = store.journal(run_id)
    origin = run_origin(store.run(run_id), calls, journal)  # as the timeline
    out.write(f"{'call':<8} {'tool':<24} {'status':<9} {'started':>9} {'ran':>9}  why\n")
    for call in calls:
        start = "" if call.started is None else f"{call.started - origin:8.3f}s"
        fault = call.error or {}
        # An interrupted call "finished" when a later process took the run over: the time
        # between is the dead process's, not the call's.
        interrupted = str(fault.get("message", "")).startswith("interrupted")
        took = (
            ""
            if call.started is None or call.finished is None or interrupted
            else f"{call.finished - call.started:.3f}s"
        )
        tool = _safe(call.tool or "?")
        if call.line is not None:  # a code plan's call: the program line that made it
            tool = f"{tool} @{call.line}"
        why = _safe(" ".join(str(fault.get("message", "")).split())[:120])
        shown = "  " * depth_of(call.id) + _safe(call.id)  # nested under its agent call
        out.write(
            f"{shown:<8} {tool:<24} {call.status:<9} {start:>9} {took:>9}"
            f"{'  ' + why if why else ''}\n".rstrip(" ")
        )
    verdicts = guardrail_verdicts(journal)
    if verdicts:  # PROTOCOL §15: every verdict, in the order given
        out.write(f"\n{'guardrail':<24} {'kind':<7} {'of':<12} {'verdict':<8} {'at':>9}  why\n")
        for v in verdicts:
            of = v.call or (f"{v.run} run" if v.run else "run")
            why = _safe(" ".join((v.reason or "").split())[:120])
            out.write(
                f"{_safe(v.guardrail):<24} {_safe(v.kind):<7} {_safe(of):<12} "
                f"{_safe(v.verdict):<8} {v.at - origin:8.3f}s{'  ' + why if why else ''}\n"
            )
    return 0


def load_agent(spec: str) -> Any:
    """The object at `module:attr` (an Agent, or a callable returning one)."""
    from .._agent._agent import Agent

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ResumeError(f"--agent must look like module:attr, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as error:
        raise ResumeError(f"cannot load the agent {spec!r}: {error}") from error
    if not isinstance(found, Agent) and callable(found):
        found = found()
    if not isinstance(found, Agent):
        raise ResumeError(f"{spec!r} is not a tickloop Agent (it is {type(found).__name__})")
    return found


def _resume(arguments: argparse.Namespace, out: TextIO) -> int:
    agent = load_agent(arguments.agent)
    if arguments.store is not None or agent.store is None:
        agent.store = _existing_store(arguments.store or DEFAULT_STORE)
    if getattr(arguments, "force", False):
        owner = agent.store.take_over(arguments.run)
        if owner is not None:
            print(
                f"tickloop resume: warning: taking over run {_quoted(arguments.run)} from "
                f"process {_safe(owner)}; if that process still runs it, both will write it",
                file=sys.stderr,
            )
    try:
        result = agent.resume(arguments.run)
    except (ResumeError, StoreError):
        raise
    except TickloopError as error:
        print(f"tickloop resume: the run stopped: {_safe(error)}", file=sys.stderr)
        return 1
    plural = "" if result.iterations == 1 else "s"
    out.write(
        f"run {_safe(result.run_id)}: {result.status} after {result.iterations} iteration{plural}\n"
    )
    if result.status == "paused":
        for pending in result.pending:
            out.write(f"  waiting on {_safe(pending.id)} ({_safe(pending.tool)})\n")
    else:
        output = result.output
        if hasattr(output, "model_dump"):
            output = output.model_dump(mode="json")
        out.write(_safe(json.dumps(output, ensure_ascii=False, default=str)) + "\n")
    return 0

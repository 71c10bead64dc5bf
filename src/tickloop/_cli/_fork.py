"""`tickloop fork RUN NEW --rerun ID --agent MODULE:ATTR`: fork a stored run (docs/replay.md).

The new run reuses every recorded answer and result that nothing re-run reaches, and runs
the rest with the agent's tools and model; it is stored beside the old one.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from .._errors import ConfigurationError, ResumeError, StoreError, TickloopError
from ._runs import DEFAULT_STORE, EXIT_REFUSED, _existing_store, _safe, load_agent

__all__ = ["add_fork_command", "run_fork"]


def add_fork_command(commands: Any) -> None:
    fork = commands.add_parser(
        "fork",
        help="run a stored run again as a new run, re-running only what changed",
        description="Fork run RUN into NEW with the agent at MODULE:ATTR: every recorded "
        "result that depends on none of the --rerun calls and no call of a --rerun-tool is "
        "reused; those calls and what reads them run again; the model is asked again from "
        "the first request that changed.",
    )
    fork.add_argument("run", metavar="RUN")
    fork.add_argument("new", metavar="NEW")
    fork.add_argument("--agent", required=True, metavar="MODULE:ATTR")
    fork.add_argument(
        "--rerun", action="append", default=[], metavar="CALL", help="a call id to re-run"
    )
    fork.add_argument(
        "--rerun-tool",
        action="append",
        default=[],
        metavar="TOOL",
        help="re-run every call of this tool",
    )
    fork.add_argument("--store", default=DEFAULT_STORE, metavar="PATH")


def run_fork(arguments: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        agent = load_agent(arguments.agent)
        store = _existing_store(arguments.store)
        result = agent.fork(
            arguments.run,
            arguments.new,
            store=store,
            rerun=arguments.rerun,
            rerun_tools=arguments.rerun_tool,
        )
    except (ResumeError, StoreError, ConfigurationError) as error:
        print(f"tickloop fork: {_safe(error)}", file=sys.stderr)
        return EXIT_REFUSED
    except TickloopError as error:
        print(f"tickloop fork: the run stopped: {_safe(error)}", file=sys.stderr)
        return 1
    out.write(
        f"run {_safe(result.run_id)}: {result.status} after {result.iterations} "
        f"iteration{'' if result.iterations == 1 else 's'}\n"
    )
    output = result.output
    if hasattr(output, "model_dump"):
        output = output.model_dump(mode="json")
    out.write(_safe(json.dumps(output, ensure_ascii=False, default=str)) + "\n")
    return 0

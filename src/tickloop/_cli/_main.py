"""The `tickloop` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import trio
import trio.testing

from ._fork import add_fork_command, run_fork
from ._runs import COMMANDS as RUN_COMMANDS
from ._runs import add_commands as add_run_commands
from ._runs import run_command
from ._serve import add_serve_command, run_serve
from ._sessions import add_sessions_command, run_sessions

__all__ = ["main"]

DESCRIPTION = """\
tickloop runs LLM agents whose tool calls form a dependency graph: every call starts
the moment its inputs exist, while the model is still writing, in parallel.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tickloop",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run a bundled agent on the scripted model (offline) and show its calls live",
        description="Plan a team offsite with a scripted model: watch calls start while the "
        "model is still streaming, wait on each other, pass approval, and finish.",
    )
    demo.add_argument(
        "--virtual-time",
        action="store_true",
        help="run on trio's virtual clock (instant; the timings shown are still realistic)",
    )
    demo.add_argument(
        "--code",
        action="store_true",
        help="the model writes a Python program (a code plan, protocol='code') instead",
    )
    add_run_commands(commands)  # runs, pending, approve, deny, resume, trace, budget
    add_serve_command(commands)
    add_fork_command(commands)
    add_sessions_command(commands)
    from ._temporal import add_commands as add_temporal_commands  # imports no temporalio

    add_temporal_commands(commands)
    return parser


EXIT_INTERRUPTED = 130  # what a shell reports for a process stopped by SIGINT (128 + 2)


# Commands that started temporalio's native runtime (`tickloop temporal ...`), which
# `script` ends without the interpreter's finalization.
_NATIVE_RUNTIME: list[str] = []


def script() -> None:
    """The `tickloop` program: `main`, then the process's exit with its status.

    temporalio's native runtime keeps threads of its own that can abort the interpreter's
    finalization ("Fatal Python error: PyGILState_Release", status 134) after a command
    has done its work and printed its answer. A process that started it leaves with its
    output flushed and without finalization, so it exits with the command's own status.
    """
    code = main()
    if _NATIVE_RUNTIME:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; Ctrl-C ends any command quietly with exit status 130."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print(file=sys.stderr)  # end the line the ^C was echoed on; no traceback
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    if arguments.command == "demo":
        return _demo(arguments)
    if arguments.command in RUN_COMMANDS:
        return run_command(arguments)
    if arguments.command == "serve":
        return run_serve(arguments)
    if arguments.command == "fork":
        return run_fork(arguments)
    if arguments.command == "sessions":
        return run_sessions(arguments)
    if arguments.command == "temporal":
        from ._temporal import run_command as run_temporal_command

        _NATIVE_RUNTIME.append(arguments.command)
        return run_temporal_command(arguments)
    parser.print_help()
    return 0


def _demo(arguments: argparse.Namespace) -> int:
    from ._demo import run_demo
    from ._demo_code import run_code_demo

    clock = trio.testing.MockClock(autojump_threshold=0) if arguments.virtual_time else None
    trio.run(run_code_demo if arguments.code else run_demo, sys.stdout, clock=clock)
    return 0


if __name__ == "__main__":
    script()

"""`tickloop temporal ...`: a worker process, and a run's pending calls, decisions, trace.

The parser is built without importing temporalio (so `tickloop --help` stays fast); the
commands import it when they run. Refusals (an unknown run, a call that is not waiting)
print one line and exit with 2, as the store's commands do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

__all__ = ["add_commands", "run_command"]

EXIT_REFUSED = 2
DEFAULT_ADDRESS = "127.0.0.1:7233"
#: Seconds a query or decision waits for a worker of the run to answer: the server holds
#: them until one does, so with no worker they would wait forever.
DEFAULT_TIMEOUT = 30.0
#: After this long without an answer, say on stderr what the command waits for.
_SAY_AFTER = 1.0


def add_commands(commands: Any) -> None:
    temporal = commands.add_parser(
        "temporal",
        help="run agents on Temporal: a worker, and a run's pending calls, decisions, trace",
        description="Run agents on a Temporal server (pip install 'tickloop[temporal]'); "
        "see docs/temporal.md.",
    )
    sub = temporal.add_subparsers(dest="temporal_command", metavar="COMMAND", required=True)

    def connection(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--address", default=DEFAULT_ADDRESS, help=f"HOST:PORT (default {DEFAULT_ADDRESS})"
        )
        parser.add_argument("--namespace", default="default")
        if parser is not worker:
            parser.add_argument(
                "--timeout",
                type=float,
                default=DEFAULT_TIMEOUT,
                metavar="SECONDS",
                help="how long to wait for a worker of the run to answer "
                f"(default {DEFAULT_TIMEOUT:g})",
            )

    worker = sub.add_parser("worker", help="serve agents until interrupted")
    worker.add_argument("agents", nargs="+", metavar="MODULE:AGENT")
    worker.add_argument("--task-queue", required=True)
    worker.add_argument("--identity", help="the worker's name in records (default pid@host)")
    worker.add_argument(
        "--sticky-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long a run's next task waits for this worker's cache before any worker "
        "takes it (default 10; small values recover faster from a dead worker)",
    )
    connection(worker)
    pending = sub.add_parser("pending", help="the calls a run waits on a person for")
    pending.add_argument("run", metavar="RUN")
    connection(pending)
    approve = sub.add_parser("approve", help="approve a waiting call (or --edit it)")
    approve.add_argument("run", metavar="RUN")
    approve.add_argument("call", metavar="CALL")
    approve.add_argument("--edit", metavar="JSON", help="run it with these parameters instead")
    connection(approve)
    deny = sub.add_parser("deny", help="deny a waiting call")
    deny.add_argument("run", metavar="RUN")
    deny.add_argument("call", metavar="CALL")
    deny.add_argument("--reason", default="denied from the command line", help="told to the model")
    connection(deny)
    trace = sub.add_parser("trace", help="a run's calls and where they ran (or --html FILE)")
    trace.add_argument("run", metavar="RUN")
    trace.add_argument("--html", metavar="FILE", help="write a self-contained HTML timeline")
    connection(trace)


def run_command(arguments: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    from .._errors import TickloopError

    try:
        return asyncio.run(_run(arguments, out))
    except KeyboardInterrupt:
        return 130
    except TickloopError as error:
        print(f"tickloop: {error}", file=sys.stderr)
        return EXIT_REFUSED


async def _run(arguments: argparse.Namespace, out: TextIO) -> int:
    from temporalio.client import Client
    from temporalio.service import RPCError

    from .._core._decisions import Approve, Deny, Edit
    from .._errors import ResumeError
    from ..temporal import get, worker

    client = await Client.connect(arguments.address, namespace=arguments.namespace)
    command = arguments.temporal_command
    if command == "worker":
        from ._runs import load_agent

        agents = [load_agent(spec) for spec in arguments.agents]
        from datetime import timedelta

        async with worker(
            client,
            agents,
            task_queue=arguments.task_queue,
            identity=arguments.identity,
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=arguments.sticky_timeout),
        ):
            out.write(
                f"worker {arguments.identity or client.identity} serving "
                f"{', '.join(agent.name for agent in agents)} on {arguments.task_queue}\n"
            )
            out.flush()
            await asyncio.Event().wait()  # until interrupted
        return 0
    handle = get(client, arguments.run)

    async def answer(asked: Any) -> Any:
        return await _answered(asked, client, handle, arguments)

    try:
        if command == "pending":
            for call in await answer(handle.pending):
                params = json.dumps(call.params, ensure_ascii=False)
                out.write(f"{_safe(call.id)}\t{_safe(call.tool)}\t{_safe(params)}\n")
            return 0
        if command == "approve":
            decision: Any = Approve()
            if arguments.edit is not None:
                decision = Edit(json.loads(arguments.edit))
            await answer(lambda: handle.decide(arguments.call, decision))
            out.write(f"{_safe(arguments.call)}: approved\n")
            return 0
        if command == "deny":
            await answer(lambda: handle.decide(arguments.call, Deny(arguments.reason)))
            out.write(f"{_safe(arguments.call)}: denied\n")
            return 0
        if command == "trace":
            snapshot = await answer(handle.snapshot)
            if arguments.html is not None:
                events = await answer(lambda: _all_events(handle))
                Path(arguments.html).write_text(
                    timeline_of(arguments.run, snapshot, events), encoding="utf-8"
                )
                out.write(f"wrote {arguments.html}\n")
                return 0
            _trace_text(snapshot, out)
            return 0
    except RPCError as error:
        raise ResumeError(f"run {arguments.run!r}: {error}") from None
    raise AssertionError(command)


async def _all_events(handle: Any) -> list[Any]:
    return [event async for event in handle.events(follow=False)]


async def _answered(asked: Any, client: Any, handle: Any, arguments: argparse.Namespace) -> Any:
    """What a query or decision (`asked()`) answers; a ResumeError naming what it waited for when no
    worker answers within `--timeout` (the server holds the question until one does)."""
    from .._errors import ResumeError

    # No question is sent while no worker polls the run's task queue: one the server holds
    # would keep this process from exiting after the timeout, so first wait for a worker.
    queue = await _wait_for_worker(client, handle, arguments)
    task = asyncio.ensure_future(asked())
    done, _ = await asyncio.wait({task}, timeout=min(_SAY_AFTER, arguments.timeout))
    if not done:
        print(
            f"tickloop: waiting for a worker of run {_safe(arguments.run)!r} (task queue "
            f"{queue}) to answer, up to {arguments.timeout:g} s (--timeout)",
            file=sys.stderr,
        )
        done, _ = await asyncio.wait({task}, timeout=max(0.0, arguments.timeout - _SAY_AFTER))
        if not done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise ResumeError(
                f"run {_safe(arguments.run)!r}: no worker answered within "
                f"{arguments.timeout:g} s; a worker must poll the run's task queue {queue} "
                "(start one with `tickloop temporal worker MODULE:AGENT --task-queue ...`)"
            )
    return task.result()


async def _wait_for_worker(client: Any, handle: Any, arguments: argparse.Namespace) -> str:
    """The run's task queue (as shown in messages), once a worker polls it; a ResumeError
    saying so when none does within `--timeout`."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    from .._errors import ResumeError

    description = await handle.workflow.describe()
    name = description.task_queue
    queue = repr(_safe(name))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + arguments.timeout
    said = False
    while True:
        polled = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=arguments.namespace,
                task_queue=TaskQueue(name=name),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        if polled.pollers:
            return queue
        left = deadline - loop.time()
        if left <= 0:
            raise ResumeError(
                f"run {_safe(arguments.run)!r}: no worker polls its task queue {queue} "
                f"(waited {arguments.timeout:g} s, --timeout); start one with "
                f"`tickloop temporal worker MODULE:AGENT --task-queue {_safe(name)}`"
            )
        if not said and arguments.timeout - left >= _SAY_AFTER:
            said = True
            print(
                f"tickloop: waiting for a worker on task queue {queue} to serve run "
                f"{_safe(arguments.run)!r}, up to {arguments.timeout:g} s (--timeout)",
                file=sys.stderr,
            )
        await asyncio.sleep(min(0.5, left))


def _safe(text: Any) -> str:
    from ._runs import _safe as escaped  # the local commands' escaping, one rule for both

    return escaped(text)


def _trace_text(snapshot: dict[str, Any], out: TextIO) -> None:
    records = snapshot["records"]
    times = [r["started"] for r in records if r["started"] is not None]
    times += [q["started"] for q in snapshot["requests"]]
    origin = min(times, default=0.0)
    for request in snapshot["requests"]:
        out.write(
            f"model    iteration {request['iteration']:<3} attempt {request['attempt']:<2} "
            f"{request['started'] - origin:8.3f}s {request['finished'] - request['started']:.3f}s"
            f"  {_safe(request['worker'] or '')}\n"
        )
    out.write(f"{'call':<8} {'tool':<20} {'status':<9} {'started':>9} {'ran':>9}  worker\n")
    for r in records:
        start = "" if r["started"] is None else f"{r['started'] - origin:8.3f}s"
        took = (
            ""
            if r["started"] is None or r["finished"] is None
            else f"{r['finished'] - r['started']:.3f}s"
        )
        out.write(
            f"{_safe(r['id']):<8} {_safe(r['tool'] or '?'):<20} {r['status']:<9} {start:>9} "
            f"{took:>9}  {_safe(r.get('worker') or '')}\n"
        )


def timeline_of(run_id: str, snapshot: dict[str, Any], events: Sequence[Any] = ()) -> str:
    """The HTML timeline of `tickloop trace --html`, for a run on Temporal: each call's
    moments from the run's events (received, ready, asked, decided, started, finished, on
    the workflow's clock) and the worker that ran it; the model lane from its requests."""
    from .._observe._events import (
        CallAwaitingApproval,
        CallDecided,
        CallFinished,
        CallReady,
        CallReceived,
        CallStarted,
        RequestFinished,
        RequestRetried,
        RequestStarted,
        RunEnded,
    )
    from .._observe._records import CallInfo, RunInfo
    from .._observe._timeline import _render, _Request

    moments: dict[str, dict[str, Any]] = {}
    requests: list[_Request] = []
    for event in events:
        at = moments.setdefault(event.call_id, {}) if event.call_id else {}
        if isinstance(event, CallReceived):
            at["received"] = event.time
        elif isinstance(event, CallReady):
            at["ready"] = event.time
        elif isinstance(event, CallAwaitingApproval):
            at["asked"] = event.time
        elif isinstance(event, CallDecided):
            at["decided"] = event.time
            at["decision"] = {"decision": event.decision, **event.detail}
        elif isinstance(event, CallStarted):
            at["started"] = event.time
        elif isinstance(event, CallFinished):
            at["finished"] = event.time
        elif isinstance(event, RequestStarted):
            requests.append(_Request(event.iteration, event.time))
        elif isinstance(event, RequestRetried) and requests:
            requests[-1].retries += 1
        elif isinstance(event, RequestFinished) and requests:
            requests[-1].end, requests[-1].worker = event.time, event.worker
    if not events:  # a run whose workflow keeps no events: its requests, from the snapshot
        requests = [
            _Request(
                q["iteration"],
                q["started"],
                q["finished"],
                retries=q["attempt"] - 1,
                worker=q.get("worker"),
            )
            for q in snapshot["requests"]
        ]
    calls = []
    for seq, r in enumerate(snapshot["records"]):
        at = moments.get(r["id"], {})
        calls.append(
            CallInfo(
                id=r["id"],
                seq=seq,
                iteration=r["iteration"],
                tool=r["tool"],
                status=r["status"],
                call=r["call"],
                params=r["params"],
                deps=[],
                decision=at.get("decision"),
                error=r["error"],
                received=at.get("received"),
                ready=at.get("ready"),
                asked=at.get("asked"),
                decided=at.get("decided"),
                started=at.get("started", r["started"]),
                finished=at.get("finished", r["finished"]),
                worker=r.get("worker"),
            )
        )
    times = [t for c in calls for t in (c.received, c.started) if t is not None]
    times += [q.start for q in requests]
    created = min(times, default=0.0)
    updated = max([c.finished for c in calls if c.finished is not None] + [created])
    ended = [event.status for event in events if isinstance(event, RunEnded)]
    status = ended[-1] if ended else ("running" if events else "temporal")
    run = RunInfo(run_id, status, created, updated, len(calls))
    return _render(run, calls, {"": requests}, [], [])

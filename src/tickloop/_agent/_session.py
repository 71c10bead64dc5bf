"""One run (or resume) of an agent: its id, log, events and store binding.

The session belongs to the agent layer: it knows the agent's options and asks the
protocol's loop how many iterations the log holds, while `_durable` below it knows only
journals and stores (no protocol, no Agent).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import trio

from .._core._log import ContextLog
from .._core._tools import missing_bindings
from .._durable._resume import DurableLoop, DurableRun, dumps_entry, new_run_id
from .._durable._store import SQLiteStore, claim_run, create_run
from .._engine._run import initial_log
from .._errors import ConfigurationError, ResumeError
from .._observe._events import EventSink, RunEnded, RunEvent, RunStarted

if TYPE_CHECKING:
    from ._agent import Agent
    from ._loop import RunResult

__all__ = ["RunSession"]


class RunSession:
    """The id, log, events and store binding of one run; statuses and run events."""

    def __init__(
        self,
        agent: Agent,
        run_id: str,
        log: ContextLog,
        sink: EventSink,
        durable: DurableRun | None,
        *,
        resumed: bool,
        journal: list[tuple[int, float, str, Any]] | None = None,
    ) -> None:
        self.agent = agent
        self.run_id = run_id
        self.log = log
        self.sink = sink
        self.durable = durable
        self.resumed = resumed
        self.journal = journal

    @classmethod
    def new(
        cls,
        agent: Agent,
        input: Any,
        messages: Sequence[dict[str, Any]] | None,
        on_event: Callable[[RunEvent], Any] | None,
        run_id: str | None,
    ) -> RunSession:
        """Claim the run id (refused when the store has it) and start a log."""
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise ConfigurationError(f"run_id must be a non-empty string, not {run_id!r}")
        run_id = run_id or new_run_id()
        log = ContextLog(messages) if messages else initial_log(input)
        if not messages:
            problems = missing_bindings(agent.tools.values(), log.view("input"))
            if problems:
                raise ConfigurationError("; ".join(problems))
        sink = _sink(agent, run_id, on_event)
        durable = None
        store: SQLiteStore | None = agent.store
        if store is not None:
            # The input is serialised first and stored with the run's row, in one
            # transaction: an input that cannot be stored leaves nothing behind.
            at = time.time()
            entries = [(at, "message", dumps_entry(message)) for message in log.messages]
            writer = create_run(store, run_id, agent.protocol, entries)
            durable = DurableRun(writer, agent.tools, agent.redact, sink)
            for message in log.messages:
                durable._track_message(message)
        return cls(agent, run_id, log, sink, durable, resumed=False)

    @classmethod
    def claim(
        cls,
        agent: Agent,
        run_id: str,
        decisions: Mapping[str, Any] | None,
        on_event: Callable[[RunEvent], Any] | None,
    ) -> RunSession:
        """Check the resume and take the run over; `ResumeError` before anything runs."""
        store: SQLiteStore | None = agent.store
        if store is None:
            raise ResumeError(
                "this agent has no store, so it has no runs to resume (pass store=...)"
            )
        if decisions is not None and not isinstance(decisions, Mapping):
            raise ResumeError("decisions must be a dict from call id to decision")
        claimed = claim_run(store, run_id, dict(decisions or {}), protocol=agent.protocol)
        sink = _sink(agent, run_id, on_event)
        durable = DurableRun(claimed.writer, agent.tools, agent.redact, sink)
        durable.decisions = claimed.decisions
        return cls(
            agent, run_id, ContextLog(), sink, durable, resumed=True, journal=claimed.journal
        )

    async def execute(self, drive: Callable[[RunSession], Awaitable[RunResult]]) -> RunResult:
        """Run the loop; record how it ended in the store and in a `RunEnded` event."""
        self.sink.emit(
            RunStarted(run_id=self.run_id, time=trio.current_time(), resumed=self.resumed)
        )
        writer = self.durable.writer if self.durable is not None else None
        try:
            async with self.durable.flushing() if self.durable is not None else nullcontext():
                result = await drive(self)
        except Exception as error:
            reason = f"{type(error).__name__}: {error}"
            if writer is not None:
                _quietly(writer.set_status, "failed", error=reason)
            self.sink.emit(
                RunEnded(
                    run_id=self.run_id,
                    time=trio.current_time(),
                    status="failed",
                    iterations=self.agent._count_iterations(self.log),
                    error=reason,
                )
            )
            raise
        except BaseException:  # cancelled: the run stays resumable ("interrupted")
            if writer is not None:
                _quietly(writer.set_status, "running")
            raise
        else:
            result.run_id = self.run_id
            if writer is not None:
                output = _final_output(self.durable) if result.status == "done" else None
                writer.set_status(result.status, output=output)
        finally:
            if writer is not None:
                writer.release()
        self.sink.emit(
            RunEnded(
                run_id=self.run_id,
                time=trio.current_time(),
                status=result.status,
                iterations=result.iterations,
            )
        )
        return result

    def replay_into(self, loop: DurableLoop) -> None:
        if self.durable is not None and self.journal is not None:
            self.durable.replay(self.journal, loop)


def _sink(agent: Agent, run_id: str, on_event: Callable[[RunEvent], Any] | None) -> EventSink:
    listeners: list[Callable[[RunEvent], Any] | None] = [on_event]
    # A ready-made human hook (tl.BrowserApproval) shows the run live: it listens too.
    watcher = getattr(agent.approve, "on_run_event", None)
    if callable(watcher):
        listeners.append(watcher)
    if agent.tracer is not None:
        listeners.append(agent.tracer.listener())
    return EventSink(run_id, agent.redact, listeners)


def _final_output(durable: DurableRun | None) -> Any:
    if durable is None or not durable.verdicts:
        return None
    return durable.verdicts[max(durable.verdicts)]


def _quietly(function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Record a status on the way out of a failure, without hiding that failure."""
    try:
        function(*args, **kwargs)
    except Exception:
        pass

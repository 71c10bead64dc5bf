"""One run (or resume) of an agent: its id, log, events and store binding.

The session belongs to the agent layer: it is configured by the run's `AgentConfig`,
asks the run's protocol for its loop and for how many iterations the log holds, while
`_durable` below it knows only journals and stores (no protocol, no Agent).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import trio

from .._core._budget import Budget
from .._core._guardrails import ResultGuardrail, ToolGuardrail
from .._core._log import ContextLog
from .._core._paths import RunPath
from .._core._tools import missing_bindings
from .._durable._codec import dumps_entry, new_run_id
from .._durable._resume import DurableRun
from .._durable._store import SQLiteStore
from .._durable._writer import claim_run, create_run
from .._engine._run import initial_log
from .._errors import ConfigurationError, GuardrailTripped, ResumeError
from .._observe._events import EventSink, RunEnded, RunEvent, RunStarted
from ._conversation import SessionRun, history_message
from ._loop import AgentConfig, OuterLoop, RunResult
from ._tree import RunPlace, TreeServices, TreeTool, has_sub_agents, open_tree_sources

__all__ = ["RunSession"]


class RunSession:
    """The id, log, events and store binding of one run; statuses and run events."""

    def __init__(
        self,
        config: AgentConfig,
        run_id: str,
        log: ContextLog,
        sink: EventSink,
        durable: DurableRun | None,
        *,
        resumed: bool,
        journal: list[tuple[int, float, str, Any]] | None = None,
    ) -> None:
        self.config = config
        self.run_id = run_id
        self.log = log
        self.sink = sink
        self.durable = durable
        self.resumed = resumed
        self.journal = journal
        self.grant: Any = None  # a resume's `budget=`: room added once replayed
        # The session the run belongs to (PROTOCOL §16): told when the run is over.
        self.session_id: str | None = None

    @classmethod
    def new(
        cls,
        config: AgentConfig,
        input: Any,
        messages: Sequence[dict[str, Any]] | None,
        on_event: Callable[[RunEvent], Any] | None,
        run_id: str | None,
        notes: Sequence[dict[str, Any]] = (),
        *,
        session: SessionRun | None = None,
        keep_state: bool = False,
    ) -> RunSession:
        """Claim the run id (refused when the store has it) and start a log; a stored
        run journals `notes` with its input (a fork's, naming its record).

        A run of a `session` (whose lease the caller holds) begins with its `history`
        message, then its input, then (`keep_state`) the state the session left, or
        `messages` when given (their state over the session's); it joins the session
        in the transaction that makes it (PROTOCOL §16)."""
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise ConfigurationError(f"run_id must be a non-empty string, not {run_id!r}")
        run_id = run_id or new_run_id()
        first = [history_message(session.history)] if session and session.history else []
        if messages:  # a log to go on from; in a session, after the session's history
            log = ContextLog([*first, *messages])
        elif session is None:
            log = initial_log(input)
        else:
            opened = initial_log(input, session.state if keep_state else None)
            log = ContextLog([*first, *opened.messages])
        if not messages:
            problems = missing_bindings(config.tools.values(), log.view("input"))
            if problems:
                raise ConfigurationError("; ".join(problems))
        sink = _sink(config, run_id, on_event)
        durable = None
        store: SQLiteStore | None = config.store
        if store is not None:
            # The input is serialised first and stored with the run's row, in one
            # transaction: an input that cannot be stored leaves nothing behind.
            at = time.time()
            entries = [(at, "message", dumps_entry(message)) for message in log.messages]
            if config.budget is not None:  # the run's own (PROTOCOL §12): its resumes' too
                note = {"note": BUDGET_NOTE, "budget": config.budget.to_dict()}
                entries.append((at, "note", dumps_entry(note)))
            entries += [(at, "note", dumps_entry(note)) for note in notes]
            joining = None
            if session is not None:
                joining = (session.session.id, json.dumps(log.view("input"), ensure_ascii=False))
            writer = create_run(store, run_id, config.protocol.name, entries, session=joining)
            durable = DurableRun(writer, config.tools, config.redact, sink)
            for message in log.messages:
                durable._track_message(message)
        made = cls(config, run_id, log, sink, durable, resumed=False)
        made.session_id = session.session.id if session is not None else None
        return made

    @classmethod
    def claim(
        cls,
        config: AgentConfig,
        run_id: str,
        decisions: Mapping[str, Any] | None,
        on_event: Callable[[RunEvent], Any] | None,
    ) -> RunSession:
        """Check the resume and take the run over; `ResumeError` before anything runs."""
        store: SQLiteStore | None = config.store
        if store is None:
            raise ResumeError(
                "this agent has no store, so it has no runs to resume (pass store=...)"
            )
        if decisions is not None and not isinstance(decisions, Mapping):
            raise ResumeError("decisions must be a dict from call id to decision")
        claimed = claim_run(store, run_id, dict(decisions or {}), protocol=config.protocol.name)
        budget = journaled_budget(claimed.journal)
        if budget is not None:  # the run's own budget, whatever the agent's is now
            config = dataclasses.replace(config, budget=budget)
        sink = _sink(config, run_id, on_event)
        durable = DurableRun(claimed.writer, config.tools, config.redact, sink)
        durable.decisions = claimed.decisions
        return cls(
            config, run_id, ContextLog(), sink, durable, resumed=True, journal=claimed.journal
        )

    async def execute(self, *, on_text: Callable[[str], Any] | None = None) -> RunResult:
        """Run the protocol's loop (a resumed run's journal replayed into it first);
        record how it ended in the store and in a `RunEnded` event. `on_text` reads a
        final answer's text as it streams (protocol "tools", `Agent.stream`)."""
        protocol = self.config.protocol
        self.sink.emit(
            RunStarted(run_id=self.run_id, time=trio.current_time(), resumed=self.resumed)
        )
        writer = self.durable.writer if self.durable is not None else None
        config, place = self._tree_root()
        try:
            async with self.durable.flushing() if self.durable is not None else nullcontext():
                loop = protocol.open_loop(
                    config, self.log, self.sink, self.durable, on_text=on_text
                )
                async with open_tree_sources(place, config.tools.values(), self.journal):
                    if self.durable is not None and self.journal is not None:
                        _replay(self.durable, self.journal, loop, place)
                    loop.grant = self.grant
                    result = await loop.run()
                if place is not None:  # the whole tree's calls and pending calls
                    result.records = place.gather(result.records, config.tools)
                    result.pending = place.pending_of(result.pending)
        except Exception as error:
            reason = f"{type(error).__name__}: {error}"
            # A guardrail's trip (PROTOCOL §15) is stored as such: resume refuses it.
            status = "tripped" if isinstance(error, GuardrailTripped) else "failed"
            if writer is not None:
                ended = (self._state(),) if self.session_id is not None else None
                _quietly(writer.set_status, status, error=reason, session_state=ended)
            self.sink.emit(
                RunEnded(
                    run_id=self.run_id,
                    time=trio.current_time(),
                    status=status,
                    iterations=protocol.iterations_in(self.log),
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
                over = self.session_id is not None and result.status == "done"
                ended = (self._state(),) if over else None
                writer.set_status(result.status, output=output, session_state=ended)
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

    def _state(self) -> Any:
        """The state the run ends with, for its session's next run (JSON already)."""
        state = self.log.view("state")
        return state if isinstance(state, dict) else None

    def _tree_root(self) -> tuple[AgentConfig, RunPlace | None]:
        """The run's configuration as the root of a tree of runs, when it has sub-agents
        (PROTOCOL §11): its place, and its hook asked one question at a time for the
        whole tree."""
        config = self.config
        if not has_sub_agents(config.tools.values()):
            return config, None
        durable = self.durable
        tree = TreeServices(
            run_id=self.run_id,
            approve=config.approve,
            guardrails=tuple(
                g for g in config.guardrails if isinstance(g, ToolGuardrail | ResultGuardrail)
            ),
            listeners=self.sink.listeners,
            redact=config.redact,
            max_depth=config.max_depth,
            durable=durable,
            journal=self.journal or (),
            decisions=TreeServices.keyed_decisions(
                durable.decisions if durable is not None else None
            ),
            replaying=config.replaying,
            on_budget=config.on_budget,
            media=config.media,
        )
        if durable is not None:
            durable.share = False  # its children's entries come between its own
        place = RunPlace(tree, RunPath.ROOT, config.name)
        approve = place.ask if config.approve is not None else None
        return dataclasses.replace(config, approve=approve, place=place), place


class TreeReplay:
    """A resumed tree's journal replayed in the order it was written (PROTOCOL §10, §12).

    The root replays its own entries; each entry of a run below it comes here, in its
    place, and goes to that child run's loop, made when its first entry comes (its agent
    call has started by then: `TreeTool.open_replay`). So every run's scheduler sees its
    budget's ledger exactly as it was at each of its inputs, whatever its siblings did
    meanwhile: the resumed tree counts every journaled start and spending, at every
    depth, before anything new runs, and makes the same refusals. A child whose agent
    lists tool sources (MCP servers) is made with them opened first (`open_tree_sources`).
    The children made wait in `TreeState.replayed` for their agent calls (`run_child`).
    """

    def __init__(self, place: RunPlace, loop: OuterLoop) -> None:
        self.root = place
        self.loops: dict[RunPath, OuterLoop] = {RunPath.ROOT: loop}
        self.durables: dict[RunPath, DurableRun] = {}
        self.skipped: set[RunPath] = set()

    def __call__(self, path: RunPath, seq: int, at: float, kind: str, body: Any) -> None:
        loop = self.loops.get(path)
        if loop is None:
            if path in self.skipped:
                return
            loop = self._open(path)
            if loop is None:
                self.skipped.add(path)
                return
        self.durables[path].replay_entry(loop, seq, at, kind, body)

    def _open(self, path: RunPath) -> OuterLoop | None:
        parent = self.loops.get(path.parent)
        if parent is None or parent.config.place is None:
            return None
        call_id = path.last
        record = parent.engine.scheduler.records.get(call_id)
        tool = parent.config.tools.get(record.tool or "") if record is not None else None
        if not isinstance(tool, TreeTool):
            return None
        opened = tool.open_replay(parent.config.place.child(call_id, tool.agent_name))
        if opened is None:
            return None
        self.loops[path], self.durables[path] = opened
        return self.loops[path]

    def end(self) -> None:
        """The journal is replayed: each child made waits for its agent call."""
        replayed = self.root.tree.state.replayed
        for path, durable in self.durables.items():
            loop = self.loops[path]
            durable.end_replay(loop)
            replayed[path] = (loop, durable)

    def forget(self) -> None:
        for durable in self.durables.values():
            durable.forget_replay()


def _replay(
    durable: DurableRun,
    journal: list[tuple[int, float, str, Any]],
    loop: Any,
    place: RunPlace | None,
) -> None:
    """Replay a resumed run's journal into its loop; a tree's, whole, in its order."""
    if place is None:
        durable.replay(journal, loop)
        return
    tree = TreeReplay(place, loop)
    try:
        durable.replay(journal, loop, tree)
    except BaseException:
        tree.forget()
        raise
    tree.end()


BUDGET_NOTE = "budget"


def journaled_budget(journal: Sequence[tuple[int, float, str, Any]]) -> Budget | None:
    """The budget a stored run started with (its `run(budget=)`, or its agent's), from
    the note its first commit holds; None for a run without one."""
    for _, _, kind, body in journal:
        if kind == "note":
            budget = budget_in(body)
            if budget is not None:
                return budget
        if kind == "event":
            return None  # the note comes with the input, before any event
    return None


def budget_in(note: Any) -> Budget | None:
    """The budget a run's budget note holds; None for another note."""
    if isinstance(note, dict) and note.get("note") == BUDGET_NOTE:
        return Budget.from_dict(note["budget"])
    return None


def _sink(
    config: AgentConfig, run_id: str, on_event: Callable[[RunEvent], Any] | None
) -> EventSink:
    listeners: list[Callable[[RunEvent], Any] | None] = [on_event]
    # A ready-made human hook (tl.BrowserApproval) shows the run live: it listens too.
    watcher = getattr(config.approve, "on_run_event", None)
    if callable(watcher):
        listeners.append(watcher)
    if config.tracer is not None:
        listeners.append(config.tracer.listener())
    return EventSink(run_id, config.redact, listeners)


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

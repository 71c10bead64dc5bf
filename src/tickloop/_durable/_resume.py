"""Durable runs: journal a run as it goes, and resume it by replaying the journal.

A run is event sourced (PROTOCOL §10). `DurableRun` is the run's `JournalWriter`
(`_journal.py`: every event committed before the engine acts on it) that can also
rebuild a run from its journal.

To resume, the journal is replayed into a fresh scheduler without carrying out any
action: the log, every call's state and the tick's position come back exactly as they
were. `recover` then settles what the crash left open:

* a call that had started and not finished runs again if its tool is `idempotent`;
  otherwise it finishes `failed` with a runtime error saying it was interrupted;
* a call whose approval was being asked is asked again;
* decisions recorded for deferred calls are applied;
* a request whose stream had closed is never sent again; a stream that was still open
  is closed (the calls that arrived keep running) with a structural error telling the
  model its answer was cut off, and the loop goes on with the next iteration.

Replay and the settling of calls (`reopen`) serve both protocols' loops; what a crash
means for the request itself differs, so each protocol's loop settles its own, in
`tickloop._agent` (`_SolutionLoop._recover`, `_TurnLoop._recover`): this module runs no
protocol's loop and knows no agent. It knows the shapes of the solution protocol's plan
and solution messages, only to store their calls once (`shared_text`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import trio

from .._core._decisions import (
    Approve,
)
from .._core._log import ContextLog
from .._core._paths import RunPath, untag_kind
from .._core._questions import is_verdict
from .._core._scheduler_io import (
    FinishCall,
)
from .._core._status import CallStatus
from .._engine._engine import Engine, utc_now
from .._engine._questions import QUESTION_NOTE, SAMPLED_NOTE
from .._errors import ResumeError
from ._codec import damaged_entry, event_from_dict
from ._journal import JournalWriter


class DurableLoop(Protocol):
    """What replay needs of an outer loop (either protocol's): its engine and its log."""

    engine: Engine
    log: ContextLog


Below = Callable[[RunPath, int, float, str, Any], None]
"""Takes an entry of a run below the one replayed: (its path, seq, time, kind, body)."""

INTERRUPTED = {
    "type": "runtime",
    "message": "interrupted: the process running this call stopped before it finished",
}
CUT_OFF = "the model's answer was cut off by a crash"
UNCHECKED = (
    "the process stopped before the model's answer was checked; its output, if any, was not used"
)


class DurableRun(JournalWriter):
    """Journals one run (`JournalWriter`) and replays it; see the module docstring."""

    def replay(
        self,
        journal: Sequence[tuple[int, float, str, Any]],
        loop: DurableLoop,
        below: Below | None = None,
    ) -> None:
        """Rebuild the log and the scheduler from the journal; no action is carried out.

        `below` takes the entries of the runs below this one (a tree's, tagged
        "kind@path"), in their place among this run's: a tree replayed in the order its
        entries were written shares its budget exactly as it did (PROTOCOL §12). Without
        it they are skipped (each child run replays its own when it starts again).
        """
        try:
            for seq, at, kind, body in journal:
                try:
                    base, path = untag_kind(kind)
                    if path:  # a sub-agent's entry: its child run replays it
                        if below is not None:
                            below(path, seq, at, base, body)
                        continue
                    self.replay_entry(loop, seq, at, kind, body)
                except (ValueError, KeyError, TypeError, AttributeError) as error:
                    raise damaged_entry(
                        self.writer.store.path,
                        self.writer.run_id,
                        seq,
                        f"cannot be read ({type(error).__name__}: {error})",
                    ) from None
        except BaseException:
            self.forget_replay()
            raise
        self.end_replay(loop)

    def forget_replay(self) -> None:
        """A replay that failed: rows of a journal prefix must never be written as the
        run's (the run's end commits whatever rows wait), so the stored ones stay."""
        self.changes.forget()

    def end_replay(self, loop: DurableLoop) -> None:
        """The journal is replayed: place the calls' times on this process's clock and
        make the rows the replay's, for the resume's first commit."""
        scheduler = loop.engine.scheduler
        # Times of calls that ran in an earlier process, on this process's trio clock.
        for call_id, record in scheduler.records.items():
            row = self.rows.get(call_id)
            if row is not None and row.started is not None:
                record.started = row.started - self.wall0 + self.trio0
                if row.finished is not None and call_id not in self.running:
                    record.finished = row.finished - self.wall0 + self.trio0
        # The stored rows may trail the journal (a crash within ROW_LAG of a change):
        # the resume's first commit replaces them all with the replay's. A root's rows
        # are rewritten whole (its children's are left to them); a child's one by one.
        self.changes.rewrite_all(self.rows, whole=not self.path)
        self.sink.remember(scheduler.records)
        self.resumed = True

    def replay_entry(self, loop: DurableLoop, seq: int, at: float, kind: str, body: Any) -> None:
        """Replay one entry of this run's own; damage in it (not an object, a missing
        field) raises a ValueError, KeyError, TypeError or AttributeError."""
        scheduler = loop.engine.scheduler
        self._replay_entry(scheduler, loop, seq, at, kind, body)

    def _replay_entry(
        self, scheduler: Any, loop: DurableLoop, seq: int, at: float, kind: str, body: Any
    ) -> None:
        if kind == "message":
            loop.log.append(body)
            self._track_message(body)
        elif kind == "event":
            event = event_from_dict(body)
            try:
                actions = scheduler.handle(event)
            except (ValueError, KeyError, TypeError) as error:
                raise ResumeError(
                    f"run {self.writer.run_id!r} cannot be replayed at journal entry "
                    f"{seq} ({body.get('type')}): {error}. Were the agent's tools changed "
                    "since the run began?"
                ) from error
            self._track(event, actions, at)
        elif body.get("note") == "verdict":
            self.verdicts[body["iteration"]] = body.get("output")
            if body.get("unresolved"):
                self.unresolved.add(body["iteration"])
            else:
                self.unresolved.discard(body["iteration"])
        elif body.get("note") == "guardrail":
            self.guardrails.append({k: v for k, v in body.items() if k != "note"})
        elif body.get("note") == "statement":
            self.programs[body["iteration"]] = body["program"]
        elif body.get("note") in (QUESTION_NOTE, SAMPLED_NOTE) and "key" in body:
            self.answers[str(body["key"])] = body
            self._follow_note(body)
        elif body.get("note") == "restart" and body.get("call_id") in self.rows:
            row = self.rows[body["call_id"]]
            if row.started is None or not self._resumes(row.tool or ""):
                row.started = at

    def reopen(self, engine: Engine) -> bool:
        """Settle the calls a crash (or a pause) left open, for either protocol's loop.

        Runs inside the engine's session, after `replay`. A call that was running runs
        again if its tool is idempotent, else finishes `failed` with `INTERRUPTED`; a
        question left unanswered is asked again; the decisions recorded for deferred
        calls are applied. False when this run is not a resume (nothing to settle).
        """
        if not self.resumed:
            return False
        scheduler = engine.scheduler
        self.note("resumed")
        engine.expect_tick()
        for call_id, action in list(self.running.items()):
            tool = self.tools.get(action.tool)
            if tool is not None and tool.idempotent:
                self.note("restart", call_id=call_id)
                row = self.rows[call_id]
                if not tool.resumes:  # one that resumes keeps its first start
                    row.started = self.now()
                self.changes.changed(row, settling=False)
                self.sink.restarted(action)
                engine.restart(action)
            else:
                engine.feed(FinishCall(call_id, error=dict(INTERRUPTED), date=utc_now()))
                scheduler.records[call_id].finished = trio.current_time()
        if self.asking is not None and scheduler.status(self.asking.id) == CallStatus.APPROVING:
            engine.ask(self.asking)
        plan = scheduler.plan_under_review()
        if plan is not None:  # a plan review left unanswered (PROTOCOL §15)
            engine.ask_review(plan)
        engine.ask_budget_again()  # a budget question left open (PROTOCOL §12)
        life = engine.budget.life if engine.budget is not None else None
        for pending in scheduler.deferred:
            decision = self.decisions.get(pending.id)
            if is_verdict(decision):
                if pending.id not in self.parked:  # not a call a question parked
                    continue
                # The answer to the question the call was parked on: it runs again, and
                # the server's same question is answered with it (`QuestionDesk`).
                self.question_verdicts[pending.id] = decision
            if life is not None and life.is_parked(pending.id):
                decision = Approve()  # parked for budget room (§12): it reserves again
            if pending.id in self.parked:
                # A sub-agent's call parked by its paused child: it starts again, and its
                # child replays its journal and applies the decisions under its path (a
                # child with nothing new to do parks it again).
                self.parked.discard(pending.id)
                decision = Approve()
            if decision is not None:
                if not scheduler.tick_active:
                    # The previous decision settled its call at once (a Deny, a Respond)
                    # and so ended the tick, paused on the calls still to be decided
                    # here; this one opens it again, and its end is the one to wait for.
                    engine.expect_tick()
                engine.decide(pending.id, decision)
        return True

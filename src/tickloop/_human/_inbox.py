"""The inbox over a store (`tickloop serve`): every run, every deferred call across runs.

A decision is recorded with `SQLiteStore.decide`, exactly as `tickloop approve` records
it, so the store's rules hold whoever decides (a call is decided once; a finished run
takes no decision). With an agent, the inbox also knows the tools' schemas (so a person
may edit or respond) and resumes a paused run once every call it waits on has a decision.

The store may change under the inbox (another process runs, pauses or decides), so it is
polled about once a second and the page is told when what it shows changed.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any, TextIO

import trio

from .._core._budget import Budget
from .._core._expressions import find_references, parse_expression
from .._core._status import CallStatus
from .._durable._store import SQLiteStore
from .._errors import ResumeError, StoreError
from .._observe._events import Redactor
from .._terminal import one_line
from ._budget import BUDGET_PREFIX, budget_views, grant_for, open_budget_questions
from ._common import VERBS, CallView, Refused, decision_from_answer
from ._page import CallRow, RunView
from ._question_form import verdict_from_form
from ._web import Changes

__all__ = ["StoreInbox"]


class StoreInbox:
    """The web app's backend for a store; `run(nursery)` polls and resumes."""

    title = "approval inbox"

    def __init__(
        self,
        store: SQLiteStore,
        agent: Any = None,
        *,
        poll: float = 1.0,
        log: TextIO | None = None,
    ) -> None:
        self.store = store
        self.agent = agent
        self.changes = Changes()
        self._redactor: Redactor = agent.redact if agent is not None else Redactor()
        self._poll = poll
        self._log = log or sys.stderr
        self._resuming: set[str] = set()
        self._notes: dict[str, str] = {}  # run id -> why its last resume stopped
        self._seen: Any = None
        self._nursery: trio.Nursery | None = None

    # -- reading ---------------------------------------------------------------------

    def _tool(self, name: str | None) -> Any:
        if self.agent is None or name is None:
            return None
        return self.agent.tools.get(name)

    def _views(self, run_id: str) -> list[CallView]:
        calls = self.store.calls(run_id)
        decided = {p.id: p.decision for p in self.store.pending(run_id)}
        views = []
        by_id = {call.id: call for call in calls}
        for call in calls:
            if call.status != CallStatus.DEFERRED:
                continue
            tool = self._tool(call.tool)
            decision = decided.get(call.id)
            arrows = self._plan_from(call, calls, by_id)
            readers = sorted({reader for _, reader in arrows})
            views.append(
                CallView(
                    run_id=run_id,
                    id=call.id,
                    tool=call.tool,
                    params=call.params,
                    waits_on=list(call.deps),
                    dependents=_readers_of(call, calls, tool),
                    schema=None if tool is None else tool.parameters,
                    output_schema=None if tool is None else tool.output,
                    known_tool=tool is not None,
                    decided=None if decision is None else str(decision.get("decision")),
                    question=self.store.question(run_id, call.id),
                    downstream=[r for r in readers if self._gated(by_id[r].tool)],
                    arrows=arrows,
                )
            )
        return views

    def _gated(self, name: str | None) -> bool:
        """Whether a stored call's tool may need approval (unknown here: it may)."""
        tool = self._tool(name)
        return tool is None or bool(tool.may_require_approval)

    def _plan_from(self, call: Any, calls: list[Any], by_id: dict[str, Any]) -> list[Any]:
        """The arrows (writer, reader) of the stored plan from `call` on: the calls still
        waiting to read its output, transitively (PROTOCOL §15 "Plan review")."""
        arrows: list[tuple[str, str]] = []
        seen = {call.id}
        frontier = [call]
        while frontier:
            writer = frontier.pop(0)
            for reader in _readers_of(writer, calls, self._tool(writer.tool)):
                arrows.append((writer.id, reader))
                if reader not in seen:
                    seen.add(reader)
                    frontier.append(by_id[reader])
        return arrows

    def _run_view(self, info: Any) -> RunView:
        status = "resuming" if info.run_id in self._resuming else info.status
        return RunView(info.run_id, status, info.created, info.calls, self._notes.get(info.run_id))

    def snapshot(self) -> tuple[list[RunView], list[CallView]]:
        runs = self.store.runs()
        pending: list[CallView] = []
        for info in runs:
            if info.status in ("paused", "failed", "interrupted"):
                pending.extend(self._views(info.run_id))
            if info.status == "paused":
                pending.extend(budget_views(self.store, info.run_id))
        runs.reverse()  # newest first
        return [self._run_view(info) for info in runs], pending

    def run_page(self, run_id: str) -> tuple[RunView, list[CallRow], list[CallView]] | None:
        try:
            info = self.store.run(run_id)
        except ResumeError:
            return None
        calls = [
            CallRow(c.id, c.tool, c.status, c.params, c.error) for c in self.store.calls(run_id)
        ]
        questions = budget_views(self.store, run_id) if info.status == "paused" else []
        return self._run_view(info), calls, self._views(run_id) + questions

    def timeline(self, run_id: str) -> str | None:
        from .._durable._timeline import timeline_html

        try:
            return timeline_html(self.store, run_id)
        except (ResumeError, StoreError):
            return None

    # -- deciding --------------------------------------------------------------------

    async def decide(
        self, run_id: str, call_id: str, action: str, reason: str, text: str, slot: str = ""
    ) -> str:
        if call_id.startswith(BUDGET_PREFIX):  # a budget question: more room (PROTOCOL §12)
            return await self._grant(run_id, call_id[len(BUDGET_PREFIX) :], action, text)
        decision = await trio.to_thread.run_sync(
            self._decide, run_id, call_id, action, reason, text
        )
        self.changes.bump()
        self._resume_if_ready(run_id)
        verb = VERBS.get(decision, "answered")
        then = (
            "; the run resumes once every call it waits on is decided"
            if self.agent is not None
            else f"; continue it with: tickloop resume {shlex.quote(run_id)} --agent MODULE:ATTR"
        )
        return f"{verb} {call_id} of run {run_id}{then}"

    async def _grant(self, run_id: str, limit: str, action: str, text: str) -> str:
        if action != "grant":
            raise Refused(f"a budget question is answered with more room, not {action!r}")
        grant = await trio.to_thread.run_sync(self._add_budget, run_id, limit, text)
        self.changes.bump()
        self._resume_if_ready(run_id, granted=True)
        then = (
            "; the run resumes"
            if self.agent is not None
            else f"; continue it with: tickloop resume {shlex.quote(run_id)} --agent MODULE:ATTR"
        )
        return f"added {grant.limit(limit):g} to {limit} of run {run_id}{then}"

    def _add_budget(self, run_id: str, limit: str, text: str) -> Budget:
        try:
            info = self.store.run(run_id)
            waiting = open_budget_questions(self.store, run_id) if info.status == "paused" else []
        except (ResumeError, StoreError) as error:
            raise Refused(str(error)) from error
        if limit not in waiting:
            raise Refused(f"run {run_id} has no budget question about {limit} waiting")
        grant = grant_for(limit, text)
        try:
            self.store.add_budget(run_id, grant)
        except (ResumeError, StoreError) as error:
            raise Refused(str(error)) from error
        return grant

    def _decide(self, run_id: str, call_id: str, action: str, reason: str, text: str) -> str:
        try:
            views = {view.id: view for view in self._views(run_id)}
        except ResumeError as error:
            raise Refused(str(error)) from error
        view = views.get(call_id)
        if view is None:
            raise Refused(f"run {run_id} has no call {call_id} waiting for a decision")
        if view.decided is not None:
            raise Refused(
                f"{call_id} of run {run_id} is already decided ({view.decided}); "
                "a call is decided once"
            )
        decision: Any
        if view.question is not None:  # parked on an MCP server's question: a verdict
            decision = verdict_from_form(view.question, action, text)
        else:
            decision = decision_from_answer(
                view, action, reason=reason, text=text, redactor=self._redactor
            )
        try:
            self.store.decide(run_id, call_id, decision)
        except (ResumeError, StoreError) as error:
            raise Refused(str(error)) from error
        return action

    # -- polling and resuming ----------------------------------------------------------

    async def run(self) -> None:
        """Poll the store and resume what is ready, until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            while True:
                try:
                    seen = await trio.to_thread.run_sync(self._fingerprint)
                except StoreError as error:
                    print(f"tickloop serve: {one_line(error)}", file=self._log, flush=True)
                    seen = None
                if seen != self._seen:
                    self._seen = seen
                    self.changes.bump()
                    if seen is not None:
                        for run_id, status, undecided, decided in seen:
                            if status == "paused" and decided and not undecided:
                                self._resume_if_ready(run_id)
                await trio.sleep(self._poll)

    def _fingerprint(self) -> Any:
        rows = []
        for info in self.store.runs():
            waiting = self.store.pending(info.run_id) if info.status == "paused" else []
            undecided = sum(1 for p in waiting if p.decision is None)
            rows.append((info.run_id, info.status, undecided, len(waiting) - undecided))
        return tuple(rows)

    def _resume_if_ready(self, run_id: str, *, granted: bool = False) -> None:
        if self.agent is None or self._nursery is None or run_id in self._resuming:
            return
        self._resuming.add(run_id)
        self._nursery.start_soon(self._resume, run_id, granted)

    async def _resume(self, run_id: str, granted: bool = False) -> None:
        try:
            waiting = await trio.to_thread.run_sync(self.store.pending, run_id)
            info = await trio.to_thread.run_sync(self.store.run, run_id)
            # Once every call it waits on is decided, or (`granted`) room was given.
            ready = bool(waiting) or granted
            if info.status != "paused" or not ready or any(p.decision is None for p in waiting):
                return
            self.changes.bump()
            print(f"tickloop serve: resuming {one_line(run_id)}", file=self._log, flush=True)
            result = await self.agent.resume_async(run_id, on_event=self._on_event)
            self._notes.pop(run_id, None)
            print(
                f"tickloop serve: run {one_line(run_id)} is {result.status}",
                file=self._log,
                flush=True,
            )
        except Exception as error:  # the inbox stays up; the run page says what happened
            self._notes[run_id] = f"resume failed: {type(error).__name__}: {error}"
            print(
                f"tickloop serve: {one_line(run_id)}: {one_line(self._notes[run_id])}",
                file=self._log,
                flush=True,
            )
        finally:
            self._resuming.discard(run_id)
            self.changes.bump()

    def _on_event(self, event: Any) -> None:
        self.changes.bump()


def _readers_of(call: Any, calls: list[Any], tool: Any) -> list[str]:
    """The stored calls still waiting to read what a deferred call writes.

    The store keeps each call's wire form, so this reads the references there; the
    output path is the call's own `_outputPath`, else its tool's default (when known).
    """
    wire = call.call if isinstance(call.call, dict) else {}
    target = wire.get("_outputPath")
    if not isinstance(target, str) and tool is not None:
        target = getattr(tool, "output_path", None)
    if not isinstance(target, str):
        return []
    try:
        writes = parse_expression(target).terms
    except ValueError:
        return []
    readers = []
    for other in calls:
        if (
            other.id == call.id
            or other.status != CallStatus.WAITING
            or not isinstance(other.call, dict)
        ):
            continue
        params = {k: v for k, v in other.call.items() if not str(k).startswith("_")}
        try:
            terms = [t for ref in find_references(params) for t in ref.expression.terms]
        except ValueError:
            continue
        if any(term.overlaps(written) for term in terms for written in writes):
            readers.append(other.id)
    return readers

"""`tl.BrowserApproval()`: a local page where a person decides, while the run goes on.

The page is served from a thread of its own (its own trio loop, Hypercorn's trio worker),
so it works the same for `agent.run`, `agent.run_async`, `run_calls` and several runs at
once, and it stays up between runs. The hook itself is synchronous: the engine runs it in
a worker thread, which waits for the person's answer while every call that does not
depend on this one keeps running (PROTOCOL §6).

The run is shown live because the agent hands this hook its events (`on_run_event`); the
page keeps, per run, what the timeline needs (calls and the time of each transition).
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
import webbrowser
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

import trio

from .._core._decisions import Deny, PendingCall, decision_to_dict
from .._core._questions import Cancel, Question, verdict_to_dict
from .._core._status import CallStatus
from .._observe import _events as ev
from .._observe._events import Redactor
from ._common import VERBS, CallView, Refused, decision_from_answer, make_redactor, view_of
from ._page import CallRow, RunView
from ._question_form import verdict_from_form
from ._web import Changes, WebApp, require_web, serve

__all__ = ["BrowserApproval"]

_CLOSED = "denied: the approval page was closed before a person decided"
_KEPT_RUNS = 50  # the page of a long-lived process shows its most recent runs


def _question_view(question: Question) -> CallView:
    """An MCP server's question as the page shows it: under the call it was asked
    during, its form built from the question's schema."""
    return CallView(
        run_id=question.run_id,
        id=question.call_id or "question",
        tool=f"question from {question.server}",
        params=question.sampling.to_dict() if question.sampling is not None else {},
        question=question,
    )


@dataclass(slots=True)
class _Waiting:
    call: PendingCall | None  # None for an MCP server's question (`view.question`)
    view: CallView
    answered: threading.Event = field(default_factory=threading.Event)
    decision: Any = None  # a Decision, or a verdict for a question


@dataclass(slots=True)
class _LiveCall:
    id: str
    seq: int
    iteration: int
    tool: str | None
    status: str = CallStatus.WAITING
    params: Any = None
    error: Any = None
    decision: dict[str, Any] | None = None
    deps: list[str] = field(default_factory=list)
    received: float | None = None
    ready: float | None = None
    asked: float | None = None
    decided: float | None = None
    started: float | None = None
    finished: float | None = None


@dataclass(slots=True)
class _LiveRun:
    run_id: str
    created: float
    offset: float  # wall clock minus trio clock, in the run's thread
    status: str = "running"
    iteration: int = 0
    calls: dict[str, _LiveCall] = field(default_factory=dict)
    requests: list[list[Any]] = field(default_factory=list)  # [iteration, start, end]
    note: str | None = None


class BrowserApproval:
    """An approval hook that serves a local page where a person decides.

    ::

        approval = tl.BrowserApproval()          # prints http://127.0.0.1:PORT/?token=...
        agent = tl.Agent(model, tools=[...], approve=approval)

    The server starts when the hook is made and serves until `close()` (or the end of a
    `with` block, or of the process). `port=0` picks a free port; `url` is the address
    with its one-time token. `open_browser=True` opens it. `host` binds elsewhere than
    127.0.0.1 only when told to. `redact` takes the agent's patterns when those were
    changed (the page shows parameters as events do). `timeout` (seconds, None: wait for
    ever) denies a call nobody answered in time.
    """

    def __init__(
        self,
        port: int = 0,
        open_browser: bool = False,
        *,
        host: str = "127.0.0.1",
        redact: Iterable[str] | Redactor | None = None,
        timeout: float | None = None,
        output: TextIO | None = None,
        title: str = "approvals",
    ) -> None:
        require_web()
        self.title = title
        self.changes = Changes()
        self._redactor = make_redactor(redact)
        self._timeout = timeout
        self._lock = threading.Lock()
        # Keyed by `CallView.key`: the run id and call id, or for a call without a run
        # id (`run_calls`, whose ids repeat from one call of it to the next) its slot.
        self._waiting: dict[str, _Waiting] = {}
        self._decided: dict[str, str] = {}  # key -> how it was decided: refuse a second
        self._slots = itertools.count(1)
        self._runs: dict[str, _LiveRun] = {}
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._app = WebApp(self)
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(
            target=self._serve_thread, args=(host, port), name="tickloop-approvals", daemon=True
        )
        self._thread.start()
        self._started.wait()
        if self._failure is not None:
            raise self._failure
        self.url = self._app.url(host, self.port)
        print(f"tickloop approvals: {self.url}", file=output or sys.stderr, flush=True)
        if open_browser:
            webbrowser.open(self.url)

    # -- the server thread ---------------------------------------------------------------

    def _serve_thread(self, host: str, port: int) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                self._cancel = scope
                async with trio.open_nursery() as nursery:
                    self.port = await nursery.start(serve, self._app, host, port)
                    self._started.set()

        try:
            trio.run(main)
        except BaseException as error:  # a port in use: raised in the constructor
            self._failure = error
        finally:
            self._started.set()
            with self._lock:
                for waiting in self._waiting.values():
                    waiting.decision = Deny(_CLOSED) if waiting.call is not None else Cancel()
                    waiting.answered.set()

    def _changed(self) -> None:
        token = self._token
        if token is None:
            return
        try:
            token.run_sync_soon(self.changes.bump)
        except trio.RunFinishedError:
            pass

    def close(self) -> None:
        """Stop serving; calls still waiting for a person are denied."""
        token, scope = self._token, self._cancel
        if token is not None and scope is not None:
            try:
                token.run_sync_soon(scope.cancel)
            except trio.RunFinishedError:
                pass
        self._thread.join(timeout=5)

    def __enter__(self) -> BrowserApproval:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the hook ------------------------------------------------------------------------

    def __call__(self, call: PendingCall | Question) -> Any:
        """Wait (in the engine's worker thread) for a person's answer on the page: a
        decision about a call, or (as a `questions=` hook) a verdict on an MCP server's
        question, answered in a form built from its schema."""
        if isinstance(call, Question):
            return self._wait(None, _question_view(call), closed=Cancel())
        return self._wait(call, view_of(call, self._redactor), closed=Deny(_CLOSED))

    def _wait(self, call: PendingCall | None, view: CallView, *, closed: Any) -> Any:
        waiting = _Waiting(call, view)
        with self._lock:
            if not self._thread.is_alive():
                return closed
            if view.run_id is None:
                view.slot = next(self._slots)
            self._waiting[view.key] = waiting
            self._decided.pop(view.key, None)
        self._changed()
        answered = waiting.answered.wait(self._timeout)
        with self._lock:
            if self._waiting.get(view.key) is waiting:
                del self._waiting[view.key]
        self._changed()
        if not answered or waiting.decision is None:
            if call is None:
                return Cancel()  # a question nobody answered in time is dismissed
            return Deny(f"denied: nobody answered within {self._timeout} seconds")
        return waiting.decision

    def on_run_event(self, event: ev.RunEvent) -> None:
        """The agent hands the hook its run's events, so the page shows the run live.

        Called in the run's thread; it only records and never raises into the run.
        """
        try:
            with self._lock:
                self._record(event)
        except Exception:  # the page is a view: a bug here must not stop a run
            return
        self._changed()

    def _record(self, event: ev.RunEvent) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            offset = time.time() - trio.current_time()
            run = self._runs[event.run_id] = _LiveRun(event.run_id, event.time + offset, offset)
            while len(self._runs) > _KEPT_RUNS:
                del self._runs[next(iter(self._runs))]
        at = event.time + run.offset
        if isinstance(event, ev.RunStarted):
            run.status, run.note = "running", None
            return
        if isinstance(event, ev.RunEnded):
            run.status = event.status
            run.note = event.error
            return
        if isinstance(event, ev.RequestStarted):
            run.iteration = event.iteration
            run.requests.append([event.iteration, at, None])
            return
        if isinstance(event, ev.RequestFinished):
            if run.requests and run.requests[-1][2] is None:
                run.requests[-1][2] = at
            return
        call_id = event.call_id
        if call_id is None:
            return
        call = run.calls.get(call_id)
        if call is None:
            tool = getattr(event, "tool", None)
            call = run.calls[call_id] = _LiveCall(call_id, len(run.calls), run.iteration, tool)
            call.received = at
        if isinstance(event, ev.CallReceived):
            call.params = event.call
        elif isinstance(event, ev.CallReady):
            call.status, call.ready, call.params = CallStatus.QUEUED, at, event.params
        elif isinstance(event, ev.CallAwaitingApproval):
            call.status, call.asked = CallStatus.APPROVING, at
            waiting = self._waiting_for(event.run_id, call_id)
            if waiting is not None:
                call.deps = list(waiting.view.waits_on)
        elif isinstance(event, ev.CallDecided):
            call.decided = at
            call.decision = {"decision": event.decision, **event.detail}
            call.status = CallStatus.DEFERRED if event.decision == "defer" else CallStatus.QUEUED
        elif isinstance(event, ev.CallStarted):
            call.status, call.started, call.params = CallStatus.RUNNING, at, event.params
        elif isinstance(event, ev.CallFinished):
            call.status, call.finished, call.error = event.status, at, event.error

    def _waiting_for(self, run_id: str | None, call_id: str) -> _Waiting | None:
        for waiting in self._waiting.values():
            if waiting.view.run_id == run_id and waiting.view.id == call_id:
                return waiting  # (of calls without a run id that share an id: one of them)
        return None

    def _key(self, run_id: str, call_id: str, slot: str) -> str:
        """The key of the call a person decides (called with the lock held).

        A call without a run id is named by its slot; a form without one (an older page,
        a script) names such a call by its id alone, which is refused when several calls
        of that id wait, rather than guessed.
        """
        if run_id:
            return f"{run_id}/{call_id}"
        if slot:
            return f"#{slot}/{call_id}"
        keys = [
            key
            for key, w in self._waiting.items()
            if w.view.run_id is None and w.view.id == call_id
        ]
        if len(keys) > 1:
            raise Refused(
                f"several calls {call_id} without a run wait for a decision; decide each on "
                "the page, which tells them apart"
            )
        if keys:
            return keys[0]
        decided = [
            key for key in self._decided if key.startswith("#") and key.endswith(f"/{call_id}")
        ]
        return decided[-1] if decided else f"/{call_id}"

    # -- the backend of the page ---------------------------------------------------------

    def snapshot(self) -> tuple[list[RunView], list[CallView]]:
        with self._lock:
            runs = [self._run_view(run) for run in self._runs.values()]
            pending = [waiting.view for waiting in self._waiting.values()]
        runs.reverse()  # newest first
        return runs, pending

    def _run_view(self, run: _LiveRun) -> RunView:
        return RunView(run.run_id, run.status, run.created, len(run.calls), run.note)

    def run_page(self, run_id: str) -> tuple[RunView, list[CallRow], list[CallView]] | None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return None
            calls = [
                CallRow(call.id, call.tool, call.status, call.params, call.error)
                for call in run.calls.values()
            ]
            pending = [w.view for w in self._waiting.values() if w.view.run_id == run_id]
            return self._run_view(run), calls, pending

    def timeline(self, run_id: str) -> str | None:
        from .._durable._store import CallInfo, RunInfo
        from .._observe._timeline import _render, _Request

        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return None
            info = RunInfo(run.run_id, run.status, run.created, time.time(), len(run.calls))
            calls = [
                CallInfo(
                    c.id,
                    c.seq,
                    c.iteration,
                    c.tool,
                    c.status,
                    None,
                    c.params,
                    list(c.deps),
                    c.decision,
                    c.error,
                    c.received,
                    c.ready,
                    c.asked,
                    c.decided,
                    c.started,
                    c.finished,
                )
                for c in run.calls.values()
            ]
            requests = [_Request(iteration, start, end) for iteration, start, end in run.requests]
        return _render(info, calls, {"": requests}, [], [])

    async def decide(
        self, run_id: str, call_id: str, action: str, reason: str, text: str, slot: str = ""
    ) -> str:
        with self._lock:
            key = self._key(run_id, call_id, slot)
            waiting = self._waiting.get(key)
            if waiting is None:
                earlier = self._decided.get(key)
                if earlier is not None:
                    raise Refused(
                        f"{call_id} is already decided ({earlier}); a call is decided once"
                    )
                raise Refused(f"no call {call_id} is waiting for a decision here")
            decision: Any
            if waiting.call is None:  # an MCP server's question
                assert waiting.view.question is not None
                decision = verdict_from_form(waiting.view.question, action, text)
                name = verdict_to_dict(decision)["decision"]
            else:
                decision = decision_from_answer(
                    waiting.view,
                    action,
                    reason=reason,
                    text=text,
                    real_params=waiting.call.params,
                    redactor=self._redactor,
                )
                name = decision_to_dict(decision)["decision"]
            self._decided[key] = name
            if action == "approve_all":
                name = action  # said as such: the calls that read it were approved too
            del self._waiting[key]
            waiting.decision = decision
            waiting.answered.set()
        self.changes.bump()
        verb = VERBS.get(name, name)
        where = f" of run {run_id}" if run_id else ""
        return f"{verb} {call_id}{where}"

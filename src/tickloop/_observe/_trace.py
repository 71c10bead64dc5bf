"""OpenTelemetry spans for runs, when `opentelemetry-api` is installed.

A run is one trace: its root span `invoke_agent` (the run id, and when it ends its status
and iterations), one `turn` per iteration under it, the model `request` inside each
turn, and one `execute_tool` per call, carrying the call id, tool and final status.
Spans are made from the typed run events, so they see exactly what `on_event` sees,
secrets already redacted. Every attribute is a plain `str`, `int`, `bool` or a list of
them, as OpenTelemetry's types are: a status is "done", never the engine's str enum.
Without OpenTelemetry nothing is imported and nothing is recorded; tickloop does not
depend on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .._core._status import ERROR_STATUSES
from .._errors import ConfigurationError
from ._events import (
    CallFinished,
    CallStarted,
    RequestFinished,
    RequestRetried,
    RequestStarted,
    RunEnded,
    RunEvent,
    RunStarted,
    TickEnded,
)

__all__ = ["RunTracer", "make_tracer"]


def make_tracer(tracer_provider: Any = None) -> RunTracer | None:
    """A tracer on `tracer_provider` (default: the global one), or None without OTel."""
    try:
        from opentelemetry import trace
    except ImportError:
        if tracer_provider is not None:
            raise ConfigurationError(
                "tracer_provider was given but opentelemetry-api is not installed"
            ) from None
        return None
    return RunTracer(trace, tracer_provider)


class RunTracer:
    """Makes a fresh span-keeping listener for each run."""

    def __init__(self, trace: Any, tracer_provider: Any) -> None:
        self._trace = trace
        self._provider = tracer_provider

    def listener(self) -> Callable[[RunEvent], None] | None:
        """None while no SDK is configured: every span would be dropped, so the run
        skips building them (the global provider is looked up per run, so one set
        later is used from the next run on)."""
        trace = self._trace
        provider = self._provider or trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return None
        return _RunSpans(trace, trace.get_tracer("tickloop", tracer_provider=provider))


class _RunSpans:
    """The open spans of one run, driven by its events."""

    def __init__(self, trace: Any, tracer: Any) -> None:
        self._trace = trace
        self._tracer = tracer
        self._run: Any = None  # the root: every other span of the run is under it
        self._turn: Any = None
        self._request: Any = None
        self._calls: dict[str, Any] = {}
        self._run_id = ""

    def __call__(self, event: RunEvent) -> None:
        self._run_id = event.run_id
        if isinstance(event, RunStarted):
            self._run = self._start(
                "invoke_agent",
                None,
                {"gen_ai.operation.name": "invoke_agent", "tickloop.resumed": event.resumed},
            )
        elif isinstance(event, RequestStarted):
            self._end_turn()
            self._turn = self._start(
                "turn", self._ensure_run(), {"tickloop.iteration": event.iteration}
            )
            self._request = self._start(
                "request", self._turn, {"tickloop.iteration": event.iteration}
            )
        elif isinstance(event, RequestRetried) and self._request is not None:
            self._request.add_event(
                "retry", {"attempt": event.attempt, "delay": event.delay, "error": event.error}
            )
        elif isinstance(event, RequestFinished) and self._request is not None:
            if event.error is not None:
                self._request.set_attribute("tickloop.error", event.error)
            self._request.end()
        elif isinstance(event, CallStarted):
            self._calls[event.call_id or ""] = self._call_span(
                event.call_id, event.tool, event.params
            )
        elif isinstance(event, CallFinished):
            span = self._calls.pop(event.call_id or "", None)
            if span is None:  # never ran (denied, skipped, invalid): a span for its status
                span = self._call_span(event.call_id, event.tool, None)
            status = str(event.status)  # the engine's str enum, as the plain string
            span.set_attribute("tickloop.call.status", status)
            if status in ERROR_STATUSES:
                message = str((event.error or {}).get("message", status))
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, message))
            span.end()
        elif isinstance(event, TickEnded) and self._turn is not None:
            if event.paused:
                self._turn.set_attribute("tickloop.paused", list(event.paused))
            self._end_turn()
        elif isinstance(event, RunEnded):
            for span in self._calls.values():
                span.end()
            self._calls.clear()
            self._end_turn()
            self._end_run(event)

    def _call_span(self, call_id: str | None, tool: str | None, params: Any) -> Any:
        parent = self._request if self._request is not None else self._ensure_turn()
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool or "",
            "gen_ai.tool.call.id": call_id or "",
        }
        if params is not None:
            attributes["tickloop.call.params"] = json.dumps(params, default=str)
        return self._start("execute_tool", parent, attributes)

    def _ensure_turn(self) -> Any:
        """A resumed run's first calls come before any request: give them a turn."""
        if self._turn is None:
            self._turn = self._start("turn", self._ensure_run(), {"tickloop.resumed": True})
        return self._turn

    def _ensure_run(self) -> Any:
        """The run's root span (made by `RunStarted`, which comes first; here in case a
        listener was attached after it)."""
        if self._run is None:
            self._run = self._start("invoke_agent", None, {"gen_ai.operation.name": "invoke_agent"})
        return self._run

    def _end_run(self, event: RunEnded) -> None:
        run = self._ensure_run()
        run.set_attribute("tickloop.status", str(event.status))
        run.set_attribute("tickloop.iterations", event.iterations)
        if event.error is not None:
            run.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(event.error)))
        run.end()
        self._run = None

    def _start(self, name: str, parent: Any, attributes: dict[str, Any]) -> Any:
        context = None if parent is None else self._trace.set_span_in_context(parent)
        return self._tracer.start_span(
            name, context=context, attributes={"tickloop.run_id": self._run_id, **attributes}
        )

    def _end_turn(self) -> None:
        if self._request is not None and self._request.is_recording():
            self._request.end()
        if self._turn is not None:
            self._turn.end()
        self._turn = self._request = None

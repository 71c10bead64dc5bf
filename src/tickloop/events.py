"""The typed events of a run (docs/api.md "Events"): `from tickloop.events import CallFinished`.

Each is also importable from `tickloop` itself. A watcher gets them from `on_event=` or
`async with agent.events(input) as events`; every event has `.type`, `.run_id` and
`.time`, and `RunEvent` is their union.
"""

from ._observe._events import (
    CallAwaitingApproval,
    CallDecided,
    CallFinished,
    CallReady,
    CallReceived,
    CallStarted,
    EventStream,
    GuardrailChecked,
    ProgramPrinted,
    RequestFinished,
    RequestRetried,
    RequestStarted,
    RunEnded,
    RunEvent,
    RunStarted,
    TickEnded,
    open_event_stream,
)

__all__ = [
    "CallAwaitingApproval",
    "CallDecided",
    "CallFinished",
    "CallReady",
    "CallReceived",
    "CallStarted",
    "EventStream",
    "GuardrailChecked",
    "ProgramPrinted",
    "RequestFinished",
    "RequestRetried",
    "RequestStarted",
    "RunEnded",
    "RunEvent",
    "RunStarted",
    "TickEnded",
    "open_event_stream",
]

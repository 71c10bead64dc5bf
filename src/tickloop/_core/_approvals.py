"""Calls waiting to be asked about, one question at a time, and what the asker is shown."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from ._call import Call
from ._decisions import HOOK_REFUSED, PendingCall
from ._log import copy_json
from ._path_index import PathIndex
from ._status import CallStatus

__all__ = ["ApprovalQueue", "downstream_of", "hook_fault", "pending_call", "waited_on"]

_log = logging.getLogger("tickloop")


class ApprovalQueue:
    """The call being asked about (`asking`), and the ready calls that wait their turn."""

    __slots__ = ("asking", "waiting")

    def __init__(self) -> None:
        self.asking: str | None = None
        self.waiting: deque[Call] = deque()

    @property
    def busy(self) -> bool:
        return self.asking is not None or bool(self.waiting)

    def holds(self, call: Call) -> bool:
        """Whether `call` waits here to be asked about (ready, past its guardrails)."""
        return (
            call.status == CallStatus.APPROVING
            and call.id != self.asking
            and (call in self.waiting)
        )

    def next(self) -> Call | None:
        """The next call to ask about, in the order calls became ready; None while a
        question is open or none waits. A call decided meanwhile is passed over."""
        while self.asking is None and self.waiting:
            call = self.waiting.popleft()
            if call.status == CallStatus.APPROVING:
                self.asking = call.id
                return call
        return None


def downstream_of(
    call: Call,
    calls: dict[str, Call],
    waiters: PathIndex,
    tool_dependents: dict[str, set[str]],
    seq_of: Callable[[str], int],
) -> list[str]:
    """The known calls that may need approval and read `call`'s output, transitively
    (through calls that need none too), in arrival order: PROTOCOL §15 "Plan review".

    A reader is a waiting call whose references overlap what a call writes, or one whose
    tool `depends_on` the call's tool (`tool_dependents`): the scheduler's own graph."""
    seen: set[str] = {call.id}
    frontier = [call]
    gated: list[str] = []
    while frontier:
        writer = frontier.pop()
        readers: set[str] = set(tool_dependents.get(writer.id, ()))
        for term in writer.writes:
            readers.update(waiters.ids_overlapping(term))
        for reader_id in readers - seen:
            seen.add(reader_id)
            reader = calls.get(reader_id)
            if reader is None:
                continue
            frontier.append(reader)
            if reader.tool.may_require_approval:
                gated.append(reader_id)
    return sorted(gated, key=seq_of)


def pending_call(
    call: Call,
    run_id: str | None,
    written: PathIndex,
    waiters: PathIndex,
    seq_of: Callable[[str], int],
    downstream: list[str] | None = None,
) -> PendingCall:
    """What a person deciding `call` is shown: the call, its schemas, the calls that wrote
    what its parameters read, and the calls known so far that wait to read what it writes,
    in arrival order."""
    sources: set[str] = set()
    for reference in call.references:
        for term in reference.expression.terms:
            sources.update(written.ids_overlapping(term))
    readers: set[str] = set()
    for term in call.writes:
        readers.update(waiters.ids_overlapping(term))
    sources.discard(call.id)
    readers.discard(call.id)
    return PendingCall(
        id=call.id,
        tool=call.tool.name,
        params=copy_json(call.record.params),
        call=copy_json(call.wire),
        run_id=run_id,
        waits_on=sorted(sources, key=seq_of),
        dependents=sorted(readers, key=seq_of),
        schema=call.tool.parameters,
        output_schema=call.tool.output,
        line=call.record.line,
        downstream=downstream or [],
    )


def waited_on(
    call: Call,
    written: PathIndex,
    by_tool: dict[str, list[str]],
    seq_of: Callable[[str], int],
) -> list[str]:
    """The calls `call` waited on, in arrival order: those that wrote what its parameters
    or its tool's `depends_on` read, and the earlier calls of its request to a tool it
    depends on. Asked when it becomes ready (`NoteReady.waits_on`), so a later write of
    the same path is not counted; the scheduler knows this already, so an observer that
    draws the arrows (the store's rows) need not keep an index of writes of its own."""
    tool = call.tool
    if tool.dependency_references or tool.dependency_tools:
        pass  # the general walk below
    elif not call.references:  # its parameters are all literal: it waited on nothing
        return []
    elif len(call.references) == 1:
        terms = call.references[0].expression.terms
        if len(terms) == 1:  # most readers read one path: no set of their own to build
            writers = written.ids_overlapping(terms[0])
            if len(writers) == 1:
                return [] if call.id in writers else list(writers)
            if not writers:
                return []
    found: set[str] = set()
    for _, expression in call.expressions():
        for term in expression.terms:
            found.update(written.ids_overlapping(term))
    for name in call.tool.dependency_tools:
        for earlier in by_tool.get(name, ()):  # this request's calls to it, by id
            if seq_of(earlier) < call.seq:
                found.add(earlier)
    found.discard(call.id)
    return sorted(found, key=seq_of) if len(found) > 1 else list(found)


def hook_fault(call: Call, changed: bool, detail: str) -> dict[str, Any]:
    """A reviewer's decision that cannot be carried out: the hook's bug, not the model's.

    The developer reads the detail on the `tickloop` logger; the model, which can fix
    none of it, is told only that a reviewer refused or changed the call.
    """
    _log.warning("approval hook bug on call %s (%s): %s", call.id, call.record.tool, detail)
    message = (
        "a reviewer changed this call, and the change could not run" if changed else HOOK_REFUSED
    )
    return {"type": "hook", "message": message}

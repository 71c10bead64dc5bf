"""The journal's JSON: scheduler events as data and back, entry texts, shared messages.

Each encoder has its decoder beside it: `event_to_dict` / `event_from_dict`, and
`shared_text` (a plan or solution message whose calls are references to their
CallReceived entries) / `expand_shared`. The `*_text` functions build an entry's JSON
around text already made (a call's own text), the text the general path
(`dumps_entry(event_to_dict(event))`) would make, without building the dict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._schema import SHARED

if TYPE_CHECKING:
    from ._rows import Row

import json
import uuid
from collections.abc import Mapping, Sequence
from json.encoder import JSONEncoder, encode_basestring, encode_basestring_ascii
from pathlib import Path
from typing import Any

from .._core._budget import Budget
from .._core._decisions import (
    Deny,
    decision_from_dict,
    decision_to_dict,
)
from .._core._log import has_surrogate
from .._core._scheduler_io import (
    AnswerBudget,
    CloseGate,
    CloseStream,
    CloseText,
    Decide,
    Event,
    FinishCall,
    Flush,
    OpenGate,
    OpenTick,
    ParkCall,
    ReceiveCall,
    ReportFault,
    Review,
    Screened,
    SpendBudget,
)
from .._errors import StoreError

# --------------------------------------------------------------------------------------
# Events as JSON


def event_to_dict(event: Event) -> dict[str, Any]:
    """A scheduler event as JSON data; `event_from_dict` turns it back."""
    if isinstance(event, FinishCall):
        body: dict[str, Any] = {
            "type": "CallFinished",
            "call_id": event.call_id,
            "value": event.value,
        }
        if event.branch is not None:
            body["branch"] = event.branch
        if event.error is not None:
            body["error"] = event.error
    elif isinstance(event, ReceiveCall):
        body = {"type": "CallReceived", "call": event.call}
    elif isinstance(event, Decide):
        body = {
            "type": "DecisionMade",
            "call_id": event.call_id,
            "decision": decision_to_dict(event.decision),
        }
    elif isinstance(event, Review):
        body = {
            "type": "PlanReviewed",
            "decisions": {key: decision_to_dict(d) for key, d in event.decisions.items()},
        }
    elif isinstance(event, OpenTick):
        body = {"type": "TickOpened", "iteration": event.iteration}
        if event.plan_order:
            body["plan_order"] = True
        if event.code:
            body["code"] = True
        if event.found:
            body["found"] = list(event.found)
    elif isinstance(event, CloseStream):
        body = {"type": "StreamClosed"}
    elif isinstance(event, CloseText):
        body = {"type": "TextClosed", "program": event.program, "sites": dict(event.sites)}
    elif isinstance(event, ReportFault):
        body = {"type": "FaultReported", "error": event.error, "call": event.call}
    elif isinstance(event, Flush):
        body = {"type": "Flush"}
    elif isinstance(event, ParkCall):
        body = {"type": "CallParked", "call_id": event.call_id}
    elif isinstance(event, SpendBudget):
        body = {"type": "BudgetSpent", "amount": event.amount}
    elif isinstance(event, AnswerBudget):
        grant = event.grant.to_dict() if isinstance(event.grant, Budget) else event.grant
        body = {"type": "BudgetAnswered", "limit": event.limit, "grant": grant}
    elif isinstance(event, Screened):
        body = {"type": "CallScreened", "call_id": event.call_id}
        if event.denial is not None:
            body["denied"] = event.denial.reason
    elif isinstance(event, OpenGate):
        body = {"type": "GateOpened"}
    elif isinstance(event, CloseGate):
        body = {"type": "GateClosed"}
    else:
        raise TypeError(f"not a scheduler event: {event!r}")
    body["date"] = event.date
    return body


def event_from_dict(data: Mapping[str, Any]) -> Event:
    kind = data["type"]
    date = data.get("date", "")
    if kind == "CallFinished":
        return FinishCall(
            data["call_id"], data.get("value"), data.get("branch"), data.get("error"), date
        )
    if kind == "CallReceived":
        return ReceiveCall(data["call"], date)
    if kind == "DecisionMade":
        return Decide(data["call_id"], decision_from_dict(data["decision"]), date)
    if kind == "PlanReviewed":
        decisions = {key: decision_from_dict(d) for key, d in data["decisions"].items()}
        return Review(decisions, date)
    if kind == "TickOpened":
        # Every tick of a version 2 journal keeps plan order (`_migrations._from_1`).
        return OpenTick(
            data["iteration"],
            date,
            code=bool(data.get("code")),
            found=tuple(data.get("found") or ()),
        )
    if kind == "StreamClosed":
        return CloseStream(date)
    if kind == "TextClosed":
        return CloseText(str(data.get("program") or ""), dict(data.get("sites") or {}), date)
    if kind == "FaultReported":
        return ReportFault(data["error"], data.get("call"), date)
    if kind == "Flush":
        return Flush(date)
    if kind == "CallParked":
        return ParkCall(data["call_id"], date)
    if kind == "CallScreened":
        denied = data.get("denied")
        return Screened(data["call_id"], None if denied is None else Deny(denied), date)
    if kind == "GateOpened":
        return OpenGate(date)
    if kind == "GateClosed":
        return CloseGate(date)
    if kind == "BudgetSpent":
        return SpendBudget(dict(data["amount"]), date)
    if kind == "BudgetAnswered":
        grant = data.get("grant")
        return AnswerBudget(
            data["limit"], Budget.from_dict(grant) if isinstance(grant, dict) else grant, date
        )
    raise ValueError(f"unknown journal event type {kind!r}")


# Compact JSON, made by encoders built once (`json.dumps` builds one per call). No cycle
# check: a cycle (impossible in JSON data) ends in a RecursionError instead, which
# `dumps_entry` reports like any other unstorable value.
_JSON = JSONEncoder(ensure_ascii=False, check_circular=False, separators=(",", ":"))
_JSON_ASCII = JSONEncoder(check_circular=False, separators=(",", ":"))


def dumps_entry(value: Any) -> str:
    """JSON text for the store. A lone surrogate (a call the model sent with `"\\ud800"`,
    refused on arrival but journaled as it came, so the replay refuses it again) is kept
    as its `\\u` escape: SQLite stores UTF-8, which has no form for it."""
    try:
        text = _JSON.encode(value)
        return _JSON_ASCII.encode(value) if has_surrogate(text) else text
    except (TypeError, ValueError, RecursionError) as error:
        raise StoreError(f"a value of this run cannot be stored as JSON: {error}") from error


def dumps_call(value: Any) -> str:
    """A call's JSON for the store (its CallReceived entry, its row), in ASCII.

    Nearly every call holds a dagger (its `_outputPath`, its references), which would
    make each text built from it a two-byte string in Python, and a UTF-8 encoding when
    SQLite takes it: escaped, the text stays one byte a character, and a lone surrogate
    needs no path of its own. A call is short, so its non-ASCII text costs little room
    escaped; values (results, parameters) keep `dumps_entry`'s UTF-8.
    """
    try:
        return _JSON_ASCII.encode(value)
    except (TypeError, ValueError, RecursionError) as error:
        raise StoreError(f"a value of this run cannot be stored as JSON: {error}") from error


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


def received_text(event: ReceiveCall) -> tuple[str, tuple[dict[str, Any], str] | None]:
    """A CallReceived entry's JSON, the text `dumps_call(event_to_dict(event))` makes,
    built around the call's own text; and the call with that text, for the row of the
    call it is accepted as (`arrival_text`), or None."""
    call, date = event.call, event.date
    if type(call) is dict and type(date) is str:
        try:
            call_text = _JSON_ASCII.encode(call)
        except (TypeError, ValueError, RecursionError):
            pass  # dumps_call says why
        else:
            date_text = encode_basestring_ascii(date)
            text = f'{{"type":"CallReceived","call":{call_text},"date":{date_text}}}'
            return text, (call, call_text)
    return dumps_call(event_to_dict(event)), None


# Results whose entry may be made after the tool returned: nothing can change them since.
_UNCHANGING = frozenset({int, str, type(None), float, bool})

_BIG = 10**100  # ints beyond it take the general path (too long to write: a StoreError)


def finished_text(event: FinishCall) -> str:
    """A CallFinished entry's JSON, the text `dumps_entry(event_to_dict(event))` makes,
    without building the dict: one per call. A value that is not a plain int, string or
    null, a branch, an error or a lone surrogate takes the general path."""
    call_id, value, date = event.call_id, event.value, event.date
    if (
        event.branch is None
        and event.error is None
        and type(call_id) is str
        and type(date) is str
        and (value is None or type(value) is str or (type(value) is int and -_BIG < value < _BIG))
    ):
        if value is None:
            value_text = "null"
        elif type(value) is str:
            value_text = encode_basestring(value)
        else:
            value_text = int.__repr__(value)
        text = (
            f'{{"type":"CallFinished","call_id":{encode_basestring(call_id)},'
            f'"value":{value_text},"date":{encode_basestring(date)}}}'
        )
        if text.isascii() or not has_surrogate(text):
            return text
    return dumps_entry(event_to_dict(event))


def deps_text(waits: Sequence[str]) -> str:
    """`dumps_entry(list(waits))` for call ids, joined from their C-escaped texts."""
    text = "[" + ",".join(map(encode_basestring, waits)) + "]"
    if text.isascii() or not has_surrogate(text):
        return text
    return dumps_entry(list(waits))


def arrival_text(wire: dict[str, Any], received: tuple[dict[str, Any], str]) -> str | None:
    """`dumps_call(wire)` of the wire the scheduler made on a call's arrival, built from
    the received call's text; None when it cannot be (`dumps_call` then encodes it).

    That wire is the received call copied with its `_id` set (`_core._arrival.new_call`),
    so when the call had no `_id` it is the call plus its `_id` last, and nothing else:
    its text is the call's with the `_id` member added, without comparing the two member
    by member. None otherwise (an `_id` of the model's).
    """
    call, call_text = received
    call_id = wire["_id"]
    if "_id" in call or len(wire) != len(call) + 1 or type(call_id) is not str:
        return None
    id_text = encode_basestring_ascii(call_id)
    return f'{{"_id":{id_text}}}' if not call else f'{call_text[:-1]},"_id":{id_text}}}'


def _same(a: Any, b: Any) -> bool:
    """Whether `a` stands for `b` in a stored message: equal, and written alike (dicts
    equal with their keys in another order read back in the referred call's order)."""
    return a is b or (a == b and dumps_entry(a) == dumps_entry(b))


def shared_text(
    message: dict[str, Any],
    clean: dict[str, tuple[Any, int | None]],
    rows: dict[str, Row],
    arrived: tuple[list[int], list[Any]],
) -> str | None:
    """The body of a SHARED message entry standing for a plan or solution message whose
    calls are the calls journaled as they arrived, or None for any other message.

    A plan of a thousand calls would otherwise store every call three times over (its
    CallReceived entry, the solution message, the plan message): here the message is
    stored without its calls (`"message"`, the calls' place in it, `"path"`, held by a
    null), and each call as a reference (`"calls"`): `n`, the call of CallReceived entry
    `n`; `[n, id]`, that call with `_id` set to `id` (a plan's wire, as the scheduler made
    it on arrival); `[value]`, the value itself. `_store.expand_shared` puts them back.
    Only calls equal to what was journaled are referenced (the wire the scheduler made
    from the received call, `clean`; the calls handed on, `arrived`: their entries'
    numbers and the calls), so the message read back is the one journaled. A plan's
    wire replaced by a reviewer is its row's text (encoded once, when it was decided).
    None for any other message, for a plan of no calls, and for a solution none of whose
    calls is shared.
    """
    kind = message.get("type")
    parts: list[str] = []
    shared = False
    if kind == "plan" and len(message) == 2 and next(iter(message)) == "type":
        calls = message.get("calls")
        if type(calls) is not list or not calls:
            return None
        path = '["calls"]'
        for call in calls:
            call_id: Any = call.get("_id") if type(call) is dict else None
            kept = clean.get(call_id) if call_id is not None else None
            if kept is None or not _same(kept[0], call):
                parts.append(f"[{dumps_entry(call)}]")
                continue
            number = kept[1]
            if number is None:
                parts.append(f"[{rows[call_id].call}]")  # its row's text: the very wire's
            else:
                parts.append(f"[{number},{encode_basestring_ascii(call_id)}]")
        rest: dict[str, Any] = {"type": "plan", "calls": None}
    elif kind == "solution" and arrived[1]:
        solution: Any = message.get("solution")
        calls = solution.get("calls") if type(solution) is dict else None
        if type(calls) is not list:
            return None
        path = '["solution","calls"]'
        numbers, handed = arrived
        if len(calls) == len(handed) and all(map(_same, calls, handed)):
            parts = list(map(int.__repr__, numbers))  # every call, in order: most solutions
        else:
            # The calls handed on are in the solution in the order they arrived, among
            # others that were not (not objects, cut off): each is referred to, the rest
            # stored as they are.
            position = 0
            for call in calls:
                if position < len(handed) and _same(call, handed[position]):
                    parts.append(int.__repr__(numbers[position]))
                    position += 1
                    shared = True
                else:
                    parts.append(f"[{dumps_entry(call)}]")
            if not shared:
                return None
        rest = {**message, "solution": {**solution, "calls": None}}
    else:
        return None
    return (
        f'{{"type":"{SHARED}","message":{dumps_entry(rest)},"path":{path},'
        f'"calls":[{",".join(parts)}]}}'
    )


def loads_stored(text: str | None, path: Path) -> Any:
    """A stored JSON value; damage `quick_check` cannot see (a row whose text is not JSON)
    is a `StoreError` naming the path, as any other damage."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError) as error:
        raise StoreError(
            f"{path}: the store is damaged: a stored value is not JSON ({error})"
        ) from None


def damaged_entry(path: Path, run_id: str, number: int, what: str) -> StoreError:
    """The error for journal entry `number` of a run, which `what` says is damaged."""
    return StoreError(
        f"{path}: the store is damaged: journal entry {number} of run {run_id!r} {what}"
    )


def expand_shared(body: Any, received: Mapping[int, Any]) -> dict[str, Any]:
    """The message a SHARED message stands for (`_resume.shared_text`), its calls taken
    from `received` (entry number -> the call of that CallReceived entry).

    A call referred to is the received object itself, as the message held it when it
    was journaled; a wire (`[n, id]`) is a copy of it with its `_id`, as the scheduler
    made it on arrival. Damage raises TypeError, KeyError, ValueError or IndexError.
    """
    message, path, refs = body["message"], body["path"], body["calls"]
    if type(message) is not dict or type(path) is not list or not path or type(refs) is not list:
        raise TypeError("not a shared message")
    calls: list[Any] = []
    for ref in refs:
        if type(ref) is int:
            calls.append(received[ref])
        elif type(ref) is list and len(ref) == 1:
            calls.append(ref[0])
        elif type(ref) is list and len(ref) == 2 and type(ref[0]) is int:
            wire = dict(received[ref[0]])
            wire["_id"] = ref[1]
            calls.append(wire)
        else:
            raise ValueError(f"{ref!r} is not a reference to a call")
    holder = message
    for key in path[:-1]:
        holder = holder[key]
    if type(holder) is not dict or holder.get(path[-1], 0) is not None:
        raise ValueError("the calls' place is not held")
    holder[path[-1]] = calls
    return message

"""A run of a session (PROTOCOL §16): the lease it holds while it runs, and what it is
given: the `history` message and, with `keep_state`, the state its session left.

The store's side (the tables, the lease's transactions, the queue of waiting runs,
`tl.Session`) is `_durable._sessions`; this module holds the lease from trio: it waits
for a running run (in the session's queue, looking every `_POLL` seconds, up to the
caller's timeout, on trio's clock), renews the lease while the run runs, and gives it
back however the run ends. A process that dies gives nothing back: its lease lapses
(`LEASE_SECONDS`) and its run is then crashed; its place in a queue is dead at once on
its host, and lapses (`WAIT_SECONDS`) elsewhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

import trio

from .._durable._sessions import (
    RENEW_SECONDS,
    Session,
    SessionStore,
    check_session_id,
    given_to_next_run,
    history_ids,
    leave_queue,
    new_lease_token,
    release_lease,
    renew_lease,
    take_lease,
)
from .._errors import ConfigurationError, SessionBusy, StoreError
from ._compaction import HISTORY_KIND, is_summary, reusable_compaction

__all__ = [
    "SessionRun",
    "check_busy_options",
    "check_session_options",
    "history_message",
    "holding",
    "keeps_state",
    "maybe_holding",
    "maybe_resuming",
]

_POLL = 0.1  # seconds between looks at a busy session's lease, on trio's clock


@dataclass(slots=True)
class SessionRun:
    """The session a run belongs to, as the run holds it."""

    session: Session
    history: list[dict[str, Any]]
    state: dict[str, Any] | None


def check_busy_options(busy: Any, timeout: Any) -> None:
    if busy not in ("wait", "raise"):
        raise ConfigurationError(f'session_busy must be "wait" or "raise", not {busy!r}')
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ConfigurationError(
            f"session_timeout must be a number of seconds >= 0, not {timeout!r}"
        )


@asynccontextmanager
async def holding(
    store: SessionStore,
    session_id: str,
    *,
    busy: str = "raise",
    timeout: float = 0.0,
    resuming: str | None = None,
) -> AsyncIterator[SessionRun]:
    """Hold the session's lease for the block, renewed while it runs; `SessionBusy`
    when it cannot be had (at once, or after waiting `timeout` for a running run)."""
    session = Session(store, session_id)
    token = new_lease_token()
    await _take(store, session_id, token, busy, timeout, resuming)
    failure: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_renew, store, session_id, token)
            try:
                # A resumed run's history and state are in its journal already.
                history, state = ([], None) if resuming is not None else given_to_next_run(session)
                yield SessionRun(session, _given_history(session, history), state)
            except BaseException as error:
                # Re-raised outside the nursery, so the caller's error is not wrapped
                # in an exception group.
                failure = error
            finally:
                nursery.cancel_scope.cancel()
    finally:
        release_lease(store, session_id, token)
    if failure is not None:
        raise failure


async def _take(
    store: SessionStore,
    session_id: str,
    token: str,
    busy: str,
    timeout: float,
    resuming: str | None,
) -> None:
    """Take the lease, waiting for a running run in the session's queue when `busy` is
    "wait" (each look keeps the run's place); the place is given up however the wait
    ends without the lease (timeout, cancellation)."""
    deadline = trio.current_time() + timeout
    queue = busy == "wait" and resuming is None
    taken = False
    try:
        while True:
            try:
                take_lease(store, session_id, token, resuming=resuming, queue=queue)
                taken = True
                return
            except SessionBusy as error:
                # A paused or crashed run is refused at once: waiting does not end it.
                if error.reason != "running" or busy == "raise":
                    raise
                left = deadline - trio.current_time()
                if left <= 0:
                    raise SessionBusy(
                        f"{error} (waited {timeout:g} s: session_timeout)",
                        session_id=session_id,
                        run_id=error.run_id,
                        reason=error.reason,
                    ) from None
                await trio.sleep(min(_POLL, left))
    finally:
        if queue and not taken:
            # Not over what ends the wait (a cancellation above all): a place that
            # cannot be given back lapses by itself, `WAIT_SECONDS` after its last look.
            with suppress(StoreError):
                leave_queue(store, session_id, token)


async def _renew(store: SessionStore, session_id: str, token: str) -> None:
    while True:
        await trio.sleep(RENEW_SECONDS)
        renew_lease(store, session_id, token)


def _given_history(session: Session, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history a new run is given: the session's, its oldest runs replaced by the
    newest compaction of the session that covers exactly them (PROTOCOL §16
    "Ownership")."""
    if not history:
        return history
    compaction = reusable_compaction(_compactions(session, history), history_ids(history))
    if compaction is None:
        return history
    covers = compaction["covers"]
    covered = set(covers) if isinstance(covers, list) else set()
    entry = {"type": "compaction", "covers": compaction["covers"], "summary": compaction["summary"]}
    return [entry, *(item for item in history if item["run_id"] not in covered)]


def _compactions(session: Session, history: list[dict[str, Any]]) -> list[dict[str, object]]:
    """The compactions of the session's last run that is over, oldest first: those it
    was given in its history and those it made, each with its `covers` kept to the
    session's runs. A compaction reusable now was given to that run (or made by it), so
    its journal is the only one read."""
    ids = set(history_ids(history))
    last = history[-1]["run_id"]
    found: list[dict[str, object]] = []
    store: Any = session.store
    for _, _, kind, body in store.journal(last):
        if kind != "message" or not isinstance(body, dict):
            continue
        if body.get("type") == "compaction":
            candidates = [body]
        elif body.get("type") == "data" and body.get("kind") == HISTORY_KIND:
            candidates = [e for e in body.get("data") or () if isinstance(e, dict)]
        else:
            continue
        for item in candidates:
            if is_summary(item):
                covers = [key for key in item.get("covers") or () if key in ids]
                if covers:
                    found.append({"covers": covers, "summary": item.get("summary")})
    return found


def history_message(history: list[dict[str, Any]]) -> dict[str, Any]:
    """The `data` message of kind `history` a session run's log begins with (§16)."""
    return {"type": "data", "kind": HISTORY_KIND, "data": history}


def check_session_options(
    store: Any, session: Any, keep_state: Any, busy: Any, timeout: Any
) -> None:
    """A run's session options, checked before anything runs (`ConfigurationError`)."""
    if keep_state is not None and not isinstance(keep_state, bool):
        raise ConfigurationError(f"keep_state must be True, False or None, not {keep_state!r}")
    check_busy_options(busy, timeout)
    if session is None:
        return
    check_session_id(session)
    if store is None:
        raise ConfigurationError(
            f"session={session!r} needs a store to keep its history in: "
            "tl.Agent(..., store='runs.db')"
        )


def keeps_state(run_value: bool | None, agent_value: bool | None, protocol: str) -> bool:
    """The run's `keep_state` over the agent's; by default, code plans keep theirs."""
    if run_value is not None:
        return run_value
    if agent_value is not None:
        return agent_value
    return protocol == "code"


@asynccontextmanager
async def maybe_holding(
    store: Any, session_id: str | None, busy: str, timeout: float
) -> AsyncIterator[SessionRun | None]:
    """`holding` the session for a run of one; nothing for a run outside sessions."""
    if session_id is None:
        yield None
        return
    async with holding(store, session_id, busy=busy, timeout=timeout) as held:
        yield held


@asynccontextmanager
async def maybe_resuming(store: Any, session_id: str | None, run_id: str) -> AsyncIterator[None]:
    """A resumed run of a session holds its lease while it goes on (refused at once
    while another run of the session runs)."""
    if session_id is None:
        yield
        return
    async with holding(store, session_id, resuming=run_id):
        yield

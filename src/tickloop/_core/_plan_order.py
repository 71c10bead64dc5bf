"""Plan order: a plan means what it says (PROTOCOL §3, §4, §5).

Within one request the calls are ordered by arrival. A reference reads what the calls
*before it* leave at its path, and writes to overlapping paths apply in plan order, so a
plan gives the same parameters and the same state as a one-by-one run in list order,
whatever order its calls finish in (forward references aside).

This module is the scheduler's bookkeeping for that, kept apart from the `Scheduler`
class. It answers three questions, each from an index over paths, never by scanning every
pending call:

* what a waiting call's term reads (`Slot`): *pending* while an earlier writer of an
  overlapping path has not ended; *forward* when the path is absent and no earlier call
  writes it (read when some call writes it, PROTOCOL §3); otherwise *final*;
* whether a finished call's write must be held (`blockers`, and the latest of them,
  `latest_blocker`): while an earlier writer of an overlapping path has not ended, or an
  earlier reader of an overlapping path still waits for its earlier writers (PROTOCOL
  §4), never on a call's own forward reader. The writers of one exact path are kept in
  plan order, so the latest earlier one is a lookup; a held write is looked at again
  when that one moves on;
* which earlier readers must keep the value they would have read (`capture`): a later
  write never changes what an earlier call reads.

Calls "end" when the scheduler settles them; a held call has not ended until its write is
applied. Pure bookkeeping: no I/O, clock or randomness.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import _few
from ._call import Call
from ._expressions import Term
from ._log import copy_json
from ._path_index import PathIndex

__all__ = ["PlanOrder", "Slot"]


class Slot:
    """One term a waiting call reads, and where its value comes from (PROTOCOL §3)."""

    __slots__ = ("forward", "kept", "pending", "reader", "term")

    def __init__(self, reader: str, term: Term, pending: Any, forward: bool) -> None:
        self.reader = reader
        self.term = term
        # Earlier writers of an overlapping path, not ended: a `_few` holder (None, one
        # id, or a set), since in a chain every call waits on exactly one.
        self.pending = pending
        self.forward = forward  # absent, and no earlier call writes it
        # (present, value) kept before a later write changed the path; None until then
        # (rare: one slot rather than three in every slot of every waiting call)
        self.kept: tuple[bool, Any] | None = None

    @property
    def final(self) -> bool:
        """The calls before the reader have all left this path: its value is settled."""
        return not self.forward and not self.pending


class PlanOrder:
    """Slots of waiting calls and held writes of one scheduler; see the module docstring.

    `writers` is the scheduler's index of calls that have not ended, by output term (held
    calls included); `readers` its index of waiting calls by the terms they read, kept
    here by `watch` and `unwatch`; `seq_of` gives a call's arrival order; `lookup` reads
    the views.
    """

    def __init__(
        self,
        writers: PathIndex,
        readers: PathIndex,
        seq_of: Callable[[str], int],
        lookup: Callable[[Term], tuple[bool, Any]],
    ) -> None:
        self._writers = writers
        self._seq_of = seq_of
        self._lookup = lookup
        # This request's calls by output term, ended or not: asked only by a read of a path
        # that is absent and has no earlier writer left.
        self._planned = PathIndex()
        # reader -> its slots: the Slot itself when it reads one term (most do), so a
        # waiting call keeps no tuple for it
        self._slots: dict[str, Slot | tuple[Slot, ...]] = {}
        # Waiting calls by the terms they read: the scheduler's index, which only
        # `watch` and `unwatch` change (one index, not a copy of it here).
        self._readers = readers
        # writer -> slots waiting for it to end, a `_few` holder (mostly one slot)
        self._blocking: dict[str, Any] = {}
        self._held: dict[str, tuple[int, tuple[Term, ...]]] = {}  # id -> (seq, targets)
        self._held_on: dict[str, set[str]] = {}  # blocker -> held calls it holds back
        # Holds whose blockers moved on: what `releasable` looks at (empty: nothing to do).
        self.recheck: set[str] = set()
        # Slots of waiting calls that read forward: when none do, no call has an earlier
        # forward reader to look for (`dependents`).
        self._forward_slots = 0
        self._legacy = False
        # The writers not ended at each exact term, in plan order, as a doubly linked list
        # (a term's last writer; each writer's neighbours when it has them): the latest
        # earlier writer of the same path is one lookup, not a scan of every writer of
        # it (issue 29, item 4). Calls arrive in plan order, so appending keeps the order.
        self._lane_last: dict[Term, str] = {}
        # Links come in pairs (x before y, y after x): both are empty while no term has two
        # writers, as in most plans, where a lane is its one writer.
        self._lane_before: dict[tuple[Term, str], str] = {}
        self._lane_after: dict[tuple[Term, str], str] = {}
        # A fan-out may name one term twice (`†state.a && †state.a`): the extra times
        self._lane_again: dict[tuple[Term, str], int] = {}

    # -- the request ---------------------------------------------------------------------

    def open_request(self, *, plan_order: bool = True) -> None:
        """A new request: only its own calls are "earlier" (earlier requests' writes are
        applied). `plan_order=False` replays a tick journaled before plan order existed:
        every read is live (as a forward reference) and nothing is held."""
        self._planned = PathIndex()
        self._legacy = not plan_order

    def plan(self, call_id: str, terms: tuple[Term, ...], spelled: str | None = None) -> None:
        """A call of this request will (or may) write these terms; `spelled` is the text
        they were parsed from, if any, kept instead of them until the index is asked."""
        if spelled is not None:
            self._planned.add_spelled(spelled, call_id, len(terms))
            return
        for term in terms:
            self._planned.add(term, call_id)

    def unplan(self, call_id: str, terms: Iterable[Term]) -> None:
        for term in terms:
            self._planned.remove(term, call_id)

    # -- writers not ended ----------------------------------------------------------------

    def add_writer(self, term: Term, call_id: str, seq: int) -> None:
        """File a call that will write `term` (in the scheduler's index of writers too)."""
        self._writers.add(term, call_id)
        last = self._lane_last.get(term)
        if last == call_id:  # the same call's terms are filed one after the other
            key = (term, call_id)
            self._lane_again[key] = self._lane_again.get(key, 0) + 1
            return
        self._lane_last[term] = call_id
        if last is None:
            return
        if self._seq_of(last) > seq:  # a replacement keeping its earlier place: rare
            self._lane_last[term] = last
            while True:
                before = self._lane_before.get((term, last))
                if before is None or self._seq_of(before) < seq:
                    break
                last = before
            if before is not None:
                self._lane_after[(term, before)] = call_id
                self._lane_before[(term, call_id)] = before
            self._lane_after[(term, call_id)] = last
            self._lane_before[(term, last)] = call_id
            return
        self._lane_before[(term, call_id)] = last
        self._lane_after[(term, last)] = call_id

    def remove_writer(self, term: Term, call_id: str) -> None:
        self._writers.remove(term, call_id)
        if self._lane_again:
            again = self._lane_again.pop((term, call_id), 0)
            if again > 1:
                self._lane_again[(term, call_id)] = again - 1
            if again:
                return
        if not self._lane_before:  # no term has two writers: the call is its term's lane
            del self._lane_last[term]
            return
        before = self._lane_before.pop((term, call_id), None)
        after = self._lane_after.pop((term, call_id), None)
        if after is None:
            if before is None:
                del self._lane_last[term]
            else:
                self._lane_last[term] = before
                del self._lane_after[(term, before)]
        elif before is None:
            del self._lane_before[(term, after)]
        else:
            self._lane_before[(term, after)] = before
            self._lane_after[(term, before)] = after

    # -- readers -------------------------------------------------------------------------

    def watch(self, reader: str, seq: int, terms: Iterable[Term]) -> tuple[Slot, ...]:
        """File the terms a waiting call reads; its slots come back in the same order."""
        slots = []
        for term in terms:
            if self._legacy:
                slot = Slot(reader, term, None, True)
            else:
                pending = None
                for writer in self._writers.ids_overlapping(term):
                    if writer != reader and self._seq_of(writer) < seq:
                        pending = _few.add(pending, writer)
                forward = False
                if not pending and not self._lookup(term)[0]:
                    forward = not any(
                        writer != reader and self._seq_of(writer) < seq
                        for writer in self._planned.ids_overlapping(term)
                    )
                slot = Slot(reader, term, pending, forward)
                if pending is not None:
                    blocking = self._blocking
                    for writer in _few.members(pending):
                        blocking[writer] = _few.add(blocking.get(writer), slot)
            if slot.forward:
                self._forward_slots += 1
            self._readers.add(term, reader)
            slots.append(slot)
        watched = tuple(slots)
        self._slots[reader] = watched[0] if len(watched) == 1 else watched
        return watched

    def slots(self, reader: str) -> tuple[Slot, ...]:
        slots = self._slots.get(reader, ())
        return (slots,) if isinstance(slots, Slot) else slots

    def unwatch(self, reader: str) -> None:
        """The call stopped waiting (ready, or settled): it reads nothing more."""
        watched = self._slots.pop(reader, None)
        if watched:
            for slot in (watched,) if isinstance(watched, Slot) else watched:
                for writer in _few.members(slot.pending):
                    waiting = self._blocking.get(writer)
                    if waiting is not None:
                        waiting = _few.discard(waiting, slot)
                        if waiting is None:
                            del self._blocking[writer]
                        else:
                            self._blocking[writer] = waiting
                if slot.forward:
                    self._forward_slots -= 1
                self._readers.remove(slot.term, reader)
        if self._held_on:
            held = self._held_on.pop(reader, None)
            if held:
                self.recheck |= held

    def replan(
        self,
        call_id: str,
        seq: int,
        old: tuple[Term, ...],
        new: tuple[Term, ...],
        calls: Mapping[str, Call],
    ) -> list[str]:
        """A call that keeps its place in the plan now writes `new` instead of `old` (a
        replacement, PROTOCOL §3): the waiting calls after it that read either are filed
        anew, since which earlier calls they wait on may have changed. They come back in
        plan order, to be examined again."""
        self.unplan(call_id, old)
        self.plan(call_id, new)
        found: set[str] = set()
        for term in (*old, *new):
            found.update(r for r in self._readers.ids_overlapping(term) if self._seq_of(r) > seq)
        readers = sorted(found, key=self._seq_of)
        for reader in readers:
            self.unwatch(reader)
            self.watch(reader, calls[reader].seq, calls[reader].watching)
        return readers

    def ended(self, call_id: str) -> set[str] | None:
        """A call ended (any final status): the readers whose slots it settled (None for
        none, the common case)."""
        woken: set[str] | None = None
        blocking = self._blocking.pop(call_id, None) if self._blocking else None
        if blocking:
            woken = set()
            for slot in _few.members(blocking):
                slot.pending = _few.discard(slot.pending, call_id)
                if slot.pending is None:
                    woken.add(slot.reader)
                    held = self._held_on.pop(slot.reader, None)
                    if held:
                        self.recheck |= held
        if self._held_on:
            held = self._held_on.pop(call_id, None)
            if held:
                self.recheck |= held
        if self._held:
            self._held.pop(call_id, None)
        return woken

    # -- writers -------------------------------------------------------------------------

    def blockers(self, call_id: str, seq: int, targets: tuple[Term, ...]) -> set[str]:
        """The earlier calls a write at `targets` must wait for (PROTOCOL §4).

        An earlier writer of an overlapping path that has not ended, and an earlier reader
        whose term overlapping the write still waits for its own earlier writers. A call
        that waits on this write through a forward reference never holds it back.
        """
        found: set[str] = set()
        if self._legacy:
            return found
        readers = self._readers
        for term in targets:
            for writer in self._writers.others_overlapping(term, call_id):
                if self._seq_of(writer) < seq:
                    found.add(writer)
            if not readers.size:
                continue
            for reader in readers.ids_overlapping(term):
                if reader == call_id or self._seq_of(reader) >= seq:
                    continue
                if any(slot.pending and slot.term.overlaps(term) for slot in self.slots(reader)):
                    found.add(reader)
        if not found:
            return found
        return {other for other in found if not self._reads_forward(other, targets)}

    def latest_blocker(self, call_id: str, seq: int, targets: tuple[Term, ...]) -> str | None:
        """The latest of `blockers(...)`, or None when there are none, found without
        scanning the writers of the same path: a write finishing ahead of the N writes
        before it to that path costs a lookup, not N (issue 29, item 4)."""
        if self._legacy:
            return None
        latest: str | None = None
        latest_seq = -1
        writers, readers = self._writers, self._readers
        lanes = self._lane_before
        for term in targets:
            before = lanes.get((term, call_id)) if lanes else None
            while before is not None and self._reads_forward(before, targets):
                before = self._lane_before.get((term, before))
            if before is not None and self._seq_of(before) > latest_seq:
                latest, latest_seq = before, self._seq_of(before)
            if writers.holds_around(term):  # writers of a prefix or below: scanned
                same = writers.ids_at(term)
                for writer in writers.ids_overlapping(term):
                    if writer in same:
                        continue
                    writer_seq = self._seq_of(writer)
                    if latest_seq < writer_seq < seq and not self._reads_forward(writer, targets):
                        latest, latest_seq = writer, writer_seq
            if not readers.size:
                continue
            for reader in readers.ids_overlapping(term):
                if reader == call_id:
                    continue
                reader_seq = self._seq_of(reader)
                if not latest_seq < reader_seq < seq:
                    continue
                if any(slot.pending and slot.term.overlaps(term) for slot in self.slots(reader)):
                    if not self._reads_forward(reader, targets):
                        latest, latest_seq = reader, reader_seq
        return latest

    def _reads_forward(self, reader: str, targets: tuple[Term, ...]) -> bool:
        return any(
            slot.forward and any(slot.term.overlaps(term) for term in targets)
            for slot in self.slots(reader)
        )

    def hold(self, call_id: str, seq: int, targets: tuple[Term, ...], blocker: str) -> None:
        """Hold a finished call's write until the rest of its blockers have moved on (see
        `releasable`); `blocker` is the latest of them (`latest_blocker`).

        The held call is looked at again when that one moves on, not when any does: it
        cannot apply before that one has, and the blockers before it mostly move on first
        (they hold it back in turn). Waiting on every blocker made N writes to one path,
        finishing in reverse, look at every held write again at each end: N² looks at N
        blockers each (issue 29, item 4); this is one look each, at one lookup each."""
        self._held[call_id] = (seq, targets)
        self._held_on.setdefault(blocker, set()).add(call_id)

    def is_held(self, call_id: str) -> bool:
        return call_id in self._held

    @property
    def held(self) -> list[str]:
        return sorted(self._held, key=self._seq_of)

    def held_blockers(self, call_id: str) -> set[str]:
        seq, targets = self._held[call_id]
        return self.blockers(call_id, seq, targets)

    def releasable(self) -> list[str]:
        """Held writes that may apply now, in plan order; the rest stay held.

        Only holds whose blockers moved on are looked at again (event-driven).
        """
        if not self.recheck:  # the common case, once per input: nothing moved
            return []
        recheck, self.recheck = self.recheck, set()
        ready = []
        for call_id in sorted(recheck & self._held.keys(), key=self._seq_of):
            seq, targets = self._held[call_id]
            blocker = self.latest_blocker(call_id, seq, targets)
            if blocker is not None:
                self._held_on.setdefault(blocker, set()).add(call_id)
            else:
                del self._held[call_id]
                ready.append(call_id)
        return ready

    def release(self, call_id: str) -> None:
        """Let a held write apply out of order: it is on a cycle through a forward
        reference, where plan order cannot be kept (PROTOCOL §4, "forward references
        aside")."""
        del self._held[call_id]

    def capture(self, seq: int, targets: Iterable[Term]) -> None:
        """Before a write by the call at `seq`: earlier readers of an overlapping path whose
        value is final keep it, so the write does not change what they read (PROTOCOL §4)."""
        if not self._readers.size:
            return
        for term in targets:
            for reader in self._readers.ids_overlapping(term):
                if self._seq_of(reader) >= seq:
                    continue
                for slot in self.slots(reader):
                    if slot.kept is not None or not slot.final or not slot.term.overlaps(term):
                        continue
                    present, value = self._lookup(slot.term)
                    slot.kept = (present, copy_json(value) if present else None)

    # -- who waits on a call (PROTOCOL §13: ranks under a limit) -------------------------

    def dependents(self, call_id: str, seq: int, writes: tuple[Term, ...]) -> list[str]:
        """The calls that wait on this one: readers whose terms wait for it to end, earlier
        readers of what it writes through a forward reference, and held calls whose write
        waits for it. Asked only to rank calls a limit holds back."""
        found = [slot.reader for slot in _few.members(self._blocking.get(call_id))]
        if writes and self._forward_slots:
            for term in writes:
                for reader in self._readers.ids_overlapping(term):
                    if self._seq_of(reader) < seq and self._reads_forward(reader, (term,)):
                        found.append(reader)
        held = self._held_on.get(call_id)
        if held:
            found.extend(held)
        return found

"""The per-call fast paths of issue 15 answer exactly what the general paths answer.

Each exists only for speed, so each is checked against the slower way it replaces:

* `PathIndex` (pruned on removal, filed only when asked across depths) against a plain
  list of its entries;
* a scheduler that makes no `Note...` actions (`notes=False`, for a driver with no
  observer and no journal) against one that does: the same work actions, in the same
  order, the same records and the same log, whatever order the calls finish in; and one
  that makes no `NoteMessage` (`messages=False`, for a journal or a run's event sink,
  which read none) against one that makes them all;
* `SolutionStream` reading a whole call in one step (a chunk that holds it all) against
  the character automaton (one character per chunk): the same calls, the same outcome,
  for solutions and for text that is not quite JSON (NaN, duplicate keys, cut off);
* a handler whose parameters are all `str`/`int`/`float`/`bool` given values of exactly
  those types, passed without pydantic, against pydantic's conversion of the same values;
* the scheduler's per-call inputs and actions built by their quicker `__init__` against
  the dataclass's own: the same fields, defaults, equality, and still frozen;
* the private copy a written call's record and messages share (`private_copy`) against
  `copy_json`, the copy per message it replaces.
"""

from __future__ import annotations

import dataclasses
import json
import random
from datetime import UTC, datetime
from typing import Any
from unittest import mock
from unittest.mock import patch

import pytest
import trio._core._run
from hypothesis import given, settings
from hypothesis import strategies as st

import tickloop as tl
from tickloop._agent import _prompt
from tickloop._core import _arrival
from tickloop._core._expressions import Term, find_references
from tickloop._core._log import ContextLog, copy_json, is_flat, private_copy, shape_fault
from tickloop._core._path_index import PathIndex
from tickloop._core._run_queue import RunQueue
from tickloop._core._scheduler import Scheduler
from tickloop._core._scheduler_io import (
    AskApproval,
    CloseStream,
    Decide,
    FinishCall,
    NoteAccepted,
    NoteDecided,
    NoteMessage,
    NoteReady,
    NoteSettled,
    OpenTick,
    ReceiveCall,
    StartCall,
)
from tickloop._core._tools import ToolSet
from tickloop._engine import _engine
from tickloop._json._stream import SolutionStream
from tickloop._observe._events import EventSink

# -- PathIndex ----------------------------------------------------------------------------

_steps = st.sampled_from(["a", "b", 0, 1])
_terms = st.builds(
    lambda kind, path: Term(kind, tuple(path)),
    st.sampled_from(["state", "k"]),
    st.lists(_steps, max_size=3),
)
_ids = st.sampled_from(["c1", "c2", "c3"])


def _naive_overlapping(entries: list[tuple[Term, str]], term: Term) -> set[str]:
    return {call_id for filed, call_id in entries if filed.overlaps(term)}


@settings(max_examples=300)
@given(
    operations=st.lists(
        st.tuples(
            st.sampled_from(["add", "spell", "spell2", "remove"]), _terms, _ids, st.booleans()
        ),
        max_size=40,
    ),
)
def test_a_path_index_answers_as_a_scan_of_its_entries(
    operations: list[tuple[str, Term, str, bool]],
) -> None:
    """Entries added as terms or as the text of an expression (kept as text until the
    index is asked), asked between changes or not (an entry is filed in the trie only by
    a question spanning depths), answer alike."""
    index = PathIndex()
    entries: list[tuple[Term, str]] = []
    other = Term("k", ("b",))
    for operation, term, call_id, ask in operations:
        if operation == "add":
            index.add(term, call_id)
            entries.append((term, call_id))
        elif operation == "spell":
            index.add_spelled(str(term), call_id, 1)
            entries.append((term, call_id))
        elif operation == "spell2":  # a fan-out's text: both terms filed
            index.add_spelled(f"{term} && {other}", call_id, 2)
            entries += [(term, call_id), (other, call_id)]
        elif operation == "remove" and (term, call_id) in entries:
            index.remove(term, call_id)
            entries.remove((term, call_id))
        assert index.size == len(entries)
        assert bool(index) == bool(entries)
        if not ask:
            continue
        expected = _naive_overlapping(entries, term)
        assert set(index.ids_overlapping(term)) == expected
        assert set(index.ids_at(term)) == {call_id for filed, call_id in entries if filed == term}
        assert set(index.others_overlapping(term, call_id)) == expected - {call_id}
        overlapping = [filed for filed, _ in entries if filed.overlaps(term)]
        assert index.count_overlapping(term) == len(overlapping)
        assert index.holds_around(term) == any(
            filed.overlaps(term) and filed != term for filed, _ in entries
        )


def test_removing_the_last_entry_under_a_path_prunes_it() -> None:
    index = PathIndex()
    terms = [Term("state", (f"r{i}", "x")) for i in range(100)]
    for term in terms:
        index.add(term, "c")
    assert index.holds_around(Term("state", ("r0",)))  # spans depths: all filed
    for term in terms:
        index.remove(term, "c")
    root = index._root
    assert root.subtree == 0 and not root.children  # nothing is kept for what left


# -- the scheduler with and without its facts ---------------------------------------------


@tl.tool
async def put(value: Any = None) -> Any:
    return value


@tl.tool(requires_approval=lambda params: params.get("value") == "ask")
async def asked(value: Any = None) -> Any:
    return value


_TOOLS = ToolSet([put, asked])
_PATHS = ["a", "a.x", "b", "list"]
_NOTES = (NoteAccepted, NoteReady, NoteDecided, NoteMessage, NoteSettled)


@st.composite
def _plans(draw: st.DrawFn) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 8))):
        value: Any = draw(st.sampled_from([0, "s", {"k": 1}, [1], "ask"]))
        if draw(st.integers(0, 2)) == 0:
            first, second = (f"†state.{draw(st.sampled_from(_PATHS))}" for _ in range(2))
            value = draw(st.sampled_from([first, f"{first} || {second}", f"{second} && {first}"]))
            if draw(st.booleans()):  # two references, the first term of each shared
                value = [value, first]
        call: dict[str, Any] = {
            "_tool": draw(st.sampled_from(["put", "put", "asked"])),
            "value": value,
        }
        if draw(st.booleans()):
            call["_id"] = f"k{index}"
        if draw(st.integers(0, 4)) > 0:
            call["_outputPath"] = f"†state.{draw(st.sampled_from(_PATHS))}"
            call["_outputMethod"] = draw(st.sampled_from(["set", "merge", "push"]))
        if draw(st.integers(0, 9)) == 0:
            call["_bogus"] = 1  # now and then a call that fails its arrival checks
        calls.append(call)
    return calls


def _as_data(records: dict[str, Any]) -> dict[str, Any]:
    return {call_id: dataclasses.asdict(record) for call_id, record in records.items()}


def _work(actions: list[Any]) -> list[Any]:
    return [action for action in actions if not isinstance(action, _NOTES)]


def _answer_one(
    running: list[StartCall],
    asking: list[AskApproval],
    order: random.Random,
    feed: Any,
    failing: set[str] | None = None,
) -> None:
    """Finish one running call (failing it when its id is in `failing`) or answer one
    question: which, at random."""
    if asking and (not running or order.random() < 0.3):
        question = asking.pop(order.randrange(len(asking)))
        feed(Decide(question.pending.id, tl.Approve(), "d"))
        return
    started = running.pop(order.randrange(len(running)))
    if failing and started.id in failing:
        feed(FinishCall(started.id, error={"type": "runtime", "message": "no"}, date="d"))
    else:
        feed(FinishCall(started.id, started.params.get("value"), date="d"))


def _unshared(*_: Any) -> None:
    """`share_parsed` that shares nothing: every call keeps its own parses."""


@pytest.mark.parametrize("variant", ["notes", "messages", "sharing"])
@settings(max_examples=200)
@given(calls=_plans(), order=st.randoms(use_true_random=False), failing=st.sets(_ids))
def test_a_scheduler_without_notes_does_the_same_work(
    variant: str, calls: list[dict[str, Any]], order: random.Random, failing: set[str]
) -> None:
    """`notes`: a scheduler that makes no facts does the same work as one that does.
    `messages`: one that makes every fact but `NoteMessage` (a journal's) makes the same
    others in the same order. `sharing`: one whose calls share equal parsed expressions
    (`_sharing`) does exactly what one does whose calls each keep their own."""
    with_notes = Scheduler(_TOOLS, ContextLog(), notes=True)
    without = Scheduler(
        _TOOLS, ContextLog(), notes=variant != "notes", messages=variant != "messages"
    )
    running: list[StartCall] = []
    asking: list[AskApproval] = []

    def feed(event: Any) -> None:
        noted = with_notes.handle(event)
        if variant == "notes":
            bare = without.handle(event)
            assert _work(noted) == bare
        elif variant == "messages":
            bare = without.handle(event)
            assert [action for action in noted if not isinstance(action, NoteMessage)] == bare
        else:
            with patch("tickloop._core._scheduler.share_parsed", _unshared):
                bare = without.handle(event)
            assert noted == bare
        running.extend(action for action in bare if isinstance(action, StartCall))
        asking.extend(action for action in bare if isinstance(action, AskApproval))

    feed(OpenTick(1, "d"))
    for call in calls:
        feed(ReceiveCall(call, "d"))
    feed(CloseStream("d"))
    while running or asking:
        _answer_one(running, asking, order, feed, failing)
    assert _as_data(with_notes.records) == _as_data(without.records)
    assert with_notes.log.messages == without.log.messages
    assert not with_notes.tick_active and not without.tick_active


def test_only_a_listener_that_reads_messages_is_handed_them() -> None:
    """A journal and an event sink read no `NoteMessage` (every write is at a path its
    call declared; a message is the log's, not an event): a driver with only those makes
    none. A listener of its own is handed every action, as before."""
    sink = EventSink("r", tl.Redactor(), [lambda event: None])
    journal = mock.Mock()  # record and commit: what a driver asks of a journal

    def made(**options: Any) -> tuple[bool, bool]:
        engine = _engine.Engine(ToolSet([put]), ContextLog(), **options)
        return engine.scheduler.notes, engine.scheduler.messages

    assert made() == (False, False)
    assert made(journal=journal) == (True, False)
    assert made(on_action=sink) == (True, False)
    assert made(on_action=sink, journal=journal) == (True, False)
    assert made(on_action=lambda action: None) == (True, True)


# -- the solution stream, whole chunks against single characters --------------------------

_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text('ab"\\{}', max_size=3)),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.sampled_from("xyz"), kids),
    max_leaves=6,
)


def _mangle(text: str, how: str, at: int) -> str:
    """Make a solution text not quite JSON, the ways a model gets it wrong."""
    cut = at % (len(text) + 1)
    if how == "cut":
        return text[:cut]
    if how == "nan":
        return text.replace("null", "NaN", 1)
    if how == "duplicate":
        return text.replace('{"_tool"', '{"x": 1, "x": 2, "_tool"', 1)
    if how == "junk":
        return text[:cut] + "@" + text[cut:]
    return text


@settings(max_examples=300)
@given(
    calls=st.lists(
        st.builds(
            lambda params: {"_tool": "t", **params}, st.dictionaries(st.sampled_from("ij"), _values)
        ),
        max_size=5,
    ),
    how=st.sampled_from(["none", "cut", "nan", "duplicate", "junk"]),
    at=st.integers(0, 10_000),
    indent=st.sampled_from([None, 1]),
)
def test_a_whole_chunk_is_read_as_the_automaton_reads_it(
    calls: list[dict[str, Any]], how: str, at: int, indent: int | None
) -> None:
    text = _mangle(json.dumps({"calls": calls, "output": None}, indent=indent), how, at)
    whole = SolutionStream()
    emitted_whole = whole.feed(text)
    by_char = SolutionStream()
    emitted_by_char = [call for char in text for call in by_char.feed(char)]
    assert emitted_whole == emitted_by_char
    assert whole.close() == by_char.close()
    if how == "none":
        assert emitted_whole == calls


_PLAIN_KINDS: list[Any] = [str, int, float, bool, Any]
_JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(_PLAIN_KINDS), min_size=0, max_size=4),
    values=st.lists(
        _JSON_SCALARS
        | st.lists(_JSON_SCALARS, max_size=2)
        | st.dictionaries(st.text(max_size=2), _JSON_SCALARS, max_size=2),
        min_size=0,
        max_size=5,
    ),
    defaults=st.booleans(),
)
def test_plain_parameters_are_passed_as_pydantic_would_pass_them(
    kinds: list[type], values: list[Any], defaults: bool
) -> None:
    names = [f"p{i}" for i in range(len(kinds))]
    namespace: dict[str, Any] = {"str": str, "int": int, "float": float, "bool": bool, "Any": Any}
    tail = "=None" if defaults else ""
    pairs = zip(names, kinds, strict=True)
    signature = ", ".join(
        f"{name}: {'Any' if kind is Any else kind.__name__}{tail}" for name, kind in pairs
    )
    exec(f"async def handler({signature}):\n    return None", namespace)
    tool = tl.tool(namespace["handler"])
    signature_of = tool._signature
    assert signature_of is not None and signature_of.plain is not None  # the fast path's case
    keys = [*names, "extra"]
    params = {keys[i % len(keys)]: value for i, value in enumerate(values)}

    def general() -> Any:
        try:
            converted = signature_of.model.model_validate(params)
        except Exception as problem:
            return ("raised", type(problem))
        return {name: getattr(converted, name) for name in signature_of.fields}

    def fast() -> Any:
        try:
            return signature_of.arguments(params, None)
        except Exception as problem:
            return ("raised", type(problem))

    expected, got = general(), fast()
    if isinstance(expected, dict) and isinstance(got, dict):
        assert got.keys() == expected.keys()
        for name in expected:  # the very objects (a NaN is not equal to itself)
            assert got[name] is expected[name] or got[name] == expected[name]
            assert type(got[name]) is type(expected[name])
    else:
        assert got == expected


# -- arrival: a plain call, and a call ready as it arrives, against the general path -------


@tl.tool(max_concurrency=1)
async def one_at_a_time(value: Any = None) -> Any:
    return value


_ARRIVAL_TOOLS = ToolSet([put, asked, one_at_a_time])
# Values a plain call may hold, and the ones that take it off the fast path: references, an
# escaped dagger, a lone surrogate, text that is not ASCII, nesting.
_SOUND_VALUES = [0, -1.5, None, True, "s", "ask", "é", "††lit", "†state.a", "†state.b"]
_DEEP: list[Any] = []
for _ in range(300):
    _DEEP = [_DEEP]
_NESTED = [{"k": 1}, [1], [[[]]], {"k": "†state.a"}, ["†state.b"], ["\ud800"], _DEEP]
_ARRIVAL_VALUES = st.sampled_from([*_SOUND_VALUES, *_NESTED, "\ud800"])


@st.composite
def _arrivals(draw: st.DrawFn) -> list[Any]:
    calls: list[Any] = []
    for index in range(draw(st.integers(1, 8))):
        odd_id = draw(st.integers(0, 5)) == 0  # a bad id, with a bad shape or not
        call: dict[Any, Any] = {
            "_tool": draw(st.sampled_from(["put", "put", "asked", "one_at_a_time"])),
            "value": draw(_ARRIVAL_VALUES),
        }
        if odd_id:
            call["_id"] = draw(st.sampled_from(["", 7, "k0"]))
        elif draw(st.booleans()):
            call["_id"] = f"k{index}"
        if draw(st.integers(0, 2)) == 0:
            paths = ["†state.a", "†state.b", 3, "\ud800"]
            call["_outputPath"] = draw(st.sampled_from(paths))
        extra = draw(st.integers(0, 12))
        if extra == 0:
            call[1] = 2  # a key that is not a string
        elif extra == 1:
            call["ключ"] = "é"  # a parameter whose name is not ASCII
        elif extra == 2:
            reasons = ["why", "pourquoi é"] + ([] if odd_id else ["\udfff"])
            call["_reasoningForCall"] = draw(st.sampled_from(reasons))
        elif extra == 3:
            call["_bogus"] = 1
        calls.append(call if draw(st.integers(0, 15)) else [call])  # now and then not an object
    return calls


@settings(max_examples=300, deadline=None)
@given(
    calls=_arrivals(),
    order=st.randoms(use_true_random=False),
    limit=st.sampled_from([None, 1, 2]),
    close_first=st.booleans(),
)
def test_the_arrival_fast_paths_do_what_the_general_path_does(
    calls: list[Any], order: random.Random, limit: int | None, close_first: bool
) -> None:
    """A plain call skips the shape walk and the reference search (`_read_keys`), and a
    new call that reads nothing is made ready as it arrives (`Scheduler._arrival`): the
    same actions in the same order, the same records, log and errors as without them."""
    fast = Scheduler(_ARRIVAL_TOOLS, ContextLog(), max_concurrency=limit)
    general = Scheduler(_ARRIVAL_TOOLS, ContextLog(), max_concurrency=limit)
    general._arrival = None
    running: list[StartCall] = []
    asking: list[AskApproval] = []

    def feed(event: Any) -> None:
        actions = fast.handle(event)
        with mock.patch.object(_arrival, "_read_keys", _never_plain):
            assert general.handle(event) == actions
        running.extend(action for action in actions if isinstance(action, StartCall))
        asking.extend(action for action in actions if isinstance(action, AskApproval))

    def finish_some() -> None:
        while running or asking:
            _answer_one(running, asking, order, feed)
            if order.random() < 0.5:
                return  # the next call arrives while others still run

    feed(OpenTick(1, "d"))
    for call in calls:
        feed(ReceiveCall(call, "d"))
        if not close_first:
            finish_some()
    feed(CloseStream("d"))
    while running or asking:
        finish_some()
    assert _as_data(fast.records) == _as_data(general.records)
    assert fast.log.messages == general.log.messages
    assert not fast.tick_active and not general.tick_active


_READ_KEYS = _arrival._read_keys


def _never_plain(wire: dict[Any, Any], code: bool) -> Any:
    """`_read_keys` for the general path: the same keys, and never a plain call."""
    keys = _READ_KEYS(wire, code)
    return None if keys is None else (keys[0], keys[1], False)


_KEYS = st.sampled_from(["", "a", "é", "_", "_tool", "_id", "_line", "_x", "_é"])


@settings(max_examples=500)
@given(
    wire=st.dictionaries(_KEYS | st.text(max_size=3) | st.integers(), _ARRIVAL_VALUES, max_size=4),
    code=st.booleans(),
)
def test_a_plain_call_has_the_shape_and_no_reference(wire: dict[Any, Any], code: bool) -> None:
    """One walk over the keys answers what three would: the parameters, the meta keys that
    are not ones, and whether the call is plain (then it passes the shape walk and holds
    no reference)."""
    keys = _arrival._read_keys(wire, code)
    if any(not isinstance(key, str) for key in wire):
        assert keys is None
        assert shape_fault(wire, _arrival.CALL_DEPTH) is not None
        return
    assert keys is not None
    params, unknown, plain = keys
    assert params == {key: value for key, value in wire.items() if not key.startswith("_")}
    assert list(params) == [key for key in wire if not key.startswith("_")]  # in order
    meta = _arrival.META_KEYS | ({"_line"} if code else set())
    assert unknown == [key for key in wire if key.startswith("_") and key not in meta]
    if plain:
        assert shape_fault(wire, _arrival.CALL_DEPTH) is None
        assert find_references(params) == ()


# -- results that are JSON as they are, and the date of every event -----------------------


@settings(max_examples=500)
@given(value=_JSON_SCALARS | st.integers() | st.builds(object) | st.just(10**700))
def test_a_result_surely_json_is_what_conversion_would_leave(value: Any) -> None:
    if _engine._surely_json(value):
        assert put.dump_output(value) is value
        assert _engine._not_json(value) is None


@settings(max_examples=500)
@given(nanoseconds=st.integers(min_value=-(10**18), max_value=4 * 10**18))
def test_the_date_of_an_event_is_the_clock_in_iso_8601(nanoseconds: int) -> None:
    micro = nanoseconds // 1000
    moment = datetime.fromtimestamp(micro // 10**6, UTC)
    expected = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{micro % 10**6:06d}Z"
    assert _engine.utc_now(lambda: nanoseconds) == expected
    assert _engine.utc_now(lambda: nanoseconds) == expected  # cached, the same


# -- an agent run nobody listens to -------------------------------------------------------


def _without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in _TIMES}
    if isinstance(value, list):
        return [_without_times(item) for item in value]
    return value


_TIMES = {"_date", "started", "finished"}


@settings(max_examples=30, deadline=None)
@given(calls=_plans())
def test_a_run_without_listeners_does_what_a_listened_run_does(
    calls: list[dict[str, Any]],
) -> None:
    """Without a listener the engine hands the scheduler's actions to nobody, and the
    scheduler makes no facts for them: the same records and log as a run that is watched."""

    def run(on_event: Any) -> tl.RunResult:
        model = tl.ScriptedModel([{"calls": calls, "output": None}, {"calls": [], "output": 1}])
        agent = tl.Agent(model, tools=[put, asked], approve=lambda pending: tl.Approve())
        # Both runs take their ready tasks in the same order. A forward reference to a
        # path that several later calls write reads whichever ends first (PROTOCOL §3), so
        # two runs of one plan may rightly differ there; Hypothesis makes trio's scheduler
        # deterministic for a seed of trio's own Random, which each run starts afresh.
        trio._core._run._r.seed(0)
        return agent.run(on_event=on_event)

    events: list[Any] = []
    quiet, watched = run(None), run(events.append)
    assert events  # the watched run was watched
    assert quiet.output == watched.output == 1
    assert _without_times(_as_data(quiet.records)) == _without_times(_as_data(watched.records))
    # In any order: trio shuffles each batch of ready tasks, so a call may finish before
    # or after the solution is logged, watched or not.
    assert sorted(map(_text, _without_times(quiet.messages))) == sorted(
        map(_text, _without_times(watched.messages))
    )


def _text(message: Any) -> str:
    return json.dumps(message, sort_keys=True, ensure_ascii=False)


def _naive_holds_null(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_naive_holds_null(item) for item in value.values())
    if isinstance(value, list):
        return any(_naive_holds_null(item) for item in value)
    return False


@settings(max_examples=500)
@given(call=st.dictionaries(st.sampled_from(["_tool", "a", "b"]), _values))
def test_a_call_holds_a_null_where_a_full_walk_finds_one(call: dict[str, Any]) -> None:
    assert _prompt._holds_null(call) == _naive_holds_null(call)


# -- a written call's private copy against copy_json ------------------------------------------

_TUPLED = st.recursive(
    _JSON_SCALARS | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=2), inner, max_size=3)
        | st.tuples(inner, inner)
    ),
    max_leaves=12,
)


def _containers(value: Any) -> list[Any]:
    found = [value] if isinstance(value, dict | list | tuple) else []
    items = value.values() if isinstance(value, dict) else value
    if isinstance(value, dict | list | tuple):
        for item in items:
            found += _containers(item)
    return found


def _holds_tuple(value: Any) -> bool:
    return any(type(container) is tuple for container in _containers(value))


@settings(max_examples=300)
@given(value=st.dictionaries(st.text(max_size=3), _TUPLED, max_size=4))
def test_a_private_copy_is_copy_json_sharing_nothing_or_none_for_a_tuple(
    value: dict[str, Any],
) -> None:
    """What a written call's record and messages hold instead of a copy per message: the
    same value `copy_json` gives, sharing no container with the call as sent; a call
    holding a tuple (which `copy_json` shows as a list) keeps the copy per message."""
    copied = private_copy(value)
    if _holds_tuple(value):
        assert copied is None
        return
    assert copied == copy_json(value) == value
    assert is_flat(value) == all(not isinstance(item, dict | list) for item in value.values())
    originals = {id(container) for container in _containers(value)}
    assert not any(id(container) in originals for container in _containers(copied))


class _QueuedOnly(RunQueue):
    """The run queue without its list of calls that meet no limit: every call through
    its tool's queue and the heap, as the general path has it."""

    __slots__ = ()

    def push(self, call: Any) -> None:
        self.queued += 1
        self._queue(call, call.tool.name, self._queues.get(call.tool.name))


_queue_ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from(["a", "b", "c"])),
        st.tuples(st.just("start"), st.sampled_from([None, None, 1, 2])),
        st.tuples(st.just("finish"), st.integers(0, 10)),
        st.tuples(st.just("late"), st.sampled_from(["a", "b", "c"])),  # out of order
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(_queue_ops)
def test_calls_that_meet_no_limit_start_as_the_queues_would_start_them(
    ops: list[tuple[str, Any]],
) -> None:
    """The run queue's list of calls meeting no limit starts the calls the tools' queues
    and the heap would start, in the same order, and counts the same: whatever the mix
    of run limits, tool limits (`c` allows one at a time), and calls queued out of
    arrival order."""
    from types import SimpleNamespace

    limits = {"a": None, "b": None, "c": 1}
    fast, general = RunQueue(), _QueuedOnly()
    seq = 100
    running: list[Any] = []
    for op, arg in ops:
        if op in ("push", "late"):
            seq += 1
            tool = SimpleNamespace(name=arg, max_concurrency=limits[arg])
            call = SimpleNamespace(
                id=f"k{seq}",
                seq=seq if op == "push" else seq - 50,
                tool=tool,
                fire_and_forget=seq % 2 == 0,
            )
            fast.push(call)  # type: ignore[arg-type]
            general.push(call)
        elif op == "start":
            started = fast.start(arg)
            assert [c.id for c in started] == [c.id for c in general.start(arg)]
            running += started
        elif running:
            call = running.pop(arg % len(running))
            fast.finish(call)
            general.finish(call)
        for kept in ("queued", "running", "writers"):
            assert getattr(fast, kept) == getattr(general, kept)

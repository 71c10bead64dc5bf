"""The store's per-call fast paths (issue 15, target 3) store exactly what the general
paths store.

Each exists only for speed, so each is checked against the slower way it replaces, on
calls a scheduler really accepted, replaced, refused and redacted:

* a CallReceived entry is built around its call's text, and the row of the call it is
  accepted as takes that text with the `_id` added: the same texts as `dumps_call` (a
  call's JSON in ASCII) of the entry and of the wire;
* whole `calls` rows are inserted with their NULLs written in the statement (one
  statement per set of NULL columns) instead of bound: the same rows, of the same SQLite
  types, as binding every value;
* a call's status is bound as the plain string it equals;
* a plan or solution message refers to its calls' CallReceived entries (a SHARED entry)
  instead of holding the calls a second time: read back, the same message.
"""

from __future__ import annotations

import collections
import itertools
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tickloop as tl
from tickloop._core._arrival import new_call
from tickloop._core._decisions import Replace
from tickloop._core._log import ContextLog
from tickloop._core._scheduler import Scheduler
from tickloop._core._scheduler_io import (
    AskApproval,
    CloseStream,
    Decide,
    Event,
    FinishCall,
    OpenTick,
    ReceiveCall,
    StartCall,
)
from tickloop._core._status import CallStatus
from tickloop._core._tools import ToolSet
from tickloop._durable import _codec, _journal, _schema, _writer
from tickloop._durable._codec import (
    dumps_call,
    dumps_entry,
    event_to_dict,
    expand_shared,
    shared_text,
)
from tickloop._durable._resume import DurableRun
from tickloop._durable._rows import Row, _text
from tickloop._durable._schema import CALL_COLUMNS, SHARED
from tickloop._durable._store import SQLiteStore
from tickloop._durable._writer import create_run
from tickloop._observe._events import EventSink, Redactor


@tl.tool
def step(n: Any = None, api_key: Any = None, note: Any = None) -> Any:
    return n


@tl.tool(requires_approval=True)
def pay(n: Any = None) -> Any:
    return n


_TOOLS = ToolSet([step, pay])
_RUN_IDS = itertools.count()
checked: collections.Counter[str] = collections.Counter()
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text('ab"\\é†\u2028', max_size=4),
)
_values = st.recursive(
    _leaves,
    lambda kids: (
        st.lists(kids, max_size=2)
        | st.dictionaries(st.sampled_from(["x", "token", "é"]), kids, max_size=2)
    ),
    max_leaves=4,
)
# A call: a tool, some parameters (a secret among them, or a reference), an output path,
# sometimes an `_id` of the model's or a key the arrival checks refuse.
_calls = st.fixed_dictionaries(
    {"_tool": st.sampled_from(["step", "pay", "nope"])},
    optional={
        "n": st.one_of(_values, st.sampled_from(["†state.a", "†state.b"])),
        "api_key": _values,
        "note": _values,
        "_outputPath": st.sampled_from(["†state.a", "†state.b", "†state.c.d"]),
        "_id": st.sampled_from(["m1", "m2", "é"]),
    },
)


_RECEIVED_TEXT, _ARRIVAL_TEXT = _journal.received_text, _journal.arrival_text


def _received_text(event: ReceiveCall) -> tuple[str, Any]:
    text, received = _RECEIVED_TEXT(event)
    assert text == dumps_call(event_to_dict(event))
    checked["received"] += 1
    return text, received


def _arrival_text(wire: dict[str, Any], received: Any) -> str | None:
    text = _ARRIVAL_TEXT(wire, received)
    if text is not None:  # else the wire is encoded (`dumps_call`)
        assert text == dumps_call(wire)
    return text


def _drive(
    tmp_path: Path, calls: list[dict[str, Any]], replace: list[dict[str, Any]]
) -> tuple[DurableRun, Scheduler]:
    """Run `calls` through a scheduler and a DurableRun; each approval is answered with
    the next replacement of `replace`. Every CallReceived entry and accepted call's row
    text the fast paths make is checked against `dumps_call`'s."""
    result: list[tuple[DurableRun, Scheduler]] = []

    async def main() -> None:
        store = tl.SQLiteStore(tmp_path / "runs.db")
        writer = create_run(store, f"r{next(_RUN_IDS)}", "solution")
        redact = Redactor()
        durable = DurableRun(writer, _TOOLS, redact, EventSink("r", redact))
        scheduler = Scheduler(_TOOLS, ContextLog([]), arrows=True)
        replacements = iter(replace)

        def feed(event: Event) -> None:
            actions = scheduler.handle(event)
            durable.record(event, actions)
            for action in actions:
                if isinstance(action, StartCall):
                    feed(FinishCall(action.id, value=action.params.get("n")))
                elif isinstance(action, AskApproval):
                    wire = next(replacements, None)
                    decision = tl.Approve() if wire is None else Replace(wire)
                    feed(Decide(action.pending.id, decision))

        feed(OpenTick(1))
        for call in calls:
            feed(ReceiveCall(call))
        feed(CloseStream())
        durable.commit(rows=True)
        writer.release()
        store.close()
        # Every unredacted accepted call's row (replacements too) holds its wire's text.
        for call_id, (wire, _) in durable._clean.items():
            assert durable.rows[call_id].call == dumps_call(wire)
            checked["accepted"] += 1
        result.append((durable, scheduler))

    with patch.multiple(_journal, received_text=_received_text, arrival_text=_arrival_text):
        trio.run(main)
    return result[0]


def _recorder(store: SQLiteStore) -> tuple[DurableRun, Callable[[Event], list[Any]]]:
    """A durable run journaling a new run `r` of `store`, and a `feed` that hands an event
    to a scheduler and what it decided to the run, as the engine does (inside trio)."""
    redact = Redactor()
    durable = DurableRun(create_run(store, "r", "solution"), _TOOLS, redact, EventSink("r", redact))
    scheduler = Scheduler(_TOOLS, ContextLog([]), arrows=True)

    def feed(event: Event) -> list[Any]:
        actions = scheduler.handle(event)
        durable.record(event, actions)
        return actions

    return durable, feed


def _received(durable: DurableRun, path: Path) -> dict[int, Any]:
    """Entry number -> the call of each CallReceived entry of the run `_drive` made."""
    with SQLiteStore(path) as store, store.connect() as connection:
        journal = store._journal(connection, durable.writer.run_id)
    return {
        number: body["call"]
        for number, _, kind, body in journal
        if kind == "event" and body["type"] == "CallReceived"
    }


def test_a_plan_refers_only_to_wires_equal_to_those_the_scheduler_made_on_arrival(
    tmp_path: Path,
) -> None:
    calls = [
        {"_tool": "step", "n": 1, "_outputPath": "†state.a"},
        {"_tool": "step", "n": 2, "api_key": "s3cret", "_outputPath": "†state.b"},
    ]
    durable, scheduler = _drive(tmp_path, calls, [])
    plain, secret = (record.call for record in scheduler.records.values())
    # The row of the call with a secret holds it redacted; the plan, like the journal's
    # CallReceived entry, holds the call as the model wrote it.
    assert "s3cret" not in durable.rows[secret["_id"]].call
    text = shared_text(
        {"type": "plan", "calls": [plain, secret, dict(plain)]},
        durable._clean,
        durable.rows,
        durable._arrived,
    )
    assert text is not None
    refs = json.loads(text)["calls"]
    assert refs[0] == [durable._clean[plain["_id"]][1], plain["_id"]]
    assert refs[1] == [secret]  # its row's text is redacted: the call is stored whole
    assert refs[2] == refs[0]  # an equal copy reads back as the same call
    back = expand_shared(json.loads(text), _received(durable, tmp_path / "runs.db"))
    assert back["calls"] == [plain, secret, plain]
    # Another message shape is journaled whole.
    for other in (
        {"type": "plan", "calls": [plain], "x": 1},
        {"calls": [plain], "type": "plan"},
        {"type": "solution", "calls": [plain]},
        {"type": "plan", "calls": "none"},
    ):
        assert shared_text(other, durable._clean, durable.rows, durable._arrived) is None


def test_a_received_call_with_a_lone_surrogate_is_journaled_as_dumps_call_makes_it(
    tmp_path: Path,
) -> None:
    calls = [{"_tool": "step", "n": "\ud800", "_outputPath": "†state.a"}]
    before = checked["received"]
    _, scheduler = _drive(tmp_path, calls, [])
    [record] = scheduler.records.values()
    assert record.status == "invalid"  # refused on arrival, but journaled as it came
    assert checked["received"] == before + 1


def test_an_accepted_calls_row_is_its_received_text_with_its_id(tmp_path: Path) -> None:
    calls = [
        {"_tool": "step", "n": "é†", "_outputPath": "†state.a"},
        {"_tool": "step", "_id": "m1", "n": 2},  # an id of the model's: encoded afresh
        {"_tool": "step"},
    ]
    before = dict(checked)
    durable, scheduler = _drive(tmp_path, calls, [])
    assert checked["received"] == before.get("received", 0) + 3
    assert checked["accepted"] == before.get("accepted", 0) + 3
    assert [json.loads(row.call) for row in durable.rows.values()] == [
        record.call for record in scheduler.records.values()
    ]


class _Dict(dict[str, Any]):
    """A dict subclass holding a secret: the quick look must not take it for a leaf."""


_redactable = st.recursive(
    st.one_of(_leaves, st.builds(lambda: _Dict(api_key="s3cret"))),
    lambda kids: (
        st.lists(kids, max_size=3)
        | st.dictionaries(st.sampled_from(["x", "token", "api_key", "n", "_id"]), kids, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300)
@given(values=st.lists(_redactable, min_size=1, max_size=3))
def test_redacting_a_value_to_store_it_is_the_general_walk(values: list[Any]) -> None:
    """`Redactor.shared` looks at a flat object of known names without walking it: the
    same answer as the walk, the value itself exactly when nothing in it is secret."""
    quick, walk = Redactor(), Redactor()
    for value in values * 2:  # names unknown, then known
        expected = walk._redact(value, False)
        redacted = quick.shared(value)
        assert redacted == expected
        assert (redacted is value) == (expected is value)


@settings(max_examples=300)
@given(
    call=st.dictionaries(st.sampled_from(["_tool", "n", "_id", "é"]), _values, max_size=3),
    taken=st.booleans(),
)
def test_the_text_of_a_wire_made_on_arrival_is_dumps_call_of_it(
    call: dict[str, Any], taken: bool
) -> None:
    """`arrival_text` trusts that the scheduler made the wire from the received call
    (`new_call`): on every wire it makes, for any call, its text is `dumps_call`'s (or
    None, and the wire is encoded)."""
    event = ReceiveCall(call, "2026-01-01T00:00:00.000000Z")
    _, received = _RECEIVED_TEXT(event)
    taken_ids = {"c1.0": object()} if taken else {}  # the id it would get is taken
    new, _, _, _ = new_call(call, 1, 0, 1, taken_ids)
    wire = new.record.call
    if received is None:
        return  # the general path: no text to build on
    text = _ARRIVAL_TEXT(wire, received)
    assert text is None or text == dumps_call(wire)
    if "_id" not in call:
        assert text == dumps_call(wire)  # the common case is the fast one


_COLUMNS = ("run_id", *CALL_COLUMNS)
_BIND_ALL = (
    f"INSERT OR REPLACE INTO calls ({', '.join(_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_COLUMNS))})"
)
_values = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text("ab\"'é†\x00", max_size=4),
    st.sampled_from(list(CallStatus)),
)


def _row(call_id: str, values: list[Any]) -> tuple[Any, ...]:
    # run_id, call_id, seq, iteration and status are NOT NULL in the table.
    run_id, seq, iteration, status = "r", values[0] or 0, values[1] or 0, values[3] or "done"
    return (run_id, call_id, seq, iteration, values[2], status, *values[4:])


def _read(connection: sqlite3.Connection) -> list[tuple[Any, ...]]:
    typed = ", ".join(f"{name}, typeof({name})" for name in _COLUMNS)
    return connection.execute(f"SELECT {typed} FROM calls ORDER BY call_id").fetchall()


_SPARSE = [_COLUMNS.index(name) for name in _schema.USUALLY_NULL]


def _lean(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """The row without its USUALLY_NULL columns, as a caller may give it when they are."""
    assert all(row[i] is None for i in _SPARSE)
    return tuple(value for i, value in enumerate(row) if i not in _SPARSE)


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(
        st.lists(_values, min_size=len(CALL_COLUMNS) - 1, max_size=len(CALL_COLUMNS) - 1),
        max_size=8,
    ),
    lean=st.lists(st.booleans(), min_size=8, max_size=8),
    replaced=st.booleans(),
)
def test_rows_with_their_nulls_in_the_statement_are_the_rows_every_value_bound_makes(
    tmp_path_factory: Any, rows: list[list[Any]], lean: list[bool], replaced: bool
) -> None:
    folder: Path = tmp_path_factory.mktemp("rows")
    made = [_row(f"c{i}", values) for i, values in enumerate(rows)]
    # Most rows have their USUALLY_NULL columns NULL: those asked to be lean are made so.
    made = [
        tuple(None if short and i in _SPARSE else value for i, value in enumerate(row))
        for row, short in zip(made, lean, strict=False)
    ]
    # Each call once per insert (a commit's rows are one per call); a second insert
    # replaces a row (a later commit, or a resume's rewrite).
    batches = [made]
    if replaced and made:
        batches.append([_row("c0", list(reversed(rows[-1])))])
    given_rows = [
        [
            _lean(row) if short and all(row[i] is None for i in _SPARSE) else row
            for row, short in zip(batch, lean, strict=False)
        ]
        for batch in batches
    ]
    stored = []
    for name, insert in (
        ("fast", lambda connection, i: _writer._insert_calls(connection, given_rows[i])),
        ("plain", lambda connection, i: connection.executemany(_BIND_ALL, batches[i])),
    ):
        store = SQLiteStore(folder / f"{name}.db")
        with store.connect() as connection:
            for i in range(len(batches)):
                connection.execute("BEGIN")
                insert(connection, i)
                connection.execute("COMMIT")
            stored.append(_read(connection))
        store.close()
    assert stored[0] == stored[1]


def test_the_results_of_calls_started_together_are_followed_at_the_next_commit(
    tmp_path: Path,
) -> None:
    """A commit for a call whose start is committed already writes nothing and follows
    nothing: the results recorded since wait, their entries already made, for the next
    commit that writes, which follows them all in one pass before anything reads a row."""
    store = tl.SQLiteStore(tmp_path / "runs.db")
    followed: list[str] = []
    track = DurableRun._track

    def counted(self: DurableRun, event: Event, *rest: Any) -> None:
        followed.append(type(event).__name__)
        track(self, event, *rest)

    async def main() -> None:
        durable, feed = _recorder(store)
        feed(OpenTick(1))
        feed(ReceiveCall({"_tool": "step", "n": 1, "_outputPath": "†state.a"}))
        durable.commit("c1.0")
        for n in (2, 3):  # both start when c1.0 finishes, in one event
            feed(ReceiveCall({"_tool": "step", "n": "†state.a", "_outputPath": f"†state.r{n}"}))
        actions = feed(FinishCall("c1.0", value=1))
        assert [a.id for a in actions if isinstance(a, StartCall)] == ["c1.1", "c1.2"]
        durable.commit("c1.1")  # writes the event that started both
        followed.clear()
        feed(FinishCall("c1.1", value=2))
        durable.commit("c1.2")  # started by an entry committed already
        assert followed == [] and durable.rows["c1.1"].status == CallStatus.RUNNING
        durable.commit()
        assert followed == ["FinishCall"] and durable.rows["c1.1"].status == CallStatus.DONE
        kinds = [body["type"] for _, _, kind, body in store.journal("r") if kind == "event"]
        assert kinds[-1] == "CallFinished"
        durable.writer.release()

    with patch.object(DurableRun, "_track", counted):
        trio.run(main)
    store.close()


@pytest.mark.parametrize(
    ("value", "later"), [(7, True), ("x", True), (None, True), (1.5, True), ({"n": 1}, False)]
)
def test_a_result_nothing_can_change_is_encoded_when_followed(
    tmp_path: Path, value: Any, later: bool
) -> None:
    """A result of an immutable type has its entry made when the event is followed (with
    the rest of its batch); any other at once, as it was returned: the tool may keep it
    and change it. Either way the entry committed is the one `finished_text` makes."""
    store = tl.SQLiteStore(tmp_path / "runs.db")

    async def main() -> None:
        durable, feed = _recorder(store)
        feed(OpenTick(1))
        feed(ReceiveCall({"_tool": "step", "n": 1}))
        durable.commit("c1.0")
        finished = FinishCall("c1.0", value=value, date="2026-11-25T00:00:00Z")
        feed(finished)
        assert (durable._pending[-1][2] == "") is later
        durable.commit(rows=True)
        [(_, _, _, body)] = [e for e in store.journal("r") if e[3].get("type") == "CallFinished"]
        assert body == json.loads(_codec.finished_text(finished))
        durable.writer.release()

    trio.run(main)
    store.close()


def test_a_rows_lean_values_are_its_values_without_the_usually_null_columns() -> None:
    row = Row("c1", 3, 1, "step", 1.5)
    row.call, row.params, row.deps, row.ready, row.started, row.finished = "{}", "{}", "[]", 2, 3, 4
    assert row.lean_values("r") == _lean(row.values("r"))
    for name in _schema.USUALLY_NULL:
        changed = Row("c1", 3, 1, "step", 1.5)
        setattr(changed, name, "x")
        assert changed.lean_values("r") == changed.values("r")


def test_a_row_binds_its_status_as_the_plain_string_it_equals() -> None:
    row = Row("c1", 0, 1, "step", 0.0)
    for status in CallStatus:
        row.status = status
        for values in (row.values("r"), row.settled("r")):
            (text,) = [value for value in values if value == status]
            assert type(text) is str and text == status.value
    assert _text("done") == "done"


_texts = st.text(st.sampled_from('ab"\\é†\u2028\ud800\x00'), max_size=4)
_finished_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    _texts,
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(_texts, st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(
    call_id=_texts,
    value=_finished_values,
    branch=st.none() | _texts,
    error=st.none() | st.fixed_dictionaries({"type": _texts}),
    date=_texts,
)
def test_a_finished_entry_is_the_text_dumps_entry_makes(
    call_id: str, value: Any, branch: str | None, error: dict[str, Any] | None, date: str
) -> None:
    event = FinishCall(call_id, value, branch, error, date)
    assert _codec.finished_text(event) == dumps_entry(event_to_dict(event))


@pytest.mark.parametrize(
    "value",
    [10**100 - 1, 10**100, -(10**100), 10**5000, -(10**5000)],
    ids=["below", "at", "negative", "too-long", "too-long-negative"],
)
def test_a_finished_entry_of_a_long_int_is_the_general_paths(value: int) -> None:
    event = FinishCall("c1.0", value, None, None, "2026-01-01T00:00:00Z")
    if abs(value) < 10**4000:
        assert _codec.finished_text(event) == dumps_entry(event_to_dict(event))
    else:  # too long to write as JSON text: refused alike
        with pytest.raises(tl.StoreError):
            dumps_entry(event_to_dict(event))
        with pytest.raises(tl.StoreError):
            _codec.finished_text(event)


@settings(max_examples=200, deadline=None)
@given(waits=st.lists(_texts, min_size=1, max_size=4), as_tuple=st.booleans())
def test_a_rows_arrows_are_the_text_dumps_entry_makes(waits: list[str], as_tuple: bool) -> None:
    assert _codec.deps_text(tuple(waits) if as_tuple else waits) == dumps_entry(waits)


@settings(max_examples=100, deadline=None)
@given(
    entries=st.lists(
        st.tuples(
            st.floats(allow_nan=False, allow_infinity=False),
            st.sampled_from(["event", "message", "note"]),
            st.sampled_from(['{"a":1}', '"†"', "[]"]),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_a_commits_entries_share_one_row_that_reads_back_as_they_were(
    tmp_path_factory: Any, entries: list[tuple[float, str, str]]
) -> None:
    store = SQLiteStore(tmp_path_factory.mktemp("journal") / "runs.db")
    writer = create_run(store, "r", "solution")
    writer.append(entries)
    with store.connect() as connection:
        (body,) = connection.execute("SELECT body FROM journal WHERE run_id = 'r'").fetchone()
        journal = store._journal(connection, "r")
    writer.release()
    store.close()
    if len(entries) > 1:  # the text the entries made before they were joined in one pass
        kinds = {"event": '"event"', "message": '"message"', "note": '"note"'}
        assert body == "[" + ",".join(f'["{t.hex()}",{kinds[k]},{b}]' for t, k, b in entries) + "]"
    assert journal == [
        (number, at, kind, json.loads(text)) for number, (at, kind, text) in enumerate(entries, 1)
    ]


def test_a_version_1_batch_with_numbers_for_its_times_reads_as_it_did(tmp_path: Path) -> None:
    """A version 1 store may hold its entries' times as JSON numbers; this version writes
    their hex form, and brings such a store up to it on opening (`_migrations`)."""
    with SQLiteStore(tmp_path / "runs.db") as store:
        writer = create_run(store, "r", "solution")
        writer.append([(1795607862.8484273, "note", '{"note":"a"}'), (0.1, "note", "{}")])
        writer.release()
        with store.connect() as connection:
            connection.execute(
                "INSERT INTO journal (run_id, seq, at, kind, body) VALUES ('r', 4, 2.25, "
                '\'batch\', \'[[1795607862.8484273,"note",{"note":"b"}],[2.25,"note",{}]]\')'
            )
            connection.execute("UPDATE tickloop_schema SET version = 1")
            connection.commit()
    with SQLiteStore(tmp_path / "runs.db") as store:
        journal = store.journal("r")
    assert [(number, at) for number, at, _, _ in journal] == [
        (1, 1795607862.8484273),
        (2, 0.1),
        (3, 1795607862.8484273),
        (4, 2.25),
    ]


# -- plans and solutions stored by reference (SHARED entries) ---------------------------


@tl.tool(name="step")
async def plus_one(n: int) -> int:
    return n + 1


def _shared_entries(path: Path, run_id: str) -> int:
    """How many of the run's entries, as stored, are SHARED messages."""
    entries: list[Any] = []
    with sqlite3.connect(path) as connection:
        for kind, body in connection.execute(
            "SELECT kind, body FROM journal WHERE run_id = ? ORDER BY seq", (run_id,)
        ):
            batch = json.loads(body)
            entries += [(k, b) for _, k, b in batch] if kind == "batch" else [(kind, batch)]
    return sum(kind == "message" and body["type"] == SHARED for kind, body in entries)


def test_a_runs_plan_and_solution_are_stored_once_and_read_back_as_the_log_held_them(
    tmp_path: Path,
) -> None:
    calls = [
        {"_tool": "step", "n": 1, "_outputPath": "†state.a"},
        {"_tool": "step", "n": "†state.a", "_outputPath": "†state.b"},
        {"_tool": "step", "_id": "mine", "n": 5},
    ]
    model = tl.ScriptedModel([{"calls": calls, "output": None}, {"calls": [], "output": "ok"}])
    with tl.SQLiteStore(tmp_path / "runs.db") as store:
        result = tl.Agent(model, tools=[plus_one], store=store).run({"go": 1}, run_id="r")
        journal = store.journal("r")
    assert result.state == {"a": 2, "b": 3}
    # The first iteration's solution and plan are stored by reference...
    assert _shared_entries(tmp_path / "runs.db", "r") == 2
    # ...and read back as the messages the run's log held, to the same text.
    ours = ("plan", "solution")
    stored = [body for _, _, kind, body in journal if kind == "message" and body["type"] in ours]
    held = [message for message in result.messages if message["type"] in ours]
    assert len(held) == 4
    assert [dumps_entry(message) for message in stored] == [dumps_entry(m) for m in held]
    plan = next(message for message in stored if message["type"] == "plan")
    assert [wire["_id"] for wire in plan["calls"]] == ["c1.0", "c1.1", "mine"]
    # The stored text holds each call's text once: in its CallReceived entry.
    with sqlite3.connect(tmp_path / "runs.db") as connection:
        texts = "".join(body for (body,) in connection.execute("SELECT body FROM journal"))
    assert texts.count('"_outputPath":"\\u2020state.b"') == 1  # a call's text is ASCII


@tl.tool(name="ask", requires_approval=True)
async def ask_first(n: int) -> int:
    return n


def test_a_resumed_run_reads_its_shared_messages_back_into_its_log(tmp_path: Path) -> None:
    calls = [{"_tool": "step", "n": i, "_outputPath": f"†state.v{i}"} for i in range(3)]
    calls.append({"_tool": "ask", "n": "†state.v2", "_outputPath": "†state.asked"})
    model = tl.ScriptedModel([{"calls": calls, "output": None}, {"calls": [], "output": "ok"}])
    with tl.SQLiteStore(tmp_path / "runs.db") as store:
        agent = tl.Agent(
            model, tools=[plus_one, ask_first], approve=lambda call: tl.Defer(), store=store
        )
        paused = agent.run({"go": 1}, run_id="r")
        assert paused.status == "paused"
        assert _shared_entries(tmp_path / "runs.db", "r") == 2
        # The resumed run's log is rebuilt from the journal: its plan and solution are
        # the ones the first process held, to the same text.
        result = agent.resume("r", decisions={"c1.3": tl.Approve()})
    assert result.output == "ok" and result.state["asked"] == 3

    def first(messages: list[dict[str, Any]], kind: str) -> str:
        return dumps_entry(next(m for m in messages if m["type"] == kind))

    for kind in ("solution", "plan"):
        assert first(result.messages, kind) == first(paused.messages, kind)
    assert json.loads(first(result.messages, "plan"))["calls"][3]["_id"] == "c1.3"


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(_calls, max_size=6), replace=st.lists(_calls, max_size=2), data=st.data())
def test_a_shared_message_reads_back_as_the_message_it_stands_for(
    tmp_path: Path, calls: list[dict[str, Any]], replace: list[dict[str, Any]], data: Any
) -> None:
    """Plans and solutions of any calls (refused ones, an `_id` of the model's, secrets,
    replacements, lone surrogates): what is stored by reference reads back to the same
    text; calls that are not the very objects journaled are stored whole."""
    durable, scheduler = _drive(tmp_path, calls, replace)
    received = _received(durable, tmp_path / "runs.db")
    # The solution holds the very calls received, or equal copies of some of them.
    copied = data.draw(st.lists(st.booleans(), min_size=len(calls), max_size=len(calls)))
    solution_calls = [
        json.loads(json.dumps(c)) if copy else c for c, copy in zip(calls, copied, strict=True)
    ]
    messages = [
        {"type": "plan", "calls": [record.call for record in scheduler.records.values()]},
        {"type": "solution", "iteration": 1, "solution": {"calls": solution_calls, "output": 1}},
    ]
    for message in messages:
        text = shared_text(message, durable._clean, durable.rows, durable._arrived)
        if text is None:
            continue  # nothing to share: journaled whole
        back = expand_shared(json.loads(text), received)
        assert dumps_entry(back) == dumps_entry(message)


def test_a_shared_entry_referring_to_a_call_never_received_is_damage(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "runs.db") as store:
        writer = create_run(store, "r", "solution")
        body = (
            '{"type":"shared","message":{"type":"plan","calls":null},"path":["calls"],'
            '"calls":[[7,"c1.0"]]}'
        )
        writer.append([(1.0, "event", '{"type":"Flush"}'), (2.0, "message", body)])
        writer.release()
        with pytest.raises(tl.StoreError, match="entry 2 of run 'r' refers to calls"):
            store.journal("r")


@pytest.mark.parametrize(
    "body",
    [
        {"message": {"type": "plan"}, "path": ["calls"], "calls": [[1]]},  # no place held
        {"message": {"type": "plan", "calls": None}, "path": ["calls"], "calls": ["x"]},
        {"message": {"type": "plan", "calls": None}, "path": [], "calls": []},
        {"message": [], "path": ["calls"], "calls": []},
    ],
)
def test_a_shared_entry_that_is_not_one_is_refused(body: dict[str, Any]) -> None:
    with pytest.raises((TypeError, ValueError, KeyError, IndexError)):
        expand_shared(body, {1: {"_tool": "step"}})


def test_a_shared_message_is_no_message_a_log_holds() -> None:
    """So a tickloop from before SHARED messages, replaying one into its log, refuses it
    as damage instead of resuming a run whose plan and solution went missing."""
    with pytest.raises(ValueError, match="not 'shared'"):
        ContextLog([]).append({"type": SHARED, "message": {}, "path": ["calls"], "calls": []})

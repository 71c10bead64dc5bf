"""The store's per-call fast paths (issue 15, target 3) store exactly what the plain
paths they replace store.

Each exists only for speed, so each is checked against the slower way it replaces:

* whole `calls` rows are inserted with their NULLs written in the statement (one
  statement per set of NULL columns) instead of bound: the same rows, of the same SQLite
  types, as binding every value;
* a call's status is bound as the plain string it equals.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tickloop._core._status import CallStatus
from tickloop._durable import _store
from tickloop._durable._resume import _Row, _text
from tickloop._durable._store import CALL_COLUMNS, SQLiteStore

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


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.lists(_values, min_size=len(CALL_COLUMNS) - 1, max_size=len(CALL_COLUMNS) - 1),
        max_size=8,
    ),
    replaced=st.booleans(),
)
def test_rows_with_their_nulls_in_the_statement_are_the_rows_every_value_bound_makes(
    tmp_path_factory: Any, rows: list[list[Any]], replaced: bool
) -> None:
    folder: Path = tmp_path_factory.mktemp("rows")
    made = [_row(f"c{i}", values) for i, values in enumerate(rows)]
    if replaced and made:  # a row written again (a resume's rewrite) replaces the first
        made.append(_row("c0", list(reversed(rows[-1]))))
    stored = []
    for name, insert in (
        ("fast", lambda connection: _store._insert_calls(connection, made)),
        ("plain", lambda connection: connection.executemany(_BIND_ALL, made)),
    ):
        store = SQLiteStore(folder / f"{name}.db")
        with store.connect() as connection:
            connection.execute("BEGIN")
            insert(connection)
            connection.execute("COMMIT")
            stored.append(_read(connection))
        store.close()
    assert stored[0] == stored[1]


def test_a_row_binds_its_status_as_the_plain_string_it_equals() -> None:
    row = _Row("c1", 0, 1, "step", 0.0)
    for status in CallStatus:
        row.status = status
        for values in (row.values("r"), row.settled("r")):
            (text,) = [value for value in values if value == status]
            assert type(text) is str and text == status.value
    assert _text("done") == "done"

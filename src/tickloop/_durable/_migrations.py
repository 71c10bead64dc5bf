"""Opening a store: its schema made when new, its version checked, older ones brought up."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from .._errors import StoreError
from ._file import failure
from ._schema import _ROWS_SEQ, _SCHEMA, _TABLES, SCHEMA_VERSION

# A write transaction on a connection (`SQLiteStore._write`).
Write = Callable[[sqlite3.Connection], AbstractContextManager[Any]]

__all__ = ["prepare"]


def prepare(connection: sqlite3.Connection, path: Path, write: Write) -> None:
    """Check the schema (read only), then switch to WAL and create tables if new."""
    try:
        names = {
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        if names and "tickloop_schema" not in names:
            raise StoreError(
                f"{path} is an SQLite database but not a tickloop store "
                f"(it has tables {', '.join(sorted(names)[:5])})"
            )
        if names:
            _check_version(path, connection, names)
            _add_rows_seq(connection, write)
        if connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        if not names:
            with write(connection):
                exists = connection.execute(
                    "SELECT 1 FROM sqlite_master WHERE name='tickloop_schema'"
                ).fetchone()
                if not exists:  # another process may have made it meanwhile
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            connection.execute(statement)
                    connection.execute(
                        "INSERT INTO tickloop_schema (version) VALUES (?)", (SCHEMA_VERSION,)
                    )
    except sqlite3.OperationalError as error:  # read-only, locked: not damage
        raise failure(path, "cannot open the store", error) from error
    except sqlite3.DatabaseError as error:
        raise StoreError(f"{path}: the store is damaged or not a store: {error}") from error


def _check_version(path: Path, connection: sqlite3.Connection, names: set[str]) -> None:
    row = connection.execute("SELECT version FROM tickloop_schema").fetchone()
    if row is None or not isinstance(row[0], int):
        raise StoreError(f"{path}: the store has no schema version")
    if row[0] > SCHEMA_VERSION:
        raise StoreError(
            f"{path} was written by a newer tickloop (store schema {row[0]}, this "
            f"version reads {SCHEMA_VERSION}); upgrade tickloop"
        )
    missing = _TABLES - names
    if missing:
        raise StoreError(f"{path}: the store lacks tables {', '.join(sorted(missing))}")


def _add_rows_seq(connection: sqlite3.Connection, write: Write) -> None:
    """Give a store made before `runs.rows_seq` that column (see `_ROWS_SEQ`)."""

    def missing() -> bool:
        columns = connection.execute("PRAGMA table_info(runs)").fetchall()
        return all(column[1] != _ROWS_SEQ for column in columns)

    if missing():
        with write(connection):
            if missing():  # another process may have added it meanwhile
                connection.execute(f"ALTER TABLE runs ADD COLUMN {_ROWS_SEQ} INTEGER")

"""`timeline_html`: a stored run read from its store and drawn by `_observe._timeline`."""

from __future__ import annotations

import os

from .._errors import ResumeError, StoreError
from .._observe._timeline import render_run
from ._store import SQLiteStore, as_store

__all__ = ["timeline_html"]


def timeline_html(store: SQLiteStore | str | os.PathLike[str], run_id: str) -> str:
    """Render run `run_id` of `store` as one HTML page (a string); see the module doc."""
    if not isinstance(store, SQLiteStore) and not os.path.exists(store):
        raise StoreError(f"no store at {store}")  # reading never creates a store
    resolved = as_store(store)
    assert resolved is not None
    try:
        run = resolved.run(run_id)
    except ResumeError as error:  # nothing is being resumed: it is a lookup that failed
        raise StoreError(f"{resolved.path}: {error}") from None
    return render_run(run, resolved.calls(run_id), resolved.journal(run_id), resolved.get_media)

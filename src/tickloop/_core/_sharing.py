"""One parsed expression for equal texts of the calls that wait at the same time.

Each call parses its own output path and references, so in a plan read in any order but
its own (a shuffled chain, a random DAG) a waiting call and its writer each hold a parse
of the same text: an `Expression`, its tuple of terms, a `Term`, its path and its step
strings, about 250 bytes. The parse cache only remembers the last few dozen texts.
Here a call that arrives takes an equal expression from a call still waiting or running
that already has one, found through the indexes of paths the scheduler keeps anyway (no
table of its own, nothing kept for a call that has ended). Expressions are immutable and
compare by value, so which equal object a call holds changes nothing it does.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._call import Call
from ._expressions import Expression
from ._path_index import PathIndex

__all__ = ["share_parsed"]

_set_field = object.__setattr__


def share_parsed(
    call: Call, calls: Mapping[str, Call], writers: PathIndex, readers: PathIndex
) -> None:
    """Before `call` is filed: its references and output path take an equal expression
    a call in `calls` holds, from a writer (by `writers`) or a waiting reader (by
    `readers`) of the same first term."""
    for reference in call.references:
        shared = _held(reference.expression, calls, writers, readers)
        if shared is not None:
            # Its own Reference, made by `find_references` for this call and not yet seen.
            _set_field(reference, "expression", shared)
    output = call.output
    if output is not None and readers.size and output is not call.tool.output_expression:
        shared = _held(output, calls, None, readers)
        if shared is not None:
            call.output = shared
            call.writes = shared.terms


def _held(
    expression: Expression,
    calls: Mapping[str, Call],
    writers: PathIndex | None,
    readers: PathIndex,
) -> Expression | None:
    """An expression equal to `expression` that a live call holds, or None."""
    term = expression.terms[0]
    if writers is not None and writers.size:
        for writer_id in writers.ids_at(term):
            writer = calls.get(writer_id)
            if writer is not None and writer.output == expression:
                return writer.output
    if readers.size:
        for reader_id in readers.ids_at(term):
            reader = calls.get(reader_id)
            if reader is not None:
                for reference in reader.references:
                    if reference.expression == expression:
                        return reference.expression
    return None

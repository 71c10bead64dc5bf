"""What a waiting call keeps that the cycle collector need not visit (CPython only).

CPython's cycle collector walks every object it tracks on each full pass, and full passes
come as the heap grows by a quarter: a plan of 100,000 waiting calls was walked about ten
times over, at a cost per call that grew with the plan (issue 15, docs/benchmarks.md).
About five of the eight objects a waiting call keeps are its parsed paths (`Term`,
`Expression`, `Reference` and the tuples holding them) and the `Slot` each term is read
through. None of them can be part of a reference cycle: they hold only strings, numbers,
tuples of those, each other, sets of call ids and copies of JSON values (trees), and
nothing they hold refers back to them. Reference counting alone frees them, so the
collector has nothing to find there. CPython stops tracking tuples and dicts of atoms for
this very reason, but cannot tell that a frozen dataclass is acyclic; we tell it, through
`PyObject_GC_UnTrack`, for the objects of calls that wait (a call ready on arrival runs
and ends before many passes could walk them).

An untracked object that holds a tracked one only keeps that one alive, as any reference
from outside the collector's view does; it never hides garbage from it. Elsewhere than
CPython, or where the C API is not reachable, this does nothing.
"""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Callable, Iterable

from ._call import Call

__all__ = ["untrack_waiting"]


@functools.cache
def _untracker() -> Callable[[object], None] | None:
    """`PyObject_GC_UnTrack`, or None; ctypes is imported only when a call first waits."""
    if sys.implementation.name != "cpython":
        return None
    try:
        import ctypes

        untrack = ctypes.pythonapi.PyObject_GC_UnTrack
    except (ImportError, AttributeError, OSError):
        return None
    untrack.argtypes = (ctypes.py_object,)
    untrack.restype = None
    return untrack


def untrack_waiting(call: Call, slots: Iterable[object]) -> None:
    """Take a waiting call's parsed paths and its slots out of the collector's view."""
    untrack = _untracker()
    if untrack is None:
        return
    is_tracked = gc.is_tracked  # also False for an object the collector never tracks
    # Every object here is immutable (or, a Slot, holds only what is listed above).
    objects: list[object] = [call.references, call.watching, *slots]
    for reference in call.references:
        expression = reference.expression
        objects += (reference, expression, expression.terms, *expression.terms)
    output = call.output
    if output is not None:
        objects += (output, output.terms, *output.terms, call.writes)
    for item in objects:
        if is_tracked(item):
            untrack(item)

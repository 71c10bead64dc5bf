"""Close matches for a name a caller got wrong, for the words of an error.

A typo in a name that switches a control on (a budget's `per_tool`, a fork's
`rerun_tools`, `tickloop budget --add per_tool.NAME`) must not switch it off silently:
the error names the unknown name and the closest known one.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["did_you_mean"]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`" (did you mean 'summarize'?)"` for the known name closest to `name`; "" when
    none is close."""
    import difflib  # only on an error's path

    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""

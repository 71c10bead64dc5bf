"""Text for a terminal line: what a model chose, shown so it cannot rewrite the screen.

Call ids, tool names and parameters are the model's choice, and a terminal is where a
person approves a charge: an id carrying `ESC[2K` or a right-to-left override could
otherwise rewrite or hide what a line says. Used by the command line and by every hook
or server that writes to a terminal (beside `_errors`, below every layer).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["one_line", "shown"]

# C0 and C1 controls (ESC starts the sequences that erase or hide a line), DEL, and the
# bidi controls that reorder what a line shows (Trojan Source), plus line separators.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def one_line(text: Any) -> str:
    """`text` as one terminal line: every control or bidi character shown as an escape."""
    return _UNSAFE.sub(lambda m: _escape(m.group()), str(text))


def shown(text: str) -> str:
    """`text` for a terminal, its own line breaks kept and every line made safe."""
    return "\n".join(one_line(line) for line in text.split("\n"))


def _escape(character: str) -> str:
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

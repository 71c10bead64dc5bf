"""The `tickloop` command."""

from ._main import main, script

__all__ = ["main", "script"]

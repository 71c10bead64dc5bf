"""What a driver needs of whoever observes the actions it carries out.

A driver hands each scheduler action it carries out to an observer (`on_action`). Most
actions are the scheduler's facts (`Note...`), several per call, which nobody needs to
read when no one listens: an observer that subclasses `ActionObserver` says which kinds
it can use, and the driver spares the scheduler making the others. A plain callable
takes every action. The interface is stated here, below its implementers (the run's
events in `_observe`), so `_core` reads no consumer's attributes by name.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ActionObserver", "wants"]


class ActionObserver:
    """An observer of a driver's actions that says which of them it can use."""

    @property
    def wants_notes(self) -> bool:
        """Whether the scheduler's facts (`Note...` actions) are of any use to it."""
        return True

    @property
    def wants_messages(self) -> bool:
        """Whether a `NoteMessage` (a message appended to the log) is of use to it."""
        return True

    def __call__(self, action: Any) -> None:
        raise NotImplementedError


def wants(on_action: object) -> tuple[bool, bool]:
    """(notes, messages): which facts the observer `on_action` (None: none) can use."""
    if on_action is None:
        return False, False
    if isinstance(on_action, ActionObserver):
        return on_action.wants_notes, on_action.wants_messages
    return True, True  # a plain callable: every action

"""What a request compacts (PROTOCOL §16 "Compaction"): the decision, and what a log says
of compactions (the newest one, what a new one covers, a session history's turns).

Pure functions: no I/O, no model, no clock. The loop base (`_loop.OuterLoop`) measures a
request (its fixed part and its compactable turns, oldest first), asks `plan_compaction`
what to do, and then does it: a summary request to the model (or the user's `compact=`
function), journaled as a `compaction` message (§1) that the request shows in place of
what it covers. Resume and replay find that message in the log and never ask again.

Invariants of a decision (each tested in tests/test_compaction.py):

- A request that fits (`prompt + max_output <= window`) is never compacted: `Fits`.
- What is compacted is always a *prefix* of the turns (the oldest first), never empty,
  and never anything of the fixed part (the instructions, the tool menu, the output
  schema, the current input, the state view, the previous plan or program, the last
  tick's errors): the caller does not pass those as turns, so they cannot be chosen.
- The prefix is the shortest one that brings the prompt (fixed part, the summary at its
  largest, and the turns kept) to at most `target` of the window (and to no more than
  leaves room for the answer); if no prefix does,
  every turn is compacted, as long as the result still leaves room for the answer.
- `Overflow` only when compacting every turn still leaves no room for the answer: what
  cannot be compacted does not fit, and the run stops (`ContextOverflow`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from .._core._log import ContextLog
from .._models._base import estimate_tokens

__all__ = [
    "COMPACT_GUIDE",
    "GIVEN_SUMMARY",
    "HISTORY_KIND",
    "Compact",
    "Fits",
    "Overflow",
    "Turn",
    "default_max_output",
    "estimate_prompt",
    "given_covers",
    "history_turns",
    "is_summary",
    "latest_compaction",
    "merged_covers",
    "plan_compaction",
    "reusable_compaction",
]


COMPACT_GUIDE = """\
You compact a long conversation. Summarise the earlier turns below in plain prose, as
briefly as you can: keep every fact, name, number, decision and open question a later
turn may need; drop what was tried and abandoned. Write only the summary.
"""


def default_max_output(window: int) -> int:
    """The most an answer may take when the model client states no output limit: a
    quarter of the window, at most 4096 tokens (docs/decisions.md)."""
    return max(1, min(4096, window // 4))


@dataclass(frozen=True, slots=True)
class Turn:
    """One compactable unit of a request, as the agent layer measured it.

    `key` is what a `compaction` message's `covers` names (an iteration, a native
    assistant turn with all its tool results and reasoning, a session run's id, or an
    earlier compaction, which a later one may summarise again); `tokens` its size.
    """

    key: str
    tokens: int


@dataclass(frozen=True, slots=True)
class Fits:
    """The request fits its window as it is: send it unchanged."""

    prompt: int


@dataclass(frozen=True, slots=True)
class Compact:
    """Summarise `covers` (the oldest turns, in order) in at most `summary_tokens`; the
    request then shows `prompt_after` tokens at most."""

    covers: tuple[str, ...]
    summary_tokens: int
    prompt_after: int


@dataclass(frozen=True, slots=True)
class Overflow:
    """What cannot be compacted (`fixed`), with the smallest summary, leaves no room for
    `max_output` in `window`."""

    fixed: int
    max_output: int
    window: int


def estimate_prompt(chars: int, measured: int | None = None) -> int:
    """A prompt's size in tokens: the model's own count when it reported one for the same
    text (usage of an earlier request), else about four characters a token (the
    estimate budgets use, PROTOCOL §12)."""
    return measured if measured is not None else estimate_tokens(chars)


def plan_compaction(
    fixed: int,
    turns: Sequence[Turn],
    *,
    window: int,
    max_output: int,
    target: float = 0.6,
    summary_tokens: int | None = None,
) -> Fits | Compact | Overflow:
    """Decide what one request compacts (PROTOCOL §16).

    `fixed` is the tokens of what is never compacted; `turns` the compactable turns,
    oldest first; `max_output` the most the answer may take; `summary_tokens` the most a
    summary may take (default: a tenth of the window). A summary replaces its turns in
    the prompt, so it counts as `summary_tokens` in every size below.
    """
    if window <= 0:
        raise ValueError(f"context window must be positive, got {window}")
    if not 0.0 < target <= 1.0:
        raise ValueError(f"compact_target must be in (0, 1], got {target}")
    summary = max(1, window // 10) if summary_tokens is None else summary_tokens
    kept = sum(turn.tokens for turn in turns)
    prompt = fixed + kept
    if prompt + max_output <= window:
        return Fits(prompt)
    if not turns or fixed + summary + max_output > window:
        return Overflow(fixed, max_output, window)
    # The target share, but never more than leaves room for the answer: a compacted
    # request is never over the window, whatever the target.
    goal = min(int(target * window), window - max_output)
    for count, turn in enumerate(turns, start=1):
        kept -= turn.tokens
        after = fixed + summary + kept
        if after <= goal:
            return Compact(tuple(t.key for t in turns[:count]), summary, after)
    # No prefix reaches the target; every turn goes, and the answer still has room
    # (checked above), so the request is sent rather than the run stopped.
    return Compact(tuple(t.key for t in turns), summary, fixed + summary)


def latest_compaction(log: ContextLog) -> tuple[str | None, list[str]]:
    """The newest compaction's summary and what it covers. A later compaction summarises
    the earlier one with it, so it covers all the earlier one did: only the newest shows."""
    for message in reversed(log.messages):
        if message.get("type") == "compaction":
            return str(message["summary"]), list(message["covers"])
    return None, []


def merged_covers(
    before: Sequence[str], covers: Sequence[str], given: Sequence[str] = ()
) -> list[str]:
    """What a new compaction covers: all the one it summarises again did (the turn key
    "compaction" stands for it), then the turns it adds, in the order they were shown;
    the summary a session run's history opened with (`GIVEN_SUMMARY`) stands for the
    runs it covered (`given`)."""
    keys: list[str] = []
    for key in [*before, *covers]:
        if key == GIVEN_SUMMARY:
            keys += given
        elif key != "compaction":
            keys.append(key)
    return list(dict.fromkeys(keys))


HISTORY_KIND = "history"  # the data kind of a session run's earlier runs (§1, §16)
# The turn key of the compaction a session run's history opens with (§16 "Ownership").
GIVEN_SUMMARY = "session summary"


def is_summary(entry: dict[str, Any]) -> bool:
    return entry.get("type") == "compaction" or ("summary" in entry and "covers" in entry)


def history_turns(history: Any, covered: Collection[str]) -> list[tuple[str, dict[str, Any]]]:
    """A session run's history (PROTOCOL §16) as compactable turns, oldest first, without
    those `covered`: (run id, `{"run_id", "input", "output"}`), or (`GIVEN_SUMMARY`, the
    compaction it was given, covered once every run it covers is: a compaction that
    summarises it again covers those runs, `merged_covers`)."""
    if not isinstance(history, list):
        return []
    turns: list[tuple[str, dict[str, Any]]] = []
    for entry in history:
        if not isinstance(entry, dict):
            continue
        if is_summary(entry):
            runs = [str(key) for key in entry.get("covers") or ()]
            if GIVEN_SUMMARY not in covered and not set(runs) <= set(covered):
                turns.append((GIVEN_SUMMARY, entry))
        elif str(entry.get("run_id")) not in covered:
            turns.append((str(entry.get("run_id")), entry))
    return turns


def given_covers(history: Any) -> list[str]:
    """The runs the compaction a session run's history opens with covers (none: [])."""
    for entry in history if isinstance(history, list) else ():
        if isinstance(entry, dict) and is_summary(entry):
            return [str(key) for key in entry.get("covers") or ()]
    return []


def reusable_compaction(
    compactions: Sequence[dict[str, object]], history: Sequence[str]
) -> dict[str, object] | None:
    """The compaction a session's new run starts from (PROTOCOL §16 "Ownership"): the
    newest of the session's `compactions` (oldest first) whose `covers` are all earlier
    runs of `history` (run ids, in order) and form a prefix of it, so the summary stands
    in for exactly the oldest runs; None when none does (a fork of the session at an
    earlier run drops those covering later ones)."""
    for compaction in reversed(compactions):
        covers = compaction.get("covers")
        if isinstance(covers, list) and covers and list(history[: len(covers)]) == covers:
            return compaction
    return None

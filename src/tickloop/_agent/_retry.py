"""Retrying a model request: which failures, how long to wait, when to stop.

One policy for every protocol and provider (PROTOCOL §8): transport errors and HTTP 408,
409, 429 and 5xx are retried; before attempt k+1 the loop waits
`min(2**k + uniform(0, 1), 60)` seconds, or the server's Retry-After. Anything else fails
at once. A stream that broke off after text arrived is not retried: calls may already be
running, so the partial answer is kept and the fault reported to the model instead.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import trio

from .._models._base import ModelError

__all__ = [
    "MAX_BACKOFF",
    "StreamBroken",
    "attempts_made",
    "backoff_delay",
    "stream_with_retries",
]

_log = logging.getLogger("tickloop")

MAX_BACKOFF = 60.0
T = TypeVar("T")


class StreamBroken(Exception):
    """The answer began and then failed: the caller keeps what arrived."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def backoff_delay(attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
    """Seconds to wait after failed attempt number `attempt` (counted from 1)."""
    if retry_after is not None and retry_after >= 0:
        return float(retry_after)
    return min(2.0**attempt + rng.uniform(0, 1), MAX_BACKOFF)


async def stream_with_retries(
    open_stream: Callable[[], AsyncIterator[T]],
    on_item: Callable[[T], None],
    *,
    attempts: int,
    rng: random.Random,
    on_retry: Callable[[int, float, ModelError], Any] | None = None,
) -> None:
    """Consume one streamed request, retrying it whole while nothing has arrived yet.

    Raises the last `ModelError` when a failure is not retryable or the attempts are
    used up, and `StreamBroken` when a stream fails after its first item.
    """
    for attempt in range(1, attempts + 1):
        started = False
        try:
            async for item in open_stream():
                started = True
                on_item(item)
            return
        except ModelError as error:
            if started:
                raise StreamBroken(error) from error
            if not error.retryable or attempt == attempts:
                error.attempts = attempt  # type: ignore[attr-defined]  # for ExecuteError
                raise
            delay = backoff_delay(attempt, rng, error.retry_after)
            # Seconds of silence otherwise: say why the run waits, and for how long.
            _log.warning(
                "model request failed (%s); attempt %d of %d, retrying in %.1f s",
                error,
                attempt,
                attempts,
                delay,
            )
            if on_retry is not None:
                on_retry(attempt, delay, error)
            await trio.sleep(delay)  # cancellation stops the wait at once


def attempts_made(error: BaseException) -> str:
    """ " after N attempts" for an ExecuteError's message, when retries were counted."""
    count = getattr(error, "attempts", None)
    if not isinstance(count, int):
        return ""
    return f" (after {count} attempt{'s' if count != 1 else ''})"

"""A model that plays back a script: examples, tests and the demo run with no network.

It streams like a real server (text in chunks, spaced in trio time), so what a user
tests with it, calls starting while the answer is still arriving, is what happens with
a hosted model; and on a `trio.testing.MockClock` the timing is exact and instant.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Sequence
from typing import Any

import trio

from .._errors import ConfigurationError
from ._base import ModelError, SolutionRequest, TextDelta, Usage

__all__ = ["ScriptedModel"]


def _estimate_tokens(text: str) -> int:
    """About four characters a token: the usual rule of thumb for English and JSON."""
    return math.ceil(len(text) / 4)


class ScriptedModel:
    """Answers iteration k of a run with `responses[k-1]`.

    A response is a solution dict, sent as `json.dumps(response, ensure_ascii=False)`, or
    a string sent verbatim (to test what the loop does with malformed output). The text
    is streamed in chunks of `chunk_chars` characters; chunk i is sent at
    `first_token_delay + i * chunk_delay` seconds of trio time after the request, each
    time measured from the request so that delays do not drift.

    After the text comes one `Usage`, estimated as a token per four characters of the
    request (as JSON) and of the answer, so runs on a script report plausible totals;
    `usage=False` leaves it out.

    `.requests` records every request received, each the JSON-serialisable snapshot
    `{"messages": [...], "schema": {...}}` taken when it arrived.
    """

    def __init__(
        self,
        responses: Sequence[dict[str, Any] | str],
        *,
        chunk_chars: int = 16,
        chunk_delay: float = 0.0,
        first_token_delay: float = 0.0,
        usage: bool = True,
    ) -> None:
        if isinstance(responses, str | dict):
            raise ConfigurationError("ScriptedModel takes a list of responses, not one response")
        if chunk_chars < 1:
            raise ConfigurationError(f"chunk_chars must be at least 1, not {chunk_chars}")
        if chunk_delay < 0 or first_token_delay < 0:
            raise ConfigurationError("chunk_delay and first_token_delay cannot be negative")
        texts: list[str] = []
        for index, response in enumerate(responses):
            if isinstance(response, str):
                texts.append(response)
            elif isinstance(response, dict):
                try:
                    texts.append(json.dumps(response, ensure_ascii=False))
                except (TypeError, ValueError) as exc:
                    raise ConfigurationError(
                        f"response {index} of the script is not JSON-serialisable: {exc}"
                    ) from exc
            else:
                raise ConfigurationError(
                    f"response {index} of the script must be a dict or a str, "
                    f"not {type(response).__name__}"
                )
        # Serialised once, now: a bad response fails at construction, not mid-run, and a
        # dict the caller mutates later does not change the script.
        self._texts = texts
        self.chunk_chars = chunk_chars
        self.chunk_delay = chunk_delay
        self.first_token_delay = first_token_delay
        self.usage = usage
        self.requests: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        return f"ScriptedModel(<{len(self._texts)} responses>, chunk_chars={self.chunk_chars})"

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        start = trio.current_time()
        # A JSON round trip: proves the record serialisable and detaches it from the
        # loop's own lists, which keep changing after the request.
        snapshot = json.dumps(request.to_dict(), ensure_ascii=False)
        self.requests.append(json.loads(snapshot))
        k = request.iteration
        if not 1 <= k <= len(self._texts):
            # 400: a script that ran out is the test's mistake; retrying cannot fix it.
            raise ModelError(
                f"ScriptedModel has no response for iteration {k}: the script has "
                f"{len(self._texts)} response(s) (status 400, not retried)",
                status=400,
            )
        text = self._texts[k - 1]
        for i, offset in enumerate(range(0, len(text), self.chunk_chars)):
            await trio.sleep_until(start + self.first_token_delay + i * self.chunk_delay)
            yield TextDelta(text[offset : offset + self.chunk_chars])
        if self.usage:
            yield Usage(_estimate_tokens(snapshot), _estimate_tokens(text))

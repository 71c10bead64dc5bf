"""A test model that reacts: a function of the request gives each answer.

`ScriptedModel` plays a list back whatever it is asked; a test that needs the answer to
depend on the request (what the last tool returned, which tools are offered, which
child agent asks) writes a function instead. The function's answer is then played back
exactly as a one-response script would be (streamed in chunks, usage estimated), so
both test models behave alike everywhere but in where the answer comes from.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from .._errors import ConfigurationError
from ._base import (
    ModelError,
    SolutionRequest,
    TextDelta,
    ToolResult,
    TurnItem,
    TurnRequest,
    TurnResponse,
    Usage,
    chat_tool_messages,
)
from ._scripted import ScriptedModel, turn_record

__all__ = ["FunctionModel"]

Answer = dict[str, Any] | str
AnswerFunction = Callable[[dict[str, Any]], Answer | Awaitable[Answer]]


class FunctionModel:
    """Answers each request with `fn(request)`, sync or async.

    `request` is a JSON-serialisable dict, a fresh copy each time (the function may keep
    or change it): with protocol "solution" `{"messages": [...], "schema": {...}}` as
    `ScriptedModel.requests` records them; with protocol "tools" `{"system": ...,
    "messages": [...], "tools": [{"name", "description", "parameters"}, ...]}`, the
    messages in OpenAI chat shape. Both also hold `"iteration"` (the run's requests
    counted from 1) and `"path"` (the ids of the agent calls above the asking run, `()`
    at the root).

    It returns what `ScriptedModel` takes for that iteration: a solution dict, a turn
    dict (`{"content": ..., "tool_calls": [...]}`) or a string (sent verbatim, or a final
    text answer). A `ModelError` it raises reaches the loop as a server's would (status
    429 or 5xx: retried); any other exception, or an answer of another type, fails the
    request with status 400 (not retried), naming the function. A sync `fn` runs in the
    run's thread, so it should not block.
    """

    turn_format = "scripted"  # the same chat-shaped messages as ScriptedModel's turns

    def __init__(self, fn: AnswerFunction, *, model: str = "function") -> None:
        if not callable(fn):
            raise ConfigurationError(
                f"fn must be a function of the request, not {type(fn).__name__} {fn!r}"
            )
        if not isinstance(model, str) or not model:
            raise ConfigurationError(f"model must be a non-empty string, not {model!r}")
        self.fn = fn
        self.model = model

    def __repr__(self) -> str:
        return f"FunctionModel({_name(self.fn)}, model={self.model!r})"

    async def stream_solution(self, request: SolutionRequest) -> AsyncIterator[TextDelta | Usage]:
        answer = await self._answer(request.to_dict(), request.iteration, request.path)
        player = ScriptedModel([answer])
        async for item in player.stream_solution(dataclasses.replace(request, iteration=1)):
            yield item

    async def stream_turn(self, request: TurnRequest) -> AsyncIterator[TurnItem]:
        record = turn_record(request, self.turn_format)
        answer = await self._answer(record, request.iteration, request.path)
        player = ScriptedModel([answer])
        async for item in player.stream_turn(dataclasses.replace(request, iteration=1)):
            yield item

    def tool_result_messages(
        self, response: TurnResponse, results: Sequence[ToolResult]
    ) -> list[dict[str, Any]]:
        return chat_tool_messages(response, results)

    async def _answer(
        self, record: dict[str, Any], iteration: int, path: tuple[str, ...]
    ) -> dict[str, Any] | str:
        """The function's answer to a detached copy of `record`, checked."""
        request = json.loads(json.dumps(record, ensure_ascii=False))
        request["iteration"] = iteration
        request["path"] = tuple(path)
        try:
            answer = self.fn(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except ModelError:
            raise
        except Exception as error:
            raise ModelError(
                f"FunctionModel's function {_name(self.fn)} raised on iteration {iteration}: "
                f"{type(error).__name__}: {error} (status 400, not retried)",
                status=400,
            ) from error
        if not isinstance(answer, dict | str):
            raise ModelError(
                f"FunctionModel's function {_name(self.fn)} must return a dict or a str, not "
                f"{type(answer).__name__} (iteration {iteration}; status 400, not retried)",
                status=400,
            )
        if isinstance(answer, dict):
            try:
                json.dumps(answer, ensure_ascii=False)
            except (TypeError, ValueError) as error:
                raise ModelError(
                    f"FunctionModel's function {_name(self.fn)} returned a dict that is not "
                    f"JSON-serialisable on iteration {iteration}: {error} (status 400, "
                    "not retried)",
                    status=400,
                ) from None
        return answer


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__

"""A server's questions and model requests (`elicitation/create`, `sampling/createMessage`),
from the `mcp` client's callbacks to the question desk of the run whose call it is.

The protocol does not say which of a client's calls a server's request belongs to; the
server sends it while one of its tool calls runs. So a request is tied to a call when
that call is the only one of this connection in flight; with several in flight it goes
to the run they all belong to, tied to none of them (and is then not journaled); calls
of several runs at once on one shared connection leave it with no one to ask: declined
(docs/decisions.md "Which call a server's question belongs to").

Converting between the `mcp` package's types and tickloop's plain ones is done here;
the `mcp` package is imported inside the functions (it loads when first used).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from .._core._decisions import Defer
from .._core._questions import Accept, Cancel, Decline, Sampling
from .._engine._questions import QuestionDesk, SamplingRefused

__all__ = ["Asking"]

_log = logging.getLogger("tickloop")


class Asking:
    """The callbacks one connection gives its `ClientSession`, over the calls it has in
    flight (objects with `desk`, `call_id`, `park()`)."""

    def __init__(
        self,
        label: str,
        in_flight: Collection[Any],
        sampling: Callable[[Sampling], Any] | None,
        approve_sampling: bool,
    ) -> None:
        self.label = label
        self._in_flight = in_flight
        self._sampling = sampling
        self._approve_sampling = approve_sampling

    def _whose(self) -> tuple[QuestionDesk | None, Any]:
        """The desk to ask and the call to tie the request to (None: not one call)."""
        waiting = [request for request in self._in_flight if not request.done.is_set()]
        desks = {id(request.desk): request.desk for request in waiting if request.desk is not None}
        if len(desks) != 1:
            return None, None
        [desk] = desks.values()
        return desk, (waiting[0] if len(waiting) == 1 else None)

    async def elicit(self, context: Any, params: Any) -> Any:
        import mcp_types

        desk, request = self._whose()
        if desk is None:
            _log.warning(
                "MCP server %s asked a question while no single run's call was in flight; declined",
                self.label,
            )
            return mcp_types.ElicitResult(action="decline")
        if getattr(params, "mode", "form") == "url":
            message, schema = f"{params.message}\n{params.url}", None
        else:
            message, schema = params.message, dict(params.requested_schema or {})
        call_id = request.call_id if request is not None else None
        verdict = await desk.elicit(self.label, call_id, message, schema)
        if isinstance(verdict, Accept):
            content = verdict.data if schema is not None else None
            return mcp_types.ElicitResult(action="accept", content=content)
        if isinstance(verdict, Defer) and request is not None:
            request.park()  # the call stops here and waits, parked, for a verdict
        if isinstance(verdict, Defer | Cancel):  # a question tied to no call cannot park
            return mcp_types.ElicitResult(action="cancel")
        assert isinstance(verdict, Decline)
        return mcp_types.ElicitResult(action="decline")

    async def sample(self, context: Any, params: Any) -> Any:
        import mcp_types

        desk, request = self._whose()
        if desk is None:
            return mcp_types.ErrorData(
                code=mcp_types.INVALID_REQUEST,
                message="no single run of this client is waiting on this server",
            )
        sampling = Sampling(
            [_message(message) for message in params.messages],
            params.system_prompt,
            params.max_tokens,
            self.label,
            request.call_id if request is not None else None,
        )
        try:
            text, model = await desk.sample(
                sampling, answer=self._sampling, approve=self._approve_sampling
            )
        except SamplingRefused as refused:
            return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=str(refused))
        return mcp_types.CreateMessageResult(
            role="assistant",
            content=mcp_types.TextContent(type="text", text=text),
            model=model,
            stop_reason="endTurn",
        )


def _message(message: Any) -> dict[str, Any]:
    parts = []
    for block in message.content_as_list:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]")
    return {"role": message.role, "content": "\n".join(parts)}

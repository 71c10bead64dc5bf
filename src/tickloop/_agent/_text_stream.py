"""`Agent.stream`: a run whose final answer is read as the model writes it.

Only native tool calling (`_turns`) streams a final answer as text; the session runs
the loop with an `on_text` reader, and this module hands its chunks to the caller's
`async with` block, where the run's task lives.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any

import trio

from .._errors import ConfigurationError
from ._budgeting import check_budget, check_carried, check_pricing
from ._conversation import check_session_options, keeps_state, maybe_holding
from ._loop import AgentConfig, RunResult
from ._session import RunSession

__all__ = ["TextStream", "open_stream"]


class TextStream:
    """A run whose final answer can be read as it arrives (`Agent.stream`).

    `text()` yields the final answer's text chunks as the model writes them and ends when
    the run does; `result` is the `RunResult` once the run has finished. A run that failed
    raises its error from `text()` (at the end of the chunks) or, when nobody read it
    there, when the `async with` block is left.
    """

    def __init__(self, receive: trio.MemoryReceiveChannel[str]) -> None:
        self._receive = receive
        self._result: RunResult | None = None
        self._error: BaseException | None = None
        self._delivered = False
        self._finished = False

    def text(self) -> _Chunks:
        """The final answer's text, chunk by chunk (an async iterator of `str`)."""
        return _Chunks(self)

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def result(self) -> RunResult:
        if not self._finished:
            raise RuntimeError(
                "the run has not finished: read text() to its end or leave the `async with` "
                "block first"
            )
        if self._error is not None:
            self._delivered = True
            raise self._error
        assert self._result is not None
        return self._result

    async def _run(self, run: Callable[[Callable[[str], Any]], Any], send: Any) -> None:
        async with send:
            try:
                self._result = await run(send.send_nowait)
            except Exception as error:
                self._error = error
            finally:
                self._finished = True


class _Chunks:
    """The iterator behind `TextStream.text()` (a class, not an async generator, so that
    a reader who stops early leaves nothing to finalize)."""

    def __init__(self, stream: TextStream) -> None:
        self._stream = stream

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> str:
        stream = self._stream
        try:
            return await stream._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            pass
        if stream._error is not None and not stream._delivered:
            stream._delivered = True
            raise stream._error
        raise StopAsyncIteration


class _StreamScope:
    """`async with agent.stream(...) as stream`: the run's task lives in this block."""

    def __init__(
        self,
        open_for_run: Callable[[], AbstractAsyncContextManager[AgentConfig]],
        protocol: str,
        input: Any,
        options: dict[str, Any],
    ) -> None:
        if protocol != "tools":
            raise ConfigurationError(
                "agent.stream() streams the final answer of protocol='tools'; this agent "
                f"uses protocol={protocol!r}"
            )
        self._open_for_run = open_for_run
        self._input = input
        self._options = options
        self._manager: Any = None

    async def __aenter__(self) -> TextStream:
        self._manager = self._open()
        stream: TextStream = await self._manager.__aenter__()
        return stream

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        handled: bool | None = await self._manager.__aexit__(kind, error, traceback)
        return handled

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[TextStream]:
        async with self._open_for_run() as config:
            async with self._open_bound(config) as stream:
                yield stream

    @asynccontextmanager
    async def _open_bound(self, config: AgentConfig) -> AsyncIterator[TextStream]:
        options = dict(self._options)
        on_event = options.pop("on_event", None) or config.on_event
        messages = options.pop("messages", None)
        run_id = options.pop("run_id", None)
        budget = check_budget(options.pop("budget", None))
        carried = check_carried(options.pop("usage", None), messages)
        if carried is not None:
            config = dataclasses.replace(config, carried_usage=carried)
        if budget is not None:  # this run's own budget (PROTOCOL §12)
            check_pricing(config.pricing, budget, config.model)
            config = dataclasses.replace(config, budget=budget)
        session_id = options.pop("session", None)
        keep_state = options.pop("keep_state", None)
        busy = options.pop("session_busy", "wait")
        timeout = options.pop("session_timeout", 60)
        if options:  # checked before the run is claimed, so a typo strands nothing
            raise TypeError(f"agent.stream() got unexpected options: {', '.join(options)}")
        check_session_options(config.store, session_id, keep_state, busy, timeout)
        keep = keeps_state(keep_state, config.keep_state, config.protocol.name)
        async with maybe_holding(config.store, session_id, busy, timeout) as held:
            session = RunSession.new(
                config, self._input, messages, on_event, run_id, session=held, keep_state=keep
            )
            async with self._streaming(session) as stream:
                yield stream

    @asynccontextmanager
    async def _streaming(self, session: RunSession) -> AsyncIterator[TextStream]:
        send, receive = trio.open_memory_channel[str](math.inf)
        stream = TextStream(receive)

        def run(on_text: Callable[[str], Any]) -> Any:
            return session.execute(on_text=on_text)

        failure: BaseException | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream._run, run, send)
            try:
                yield stream
            except BaseException as error:
                # The caller's block failed: stop the run, then re-raise the caller's own
                # error outside the nursery, so it is not wrapped in an exception group.
                failure = error
                nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
        if stream._error is not None and not stream._delivered:
            stream._delivered = True
            raise stream._error


def open_stream(
    open_for_run: Callable[[], AbstractAsyncContextManager[AgentConfig]],
    protocol: str,
    input: Any = None,
    **options: Any,
) -> _StreamScope:
    """`Agent.stream`: `open_for_run` gives the run's configuration (its tool sources
    open); options are `run_async`'s (`messages`, `on_event`, `run_id`)."""
    return _StreamScope(open_for_run, protocol, input, options)

"""Server-sent events, parsed incrementally as the bytes arrive.

Both providers stream their answers as `text/event-stream`, and the network splits that
stream wherever it likes: in the middle of a line, between a `\\r` and its `\\n`, inside
a multi-byte character. The decoder follows the WHATWG "event stream interpretation"
rules so that no split can change what is dispatched, and so that servers that differ in
small ways (CRLF line ends, `: keep-alive` comments, `data:` without a space) all parse.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

__all__ = ["SSEDecoder", "SSEEvent", "aiter_sse"]

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event.

    `id` is the stream's last event id at the time of dispatch (the spec carries it over
    from earlier events); `retry` is the reconnection time in milliseconds when this
    event's block set one.
    """

    event: str = "message"
    data: str = ""
    id: str = ""
    retry: int | None = None


class SSEDecoder:
    """Feed it text in any pieces; it returns the events each piece completes.

    An event is only dispatched by the blank line that ends it: a stream that stops in
    the middle of an event drops that event, as the spec says, rather than handing a
    truncated `data:` payload to a JSON parser.
    """

    def __init__(self) -> None:
        self._partial = ""  # text after the last line end, waiting for the rest of its line
        self._skip_lf = False  # the last piece ended in "\r": a "\n" opening the next is its pair
        self._started = False  # a byte-order mark is only stripped at the very start
        self._event = ""
        self._data: list[str] = []
        self._last_id = ""
        self._retry: int | None = None

    def feed(self, text: str) -> list[SSEEvent]:
        if not text:
            return []
        if not self._started:
            self._started = True
            text = text.removeprefix("\ufeff")
        if self._skip_lf:
            self._skip_lf = False
            text = text.removeprefix("\n")
        buffer = self._partial + text
        events: list[SSEEvent] = []
        start = 0
        for match in _LINE_END.finditer(buffer):
            if match.group() == "\r" and match.end() == len(buffer):
                self._skip_lf = True
            event = self._line(buffer[start : match.start()])
            if event is not None:
                events.append(event)
            start = match.end()
        self._partial = buffer[start:]
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: servers send these to keep idle connections open
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        event = None
        if self._data:
            event = SSEEvent(
                event=self._event or "message",
                data="\n".join(self._data),
                id=self._last_id,
                retry=self._retry,
            )
        self._event = ""
        self._data = []
        self._retry = None
        return event


async def aiter_sse(response: httpx.Response) -> AsyncIterator[SSEEvent]:
    """The events of a streamed response, each as soon as its blank line arrives.

    The body is decoded as UTF-8 whatever the Content-Type says (the SSE spec fixes the
    encoding), incrementally, so a character split across network chunks survives.
    """
    decoder = SSEDecoder()
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    async for chunk in response.aiter_bytes():
        for event in decoder.feed(utf8.decode(chunk)):
            yield event
    for event in decoder.feed(utf8.decode(b"", final=True)):
        yield event

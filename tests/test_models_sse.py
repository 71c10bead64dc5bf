"""Tests of the server-sent-events decoder both model clients stream through.

The network splits a stream anywhere, so the central property is that no split changes
what is dispatched: checked at every split position of a stream that uses every feature,
and with random splits by hypothesis.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from itertools import pairwise

import httpx
import trio
from hypothesis import given
from hypothesis import strategies as st

from tickloop._models._sse import SSEDecoder, SSEEvent, aiter_sse

# Every feature at once: comments, an event type, multi-line data, CRLF and CR line ends,
# an id that persists, retry, a field with no colon, a value whose second space is data.
RICH = (
    ": keep-alive\r\n"
    "\r\n"
    "event: message_start\r\n"
    'data: {"a": 1}\r\n'
    "\r\n"
    "id: 7\r"
    "data: line one\r"
    "data:line two\r"
    "retry: 1500\r"
    "\r"
    ": another comment\n"
    "data\n"
    "\n"
    "data:  two spaces\n"
    "unknown: ignored\n"
    "\n"
    "event: done\n"
    "data: é ☃ 😀\n"
    "\n"
)
RICH_EVENTS = [
    SSEEvent(event="message_start", data='{"a": 1}'),
    SSEEvent(data="line one\nline two", id="7", retry=1500),
    SSEEvent(data="", id="7"),
    SSEEvent(data=" two spaces", id="7"),
    SSEEvent(event="done", data="é ☃ 😀", id="7"),
]


def decode(*pieces: str) -> list[SSEEvent]:
    decoder = SSEDecoder()
    return [event for piece in pieces for event in decoder.feed(piece)]


def test_rich_stream_in_one_piece() -> None:
    assert decode(RICH) == RICH_EVENTS


def test_every_split_position_gives_the_same_events() -> None:
    for cut in range(len(RICH) + 1):
        assert decode(RICH[:cut], RICH[cut:]) == RICH_EVENTS, cut


def test_one_character_at_a_time() -> None:
    assert decode(*RICH) == RICH_EVENTS


def test_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    # Had "\r" and "\n" counted as two line ends, the blank line would dispatch early
    # and the second data line would start a new event.
    assert decode("data: a\r", "\ndata: b\r\n\r\n") == [SSEEvent(data="a\nb")]


def test_cr_lf_and_crlf_streams_parse_alike() -> None:
    lf = "event: x\ndata: 1\ndata: 2\n\n"
    expected = [SSEEvent(event="x", data="1\n2")]
    assert decode(lf) == expected
    assert decode(lf.replace("\n", "\r")) == expected
    assert decode(lf.replace("\n", "\r\n")) == expected


def test_keep_alive_comments_dispatch_nothing() -> None:
    assert decode(": keep-alive\n\n: ping\n\n") == []
    assert decode(": keep-alive\ndata: x\n: more\n\n") == [SSEEvent(data="x")]


def test_only_one_leading_space_is_stripped() -> None:
    assert decode("data:x\n\n", "data: x\n\n", "data:  x\n\n") == [
        SSEEvent(data="x"),
        SSEEvent(data="x"),
        SSEEvent(data=" x"),
    ]


def test_a_colon_inside_the_value_is_kept() -> None:
    assert decode('data: {"k": "a:b"}\n\n') == [SSEEvent(data='{"k": "a:b"}')]


def test_field_name_without_colon_has_empty_value() -> None:
    assert decode("data\ndata\n\n") == [SSEEvent(data="\n")]
    assert decode("event\ndata: x\n\n") == [SSEEvent(event="message", data="x")]


def test_blank_line_without_data_dispatches_nothing_and_resets_event_type() -> None:
    assert decode("event: lost\n\ndata: x\n\n") == [SSEEvent(data="x")]


def test_event_type_does_not_leak_into_the_next_event() -> None:
    assert decode("event: a\ndata: 1\n\ndata: 2\n\n") == [
        SSEEvent(event="a", data="1"),
        SSEEvent(data="2"),
    ]


def test_id_persists_and_an_id_with_nul_is_ignored() -> None:
    events = decode("id: 1\ndata: a\n\ndata: b\n\nid: x\0y\ndata: c\n\nid\ndata: d\n\n")
    assert [event.id for event in events] == ["1", "1", "1", ""]


def test_retry_must_be_digits_and_belongs_to_its_event() -> None:
    events = decode("retry: 10x\ndata: a\n\nretry: 250\ndata: b\n\ndata: c\n\n")
    assert [event.retry for event in events] == [None, 250, None]


def test_byte_order_mark_is_stripped_only_at_the_start() -> None:
    assert decode("\ufeffdata: x\n\n") == [SSEEvent(data="x")]
    assert decode("\ufeff", "data: x\n\n") == [SSEEvent(data="x")]
    # Later, U+FEFF is part of a field name, so this line is an unknown field.
    assert decode("data: x\n\n", "\ufeffdata: y\n\n") == [SSEEvent(data="x")]


def test_an_unfinished_event_is_not_dispatched() -> None:
    decoder = SSEDecoder()
    assert decoder.feed('data: {"partial": tr') == []
    assert decoder.feed("ue}\n") == []
    assert decoder.feed("\n") == [SSEEvent(data='{"partial": true}')]


def test_empty_feeds_change_nothing() -> None:
    assert decode("", "data: a\r", "", "\n\n", "") == [SSEEvent(data="a")]


def stream_text(events: list[tuple[str | None, list[str]]], line_end: str) -> str:
    out = []
    for kind, lines in events:
        if kind is not None:
            out.append(f"event: {kind}{line_end}")
        out.extend(f"data: {line}{line_end}" for line in lines)
        out.append(line_end)
    return "".join(out)


line_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=12
)


@given(
    events=st.lists(
        st.tuples(
            st.none() | st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
            st.lists(line_text, min_size=1, max_size=3),
        ),
        max_size=5,
    ),
    line_end=st.sampled_from(["\n", "\r", "\r\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_random_splits_never_change_the_events(
    events: list[tuple[str | None, list[str]]], line_end: str, cuts: list[int]
) -> None:
    text = stream_text(events, line_end)
    bounds = sorted({0, len(text), *(min(cut, len(text)) for cut in cuts)})
    pieces = [text[a:b] for a, b in pairwise(bounds)]
    expected = [SSEEvent(event=kind or "message", data="\n".join(lines)) for kind, lines in events]
    assert decode(text) == expected
    assert decode(*pieces) == expected


# -- aiter_sse over an httpx response ---------------------------------------------------------


def read_events(chunks: list[bytes], content_type: str = "text/event-stream") -> list[SSEEvent]:
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": content_type}, content=body())

    async def main() -> list[SSEEvent]:
        async with (
            httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client,
            client.stream("GET", "http://test/events") as response,
        ):
            return [event async for event in aiter_sse(response)]

    return trio.run(main)


def test_aiter_sse_reassembles_network_chunks() -> None:
    data = RICH.encode()
    chunks = [data[i : i + 3] for i in range(0, len(data), 3)]
    assert read_events(chunks) == RICH_EVENTS


def test_aiter_sse_keeps_a_character_split_across_chunks() -> None:
    data = "data: naïve 😀\n\n".encode()
    for cut in range(len(data) + 1):
        assert read_events([data[:cut], data[cut:]]) == [SSEEvent(data="naïve 😀")], cut


def test_aiter_sse_decodes_utf8_whatever_the_declared_charset() -> None:
    data = "data: café\n\n".encode()
    assert read_events([data], "text/event-stream; charset=latin-1") == [SSEEvent(data="café")]


def test_aiter_sse_drops_an_event_cut_off_by_the_end_of_the_stream() -> None:
    assert read_events([b"data: whole\n\n", b'data: {"cut": ']) == [SSEEvent(data="whole")]

"""Tests for the streamed-solution parser and the resilient tool-argument parser.

The streaming tests feed the same texts in every way a transport could split them, because
the automaton's state (inside a string, an escape, a number, a literal) must survive any
chunk boundary; and they check *when* a call is emitted, since starting calls while the
model still writes is the point of streaming (PROTOCOL §8).
"""

from __future__ import annotations

import itertools
import json
import logging
import operator
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickloop._json import _stream as _jsonstream
from tickloop._json._stream import (
    SolutionStream,
    StreamOutcome,
    resilient_json_parse,
    resilient_json_parse_with_strategy,
)

# -- helpers ---------------------------------------------------------------------------


def build_solution(
    calls: list[Any],
    output: Any = None,
    *,
    output_first: bool = False,
    prefix: str = "",
    suffix: str = "",
    sep: str = ", ",
) -> tuple[str, list[int]]:
    """Serialise a solution and return the offset of each call's closing character."""
    parts: list[str] = [prefix, "{"]
    out_part = '"output": ' + json.dumps(output, ensure_ascii=False)
    if output_first:
        parts.append(out_part + ", ")
    parts.append('"calls": [')
    ends: list[int] = []
    for k, call in enumerate(calls):
        if k:
            parts.append(sep)
        parts.append(json.dumps(call, ensure_ascii=False))
        ends.append(sum(len(p) for p in parts) - 1)
    parts.append("]")
    if not output_first:
        parts.append(", " + out_part)
    parts.append("}")
    parts.append(suffix)
    return "".join(parts), ends


def split_at(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(set(cuts)), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def run(chunks: list[str]) -> tuple[list[Any], StreamOutcome, list[list[Any]]]:
    stream = SolutionStream()
    per_feed = [stream.feed(chunk) for chunk in chunks]
    emitted = [call for batch in per_feed for call in batch]
    return emitted, stream.close(), per_feed


def fixed_chunks(text: str, size: int, offset: int = 0) -> list[str]:
    chunks = [text[:offset]] if offset else []
    chunks += [text[i : i + size] for i in range(offset, len(text), size)]
    return chunks


def assert_emitted_on_time(
    chunks: list[str], per_feed: list[list[Any]], ends: list[int], calls: list[Any]
) -> None:
    """Each call must come out of the feed() whose chunk holds its closing character."""
    expected: list[list[Any]] = [[] for _ in chunks]
    start = 0
    k = 0
    for index, chunk in enumerate(chunks):
        stop = start + len(chunk)
        while k < len(ends) and ends[k] < stop:
            expected[index].append(calls[k])
            k += 1
        start = stop
    assert per_feed == expected


TRICKY_CALLS: list[Any] = [
    {"_tool": "fetch", "url": "https://example.com/?q={x}&r=[y]", "_id": "c1.1"},
    {"_tool": "say", "text": 'quote " backslash \\ slash / tab \t newline \n', "n": -12.5e-3},
    {"_tool": "say", "text": "dagger † and escaped \u2020 and emoji 😀", "ok": True, "no": None},
    {"_tool": "nest", "calls": [{"_tool": "inner"}], "deep": {"a": [[], {}, [{"b": "}"}]]}},
    {"_tool": "nums", "values": [0, -0, 1e10, 3.25, -7, 123456789012345678901234567890]},
    {"_tool": "empty", "s": "", "o": {}, "a": [], "f": False},
]
TRICKY_OUTPUT: Any = {"calls": ["not", "emitted"], "text": "{[]}", "n": 1}


def tricky_text() -> tuple[str, list[int]]:
    return build_solution(TRICKY_CALLS, TRICKY_OUTPUT)


def expected_solution() -> dict[str, Any]:
    return {"calls": TRICKY_CALLS, "output": TRICKY_OUTPUT}


# -- streaming: chunkings --------------------------------------------------------------


def test_whole_text_in_one_chunk() -> None:
    text, _ = tricky_text()
    emitted, outcome, _ = run([text])
    assert emitted == TRICKY_CALLS
    assert outcome == StreamOutcome(expected_solution(), None, len(TRICKY_CALLS))


@pytest.mark.parametrize("size", [1, 2, 3, 7])
@pytest.mark.parametrize("offset", [0, 1])
def test_fixed_size_chunks(size: int, offset: int) -> None:
    text, ends = tricky_text()
    chunks = fixed_chunks(text, size, offset)
    emitted, outcome, per_feed = run(chunks)
    assert emitted == TRICKY_CALLS
    assert outcome.solution == expected_solution()
    assert outcome.error is None
    assert outcome.calls == len(TRICKY_CALLS)
    assert_emitted_on_time(chunks, per_feed, ends, TRICKY_CALLS)


def test_every_two_piece_split() -> None:
    text, ends = tricky_text()
    for cut in range(len(text) + 1):
        chunks = split_at(text, [cut])
        emitted, outcome, per_feed = run(chunks)
        assert emitted == TRICKY_CALLS, cut
        assert outcome.solution == expected_solution(), cut
        assert_emitted_on_time(chunks, per_feed, ends, TRICKY_CALLS)


def test_random_chunkings() -> None:
    text, ends = tricky_text()
    rng = random.Random(20240501)
    for _ in range(300):
        cuts = [rng.randrange(len(text) + 1) for _ in range(rng.randrange(1, 40))]
        chunks = split_at(text, cuts)
        emitted, outcome, per_feed = run(chunks)
        assert emitted == TRICKY_CALLS
        assert outcome.solution == expected_solution()
        assert_emitted_on_time(chunks, per_feed, ends, TRICKY_CALLS)


def test_empty_chunks_are_harmless() -> None:
    text, _ = tricky_text()
    chunks = [piece for ch in text for piece in ("", ch, "")]
    emitted, outcome, _ = run(chunks)
    assert emitted == TRICKY_CALLS
    assert outcome.solution == expected_solution()


def test_call_emitted_in_the_feed_of_its_closing_brace() -> None:
    stream = SolutionStream()
    assert stream.feed('{"calls": [{"_tool": "a", "x": [1, {"y": 2') == []
    assert stream.feed("}]") == []
    assert stream.feed("}") == [{"_tool": "a", "x": [1, {"y": 2}]}]
    assert stream.feed(', {"_tool": "b"}') == [{"_tool": "b"}]
    assert stream.feed("]") == []
    assert stream.feed(', "output": null}') == []
    assert stream.close().solution == {
        "calls": [{"_tool": "a", "x": [1, {"y": 2}]}, {"_tool": "b"}],
        "output": None,
    }


def test_closing_brace_and_comma_in_separate_chunks() -> None:
    stream = SolutionStream()
    assert stream.feed('{"calls": [{"a": 1') == []
    assert stream.feed("}") == [{"a": 1}]
    assert stream.feed(",") == []
    assert stream.feed('{"b": 2}') == [{"b": 2}]
    assert stream.feed("]}") == []
    assert stream.close().error is None


# -- streaming: structure --------------------------------------------------------------


def test_nested_calls_keys_are_not_emitted() -> None:
    solution = {
        "output": {"calls": [{"_tool": "fake"}]},
        "calls": [{"_tool": "real", "calls": [{"_tool": "inner"}], "p": {"calls": [1]}}],
    }
    text = json.dumps(solution)
    for chunks in ([text], list(text)):
        emitted, outcome, _ = run(chunks)
        assert emitted == solution["calls"]
        assert outcome.solution == solution
        assert outcome.calls == 1


def test_output_before_calls_and_pretty_printing() -> None:
    text, ends = build_solution(TRICKY_CALLS, {"answer": 42}, output_first=True, sep=",\n   ")
    emitted, outcome, per_feed = run(list(text))
    assert emitted == TRICKY_CALLS
    assert outcome.solution == {"output": {"answer": 42}, "calls": TRICKY_CALLS}
    assert_emitted_on_time(list(text), per_feed, ends, TRICKY_CALLS)


def test_indented_solution_with_extra_keys() -> None:
    solution = {"thoughts": "first {", "calls": TRICKY_CALLS, "output": None, "z": [1]}
    text = json.dumps(solution, indent=4)
    emitted, outcome, _ = run(fixed_chunks(text, 5))
    assert emitted == TRICKY_CALLS
    assert outcome.solution == solution


def test_ascii_escaped_text() -> None:
    text = json.dumps({"calls": TRICKY_CALLS, "output": "‡"}, ensure_ascii=True)
    assert "\\u2020" in text
    emitted, outcome, _ = run(list(text))
    assert emitted == TRICKY_CALLS
    assert outcome.solution == {"calls": TRICKY_CALLS, "output": "‡"}


def test_unicode_escape_split_at_every_position() -> None:
    text = '{"calls": [{"s": "a\\u2020b\\ud83d\\ude00"}], "output": null}'
    for cut in range(len(text) + 1):
        emitted, outcome, _ = run(split_at(text, [cut]))
        assert emitted == [{"s": "a†b😀"}]
        assert outcome.error is None


def test_non_object_call_items_are_emitted_as_parsed() -> None:
    text = '{"calls": [1, "two", [3], null, true, {"_tool": "x"}, -4.5e1], "output": null}'
    stream = SolutionStream()
    emitted = [call for ch in text for call in stream.feed(ch)]
    assert emitted == [1, "two", [3], None, True, {"_tool": "x"}, -45.0]
    assert stream.close().calls == 7


def test_a_number_item_is_emitted_when_its_delimiter_arrives() -> None:
    stream = SolutionStream()
    assert stream.feed('{"calls": [12') == []
    assert stream.feed("3") == []
    assert stream.feed(" ") == [123]


def test_empty_calls_and_calls_not_an_array() -> None:
    for text, calls in (('{"calls": [], "output": 1}', []), ('{"calls": null}', None)):
        emitted, outcome, _ = run(list(text))
        assert emitted == []
        assert outcome.solution == {"calls": calls, **({"output": 1} if calls == [] else {})}


def test_escaped_key_named_calls_counts() -> None:
    emitted, outcome, _ = run(['{"\\u0063alls": [{"a": 1}]}'])
    assert emitted == [{"a": 1}]
    assert outcome.solution == {"calls": [{"a": 1}]}


# -- streaming: text around the JSON ---------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "suffix"),
    [
        ("Here is my plan:\n\n", "\n\nLet me know."),
        ("```json\n", "\n```"),
        ("```JSON\n", "\n```\n"),
        ("```\n", "```"),
        ("Sure! [see below]\n```json\n", "\n```\nDone {really}."),
        ("  \n\t", "  \n"),
    ],
)
def test_text_and_fences_around_the_solution(prefix: str, suffix: str) -> None:
    text, ends = build_solution(TRICKY_CALLS, TRICKY_OUTPUT, prefix=prefix, suffix=suffix)
    for chunks in ([text], list(text), fixed_chunks(text, 3, 1)):
        emitted, outcome, per_feed = run(chunks)
        assert emitted == TRICKY_CALLS
        assert outcome == StreamOutcome(expected_solution(), None, len(TRICKY_CALLS))
        assert_emitted_on_time(chunks, per_feed, ends, TRICKY_CALLS)


@pytest.mark.parametrize("text", ["", "   ", "I cannot help with that.", "```json\n```"])
def test_no_solution(text: str) -> None:
    _, outcome, _ = run([text])
    assert outcome == StreamOutcome(None, "no solution in the response", 0)


@pytest.mark.parametrize(
    "text", ['[{"calls": []}]', "```json\n[1, 2]\n```", "42", '"calls"', "null", "  [ ]"]
)
def test_not_an_object(text: str) -> None:
    for chunks in ([text], list(text)):
        emitted, outcome, _ = run(chunks)
        assert emitted == []
        assert outcome == StreamOutcome(None, "the solution is not a JSON object", 0)


# -- streaming: truncation and faults --------------------------------------------------


def test_truncated_everywhere() -> None:
    text, ends = tricky_text()
    for cut in range(len(text)):
        prefix = text[:cut]
        for chunks in ([prefix], fixed_chunks(prefix, 4)):
            emitted, outcome, _ = run(chunks)
            complete = [call for call, end in zip(TRICKY_CALLS, ends, strict=True) if end < cut]
            # a number item only closes at its delimiter; none of these calls is a number
            assert emitted == complete
            assert outcome.solution is None
            assert outcome.calls == len(complete)
            assert outcome.error is not None
            if cut == 0:
                assert outcome.error == "no solution in the response"
            else:
                assert outcome.error.startswith(
                    f"the solution was cut off after {cut} characters"
                ), outcome.error


def test_truncation_message_names_the_place() -> None:
    text, ends = tricky_text()
    cut = ends[2] + 3
    _, outcome, _ = run([text[:cut]])
    assert outcome.error == (
        f"the solution was cut off after {cut} characters (inside 'calls', 3 calls complete)"
    )
    text = '{"calls": [{"a": 1}], "output": {"x": "unfini'
    _, outcome, _ = run([text])
    assert outcome.error == (
        f"the solution was cut off after {len(text)} characters (inside 'output', 1 call complete)"
    )
    _, outcome, _ = run(['{"calls": [], "out'])
    assert outcome.error == "the solution was cut off after 18 characters (0 calls complete)"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (' {"_tool": "c"}', "expected ',' or ']'"),
        (", x", "expected a value"),
        (", ]", "trailing comma"),
        (', {"a": 1,}', "trailing comma"),
        (', {"a" 1}', "expected ':'"),
        (", {'a': 1}", "expected a key in double quotes"),
        (', {"a": tru}', "invalid literal"),
        (', {"a": 01}', "invalid number"),
        (', {"a": 1.}', "invalid number"),
        (', {"a": "\\x"}', "invalid escape"),
        (', {"a": "\\u12G4"}', "invalid \\u escape"),
        (', {"a": "line\nbreak"}', "control character"),
        (', {"a": NaN}', "expected a value"),
        (', {"a": 1]', "expected ',' or '}'"),
    ],
)
def test_invalid_json_mid_stream(bad: str, message: str) -> None:
    head = '{"calls": [{"_tool": "a"}, {"_tool": "b"}'
    tail = ', {"_tool": "after"}], "output": null}'
    text = head + bad + tail
    for chunks in ([text], list(text), fixed_chunks(text, 6)):
        emitted, outcome, _ = run(chunks)
        assert emitted == [{"_tool": "a"}, {"_tool": "b"}]
        assert outcome.solution is None
        assert outcome.calls == 2
        assert outcome.error is not None
        assert outcome.error.startswith("invalid JSON at character "), outcome.error
        assert message in outcome.error


def test_invalid_json_position_is_exact() -> None:
    text = '{"calls": [{"a": 1} {"b": 2}]}'
    _, outcome, _ = run([text])
    assert outcome.error == "invalid JSON at character 20: expected ',' or ']'"
    assert text[20] == "{"
    text = 'Plan:\n{"calls": [{"a": 1}], "output": nul!}'
    _, outcome, _ = run(list(text))
    position = text.index("!")
    assert outcome.error == (
        f"invalid JSON at character {position}: invalid literal (expected 'null')"
    )


def test_fault_is_visible_before_close_and_later_feeds_emit_nothing() -> None:
    stream = SolutionStream()
    assert stream.feed('{"calls": [{"a": 1}, ?') == [{"a": 1}]
    assert stream.error is not None
    assert stream.feed('{"b": 2}]}') == []
    assert stream.close().calls == 1


def test_call_whose_slice_fails_json_loads_stops_emission() -> None:
    huge = "9" * 5000  # over Python's int-conversion digit limit: json.loads refuses it
    text = '{"calls": [{"a": 1}, {"n": ' + huge + '}, {"c": 3}], "output": null}'
    emitted, outcome, _ = run(fixed_chunks(text, 64))
    assert emitted == [{"a": 1}]
    assert outcome.solution is None
    assert outcome.calls == 1
    assert outcome.error is not None and outcome.error.startswith("invalid JSON at character ")


def test_a_duplicated_key_after_the_calls_is_refused_where_it_stands() -> None:
    """The calls are not decoded again at the close, but the rest of the solution is,
    and a fault there is still the solution's."""
    text = '{"calls": [{"_tool": "t", "n": 1}], "output": {"a": 1, "a": 2}}'
    emitted, outcome, _ = run([text])
    assert emitted == [{"_tool": "t", "n": 1}]
    assert outcome.solution is None
    assert outcome.error is not None and "duplicate key 'a'" in outcome.error
    assert outcome.error.startswith("invalid JSON")


def test_feed_after_close_raises_and_close_is_idempotent() -> None:
    stream = SolutionStream()
    stream.feed('{"calls": []}')
    first = stream.close()
    assert stream.close() is first
    with pytest.raises(RuntimeError):
        stream.feed("x")


def test_each_call_is_parsed_once_on_its_own_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = [{"_tool": "t", "i": i, "text": "x" * 50} for i in range(40)]
    text = json.dumps({"calls": calls, "output": None})
    parsed: list[str] = []
    real_loads = json.loads

    def counting_loads(s: str, *args: Any, **kwargs: Any) -> Any:
        parsed.append(s)
        return real_loads(s, *args, **kwargs)

    real_decode = _jsonstream._decode_refusing_duplicates

    def counting_decode(s: str) -> Any:
        parsed.append(s)
        return real_decode(s)

    monkeypatch.setattr(_jsonstream.json, "loads", counting_loads)
    monkeypatch.setattr(_jsonstream, "_decode_refusing_duplicates", counting_decode)
    emitted, _, _ = run(list(text))
    assert emitted == calls
    for call in calls:
        assert parsed.count(json.dumps(call)) == 1
    # calls once each, the two top-level keys, and at the close the object without them
    assert sum(len(s) for s in parsed) <= len(text) + 60


# -- streaming: property ---------------------------------------------------------------

_keys = st.sampled_from(["calls", "output", "_tool", "{", "}", '"', "\\", "[", ","]) | st.text(
    max_size=6
)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_values = st.recursive(
    _scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(_keys, kids, max_size=4),
    max_leaves=12,
)
_calls = st.lists(st.dictionaries(_keys, _values, max_size=5), max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    calls=_calls,
    output=_values,
    extra=st.dictionaries(
        _keys.filter(lambda k: k not in ("calls", "output")), _values, max_size=2
    ),
    order=st.randoms(use_true_random=False),
    style=st.sampled_from(
        [
            {},
            {"ensure_ascii": False},
            {"indent": 2},
            {"separators": (",", ":")},
            {"indent": "\t", "ensure_ascii": False},
        ]
    ),
    data=st.data(),
)
def test_property_random_solutions_random_chunks(
    calls: list[dict[str, Any]],
    output: Any,
    extra: dict[str, Any],
    order: random.Random,
    style: dict[str, Any],
    data: st.DataObject,
) -> None:
    items: list[tuple[str, Any]] = [("calls", calls), ("output", output), *extra.items()]
    order.shuffle(items)
    solution = dict(items)
    text = json.dumps(solution, **style)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(text)), max_size=30))
    emitted, outcome, _ = run(split_at(text, cuts))
    assert emitted == solution["calls"]
    assert outcome.error is None
    assert outcome.solution == solution
    assert outcome.calls == len(calls)
    # The solution holds the very calls emitted, not copies decoded again at the close.
    assert outcome.solution is not None
    assert all(map(operator.is_, outcome.solution["calls"], emitted))


# -- resilient argument parsing --------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value", "strategy"),
    [
        ('{"a": 1}', {"a": 1}, "direct"),
        ('  [1, {"b": null}]\n', [1, {"b": None}], "direct"),
        ('```json\n{"a": 1}\n```', {"a": 1}, "fence"),
        ('```JSON\n{"a": 1}\n```', {"a": 1}, "fence"),
        ('```\n{"a": 1}\n```', {"a": 1}, "fence"),
        ('```Json {"a": 1}```', {"a": 1}, "fence"),
        ('Here you go:\n```json\n{"a": 1}\n```\nHope it helps.', {"a": 1}, "fence"),
        ('```json\n{"a": 1}', {"a": 1}, "fence"),
        ('The arguments are {"a": 1} as requested.', {"a": 1}, "block"),
        ('use {braces} like {"a": "}{"} this', {"a": "}{"}, "block"),
        ('first {not: json} then {"ok": true}', {"ok": True}, "block"),
        ("list: [1, 2, 3] done", [1, 2, 3], "block"),
        ('{"a": 1, "b": [1, 2,],}', {"a": 1, "b": [1, 2]}, "trailing-commas"),
        ("[1, 2, \n ]", [1, 2], "trailing-commas"),
        ('```json\n{"a": [1,],}\n```', {"a": [1]}, "fence+trailing-commas"),
        ('see ```json\nargs: {"a": 1}\n``` ok', {"a": 1}, "fence+block"),
        ('```\nnote {"a": 1,} end\n```', {"a": 1}, "fence+block+trailing-commas"),
        ('prose {"a": [1, 2,], } more', {"a": [1, 2]}, "block+trailing-commas"),
        ('{"a": ",}"}', {"a": ",}"}, "direct"),
        ('{"code": "```py\\nx = 1\\n```"}', {"code": "```py\nx = 1\n```"}, "direct"),
    ],
)
def test_resilient_strategies(raw: str, value: Any, strategy: str) -> None:
    assert resilient_json_parse_with_strategy(raw) == (value, strategy)
    assert resilient_json_parse(raw) == value


def test_comma_brace_inside_a_string_is_untouched() -> None:
    assert resilient_json_parse('{"a": ",}", "b": [",]",],}') == {"a": ",}", "b": [",]"]}
    assert resilient_json_parse('text {"a": "x,}", } end') == {"a": "x,}"}
    assert resilient_json_parse('{"a": "say \\",}\\" ok",}') == {"a": 'say ",}" ok'}


def test_braces_inside_strings_do_not_count() -> None:
    raw = 'Call with {"pattern": "}}}{{[", "n": 2} please'
    assert resilient_json_parse_with_strategy(raw) == ({"pattern": "}}}{{[", "n": 2}, "block")
    raw = 'x {"q": "a \\"}\\" b"} y'
    assert resilient_json_parse(raw) == {"q": 'a "}" b'}


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "no json here",
        "{",
        "{not json}",
        '{"a": 1',
        "42",
        '"a string"',
        "null",
        "```json\n```",
        "{'a': 1}",
        "[1, 2",
        "} {",
    ],
)
def test_hopeless_input_is_none_never_empty(raw: str) -> None:
    assert resilient_json_parse_with_strategy(raw) == (None, "none")
    if raw.strip() in ("42", '"a string"', "null"):
        assert resilient_json_parse(raw) == json.loads(raw)
    else:
        with pytest.raises(ValueError, match="tried"):
            resilient_json_parse(raw)


def test_public_parse_tells_null_from_failure() -> None:
    """Issue 16 item 8: `null` is None, a failure raises instead of returning None too."""
    assert resilient_json_parse("null") is None
    with pytest.raises(ValueError, match="fence"):
        resilient_json_parse("no JSON here")


def test_warning_names_the_strategy(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tickloop")
    resilient_json_parse('{"a": 1}')
    assert caplog.records == []

    resilient_json_parse('```json\n{"a": 1}\n```')
    assert caplog.records[-1].name == "tickloop"
    assert caplog.records[-1].levelno == logging.WARNING
    assert "after stripping a code fence" in caplog.records[-1].getMessage()

    resilient_json_parse('sure: {"a": 1}')
    assert "from a JSON block found in the text" in caplog.records[-1].getMessage()

    resilient_json_parse('{"a": 1,}')
    assert "after removing trailing commas" in caplog.records[-1].getMessage()

    resilient_json_parse('```json\n{"a": 1,}\n```')
    message = caplog.records[-1].getMessage()
    assert "after stripping a code fence" in message
    assert "after removing trailing commas" in message
    assert "fence+trailing-commas" in message
    assert len(caplog.records) == 4

    resilient_json_parse_with_strategy("garbage")
    assert len(caplog.records) == 4


# -- finding blocks in one pass -------------------------------------------------------------


def _oracle_block_end(text: str, start: int) -> int:
    """The block finder as PROTOCOL §9 reads, one scan per opener (quadratic): the oracle."""
    expected: list[str] = []
    i = start
    in_string = False
    while i < len(text):
        c = text[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            expected.append("}" if c == "{" else "]")
        elif c in "}]":
            if expected.pop() != c:
                return -1
            if not expected:
                return i + 1
        i += 1
    return -1


def _oracle_blocks(text: str) -> list[str]:
    blocks = []
    i = 0
    while i < len(text):
        if text[i] in "{[":
            end = _oracle_block_end(text, i)
            if end > 0:
                blocks.append(text[i:end])
                i = end
                continue
        i += 1
    return blocks


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet='{}[]"\\ a', max_size=40))
def test_blocks_found_in_one_pass_are_those_of_a_scan_from_each_opener(text: str) -> None:
    assert list(_jsonstream._balanced_blocks(text)) == _oracle_blocks(text)


@pytest.mark.parametrize(
    "text",
    [
        # Openers inside strings start scans of their own, which meet the others' again
        # after an escaped quote: every scan is still open at the end.
        '["[\\"' * 5 + "x",
        'a "b [1] c" {"d": "}"} e',
        '"[1] "[2]',
        '[\\"]',
        '{"a": "\\\\"}',
    ],
)
def test_tricky_blocks_match_the_oracle(text: str) -> None:
    assert list(_jsonstream._balanced_blocks(text)) == _oracle_blocks(text)


@pytest.mark.parametrize(
    "raw",
    [
        "[" * 200_000,
        "{" * 200_000,
        '{"a":' * 50_000,
        "[," * 100_000,
        '"[' * 100_000,
        '["[\\"' * 50_000,  # scans in strings of one another, never closed
        "```json\n" + "[" * 200_000 + "\n```",
        "[" * 100_000 + "]" * 100_000,  # balanced, but too deep for json.loads
    ],
)
def test_unclosed_openers_cost_linear_time_and_never_parse(raw: str) -> None:
    # A scan from each opener in turn is quadratic: 200,000 openers took hours. In one
    # pass they take a fraction of a second, so the size itself is the test.
    assert resilient_json_parse_with_strategy(raw) == (None, "none")


def test_a_block_after_a_mass_of_unclosed_openers_is_found() -> None:
    raw = "[" * 100_000 + ' then {"a": 1}'
    assert resilient_json_parse_with_strategy(raw) == ({"a": 1}, "block")
    raw = '{"deep": ' + "[" * 5000 + "]" * 5000 + "} and [1, 2,]"
    assert resilient_json_parse_with_strategy(raw) == ([1, 2], "block+trailing-commas")

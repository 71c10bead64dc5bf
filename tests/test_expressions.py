"""Tests for reference expressions and output paths (PROTOCOL §3 and §4)."""

from __future__ import annotations

import copy
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickloop._core._expressions import (
    REF,
    Expression,
    Reference,
    Step,
    Term,
    _scan_expression,
    find_references,
    format_location,
    is_reference,
    parse_expression,
    parse_term,
    substitute,
    unescape,
)
from tickloop._errors import ReferenceSyntaxError


def T(kind: str, *path: Step) -> Term:
    """Short constructor so expected values read like the text they come from."""
    return Term(kind, tuple(path))


def syntax_error(text: str) -> ReferenceSyntaxError:
    with pytest.raises(ReferenceSyntaxError) as info:
        parse_expression(text)
    return info.value


# --- grammar: valid text ------------------------------------------------------------


def test_ref_is_the_dagger() -> None:
    assert REF == "†" == "\u2020"


@pytest.mark.parametrize(
    ("text", "term"),
    [
        ("†state", T("state")),
        ("†_", T("_")),
        ("†a_1B", T("a_1B")),
        ("†state.page", T("state", "page")),
        ("†state.page.items[0].body", T("state", "page", "items", 0, "body")),
        ("†state.a-b.$c.0", T("state", "a-b", "$c", "0")),
        ("†state[12][0]", T("state", 12, 0)),
        ("†state.x[007]", T("state", "x", 7)),
        ("†s.-.$._", T("s", "-", "$", "_")),
    ],
)
def test_single_terms_parse(text: str, term: Term) -> None:
    expression = parse_expression(text)
    assert expression == Expression((term,), None)
    assert parse_term(text) == term


def test_key_of_digits_is_a_key_not_an_index() -> None:
    assert parse_term("†a.0").path == ("0",)
    assert parse_term("†a[0]").path == (0,)
    assert parse_term("†a.0") != parse_term("†a[0]")


@pytest.mark.parametrize("op", ["||", "&&"])
def test_operators(op: str) -> None:
    expression = parse_expression(f"†a.x {op} †b[1] {op} †c")
    assert expression.op == op
    assert expression.terms == (T("a", "x"), T("b", 1), T("c"))


@pytest.mark.parametrize(
    "text",
    ["†a||†b", "  †a || †b  ", "\t†a\n||\r\n†b\f", "†a ||†b", "†a|| †b", "†a\v||\v†b"],
)
def test_whitespace_around_operators_and_ends_is_ignored(text: str) -> None:
    assert parse_expression(text) == Expression((T("a"), T("b")), "||")


def test_single_term_has_no_operator() -> None:
    assert parse_expression("  †a  ").op is None


def test_str_is_canonical() -> None:
    assert str(parse_expression(" †a.b[0]&&†c ")) == "†a.b[0] && †c"
    assert str(parse_expression("†a||†b||†c")) == "†a || †b || †c"
    assert str(T("state", "page", "items", 0, "body")) == "†state.page.items[0].body"
    assert str(parse_expression("†a[007]")) == "†a[7]"


def test_parse_is_cached() -> None:
    text = "†cache.check[3]"
    assert parse_expression(text) is parse_expression(text)


# --- grammar: every error, with its position ---------------------------------------


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("", 0, "empty expression"),
        ("   ", 3, "empty expression"),
        ("state.x", 0, "expected '†' to start a term"),
        ("  x", 2, "expected '†' to start a term"),
        ("†a || state.b", 6, "expected '†' to start a term"),
        ("†", 1, "expected a kind name"),
        ("†1a", 1, "expected a kind name"),
        ("†.a", 1, "expected a kind name"),
        ("† a", 1, "expected a kind name"),
        ("††a", 1, "expected a kind name"),
        ("†-a", 1, "expected a kind name"),
        ("†a.", 3, "expected a key after '.'"),
        ("†a..b", 3, "expected a key after '.'"),
        ("†a.[0]", 3, "expected a key after '.'"),
        ("†a. b", 3, "expected a key after '.'"),
        ("†a.é", 3, "expected a key after '.'"),
        ("†a[", 3, "expected an integer index"),
        ("†a[]", 3, "expected an integer index"),
        ("†a[-1]", 3, "expected an integer index"),
        ("†a[x]", 3, "expected an integer index"),
        ("†a[ 0]", 3, "expected an integer index"),
        ("†a[\u0663]", 3, "expected an integer index"),  # ARABIC-INDIC DIGIT THREE
        ("†a[0", 4, "expected ']'"),
        ("†a[0 ]", 4, "expected ']'"),
        ("†a[1x]", 4, "expected ']'"),
        ("†a[1.5]", 4, "expected ']'"),
        ("†a .b", 2, "unexpected character ' '"),
        ("†a [0]", 2, "unexpected character ' '"),
        ("†a.b c", 4, "unexpected character ' '"),
        ("†a\t.b", 2, "unexpected character '\\t'"),
        ("†a!", 2, "unexpected character '!'"),
        ("†a.b]", 4, "unexpected character ']'"),
        ("†a ,", 3, "unexpected character ','"),
        ("†a\u00a0", 2, "unexpected character '\\xa0'"),
        ("†a || †b && †c", 9, "cannot mix '||' and '&&'"),
        ("†a && †b || †c", 9, "cannot mix '||' and '&&'"),
        ("†a||†b&&†c", 6, "cannot mix '||' and '&&'"),
        ("†a ||", 5, "expected a term after '||'"),
        ("†a || ", 6, "expected a term after '||'"),
        ("†a && ", 6, "expected a term after '&&'"),
        ("†a || || †b", 6, "expected a term after '||'"),
        ("†a ||| †b", 5, "expected a term after '||'"),
        ("†a | †b", 3, "expected '||'"),
        ("†a & †b", 3, "expected '&&'"),
        ("†a †b", 3, "expected '||' or '&&' between terms"),
        ("†a.b†c", 4, "expected '||' or '&&' between terms"),
    ],
)
def test_syntax_errors(text: str, position: int, fragment: str) -> None:
    error = syntax_error(text)
    assert error.position == position
    assert fragment in error.reason
    assert error.text == text
    assert f"position {position}" in str(error)
    assert isinstance(error, ValueError)


def test_error_names_what_it_found() -> None:
    assert "found 'x'" in syntax_error("†a[x]").reason
    assert "found end of text" in syntax_error("†a[0").reason


def test_errors_are_not_cached_as_results() -> None:
    for _ in range(2):
        assert syntax_error("†a[").position == 3


def test_parse_term_rejects_operators() -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        parse_term("†a || †b")
    assert info.value.position == 3
    assert "single term" in info.value.reason
    with pytest.raises(ReferenceSyntaxError) as info:
        parse_term("†a &&")
    assert info.value.position == 3


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("", 0, "empty term"),
        ("a", 0, "expected '†' to start a term"),
        ("†a b", 2, "unexpected character ' '"),
        ("†a[", 3, "expected an integer index"),
        ("†a!", 2, "unexpected character '!'"),
    ],
)
def test_parse_term_errors(text: str, position: int, fragment: str) -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        parse_term(text)
    assert info.value.position == position
    assert fragment in info.value.reason


def test_parse_term_allows_surrounding_whitespace() -> None:
    assert parse_term("  †state.ok ") == T("state", "ok")


# --- construction invariants ---------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("1a", ()),
        ("", ()),
        ("a-b", ()),
        ("a", ("",)),
        ("a", ("a.b",)),
        ("a", ("a b",)),
        ("a", (-1,)),
        ("a", (True,)),
        ("a", (1.0,)),
        ("a", ["x"]),
    ],
)
def test_term_rejects_what_the_grammar_cannot_spell(kind: str, path: object) -> None:
    with pytest.raises(ValueError):
        Term(kind, path)  # type: ignore[arg-type]


def test_expression_requires_a_consistent_op() -> None:
    with pytest.raises(ValueError):
        Expression((), None)
    with pytest.raises(ValueError):
        Expression((T("a"),), "||")
    with pytest.raises(ValueError):
        Expression((T("a"), T("b")), None)
    with pytest.raises(ValueError):
        Expression((T("a"), T("b")), "|")


def test_terms_and_expressions_are_immutable_and_hashable() -> None:
    term = T("a", "b")
    with pytest.raises(AttributeError):
        term.kind = "c"  # type: ignore[misc]
    assert len({term, T("a", "b"), parse_term("†a.b")}) == 1
    assert hash(parse_expression("†a || †b")) == hash(Expression((T("a"), T("b")), "||"))


# --- prefix and overlap --------------------------------------------------------------


def test_steps_put_the_kind_first() -> None:
    assert T("state", "a", 0).steps == ("state", "a", 0)
    assert T("state").steps == ("state",)


def test_prefix_is_whole_steps() -> None:
    assert not parse_term("†state.b").is_prefix_of(parse_term("†state.base"))
    assert not parse_term("†state.b").overlaps(parse_term("†state.base"))


def test_prefix_of_indexed_path() -> None:
    a, a0 = parse_term("†state.a"), parse_term("†state.a[0]")
    assert a.is_prefix_of(a0)
    assert not a0.is_prefix_of(a)
    assert a.overlaps(a0) and a0.overlaps(a)


def test_equal_terms_are_prefixes_of_each_other() -> None:
    a = parse_term("†state.a[0].x")
    assert a.is_prefix_of(parse_term("†state.a[0].x"))
    assert a.overlaps(a)


def test_kind_alone_is_prefix_of_its_paths() -> None:
    assert T("state").is_prefix_of(T("state", "x", 1))
    assert T("state").overlaps(T("state"))


def test_different_kinds_never_overlap() -> None:
    assert not T("state", "a").is_prefix_of(T("audit", "a"))
    assert not T("state").overlaps(T("audit"))
    assert not T("state", "a").overlaps(T("stat", "a"))


def test_key_and_index_differ() -> None:
    assert not T("s", "0").overlaps(T("s", 0))
    assert not T("s", "a", 1).overlaps(T("s", "a", 2))
    assert not T("s", "a", "x").is_prefix_of(T("s", "a"))


# --- escapes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("†a", True),
        ("† not even valid", True),
        ("†", True),
        ("††a", False),
        ("†††a", False),
        ("a†", False),
        ("", False),
        (" †a", False),
        (None, False),
        (3, False),
        (["†a"], False),
        (b"\xe2\x80\xa0a", False),
    ],
)
def test_is_reference(value: object, expected: bool) -> None:
    assert is_reference(value) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("††x", "†x"),
        ("††", "†"),
        ("†††x", "††x"),
        ("†x", "†x"),
        ("x††", "x††"),
        ("plain", "plain"),
        ("", ""),
    ],
)
def test_unescape(value: str, expected: str) -> None:
    assert unescape(value) == expected


# --- find_references -----------------------------------------------------------------


def test_find_references_deep_in_document_order() -> None:
    params = {
        "text": "†state.page.body",
        "literal": "hello",
        "escaped": "††state.x",
        "items": [
            {"url": "†state.urls[0]", "n": 3},
            "†a || †b",
            [None, True, 1.5, "†c && †d.e"],
        ],
        "†state.key": "†k",
        "last": "  †z  ",
    }
    refs = find_references(params)
    assert [r.location for r in refs] == [
        ("text",),
        ("items", 0, "url"),
        ("items", 1),
        ("items", 2, 3),
        ("†state.key",),
    ]
    assert refs[0] == Reference(
        ("text",), Expression((T("state", "page", "body"),), None), "†state.page.body"
    )
    assert refs[1].expression.terms == (T("state", "urls", 0),)
    assert refs[2].expression.op == "||"
    assert refs[3].expression == Expression((T("c"), T("d", "e")), "&&")
    # The key is only a location; the reference is the value stored under it.
    assert refs[4].source == "†k"
    # A string with leading whitespace does not start with the dagger, so it is literal.
    assert all(r.location != ("last",) for r in refs)


def test_dict_keys_are_never_references() -> None:
    assert find_references({"†a": 1, "††b": [], "†c": {"d": 2}}) == ()


def test_find_references_when_params_is_the_string() -> None:
    (ref,) = find_references("†state.x")
    assert ref.location == ()
    assert ref.source == "†state.x"
    assert find_references("plain") == ()
    assert find_references(None) == ()
    assert find_references({}) == ()


def test_find_references_reports_the_bad_location() -> None:
    params = {"ok": "†a", "items": [{"url": "†state.urls[x]"}]}
    with pytest.raises(ReferenceSyntaxError) as info:
        find_references(params)
    assert info.value.location == ("items", 0, "url")  # type: ignore[attr-defined]
    assert info.value.position == 12
    assert "expected an integer index" in info.value.reason


def test_find_references_bad_top_level_string() -> None:
    with pytest.raises(ReferenceSyntaxError) as info:
        find_references("† oops")
    assert info.value.location == ()  # type: ignore[attr-defined]


# --- substitute ----------------------------------------------------------------------


def test_substitute_replaces_and_unescapes() -> None:
    params = {
        "text": "†state.page.body",
        "escaped": "††literal",
        "items": [{"url": "†state.u", "tag": "††t"}, "plain", 4],
        "nested": {"deep": ["††x", None]},
    }
    original = copy.deepcopy(params)
    replacement = {"big": ["value", "††kept"]}
    out = substitute(params, {("text",): replacement, ("items", 0, "url"): "http://x"})
    assert out == {
        "text": {"big": ["value", "††kept"]},
        "escaped": "†literal",
        "items": [{"url": "http://x", "tag": "†t"}, "plain", 4],
        "nested": {"deep": ["†x", None]},
    }
    assert params == original
    assert out["text"] is replacement  # type: ignore[index]


def test_substitute_never_shares_containers_with_input() -> None:
    params = {"a": [1, {"b": 2}], "c": {"d": []}}
    out = substitute(params, {})
    assert out == params
    assert out is not params
    assert out["a"] is not params["a"]  # type: ignore[index]
    assert out["a"][1] is not params["a"][1]  # type: ignore[index]
    assert out["c"]["d"] is not params["c"]["d"]  # type: ignore[index]


def test_substitute_whole_params() -> None:
    assert substitute("†state.x", {(): 42}) == 42
    assert substitute("††x", {}) == "†x"
    assert substitute(7, {}) == 7


def test_substitute_keeps_key_order_and_keys() -> None:
    params = {"z": "†a", "††k": "v", "a": "††v"}
    out = substitute(params, {("z",): 1})
    assert list(out) == ["z", "††k", "a"]  # type: ignore[arg-type]
    assert out == {"z": 1, "††k": "v", "a": "†v"}


def test_substitute_with_found_references_roundtrip() -> None:
    params = {"x": ["†a", {"y": "†b || †c"}], "z": "††lit"}
    refs = find_references(params)
    values = {ref.location: str(ref.expression).upper() for ref in refs}
    assert substitute(params, values) == {
        "x": ["†A", {"y": "†B || †C"}],
        "z": "†lit",
    }


def test_substitute_rejects_unknown_locations() -> None:
    with pytest.raises(KeyError, match=r"items\[3\]"):
        substitute({"items": []}, {("items", 3): 1})
    with pytest.raises(KeyError):
        substitute({"a": ["x"]}, {("a", "0"): 1})


# --- format_location -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("location", "text"),
    [
        ((), "(params)"),
        (("items", 0, "url"), "items[0].url"),
        (("a",), "a"),
        ((0,), "[0]"),
        ((0, "a"), "[0].a"),
        (("a b", "c"), '["a b"].c'),
        (("x", "a.b"), 'x["a.b"]'),
        (("x", "†k"), 'x["†k"]'),
    ],
)
def test_format_location(location: tuple[Step, ...], text: str) -> None:
    assert format_location(location) == text


# --- properties ----------------------------------------------------------------------

KEY_ALPHABET = string.ascii_letters + string.digits + "_$-"
kinds = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
keys = st.text(alphabet=KEY_ALPHABET, min_size=1, max_size=8)
indices = st.integers(min_value=0, max_value=10**12)
paths = st.lists(st.one_of(keys, indices), max_size=5).map(tuple)
terms = st.builds(Term, kinds, paths)


@st.composite
def expressions(draw: st.DrawFn) -> Expression:
    chosen = tuple(draw(st.lists(terms, min_size=1, max_size=4)))
    op = None if len(chosen) == 1 else draw(st.sampled_from(["||", "&&"]))
    return Expression(chosen, op)


@settings(max_examples=200)
@given(expressions())
def test_str_round_trips(expression: Expression) -> None:
    text = str(expression)
    assert parse_expression(text) == expression
    assert _scan_expression(text) == expression
    assert str(parse_expression(text)) == text


whitespace = st.text(alphabet=" \t\n", max_size=3)


@settings(max_examples=150)
@given(expressions(), st.data())
def test_spacing_around_operators_does_not_matter(
    expression: Expression, data: st.DataObject
) -> None:
    parts = [data.draw(whitespace)]
    for index, term in enumerate(expression.terms):
        if index:
            assert expression.op is not None
            parts += [data.draw(whitespace), expression.op, data.draw(whitespace)]
        parts.append(str(term))
    parts.append(data.draw(whitespace))
    text = "".join(parts)
    assert parse_expression(text) == expression
    assert _scan_expression(text) == expression


@settings(max_examples=100)
@given(terms)
def test_parse_term_round_trips(term: Term) -> None:
    assert parse_term(str(term)) == term


@settings(max_examples=100)
@given(terms, terms)
def test_overlap_is_symmetric_and_matches_prefixes(a: Term, b: Term) -> None:
    assert a.overlaps(b) == b.overlaps(a)
    assert a.is_prefix_of(b) == (b.steps[: len(a.steps)] == a.steps)
    extended = Term(a.kind, (*a.path, "x"))
    assert a.is_prefix_of(extended) and not extended.is_prefix_of(a)


# Text near the grammar (daggers, operators, brackets) finds far more interesting faults
# than arbitrary unicode, so both are drawn.
near_grammar = st.text(alphabet=f"{REF}ab_1$-.[]0|& \t\u00a0é", max_size=24)


def _parse_or_error(text: str) -> Expression | tuple[int, str]:
    try:
        return parse_expression(text)
    except ReferenceSyntaxError as error:
        assert 0 <= error.position <= len(text)
        assert error.text == text
        return (error.position, error.reason)


@settings(max_examples=200)
@given(st.one_of(st.text(max_size=30), near_grammar))
def test_random_text_only_raises_syntax_errors(text: str) -> None:
    result = _parse_or_error(text)
    if isinstance(result, Expression):
        # Whatever parses is canonical after one print.
        assert parse_expression(str(result)) == result


@settings(max_examples=200)
@given(near_grammar)
def test_fast_path_and_scanner_agree(text: str) -> None:
    try:
        scanned: Expression | None = _scan_expression(text)
    except ReferenceSyntaxError:
        scanned = None
    result = _parse_or_error(text)
    if scanned is None:
        assert not isinstance(result, Expression)
    else:
        assert result == scanned


# --- limits: index length and path depth -------------------------------------------


@pytest.mark.parametrize(
    ("text", "position", "reason"),
    [
        ("†state.x[" + "9" * 5000 + "]", 9, "index too large (5000 digits; at most 18)"),
        ("†state.x[" + "1" * 19 + "]", 9, "index too large (19 digits; at most 18)"),
        ("†a || †b[" + "0" * 19 + "]", 9, "index too large (19 digits; at most 18)"),
        ("†state." + ".".join(["k"] * 65), 134, "path deeper than 64 steps"),
        ("†state." + ".".join(["k"] * 2000), 134, "path deeper than 64 steps"),
        ("†s" + "[0]" * 65, 194, "path deeper than 64 steps"),
        (" †a  && †s" + ".k" * 70, 138, "path deeper than 64 steps"),
    ],
)
def test_an_index_too_long_or_a_path_too_deep_is_a_syntax_error(
    text: str, position: int, reason: str
) -> None:
    for parse in (parse_expression, _scan_expression):
        with pytest.raises(ReferenceSyntaxError) as info:
            parse(text)
        assert (info.value.position, info.value.reason) == (position, reason)
    if "||" not in text and "&&" not in text:
        with pytest.raises(ReferenceSyntaxError) as info:
            parse_term(text)
        assert (info.value.position, info.value.reason) == (position, reason)


def test_the_limits_themselves_parse() -> None:
    assert parse_expression("†s[" + "9" * 18 + "]") == Expression((T("s", 10**18 - 1),))
    assert parse_expression("†s[" + "0" * 18 + "]") == Expression((T("s", 0),))
    deepest = "†state" + ".k" * 64
    assert len(parse_expression(deepest).terms[0].path) == 64
    assert _scan_expression(deepest) == parse_expression(deepest)
    assert parse_term(str(T("s", *range(64)))) == T("s", *range(64))


@pytest.mark.parametrize(("kind", "path"), [("a", ("k",) * 65), ("a", (10**18,))])
def test_term_rejects_paths_the_parser_would_reject(kind: str, path: tuple[Step, ...]) -> None:
    with pytest.raises(ValueError):
        Term(kind, path)

"""Run paths (PROTOCOL §11, §14): one grammar for a sub-agent's path and a code plan's
call path, made, parsed, compared and shown only by `tickloop._core._paths`."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tickloop as tl
from tickloop._core._paths import (
    CALL_PATH,
    RunPath,
    call_id_key,
    id_problem,
    is_call_path,
    tag_kind,
    untag_kind,
)

_number = st.integers(min_value=0, max_value=10_000)
_indexes = st.lists(_number, max_size=3).map(lambda xs: "".join(f"[{x}]" for x in xs))
_frame = st.tuples(_number, _indexes).map(lambda f: f"{f[0]}{f[1]}")
call_paths = st.builds(
    lambda it, site, idx, helpers: f"c{it}.{site}{idx}" + "".join(f">{h}" for h in helpers),
    _number,
    _number,
    _indexes,
    st.lists(_frame, max_size=3),
)
model_ids = st.text(min_size=1, max_size=12).filter(lambda s: not set(s) & set("/[]>"))
segments = st.one_of(call_paths, model_ids)
paths = st.lists(segments, max_size=5).map(lambda parts: RunPath(tuple(parts)))


@given(paths)
def test_a_path_shown_parses_back_to_itself(path: RunPath) -> None:
    assert RunPath.parse(str(path)) == path
    assert RunPath.of(path.parts) == path


@given(call_paths)
def test_every_code_call_path_is_a_valid_segment_at_any_depth(call_id: str) -> None:
    assert CALL_PATH.fullmatch(call_id)
    assert id_problem(call_id) is None
    path = RunPath.parse(f"c1.2/c3.0/{call_id}")
    assert path.last == call_id
    assert path.parent == RunPath(("c1.2", "c3.0"))


def test_the_spec_examples() -> None:
    path = RunPath.parse("c1.2/c2.7[3]>1[0]")
    assert path.parts == ("c1.2", "c2.7[3]>1[0]")
    assert str(path) == "c1.2/c2.7[3]>1[0]"
    assert path.depth == 2
    assert path.parent.full(path.last) == "c1.2/c2.7[3]>1[0]"
    assert is_call_path("c2.7[3]>1[0]") and is_call_path("c1.0")
    assert not is_call_path("c2.7[3]>") and not is_call_path("c2.[1]")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("c1.2//c1.0", "must not be empty"),
        ("c1.2/", "must not be empty"),
        ("a[1]", "'[', ']' or '>'"),
        ("c1.2/fetch>1", "'[', ']' or '>'"),
        ("c2.7[3]>", "'[', ']' or '>'"),
    ],
)
def test_a_bad_path_is_refused_naming_the_segment(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=r".*") as caught:
        RunPath.parse(text)
    assert says in str(caught.value)
    assert repr(text) in str(caught.value)


def test_a_model_id_may_not_hold_the_separators() -> None:
    assert "'/'" in (id_problem("a/b") or "")
    assert id_problem("fetch-page.1#2") is None
    assert id_problem("") is not None


def test_the_root() -> None:
    assert RunPath.parse("") == RunPath.ROOT
    assert str(RunPath.ROOT) == "" and RunPath.ROOT.prefix == ""
    assert RunPath.ROOT.full("c1.0") == "c1.0"
    assert not RunPath.ROOT and RunPath.ROOT.is_root
    with pytest.raises(ValueError, match="no parent"):
        _ = RunPath.ROOT.parent


@given(paths, segments)
def test_parent_undoes_child(path: RunPath, segment: str) -> None:
    child = path / segment
    assert child.parent == path
    assert child.last == segment
    assert child.is_within(path) and child.is_within(child)
    assert child.relative_to(path) == RunPath((segment,))
    assert str(child) == path.full(segment)
    assert path.local_id(str(child)) == segment


@given(paths, paths)
def test_prefix_is_within(a: RunPath, b: RunPath) -> None:
    joined = RunPath(a.parts + b.parts)
    assert joined.is_within(a)
    assert joined.relative_to(a) == b
    assert a.is_within(joined) == (not b.parts)


def test_call_ids_order_by_their_numbers() -> None:
    ids = ["c1.10", "c2.0", "c1.2", "c2.7[0]>1", "c2.7", "c2.7[0]", "c2.7[1]", "zz", "c10.0"]
    ordered = sorted(ids, key=call_id_key)
    assert ordered == [
        *("c1.2", "c1.10", "c2.0", "c2.7", "c2.7[0]", "c2.7[0]>1", "c2.7[1]", "c10.0", "zz")
    ]
    assert RunPath.parse("c1.2/c1.10") > RunPath.parse("c1.2/c1.9")
    assert RunPath.parse("c1.2") < RunPath.parse("c1.2/c1.0") < RunPath.parse("c1.3")


@given(st.lists(paths, max_size=6))
def test_ordering_is_total_and_consistent_with_equality(found: list[RunPath]) -> None:
    ordered = sorted(found)
    for before, after in itertools.pairwise(ordered):
        assert before <= after
        assert (before == after) == (before.sort_key() == after.sort_key())


def test_below_keys_what_is_under_a_run_by_its_own_ids() -> None:
    decisions = {"c1.0": 1, "c1.2/c1.0": 2, "c1.2/c2.1/c1.0": 3, "c1.20/c1.0": 4}
    assert RunPath.parse("c1.2").below(decisions) == {"c1.0": 2, "c2.1/c1.0": 3}
    assert RunPath.ROOT.below(decisions) == decisions


@given(paths, st.sampled_from(["event", "messages", "decision"]))
def test_journal_kinds_tag_and_untag(path: RunPath, kind: str) -> None:
    assert untag_kind(tag_kind(kind, path)) == (kind, path)
    assert (tag_kind(kind, path) == kind) == path.is_root


def test_a_model_id_with_a_call_path_character_is_a_structural_error() -> None:
    """PROTOCOL §14: only a code plan's call path holds '[', ']' or '>'."""

    @tl.tool
    def add(a: int, b: int) -> int:
        return a + b

    result = tl.run_calls(
        [
            {"_tool": "add", "a": 1, "b": 2, "_id": "sum[0]", "_outputPath": "†state.x"},
            {"_tool": "add", "a": 1, "b": 2, "_id": "c2.7[3]>1[0]", "_outputPath": "†state.y"},
        ],
        tools=[add],
    )
    assert result.state == {"y": 3}
    assert result.records["c2.7[3]>1[0]"].status == "done"
    [bad] = [r for r in result.records.values() if r.status == "invalid"]
    assert "'sum[0]'" in result.errors[0]["data"]["error"]["message"]
    assert "'[', ']' or '>'" in result.errors[0]["data"]["error"]["message"]
    assert bad.id != "sum[0]"

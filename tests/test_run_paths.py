"""Run paths (PROTOCOL §11, §14): one grammar for a sub-agent's path and a code plan's
call path, made, parsed, compared and shown only by `tickloop._core._paths`."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

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
    """PROTOCOL §14: only a code plan's call path holds '[', ']' or '>', and a model's own
    `_id` in a plan may not hold them at all, not even as a whole call path (only the code
    plan's driver names calls by their call paths)."""

    @tl.tool
    def add(a: int, b: int) -> int:
        return a + b

    result = tl.run_calls(
        [
            {"_tool": "add", "a": 1, "b": 2, "_id": "sum[0]", "_outputPath": "†state.x"},
            {"_tool": "add", "a": 1, "b": 2, "_id": "c2.7[3]>1[0]", "_outputPath": "†state.y"},
            {"_tool": "add", "a": 1, "b": 3, "_id": "fine", "_outputPath": "†state.z"},
        ],
        tools=[add],
    )
    assert result.state == {"z": 4}
    bad = [r for r in result.records.values() if r.status == "invalid"]
    assert len(bad) == 2
    messages = [error["data"]["error"]["message"] for error in result.errors]
    assert "'sum[0]'" in messages[0] and "'[', ']' or '>'" in messages[0]
    assert "'c2.7[3]>1[0]'" in messages[1] and "'[', ']' or '>'" in messages[1]


# -- one owner: nothing outside `_core/_paths.py` takes a path apart or puts one together ------

SOURCE = Path(__file__).resolve().parents[1] / "src" / "tickloop"
OWNER = Path("_core/_paths.py")

#: What path manipulation looks like: splitting or joining on "/", counting or finding
#: it, cutting the last segment off a prefix, a journal kind's "@" tag.
PATH_MANIPULATION = re.compile(
    r"""partition\(["'][/@]["']\)|split\(["']/["']|["']/["']\.join|\.count\(["']/["']\)"""
    r"""|["'][/@]["'] in |\+ ["']/["']|f["']@\{|(?:prefix|path)\[:-1\]|\}/\{|\}/["']"""
    r"""|(?:starts|ends)with\(f?["'][^"']*/"""
)

#: Lines that match but handle no run path, each with why.
NOT_A_RUN_PATH = {
    # a JSON Schema "$ref" ("#/$defs/Name"), a JSON pointer
    ("_agent/_prompt.py", 'name = reference.rsplit("/", 1)[-1]'),
    ("_agent/_prompt.py", 'name = schema["$ref"].rsplit("/", 1)[-1]'),
    ("_core/_validation.py", 'if not ref.startswith("#/"):'),
    ("_core/_validation.py", 'for step in ref[2:].split("/"):'),
    ("_agent/_stubs.py", 'target = definitions.get(schema["$ref"].rsplit("/", 1)[-1])'),
    # a state path's steps (`unset` of a variable, PROTOCOL §4)
    ("_core/_log.py", "for step in term.path[:-1]:"),
    # a message's place in a stored plan (JSON keys)
    ("_durable/_codec.py", "for key in path[:-1]:"),
    # a URL
    ("_human/_web.py", 'if rest.endswith("/timeline"):'),
    ("_cli/_serve_web.py", 'guard.app = a2a.app(agent, url=f"http://{shown}:{bound}/")'),
    # a schema error's place in a value, shown
    ("_human/_common.py", 'where = "/".join(str(step) for step in error.absolute_path)'),
    # the page's key of a waiting call: its run id (or its slot on the page) before its
    # full id, never taken apart
    ("_human/_browser.py", 'return f"{run_id}/{call_id}"'),
    ("_human/_browser.py", 'return f"#{slot}/{call_id}"'),
    (
        "_human/_browser.py",
        'key for key in self._decided if key.startswith("#") and key.endswith(f"/{call_id}")',
    ),
    ("_human/_common.py", 'return f"#{self.slot}/{self.id}"'),
    ("_human/_common.py", "return f\"{self.run_id or ''}/{self.id}\""),
    # a MIME type's top-level kind ("image/png" -> "image")
    ("_mcp/_resources.py", 'kind = mime.split("/", 1)[0]'),
}


def path_manipulations(root: Path) -> list[str]:
    """`file:line text` for every line under `root` that takes a path apart or puts one
    together, outside the owner and the known lines that handle no run path."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative == OWNER:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("  #", 1)[0].strip()
            if code.startswith("#") or not PATH_MANIPULATION.search(code):
                continue
            if (relative.as_posix(), code) not in NOT_A_RUN_PATH:
                found.append(f"{relative}:{number} {code}")
    return found


def test_no_path_manipulation_outside_the_run_path_module() -> None:
    assert path_manipulations(SOURCE) == []


@pytest.mark.parametrize(
    "line",
    [
        'parent, _, local = call_id.rpartition("/")',
        'prefix = "/".join(self.path) + "/"',
        "journal = tree.journal_of(place.prefix[:-1])",
        'kind, _, where = tagged.partition("@")',
        'self._tag = f"@{path}"',
        'if "@" in kind:',
        'depth = call_id.count("/")',
        'full = f"{prefix}/{call_id}"',
        'if run.startswith(call_id + "/"):',
    ],
)
def test_the_check_finds_path_manipulation(tmp_path: Path, line: str) -> None:
    (tmp_path / "module.py").write_text(f"def f():\n    {line}\n")
    (tmp_path / "_core").mkdir()
    (tmp_path / "_core" / "_paths.py").write_text(f"def g():\n    {line}\n")
    assert path_manipulations(tmp_path) == [f"module.py:2 {line}"]

"""Tests of the context log and its output methods (PROTOCOL §1, §4).

The property test at the end checks the materialized views against an independent oracle:
the seed chapter's reverse-chronological read, which never keeps a view at all.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickloop._core._expressions import Step, Term, parse_term
from tickloop._core._log import (
    MAX_VALUE_DEPTH,
    METHODS,
    ContextLog,
    WriteError,
    copy_json,
    cut_json,
    describe_key,
    shape_fault,
    short_repr,
)


def t(text: str) -> Term:
    return parse_term(text)


def state_log(value: Any) -> ContextLog:
    """A log whose state view starts as `value` (a root message, as a user would supply)."""
    return ContextLog([{"type": "data", "kind": "state", "data": value}])


def snapshot(log: ContextLog) -> tuple[int, str]:
    """Everything a failed write must leave alone, in a form that cannot alias the log."""
    kinds = sorted({m["kind"] for m in log.messages if m["type"] == "data"})
    views = {kind: (log.has_view(kind), log.view(kind)) for kind in kinds}
    return len(log.messages), json.dumps([log.messages, views], sort_keys=True)


# -- set ------------------------------------------------------------------------------------


def test_set_creates_missing_intermediate_dicts() -> None:
    log = ContextLog()
    log.write(t("†state.page.body"), "set", "x")
    assert log.view("state") == {"page": {"body": "x"}}


def test_set_replaces_whatever_is_there() -> None:
    log = state_log({"a": {"deep": [1, 2]}})
    log.write(t("†state.a"), "set", 3)
    assert log.view("state") == {"a": 3}


def test_set_at_an_index_replaces_and_one_past_the_end_appends() -> None:
    log = state_log({"items": [1, 2]})
    log.write(t("†state.items[0]"), "set", "one")
    log.write(t("†state.items[2]"), "set", "three")
    assert log.view("state") == {"items": ["one", 2, "three"]}


def test_set_through_an_index_one_past_the_end_appends_a_dict() -> None:
    log = state_log({"items": []})
    log.write(t("†state.items[0].name"), "set", "n")
    assert log.view("state") == {"items": [{"name": "n"}]}


def test_set_index_out_of_range_names_index_length_and_path() -> None:
    log = state_log({"items": [1, 2]})
    with pytest.raises(WriteError) as caught:
        log.write(t("†state.items[5]"), "set", 0)
    message = str(caught.value)
    assert message.startswith("cannot set at †state.items[5]")
    assert "index 5 is out of range for the list of length 2 at †state.items" in message


def test_index_step_needs_an_existing_list() -> None:
    log = ContextLog()
    with pytest.raises(WriteError, match=r"†state\.items is absent"):
        log.write(t("†state.items[0]"), "set", 1)
    with pytest.raises(WriteError, match=r"†state is absent"):
        log.write(t("†state[0]"), "push", 1)
    assert log.messages == []
    assert not log.has_view("state")


def test_stepping_into_a_scalar_is_an_error() -> None:
    log = state_log({"a": "text"})
    with pytest.raises(WriteError) as caught:
        log.write(t("†state.a.b"), "set", 1)
    assert str(caught.value) == (
        "cannot set at †state.a.b: †state.a is a str, not a dict to take the key 'b' of"
    )


def test_key_step_on_a_list_and_index_step_on_a_dict_are_errors() -> None:
    log = state_log({"items": [1], "map": {"k": 1}})
    with pytest.raises(WriteError, match=r"†state\.items is a list, not a dict"):
        log.write(t("†state.items.k"), "set", 1)
    with pytest.raises(WriteError, match=r"†state\.map is a dict, not a list to take the index"):
        log.write(t("†state.map[0]"), "set", 1)


# -- merge / assign ---------------------------------------------------------------------------


def test_merge_is_deep_and_non_dict_values_replace() -> None:
    log = state_log({"cfg": {"a": {"x": 1, "y": 2}, "list": [1], "keep": True}})
    log.write(t("†state.cfg"), "merge", {"a": {"y": 3, "z": 4}, "list": [2], "new": None})
    assert log.view("state") == {
        "cfg": {"a": {"x": 1, "y": 3, "z": 4}, "list": [2], "keep": True, "new": None}
    }


def test_merge_replaces_a_non_dict_inside_with_a_dict() -> None:
    log = state_log({"cfg": {"a": 1}})
    log.write(t("†state.cfg"), "merge", {"a": {"b": 2}})
    assert log.view("state") == {"cfg": {"a": {"b": 2}}}


def test_assign_is_shallow() -> None:
    log = state_log({"cfg": {"a": {"x": 1}, "b": 2}})
    log.write(t("†state.cfg"), "assign", {"a": {"y": 3}})
    assert log.view("state") == {"cfg": {"a": {"y": 3}, "b": 2}}


@pytest.mark.parametrize("method", ["merge", "assign"])
def test_merge_and_assign_on_absent_set(method: str) -> None:
    log = ContextLog()
    log.write(t("†state.cfg"), method, {"a": 1})
    assert log.view("state") == {"cfg": {"a": 1}}


@pytest.mark.parametrize("method", ["merge", "assign"])
def test_merge_and_assign_into_a_non_dict(method: str) -> None:
    log = state_log({"x": [1]})
    with pytest.raises(WriteError) as caught:
        log.write(t("†state.x"), method, {"a": 1})
    assert str(caught.value) == f"cannot {method} into a list at †state.x"
    log = state_log({"x": None})
    assert log.check_write(t("†state.x"), method, {}) == f"cannot {method} into null at †state.x"


@pytest.mark.parametrize("method", ["merge", "assign"])
def test_merge_and_assign_need_a_dict_value_even_where_absent(method: str) -> None:
    log = ContextLog()
    with pytest.raises(WriteError) as caught:
        log.write(t("†state.x"), method, 5)
    assert str(caught.value) == f"cannot {method} an int: {method} needs a dict value at †state.x"


# -- push / concat ----------------------------------------------------------------------------


def test_push_makes_a_list_then_appends() -> None:
    log = ContextLog()
    log.write(t("†state.log"), "push", {"n": 1})
    log.write(t("†state.log"), "push", [2])
    assert log.view("state") == {"log": [{"n": 1}, [2]]}


def test_push_onto_a_str() -> None:
    log = state_log({"x": "text"})
    with pytest.raises(WriteError) as caught:
        log.write(t("†state.x"), "push", 1)
    assert str(caught.value) == "cannot push onto a str at †state.x"


def test_push_at_an_index_one_past_the_end_appends_a_new_list() -> None:
    log = state_log({"rows": [[1]]})
    log.write(t("†state.rows[0]"), "push", 2)
    log.write(t("†state.rows[1]"), "push", 3)
    assert log.view("state") == {"rows": [[1, 2], [3]]}


def test_concat_extends_and_copies_on_absent() -> None:
    log = ContextLog()
    log.write(t("†state.xs"), "concat", [1, 2])
    log.write(t("†state.xs"), "concat", [3])
    log.write(t("†state.xs"), "concat", [])
    assert log.view("state") == {"xs": [1, 2, 3]}


def test_concat_type_errors_on_either_side() -> None:
    log = state_log({"x": {"a": 1}, "xs": []})
    assert log.check_write(t("†state.x"), "concat", [1]) == "cannot concat onto a dict at †state.x"
    assert log.check_write(t("†state.xs"), "concat", "ab") == (
        "cannot concat a str: concat needs a list value at †state.xs"
    )
    assert log.check_write(t("†state.new"), "concat", 1) == (
        "cannot concat an int: concat needs a list value at †state.new"
    )


def test_unknown_method_is_a_value_error() -> None:
    log = ContextLog()
    with pytest.raises(ValueError, match="unknown output method"):
        log.write(t("†state.x"), "replace", 1)
    with pytest.raises(ValueError, match="unknown output method"):
        log.check_write(t("†state.x"), "replace", 1)


# -- presence ---------------------------------------------------------------------------------


def test_a_stored_null_is_present() -> None:
    log = state_log({"a": None})
    assert log.lookup(t("†state.a")) == (True, None)
    assert log.lookup(t("†state.b")) == (False, None)
    assert log.lookup(t("†state.a.b")) == (False, None)


def test_index_presence_follows_the_bounds() -> None:
    log = state_log({"xs": [10, None]})
    assert log.lookup(t("†state.xs[0]")) == (True, 10)
    assert log.lookup(t("†state.xs[1]")) == (True, None)
    assert log.lookup(t("†state.xs[2]")) == (False, None)
    assert log.lookup(t("†state.xs.a")) == (False, None)


def test_key_and_index_steps_do_not_cross() -> None:
    log = state_log({"m": {"0": "key"}, "xs": ["item"]})
    assert log.lookup(t("†state.m[0]")) == (False, None)
    assert log.lookup(t("†state.m.0")) == (True, "key")
    assert log.lookup(t("†state.xs.0")) == (False, None)


def test_b_is_not_base() -> None:
    log = ContextLog()
    log.write(t("†state.base"), "set", 1)
    assert log.lookup(t("†state.b")) == (False, None)
    log.write(t("†state.b"), "set", 2)
    assert log.view("state") == {"base": 1, "b": 2}


def test_root_presence_is_having_a_view() -> None:
    log = ContextLog()
    assert not log.has_view("state")
    assert log.view("state") is None
    assert log.lookup(t("†state")) == (False, None)
    log.append({"type": "data", "kind": "state", "data": None})
    assert log.has_view("state")
    assert log.lookup(t("†state")) == (True, None)
    assert log.lookup(t("†other.x")) == (False, None)


def test_lookup_returns_the_live_value() -> None:
    log = state_log({"a": {"b": [1]}})
    _, value = log.lookup(t("†state.a"))
    assert value is log.view("state")["a"]


# -- root writes and messages -----------------------------------------------------------------


def test_user_message_without_path_sets_the_root() -> None:
    message = {"type": "data", "kind": "input", "data": {"q": "hi"}}
    log = ContextLog([message])
    assert log.view("input") == {"q": "hi"}
    assert log.messages == [message]
    assert log.data_messages("input") == [message]


def test_root_messages_apply_their_method_to_the_whole_view() -> None:
    log = ContextLog()
    log.append({"type": "data", "kind": "k", "data": {"a": {"x": 1}}})
    log.append({"type": "data", "kind": "k", "data": {"a": {"y": 2}}, "_outputMethod": "merge"})
    assert log.view("k") == {"a": {"x": 1, "y": 2}}
    log.append({"type": "data", "kind": "k", "data": {"a": 3}, "_outputMethod": "assign"})
    assert log.view("k") == {"a": 3}
    log.append({"type": "data", "kind": "k", "data": [1]})
    log.write(Term("k"), "push", 2)
    log.write(Term("k"), "concat", [3])
    assert log.view("k") == [1, 2, 3]
    log.write(Term("k"), "set", "done")
    assert log.view("k") == "done"
    with pytest.raises(WriteError, match=r"^cannot push onto a str at †k$"):
        log.write(Term("k"), "push", 4)


def test_root_push_on_an_absent_kind_makes_a_list() -> None:
    log = ContextLog()
    log.write(Term("errors"), "push", {"e": 1})
    assert log.view("errors") == [{"e": 1}]


def test_write_builds_the_data_message() -> None:
    log = ContextLog()
    call = {"_tool": "fetch", "_id": "c1.0"}
    date = "2026-11-22T01:02:03.123456Z"
    log.write(t("†state.items"), "set", [])
    message = log.write(t("†state.items[0].body"), "set", "x", call=call, date=date)
    assert message == {
        "type": "data",
        "kind": "state",
        "data": {"items": [{"body": "x"}]},
        "_path": "†state.items[0].body",
        "_outputMethod": "set",
        "_call": call,
        "_date": date,
    }
    assert log.messages[-1] is message
    plain = log.write(t("†state.items[1]"), "push", 1)
    assert "_call" not in plain and "_date" not in plain


def test_index_steps_nest_as_lists_padded_with_nulls() -> None:
    log = state_log({"items": [0, 1]})
    message = log.write(t("†state.items[2]"), "set", "v")
    assert message["data"] == {"items": [None, None, "v"]}


def test_data_messages_are_indexed_per_kind_in_log_order() -> None:
    log = ContextLog()
    first = log.write(t("†state.a"), "set", 1)
    log.append({"type": "text", "role": "user", "text": "hi"})
    other = log.write(t("†audit.a"), "set", 1)
    second = log.write(t("†state.b"), "set", 2)
    assert log.data_messages("state") == [first, second]
    assert log.data_messages("audit") == [other]
    assert log.data_messages("none") == []
    assert len(log.messages) == 4


def test_replaying_the_log_gives_the_same_views() -> None:
    log = state_log({"a": [1]})
    log.write(t("†state.a[1]"), "set", {"x": 1})
    log.write(t("†state.a[1]"), "merge", {"y": {"z": 1}})
    log.write(t("†state.a"), "concat", [None])
    log.append({"type": "plan", "calls": []})
    log.append({"type": "solution", "iteration": 1, "solution": {"calls": [], "output": None}})
    replayed = ContextLog(json.loads(json.dumps(log.messages)))
    assert replayed.view("state") == log.view("state") == {"a": [1, {"x": 1, "y": {"z": 1}}, None]}
    assert len(replayed.messages) == len(log.messages)


@pytest.mark.parametrize(
    ("message", "match"),
    [
        ({"role": "user", "text": "no type"}, "needs a type"),
        ({"type": "note"}, "needs a type"),
        ({"type": "data", "data": 1}, "needs a str kind"),
        ({"type": "data", "kind": "state"}, "has no data"),
        ({"type": "data", "kind": "s", "data": 1, "_outputMethod": "add"}, "unknown _output"),
        ({"type": "data", "kind": "s", "data": {"a": 1}, "_path": "†t.a"}, "of another"),
        ({"type": "data", "kind": "s", "data": {"b": 1}, "_path": "†s.a"}, "does not match"),
        ({"type": "data", "kind": "s", "data": {"a": [1]}, "_path": "†s.a[1]"}, "does not match"),
        ({"type": "data", "kind": "s", "data": 1, "_path": 7}, "must be a str"),
    ],
)
def test_malformed_messages_are_value_errors(message: dict[str, Any], match: str) -> None:
    log = ContextLog()
    with pytest.raises(ValueError, match=match):
        log.append(message)
    assert log.messages == []


def test_a_data_message_applies_the_value_at_its_path() -> None:
    log = state_log({"items": [1, 2]})
    log.append(
        {
            "type": "data",
            "kind": "state",
            "data": {"items": [None, "x"]},
            "_path": "†state.items[1]",
            "_outputMethod": "set",
        }
    )
    assert log.view("state") == {"items": [1, "x"]}


# -- atomicity --------------------------------------------------------------------------------


def test_a_failed_write_changes_nothing() -> None:
    log = state_log({"a": {"b": "text"}, "xs": [1]})
    before = snapshot(log)
    failing = [
        (t("†state.a.b.c.d"), "set", 1),
        (t("†state.new.deep[0]"), "set", 1),
        (t("†state.a.b"), "push", 1),
        (t("†state.a"), "concat", [1]),
        (t("†state.xs"), "merge", {"k": 1}),
        (t("†state.xs[3]"), "set", 1),
        (t("†state.fresh.x"), "assign", [1]),
    ]
    for term, method, value in failing:
        error = log.check_write(term, method, value)
        assert error is not None
        with pytest.raises(WriteError) as caught:
            log.write(term, method, value, call={"_tool": "x"})
        assert str(caught.value) == error
        assert snapshot(log) == before
    assert not log.lookup(t("†state.new"))[0]


def test_a_failed_append_changes_nothing() -> None:
    log = state_log({"x": "text"})
    before = snapshot(log)
    bad = {"type": "data", "kind": "state", "data": {"x": 1}, "_path": "†state.x"}
    with pytest.raises(WriteError, match="cannot push onto a str"):
        log.append({**bad, "_outputMethod": "push"})
    assert snapshot(log) == before


def test_check_write_mutates_nothing() -> None:
    log = state_log({"a": {}})
    before = snapshot(log)
    assert log.check_write(t("†state.a.b.c"), "set", 1) is None
    assert log.check_write(t("†other.x.y"), "push", 1) is None
    assert snapshot(log) == before
    assert not log.has_view("other")


def test_a_failed_first_write_creates_no_view() -> None:
    log = ContextLog()
    with pytest.raises(WriteError):
        log.write(t("†state.a"), "merge", "not a dict")
    assert not log.has_view("state")
    assert log.messages == []


# -- aliasing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["set", "merge", "assign"])
def test_mutating_the_passed_value_does_not_change_the_view(method: str) -> None:
    log = ContextLog()
    value: dict[str, Any] = {"inner": {"xs": [1]}}
    message = log.write(t("†state.v"), method, value)
    value["inner"]["xs"].append(2)
    value["extra"] = 1
    assert log.view("state") == {"v": {"inner": {"xs": [1]}}}
    assert message["data"] == {"v": {"inner": {"xs": [1]}}}


def test_push_and_concat_copy_their_items() -> None:
    log = ContextLog()
    item: dict[str, Any] = {"n": 1}
    items: list[Any] = [{"n": 2}]
    log.write(t("†state.xs"), "push", item)
    log.write(t("†state.xs"), "concat", items)
    item["n"] = 99
    items[0]["n"] = 99
    items.append(3)
    assert log.view("state") == {"xs": [{"n": 1}, {"n": 2}]}


def test_concat_on_absent_does_not_keep_the_passed_list() -> None:
    log = ContextLog()
    xs = [1]
    log.write(t("†state.xs"), "concat", xs)
    assert log.view("state")["xs"] is not xs
    log.write(t("†state.xs"), "push", 2)
    assert xs == [1]


def test_the_view_shares_nothing_with_message_data() -> None:
    message = {"type": "data", "kind": "state", "data": {"a": {"b": [1]}}}
    log = ContextLog([message])
    log.write(t("†state.a.b"), "push", 2)
    log.write(t("†state.a"), "merge", {"c": 1})
    assert message["data"] == {"a": {"b": [1]}}
    written = log.write(t("†state.d"), "set", {"e": [1]})
    log.write(t("†state.d.e"), "push", 2)
    assert written["data"] == {"d": {"e": [1]}}
    message["data"]["a"]["b"].append("changed")
    written["data"]["d"]["e"].append("changed")
    assert log.view("state") == {"a": {"b": [1, 2], "c": 1}, "d": {"e": [1, 2]}}


def test_mutating_the_call_after_writing_does_not_change_the_message() -> None:
    log = ContextLog()
    call: dict[str, Any] = {"_tool": "t", "p": [1]}
    message = log.write(t("†state.x"), "set", 1, call=call)
    call["p"].append(2)
    assert message["_call"] == {"_tool": "t", "p": [1]}


def test_copy_json_copies_containers_only() -> None:
    value = {"a": [1, {"b": "s"}], "t": (1, 2)}
    copied = copy_json(value)
    assert copied == {"a": [1, {"b": "s"}], "t": [1, 2]}
    assert copied["a"] is not value["a"] and copied["a"][1] is not value["a"][1]


# -- scale ------------------------------------------------------------------------------------


def test_many_writes_mutate_one_view_in_place() -> None:
    log = ContextLog()
    log.write(t("†state.x_0"), "set", 0)
    view = log.view("state")
    for i in range(1, 10_000):
        log.write(Term("state", (f"x_{i}",)), "set", i)
    assert log.view("state") is view
    assert len(view) == 10_000 and view["x_9999"] == 9999
    assert len(log.data_messages("state")) == 10_000


# -- the oracle: the seed chapter's reverse-chronological read ---------------------------------

Path = tuple[Step, ...]
Read = tuple[bool, Any]
ABSENT: Read = (False, None)


def o_lookup(value: Any, path: Path) -> Read:
    for step in path:
        if isinstance(step, int):
            if not isinstance(value, list) or step >= len(value):
                return ABSENT
        elif not isinstance(value, dict) or step not in value:
            return ABSENT
        value = value[step]
    return True, copy.deepcopy(value)


def o_decode(message: dict[str, Any]) -> tuple[Path, str, Any]:
    """Where a message applies, how, and what value: read straight from its own fields."""
    path = parse_term(message["_path"]).path if "_path" in message else ()
    present, value = o_lookup(message["data"], path)
    assert present
    return path, message.get("_outputMethod", "set"), value


def o_is_prefix(short: Path, long: Path) -> bool:
    return len(short) <= len(long) and long[: len(short)] == short


def o_deep_merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    merged = dict(old)
    for key, value in new.items():
        if isinstance(merged.get(key), dict) and isinstance(value, dict):
            merged[key] = o_deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def o_combine(method: str, read: Read, value: Any) -> Any:
    present, old = read
    if method == "set" or (not present and method != "push"):
        return value
    if method == "push":
        return [*old, value] if present else [value]
    if method == "concat":
        return [*old, *value]
    if method == "merge":
        return o_deep_merge(old, value)
    return {**old, **value}


def o_unset(read: Read, rel: Path) -> Read:
    """An `unset` at `rel` below the value being read: the key goes, if it is there."""
    if not rel:
        return ABSENT
    present, old = read
    step, rest = rel[0], rel[1:]
    if not present or not o_lookup(old, (step,))[0]:
        return read  # nothing there: nothing removed, nothing made
    container = copy.copy(old)
    child = o_unset((True, container[step]), rest)
    if child is ABSENT:
        del container[step]
    else:
        container[step] = child[1]
    return True, container


def o_apply_below(read: Read, rel: Path, method: str, value: Any) -> Read:
    """A write at `rel` below the value being read, rebuilt without mutating anything."""
    if method == "unset":
        return o_unset(read, rel)
    if not rel:
        return True, o_combine(method, read, copy.deepcopy(value))
    present, old = read
    step, rest = rel[0], rel[1:]
    if not present:
        assert isinstance(step, str), "the log holds a write the log should have refused"
        container: Any = {}
    else:
        container = copy.copy(old)
    child = o_lookup(container, (step,))
    _, new_child = o_apply_below(child, rest, method, value)
    if isinstance(step, int) and step == len(container):
        container.append(new_child)
    else:
        container[step] = new_child
    return True, container


def o_apply_above(
    earlier: list[dict[str, Any]], at: Path, method: str, value: Any, rel: Path, read: Read
) -> Read:
    """What a non-set write at `at`, a strict prefix of the read path, does to the read.

    `rel` is the rest of the read path below `at`; `earlier` is the log before the write,
    read again when the write's effect depends on the length of the list it extends.
    """
    first = rel[0]
    if method == "merge":
        current = value
        for depth, step in enumerate(rel):
            if isinstance(step, int) or not isinstance(current, dict):
                return o_lookup(current, rel[depth:])
            if step not in current:
                return read
            current = current[step]
        if read[0] and isinstance(read[1], dict) and isinstance(current, dict):
            return True, o_deep_merge(read[1], copy.deepcopy(current))
        return True, copy.deepcopy(current)
    if method == "assign":
        if isinstance(first, str) and first in value:
            return o_lookup(value[first], rel[1:])
        return read
    if isinstance(first, str):
        return read
    present, old = o_read(earlier, at)
    length = len(old) if present else 0
    added = [value] if method == "push" else value
    if length <= first < length + len(added):
        return o_lookup(added[first - length], rel[1:])
    return read


def o_read(messages: list[dict[str, Any]], path: Path) -> Read:
    """Read `path` from a kind's data messages, newest first, with no view kept anywhere."""
    newer: list[int] = []
    base = ABSENT
    for index in range(len(messages) - 1, -1, -1):
        at, method, value = o_decode(messages[index])
        if method == "set" and o_is_prefix(at, path):
            base = o_lookup(value, path[len(at) :])
            break
        if method == "unset" and o_is_prefix(at, path):
            break  # removed, with all below it: absent unless a newer write made it
        newer.append(index)
    read = base
    for index in reversed(newer):
        at, method, value = o_decode(messages[index])
        if o_is_prefix(path, at):
            read = o_apply_below(read, at[len(path) :], method, value)
        elif o_is_prefix(at, path):
            read = o_apply_above(messages[:index], at, method, value, path[len(at) :], read)
    return read


def test_oracle_agrees_on_a_hand_written_log() -> None:
    log = ContextLog()
    log.write(t("†state.xs"), "push", {"a": 1})
    log.write(t("†state.xs"), "concat", [{"b": 2}, 3])
    log.write(t("†state.xs[0]"), "merge", {"c": {"d": 1}})
    log.write(t("†state"), "merge", {"xs": 5, "y": {"z": 1}})
    log.write(t("†state.y"), "assign", {"w": 2})
    messages = log.data_messages("state")
    assert o_read(messages, ()) == (True, log.view("state"))
    assert o_read(messages, ("y", "w")) == (True, 2)
    assert o_read(messages[:3], ("xs", 0, "c", "d")) == (True, 1)
    assert o_read(messages[:3], ("xs", 2)) == (True, 3)
    assert o_read(messages[:3], ("xs", 3)) == ABSENT


# -- the property -----------------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "base"])
STEPS = st.one_of(KEYS, st.integers(min_value=0, max_value=2))
PATHS = st.lists(STEPS, max_size=3).map(tuple)
KINDS = st.sampled_from(["state", "state", "state", "other"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2, max_value=2) | st.sampled_from(["", "s"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)
# Objects of objects over few keys, so merge and assign often meet a dict under a shared key.
OBJECTS = st.dictionaries(KEYS, st.dictionaries(KEYS, JSON, max_size=2) | JSON, max_size=3)
VALUES_FOR = {
    "set": OBJECTS | JSON,
    "push": JSON,
    "merge": OBJECTS | JSON,
    "assign": OBJECTS | JSON,
    "concat": st.lists(JSON, max_size=3) | JSON,
    "unset": st.none(),  # the value of an unset is never read
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_views_match_the_reverse_chronological_read(data: st.DataObject) -> None:
    log = ContextLog()
    for _ in range(data.draw(st.integers(min_value=1, max_value=25), label="writes")):
        kind = data.draw(KINDS, label="kind")
        method = data.draw(st.sampled_from(METHODS), label="method")
        value = data.draw(VALUES_FOR[method], label="value")
        if data.draw(st.integers(0, 9), label="raw") == 0:
            # A user-supplied root message: no _path, and no _outputMethod when it is a set.
            message = {"type": "data", "kind": kind, "data": value}
            if method != "set":
                message["_outputMethod"] = method
            expected_error = log.check_write(Term(kind), method, value)
            before = snapshot(log)
            try:
                log.append(message)
            except WriteError as error:
                assert str(error) == expected_error
                assert snapshot(log) == before
            else:
                assert expected_error is None
            continue
        term = Term(kind, data.draw(PATHS, label="path"))
        expected_error = log.check_write(term, method, value)
        before = snapshot(log)
        kept = copy.deepcopy(value)
        try:
            message = log.write(term, method, value)
        except WriteError as error:
            assert str(error) == expected_error
            assert snapshot(log) == before
        else:
            assert expected_error is None
            assert log.messages[-1] is message
        assert value == kept

    for kind in ("state", "other"):
        messages = log.data_messages(kind)
        assert messages == [m for m in log.messages if m.get("kind") == kind]
        assert o_read(messages, ()) == (log.has_view(kind), log.view(kind))
        for path in data.draw(st.lists(PATHS, max_size=6), label="reads"):
            assert o_read(messages, path) == log.lookup(Term(kind, path)), path

    replayed = ContextLog(json.loads(json.dumps(log.messages)))
    for kind in ("state", "other"):
        assert (replayed.has_view(kind), replayed.view(kind)) == (
            log.has_view(kind),
            log.view(kind),
        )


# -- values too deep, keys that are not strings --------------------------------------------


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_shape_fault_finds_depth_and_keys_without_recursion() -> None:
    assert shape_fault(1, 0) is None
    assert shape_fault(nested(3), 3) is None
    assert shape_fault(nested(4), 3) == "nests deeper than 3 levels of arrays and objects"
    assert shape_fault(nested(100_000), 64) is not None  # far beyond the recursion limit
    assert shape_fault({"a": [{"b": ({},)}]}, 5) is None
    assert shape_fault({"a": [{"b": ({},)}]}, 4) is not None  # tuples are arrays too
    assert shape_fault({"a": [{1: "b"}]}, 64) == ("has an object key that is not a string: 1 (int)")
    loop: list[Any] = []
    loop.append(loop)
    assert shape_fault(loop, 64) is not None


def test_cut_json_is_bounded_in_depth_and_size_and_shows_odd_keys_as_text() -> None:
    assert cut_json(nested(100_000), 3) == (nested(3, "<cut: nested too deep>"), True)
    assert cut_json(nested(3), 3) == (nested(3), False)
    assert cut_json({"a": {1: [2]}, "b": 3}, 64) == ({"a": {"1 (int)": [2]}, "b": 3}, False)
    loop: list[Any] = [1]
    loop.append(loop)
    loop.append(loop)  # 2**64 lists when copied whole
    shown, cut = cut_json(loop, 64)
    json.dumps(shown)
    assert cut
    assert shown[0] == 1 and shape_fault(shown, 64) is None


class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_short_repr_never_raises_and_stays_short() -> None:
    assert short_repr(_BadRepr()) == "<unprintable _BadRepr>"
    assert short_repr("x" * 1000) == "'" + "x" * 56 + "..."
    assert describe_key(_BadRepr()) == "<unprintable _BadRepr> (_BadRepr)"


@pytest.mark.parametrize("method", ["set", "push", "concat"])
def test_a_value_too_deep_to_store_is_a_write_error_and_nothing_changes(method: str) -> None:
    log = state_log({"a": []})
    before = snapshot(log)
    value = [nested(MAX_VALUE_DEPTH)]  # one level too many, as a list for concat
    with pytest.raises(WriteError, match=f"nests deeper than {MAX_VALUE_DEPTH} levels"):
        log.write(t("†state.a"), method, value)
    with pytest.raises(WriteError, match=r"at †state\.b"):  # a fan-out fails whole
        log.write_many([t("†state.b"), t("†state.a")], method, value)
    assert snapshot(log) == before
    log.write(t("†state.a"), "set", nested(MAX_VALUE_DEPTH))  # the limit itself is fine
    json.dumps(log.view("state"))


def test_a_value_with_a_key_that_is_not_a_string_is_a_write_error() -> None:
    log = state_log({})
    with pytest.raises(WriteError, match=r"key that is not a string: \('t',\) \(tuple\)"):
        log.write(t("†state.a"), "merge", {"x": {("t",): 1}})
    assert log.view("state") == {}

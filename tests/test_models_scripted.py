"""Tests of ScriptedModel, the no-network model of examples, tests and the demo.

Timing is checked on trio's MockClock: virtual time, exact and instant.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import trio
import trio.testing

from tickloop._errors import ConfigurationError
from tickloop._models._base import ModelClient, ModelError, SolutionRequest, TextDelta, Usage
from tickloop._models._scripted import ScriptedModel

SCHEMA = {"type": "object", "properties": {"calls": {"type": "array"}}}
SOLUTION = {"calls": [{"tool": "add", "args": {"a": 1, "b": 2}}], "output": None}


def request(iteration: int = 1, text: str = "hi") -> SolutionRequest:
    return SolutionRequest(
        messages=[{"role": "user", "content": text}],
        schema=json.loads(json.dumps(SCHEMA)),
        iteration=iteration,
    )


def collect(model: ScriptedModel, req: SolutionRequest) -> list[TextDelta | Usage]:
    async def main() -> list[TextDelta | Usage]:
        return [item async for item in model.stream_solution(req)]

    return trio.run(main)


def texts(items: list[TextDelta | Usage]) -> list[str]:
    return [item.text for item in items if isinstance(item, TextDelta)]


def arrival_times(model: ScriptedModel, req: SolutionRequest, work: float = 0.0) -> list[float]:
    """When each chunk reached a consumer that spends `work` seconds on each one."""

    async def main() -> list[float]:
        await trio.sleep(5)  # the request is not made at time zero
        start = trio.current_time()
        times = []
        async for item in model.stream_solution(req):
            if isinstance(item, TextDelta):
                times.append(trio.current_time() - start)
                await trio.sleep(work)
        return times

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_is_a_model_client() -> None:
    assert isinstance(ScriptedModel([SOLUTION]), ModelClient)


def test_dict_response_is_sent_as_compact_json_in_chunks() -> None:
    solution = {"calls": [], "output": {"city": "Zürich", "note": "naïve ☃"}}
    chunks = texts(collect(ScriptedModel([solution], chunk_chars=5), request()))
    text = json.dumps(solution, ensure_ascii=False)
    assert "".join(chunks) == text  # non-ASCII kept as it is, not \u-escaped
    assert [len(chunk) for chunk in chunks[:-1]] == [5] * (len(chunks) - 1)
    assert 1 <= len(chunks[-1]) <= 5
    assert len(chunks) == math.ceil(len(text) / 5)


def test_default_chunk_size_is_sixteen() -> None:
    text = "x" * 40
    assert texts(collect(ScriptedModel([text]), request())) == ["x" * 16, "x" * 16, "x" * 8]


def test_string_response_is_sent_verbatim() -> None:
    broken = '{"calls": [{"tool": "add", "args": {"a": 1'
    assert "".join(texts(collect(ScriptedModel([broken], chunk_chars=7), request()))) == broken


def test_empty_string_response_sends_no_text() -> None:
    assert texts(collect(ScriptedModel([""]), request())) == []


def test_iteration_k_gets_response_k() -> None:
    model = ScriptedModel(["first", "second", "third"], chunk_chars=100)
    assert texts(collect(model, request(iteration=2))) == ["second"]
    # A resumed run continues where its log stopped, not from the start of the script.
    assert texts(collect(model, request(iteration=3))) == ["third"]
    assert texts(collect(model, request(iteration=1))) == ["first"]


def test_past_the_end_is_a_non_retryable_error_naming_the_script_length() -> None:
    model = ScriptedModel([SOLUTION, SOLUTION])
    with pytest.raises(ModelError) as caught:
        collect(model, request(iteration=3))
    assert caught.value.status == 400
    assert not caught.value.retryable
    assert "2 response(s)" in str(caught.value)
    assert "iteration 3" in str(caught.value)
    assert len(model.requests) == 1  # the request was received, and recorded


def test_requests_are_json_snapshots_of_what_was_received() -> None:
    model = ScriptedModel([SOLUTION, SOLUTION])
    first = request(iteration=1, text="first question")
    collect(model, first)
    collect(model, request(iteration=2, text="second"))
    first.messages.append({"role": "assistant", "content": "added later"})
    first.schema["title"] = "changed later"

    assert model.requests == [
        {"messages": [{"role": "user", "content": "first question"}], "schema": SCHEMA},
        {"messages": [{"role": "user", "content": "second"}], "schema": SCHEMA},
    ]
    assert json.loads(json.dumps(model.requests)) == model.requests


def test_requests_are_decoded_when_read_and_kept_once_read() -> None:
    """A run that never reads `requests` (the demo, a benchmark) pays for one snapshot
    of each request, not a decoding too; reading them decodes each once, into the same
    list every time, so a test may keep it and see later requests join it."""
    from unittest.mock import patch

    from tickloop._models import _scripted

    model = ScriptedModel([SOLUTION, SOLUTION])
    first, second = request(iteration=1, text="first"), request(iteration=2, text="second")
    with patch.object(_scripted.json, "loads", wraps=json.loads) as loads:
        collect(model, first)
        assert loads.call_count == 0
        seen = model.requests
        assert [r["messages"][0]["content"] for r in seen] == ["first"]
        collect(model, second)
        assert model.requests is seen and [r["messages"][0]["content"] for r in seen] == [
            "first",
            "second",
        ]
        assert loads.call_count == 2


def test_usage_estimates_four_characters_a_token() -> None:
    text = "y" * 41
    req = request()
    items = collect(ScriptedModel([text]), req)
    assert isinstance(items[-1], Usage)
    assert items[-1].output_tokens == 11
    assert items[-1].input_tokens == math.ceil(len(json.dumps(req.to_dict())) / 4)
    assert sum(isinstance(item, Usage) for item in items) == 1


def test_usage_can_be_left_out() -> None:
    items = collect(ScriptedModel(["abc"], usage=False), request())
    assert items == [TextDelta("abc")]


def test_chunk_i_arrives_at_i_times_chunk_delay() -> None:
    model = ScriptedModel(["a" * 10], chunk_chars=2, chunk_delay=0.25)
    assert arrival_times(model, request()) == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])


def test_chunk_times_do_not_drift_with_a_slow_consumer() -> None:
    # Each chunk costs the consumer 0.1 s: a model that slept chunk_delay after each
    # chunk would send chunk i at i * 0.35; the schedule is fixed from the request.
    model = ScriptedModel(["a" * 8], chunk_chars=2, chunk_delay=0.25)
    assert arrival_times(model, request(), work=0.1) == pytest.approx([0.0, 0.25, 0.5, 0.75])


def test_a_consumer_slower_than_the_schedule_gets_late_chunks_at_once() -> None:
    model = ScriptedModel(["a" * 6], chunk_chars=2, chunk_delay=0.25)
    assert arrival_times(model, request(), work=1.0) == pytest.approx([0.0, 1.0, 2.0])


def test_first_token_delay_shifts_every_chunk() -> None:
    model = ScriptedModel(["a" * 6], chunk_chars=2, chunk_delay=0.5, first_token_delay=3.0)
    assert arrival_times(model, request()) == pytest.approx([3.0, 3.5, 4.0])


def test_no_delay_takes_no_time() -> None:
    model = ScriptedModel(["a" * 100], chunk_chars=1)
    assert arrival_times(model, request()) == [0.0] * 100


def test_responses_are_serialised_when_the_model_is_made() -> None:
    solution: dict[str, Any] = {"calls": [], "output": None}
    model = ScriptedModel([solution])
    solution["output"] = "changed afterwards"
    assert "".join(texts(collect(model, request()))) == '{"calls": [], "output": null}'


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (([{"a": object()}],), {}),
        (([42],), {}),
        (("one string",), {}),
        (([],), {"chunk_chars": 0}),
        (([],), {"chunk_delay": -1.0}),
        (([],), {"first_token_delay": -0.5}),
    ],
)
def test_bad_scripts_fail_before_anything_runs(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(ConfigurationError):
        ScriptedModel(*args, **kwargs)

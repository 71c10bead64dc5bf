"""Hot paths made cheaper for issue 15 keep their exact results."""

from __future__ import annotations

import gc
import re
from datetime import UTC, datetime, timedelta

import tickloop as tl
from tickloop._engine._engine import utc_now

_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def test_the_write_date_is_iso_utc_with_microseconds_and_follows_the_clock() -> None:
    before = datetime.now(UTC)
    stamps = [utc_now() for _ in range(2000)]
    after = datetime.now(UTC)
    for stamp in stamps:
        assert _ISO.fullmatch(stamp), stamp
    dates = [datetime.fromisoformat(stamp.replace("Z", "+00:00")) for stamp in stamps]
    assert dates == sorted(dates)  # never backwards within a second or across one
    tolerance = timedelta(milliseconds=1)  # datetime.now and time.time round apart
    assert before - tolerance <= dates[0] and dates[-1] <= after + tolerance


@tl.tool
async def write(i: int) -> int:
    """Write its number."""
    return i


def _expressions_alive() -> int:
    gc.collect()
    return sum(1 for held in gc.get_objects() if type(held) is tl.Expression)


def test_a_run_that_has_ended_keeps_few_of_its_calls_parsed_paths() -> None:
    """Each call's own output path is parsed as it arrives, and most are spelled once: the
    parser keeps the last few dozen texts, not one per call of the run (a cache of
    thousands held them all and evicted them cold, at a cost the clock shows per call;
    docs/decisions.md "A small parse cache")."""
    tl.parse_expression.cache_clear()
    before = _expressions_alive()
    calls = [{"_tool": "write", "i": i, "_outputPath": f"†state.r{i}"} for i in range(1000)]
    result = tl.run_calls(calls, tools=[write])
    assert result.state == {f"r{i}": i for i in range(1000)}
    del result
    assert _expressions_alive() - before <= 64

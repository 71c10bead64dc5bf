"""Hot paths made cheaper for issue 15 keep their exact results."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

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

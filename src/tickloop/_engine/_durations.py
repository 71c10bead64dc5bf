"""The mean duration of each tool's finished calls in this process (PROTOCOL §13).

The engine measures each call it runs (on the run's trio clock, so virtual under a
MockClock) and files it here by tool name; the scheduler reads the means as data, to rank
calls a limit holds back when a tool declares no `expected_duration`. Runs may go on in
several threads at once, so every read and write holds the lock.
"""

from __future__ import annotations

import threading

__all__ = ["MEASURED", "MeasuredDurations", "RunDurations"]


class MeasuredDurations:
    """Sum and count of measured seconds by tool name; `version` counts the changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, tuple[float, int]] = {}
        self._version = 0

    @property
    def version(self) -> int:
        with self._lock:
            return self._version

    def add_many(self, tool: str, seconds: float, count: int) -> None:
        if not seconds >= 0.0 or count <= 0:  # a clock that went back (or NaN)
            return
        with self._lock:
            total, known = self._totals.get(tool, (0.0, 0))
            self._totals[tool] = (total + seconds, known + count)
            self._version += 1

    def totals(self, tool: str) -> tuple[float, int]:
        with self._lock:
            return self._totals.get(tool, (0.0, 0))

    def mean(self, tool: str) -> float | None:
        total, count = self.totals(tool)
        # A tool that took no time at all still costs something to start: never 0.
        return max(total / count, 1e-6) if count else None

    def clear(self) -> None:
        with self._lock:
            self._totals.clear()
            self._version += 1


MEASURED = MeasuredDurations()


class RunDurations:
    """One run's measurements, over the process's: what the run's scheduler reads.

    Filed without a lock (a run's calls finish on its one trio thread), and added to the
    process's table when the run's session ends (`merge`)."""

    def __init__(self, process: MeasuredDurations = MEASURED) -> None:
        self._process = process
        self._own: dict[str, list[float]] = {}  # tool -> [seconds, count]
        self._changes = 0

    @property
    def version(self) -> int:
        return self._process.version + self._changes

    def add(self, tool: str, seconds: float) -> None:
        own = self._own.get(tool)
        if own is None:
            self._own[tool] = [seconds, 1.0]
        else:
            own[0] += seconds
            own[1] += 1.0
        self._changes += 1

    def mean(self, tool: str) -> float | None:
        total, count = self._process.totals(tool)
        own = self._own.get(tool)
        if own is not None:
            total, count = total + own[0], count + int(own[1])
        if not count:
            return None
        return max(total / count, 1e-6)

    def merge(self) -> None:
        """Hand this run's measurements to the process (once, as the run ends)."""
        own, self._own = self._own, {}
        for tool, (seconds, count) in own.items():
            self._process.add_many(tool, seconds, int(count))

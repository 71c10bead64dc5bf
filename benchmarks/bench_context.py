"""What a large tool result costs every later request, with and without the context budget.

A 5-iteration run whose first call returns a 250 KB page (PROTOCOL §8): each later request
is measured in bytes (its messages as JSON, UTF-8) and compared with the same run whose page
is empty. Target: with the default budget every later request stays under 1.2x the size it
has without the page. `context_budget=None` (everything shown) is measured beside it.

Run: python benchmarks/bench_context.py
"""

from __future__ import annotations

import json
from typing import Any

import trio
from trio.testing import MockClock

import tickloop as tl

PAGE_BYTES = 250_000
ITERATIONS = 5
TARGET = 1.2


def _script() -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [
        {
            "calls": [
                {"_tool": "fetch", "url": "https://example.org", "_outputPath": "†state.page"}
            ],
            "output": None,
        }
    ]
    for k in range(2, ITERATIONS):
        steps.append(
            {
                "calls": [
                    {"_tool": "count", "text": "†state.page", "_outputPath": f"†state.count{k}"}
                ],
                "output": None,
            }
        )
    steps.append({"calls": [], "output": "†state.count2"})
    return steps


def request_bytes(page_bytes: int, budget: int | str | None = "default") -> list[int]:
    """Bytes of each request of the 5-iteration run."""

    @tl.tool
    async def fetch(url: str) -> str:
        """Fetch a page."""
        return "x" * page_bytes

    @tl.tool
    async def count(text: str) -> int:
        """Count its characters (reads the whole page by reference)."""
        return len(text)

    options: dict[str, Any] = {} if budget == "default" else {"context_budget": budget}
    model = tl.ScriptedModel(_script())
    agent = tl.Agent(model, tools=[fetch, count], **options)
    result = trio.run(agent.run_async, clock=MockClock(autojump_threshold=0))
    assert result.output == page_bytes, result.output  # every read saw the whole page
    return [
        len(json.dumps(request["messages"], ensure_ascii=False).encode())
        for request in model.requests
    ]


def measure() -> dict[str, Any]:
    without = request_bytes(0)
    with_budget = request_bytes(PAGE_BYTES)
    unlimited = request_bytes(PAGE_BYTES, None)
    ratios = [a / b for a, b in zip(with_budget[1:], without[1:], strict=True)]
    return {
        "without_page": without,
        "default_budget": with_budget,
        "no_budget": unlimited,
        "worst_ratio": max(ratios),
        "met": max(ratios) < TARGET,
    }


def main() -> None:
    figures = measure()
    print(f"request bytes, {ITERATIONS} iterations, first call returns a {PAGE_BYTES:,}-byte page")
    print("| request | without the page | default budget | ratio | context_budget=None |")
    print("| --- | --- | --- | --- | --- |")
    for i, (a, b, c) in enumerate(
        zip(figures["without_page"], figures["default_budget"], figures["no_budget"], strict=True),
        start=1,
    ):
        print(f"| {i} | {a:,} | {b:,} | {b / a:.2f}× | {c:,} |")
    verdict = "met" if figures["met"] else "MISSED"
    print(
        f"\nworst later request: {figures['worst_ratio']:.2f}× its size without the page "
        f"(target < {TARGET}×): {verdict}"
    )


if __name__ == "__main__":
    main()

"""Throughput of `SolutionStream` on large streamed solutions.

The parser must stay linear in the solution's length: a parser that re-scanned its buffer
per chunk would look fine on small solutions and fall over on big ones. So this measures
time per MB at several sizes, with the 64-character chunks a streaming model typically
delivers, and reports how time per MB at 1 MB compares with 100 kB (target: ratio <= 1.3).

Run: python benchmarks/bench_jsonstream.py
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from tickloop._json._stream import SolutionStream

SIZES = [100_000, 250_000, 500_000, 1_000_000]
CHUNK = 64
RUNS = 5

_WORDS = (
    "the quick brown fox jumps over a lazy dog while an agent plans its next tool call "
    "and waits for results from the network before it writes a summary of every page"
).split()


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _call(rng: random.Random, index: int) -> dict[str, Any]:
    """One call shaped like what models write: references, nested params, prose, escapes."""
    kind = index % 4
    call_id = f"c1.{index + 1}"
    if kind == 0:
        return {
            "_tool": "fetch",
            "url": f"https://example.com/articles/{index}?lang=en&page={rng.randint(1, 9)}",
            "headers": {"Accept": "text/html", "User-Agent": "tickloop-bench/1.0"},
            "timeout": 10.5,
            "_outputPath": f"†state.pages.p{index}",
            "_id": call_id,
        }
    if kind == 1:
        return {
            "_tool": "summarize",
            "text": f"†state.pages.p{index - 1}.body",
            "max_words": rng.randint(50, 300),
            "style": {"tone": "neutral", "bullets": True, "keywords": _WORDS[:5]},
            "_outputPath": f"†state.summaries[{index}]",
            "_outputMethod": "append",
            "_id": call_id,
        }
    if kind == 2:
        return {
            "_tool": "write_file",
            "path": f"/tmp/out/report_{index}.md",
            "content": "# Report\n\n"
            + _sentence(rng, 60)
            + '\n\n> "quoted" text with {braces} and [brackets] \\ backslash\n',
            "overwrite": False,
            "_id": call_id,
        }
    return {
        "_tool": "search",
        "query": _sentence(rng, 8),
        "filters": {"year": [2021, 2022, 2023], "lang": "en", "min_score": 0.75},
        "limit": 20,
        "note": None,
        "_id": call_id,
    }


def build_solution(target_chars: int, seed: int = 7) -> str:
    """A solution text of about `target_chars` characters, as a model would stream it."""
    rng = random.Random(seed)
    calls: list[dict[str, Any]] = []
    size = 0
    while size < target_chars:
        call = _call(rng, len(calls))
        calls.append(call)
        size += len(json.dumps(call, ensure_ascii=False)) + 2
    return json.dumps({"calls": calls, "output": None}, ensure_ascii=False)


def feed_all(text: str) -> int:
    stream = SolutionStream()
    emitted = 0
    for i in range(0, len(text), CHUNK):
        emitted += len(stream.feed(text[i : i + CHUNK]))
    outcome = stream.close()
    if outcome.error is not None or outcome.calls != emitted:
        raise AssertionError(f"benchmark solution did not parse: {outcome.error}")
    return emitted


def best_time(text: str) -> tuple[float, int]:
    best = float("inf")
    calls = 0
    for _ in range(RUNS):
        start = time.perf_counter()
        calls = feed_all(text)
        best = min(best, time.perf_counter() - start)
    return best, calls


def main() -> None:
    print(f"SolutionStream, {CHUNK}-character chunks, best of {RUNS} runs\n")
    header = f"{'size':>10} {'chars':>10} {'calls':>7} {'time (ms)':>10} {'MB/s':>8} {'s/MB':>8}"
    print(header)
    print("-" * len(header))
    per_mb: dict[int, float] = {}
    for target in SIZES:
        text = build_solution(target)
        seconds, calls = best_time(text)
        megabytes = len(text) / 1_000_000
        per_mb[target] = seconds / megabytes
        label = f"{target // 1000} kB" if target < 1_000_000 else f"{target // 1_000_000} MB"
        print(
            f"{label:>10} {len(text):>10} {calls:>7} {seconds * 1000:>10.1f} "
            f"{megabytes / seconds:>8.2f} {per_mb[target]:>8.3f}"
        )
    ratio = per_mb[SIZES[-1]] / per_mb[SIZES[0]]
    verdict = "flat" if ratio <= 1.3 else "NOT flat"
    print(f"\ntime per MB at 1 MB / at 100 kB: {ratio:.2f} (target <= 1.3: {verdict})")


if __name__ == "__main__":
    main()

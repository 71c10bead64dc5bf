"""The agents of the committed recordings, and the script that records them again.

`tests/recordings/live.db` holds real runs of these agents against a real model server
(docs/replay.md "A recording made against a real server"), one run per protocol;
tests/test_recorded_live.py replays them offline in CI, so the agents here must stay
exactly the ones recorded: a change to an instruction, a tool's description or a schema
makes the strict replay fail, naming what changed. Record again when it was meant:

    python -m tests.recordings.record --base-url http://127.0.0.1:8765/v1

(from the repository's root, with the llama.cpp server of docs/models.md running). It
replaces live.db, prints each run's ending, and compacts the file.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path
from typing import Any

import tickloop as tl

RECORDING = Path(__file__).with_name("live.db")

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi", "Peru": "Lima"}


@tl.tool
def capital_of(country: str) -> str:
    """The capital city of a country, e.g. capital_of("Italy") -> "Rome"."""
    return CAPITALS.get(country.strip().title(), f"unknown country {country!r}")


@tl.tool
def add(a: int, b: int) -> int:
    """Add two integers and return the sum."""
    return a + b


def solution_agent(model: Any, store: tl.SQLiteStore | None = None) -> tl.Agent[Any]:
    """A plan-writing agent (protocol "solution") with one lookup tool."""
    return tl.Agent(
        model,
        tools=[capital_of],
        output={
            "type": "object",
            "properties": {"capital": {"type": "string"}},
            "required": ["capital"],
        },
        # A 270M-parameter model copies an example far better than it follows a rule.
        instructions=(
            "Find the capital of the country in the input with the capital_of tool. Write "
            'exactly this solution: {"calls": [{"_tool": "capital_of", "country": '
            '"†input.country", "_outputPath": "†state.capital"}], "output": {"capital": '
            '"†state.capital"}}'
        ),
        max_iterations=3,
        store=store,
    )


def tools_agent(model: Any, store: tl.SQLiteStore | None = None) -> tl.Agent[Any]:
    """A native function-calling agent (protocol "tools") with two small tools."""
    return tl.Agent(
        model,
        tools=[capital_of, add],
        protocol="tools",
        instructions=(
            "Answer in one short sentence. Use the tools: capital_of for a capital, add for a sum."
        ),
        max_iterations=3,
        store=store,
    )


# run id -> (the agent's maker, its input): what record() runs and the test replays.
RUNS: dict[str, tuple[Any, Any]] = {
    "solution": (solution_agent, {"country": "France"}),
    "tools": (tools_agent, "What is the capital of Japan?"),
}


# A small model may write on until its context is full: an answer is cut here (on 2
# shared CPU cores a token takes about 0.1 s to write).
MAX_TOKENS = 128


def server_model(base_url: str) -> tl.OpenAIChat:
    """The recording client: greedy decoding, answers of at most MAX_TOKENS, the default
    structured mode (the client steps down by itself where the server does not take
    json_schema)."""
    return tl.OpenAIChat(
        "local",
        base_url=base_url,
        api_key="none",
        temperature=0.0,
        extra_body={"max_tokens": MAX_TOKENS},
    )


def record(base_url: str, path: Path = RECORDING) -> None:
    path.unlink(missing_ok=True)
    store = tl.SQLiteStore(path)
    for run_id, (make, task) in RUNS.items():
        model = server_model(base_url)
        try:
            result = make(model, store).run(task, run_id=run_id)
            ending = f"output {result.output!r} after {result.iterations} iteration(s)"
        except tl.RunStopped as error:  # a real run that ends in an error is recorded too
            ending = f"{type(error).__name__}: {error}"
        print(f"{run_id}: {ending} (structured mode {model.mode!r})")
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("VACUUM")
    print(f"{path}: {path.stat().st_size} bytes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="the server's URL, with /v1")
    parser.add_argument("--out", type=Path, default=RECORDING)
    args = parser.parse_args(argv)
    record(args.base_url, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

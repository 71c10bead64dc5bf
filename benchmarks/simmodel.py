"""The simulated model every strategy talks to, and the texts it answers with.

The model is tickloop's own `ScriptedModel`: it streams a prepared answer in chunks of
`chunk_chars` characters, chunk i arriving `overhead + ttft + i * chunk_chars / rate`
seconds after the request (the per-request overhead — network, queueing, prompt
processing — and the time to first token are both paid before the first chunk, so to the
stream they are one delay; they are kept apart here only to say what they stand for).

`Recorder` wraps it to note when each request began and ended (for the timelines), and,
for the strategies that do not dispatch while the model writes, to hold the text back
until the stream has ended and hand it over in one piece, which is what an SDK that
parses a finished response does.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import trio

import tickloop as tl
from tickloop._models._base import TextDelta  # not re-exported by tickloop (yet)

from .workloads import Node, Workload

__all__ = [
    "FINAL_ANSWER",
    "ModelCosts",
    "Recorder",
    "call_text",
    "final_text",
    "scripts",
    "solution_text",
    "thought",
]

THOUGHT = (
    "Thought: to answer this I need the results of these tools, so I call them now and "
    "pass each result on by reference. "
)
# What the final request answers: ~160 characters, the same for every strategy.
FINAL_ANSWER = (
    "Based on the results gathered above, the answer is the second option: it has the "
    "larger value on every measure that was looked up, by a clear margin in each case."
)


@dataclass(frozen=True)
class ModelCosts:
    """What one model request costs, in model seconds (scaled for the real clock)."""

    overhead: float = 0.3  # per request: network, queueing, reading the prompt
    ttft: float = 0.5  # time to first token
    chars_per_second: float = 250.0  # ~70 tokens/s at ~3.5 characters a token (JSON)
    chunk_chars: int = 16
    thought_chars: int = 120  # a one-sentence thought before every answer's JSON

    def scaled(self, scale: float) -> ScaledCosts:
        return ScaledCosts(
            first_chunk=(self.overhead + self.ttft) * scale,
            chunk_delay=self.chunk_chars / self.chars_per_second * scale,
            chunk_chars=self.chunk_chars,
        )


@dataclass(frozen=True)
class ScaledCosts:
    first_chunk: float  # seconds from the request to the first chunk
    chunk_delay: float  # seconds between chunks
    chunk_chars: int

    def chunk_time(self, index: int) -> float:
        """When chunk `index` arrives, relative to the request (ScriptedModel's formula)."""
        return self.first_chunk + index * self.chunk_delay

    def chunk_of(self, offset: int) -> int:
        """The chunk that carries character `offset` of the answer."""
        return offset // self.chunk_chars

    def duration(self, text: str) -> float:
        """From the request to the last chunk of `text`."""
        return self.chunk_time(self.chunk_of(max(len(text) - 1, 0)))

    def model(self, responses: Sequence[str]) -> tl.ScriptedModel:
        return tl.ScriptedModel(
            list(responses),
            chunk_chars=self.chunk_chars,
            chunk_delay=self.chunk_delay,
            first_token_delay=self.first_chunk,
            usage=False,
        )


def thought(chars: int) -> str:
    """The reasoning a model writes before its JSON (ReAct's "Thought:"), `chars` long."""
    if chars <= 0:
        return ""
    body = (THOUGHT * (chars // len(THOUGHT) + 1))[: chars - 1]
    return body + "\n"


def call_dict(node: Node) -> dict[str, Any]:
    """A call as the model writes it: the tool, its argument, what it reads, where it writes.

    No `_id`: the engine numbers calls itself, and a call is told apart by its output path.
    """
    call: dict[str, Any] = {"_tool": node.tool, "key": node.key}
    if node.deps:
        call["inputs"] = [f"†state.{dep}" for dep in node.deps]
    call["_outputPath"] = f"†state.{node.key}"
    return call


def call_text(node: Node) -> str:
    return json.dumps(call_dict(node), ensure_ascii=False)


def solution_text(nodes: Sequence[Node], prefix: str = "") -> tuple[str, dict[str, int]]:
    """The answer that writes `nodes` in order, and where each call's object closes.

    The text is `prefix` (a thought) then exactly `json.dumps({"calls": [...], "output":
    None})`; the offsets are of each call's closing brace, the character whose arrival
    hands the call to the tick.
    """
    head = prefix + '{"calls": ['
    parts: list[str] = []
    closes: dict[str, int] = {}
    position = len(head)
    for i, node in enumerate(nodes):
        if i:
            parts.append(", ")
            position += 2
        text = call_text(node)
        parts.append(text)
        position += len(text)
        closes[node.key] = position - 1
    text = head + "".join(parts) + '], "output": null}'
    solution = json.loads(text[len(prefix) :])
    assert solution == {"calls": [call_dict(n) for n in nodes], "output": None}
    return text, closes


def final_text(prefix: str = "") -> str:
    answer = {"calls": [], "output": {"answer": FINAL_ANSWER}}
    return prefix + json.dumps(answer, ensure_ascii=False)


def scripts(workload: Workload, costs: ModelCosts) -> dict[str, list[str]]:
    """Each strategy's answers, request by request; the last one always gives the output."""
    pre = thought(costs.thought_chars)
    final = final_text(pre)
    plan = solution_text(workload.nodes, pre)[0]
    return {
        "sequential": [solution_text([node], pre)[0] for node in workload.nodes] + [final],
        "per_turn": [solution_text(level, pre)[0] for level in workload.levels()] + [final],
        "batch": [plan, final],
        "tickloop": [plan, final],
    }


class Recorder:
    """Wraps a model client: records each request's (start, end), optionally buffers.

    With `buffer=True` the whole answer is handed on in one piece when its stream has
    ended, so no call can start before the response is complete.
    """

    def __init__(self, inner: Any, *, buffer: bool) -> None:
        self.inner = inner
        self.buffer = buffer
        self.spans: list[tuple[float, float]] = []

    async def stream_solution(self, request: tl.SolutionRequest) -> AsyncIterator[Any]:
        start = trio.current_time()
        if self.buffer:
            parts: list[str] = []
            others: list[Any] = []
            async for item in self.inner.stream_solution(request):
                if isinstance(item, TextDelta):
                    parts.append(item.text)
                else:
                    others.append(item)
            self.spans.append((start, trio.current_time()))
            yield TextDelta("".join(parts))
            for item in others:
                yield item
        else:
            async for item in self.inner.stream_solution(request):
                yield item
            self.spans.append((start, trio.current_time()))

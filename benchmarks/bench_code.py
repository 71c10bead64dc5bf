"""Issue 40's benchmark: code plans side by side with the peers' code modes, in one run.

The same programs over the same read-only tools, driven by each framework's own scripted
model, on the real clock (the peers do not run on trio, so every tool sleeps `LATENCY`
real seconds):

- tickloop: `tl.Agent(..., protocol="code")` on `tl.ScriptedModel` (the program is a string;
  tools `read_only=True`);
- Pydantic AI: `CodeMode` of `pydantic-ai-harness` (its Monty sandbox) on `FunctionModel`
  answering one `run_code` call with the program;
- smolagents: `CodeAgent` (its `LocalPythonExecutor`) on a `Model` whose `generate`
  returns the program.

1. makespan over the critical path (4 of the 7 calls' latencies) for two program styles:
   call-by-call (one `a = fetch(...)` a line, dependent and independent lines mixed) and
   gather style (`asyncio.gather` over each level). A style a peer cannot run is n/a with
   its reason.
2. tickloop's first tool start while the program streams (`chunk_delay`), against the
   time the whole program takes to stream.
3. per-call cost of `protocol="code"` over `protocol="solution"`: one fan-out of many
   no-op calls, as a program and as a JSON solution, best of interleaved runs.

Every figure is a ratio of times taken in this process; none is asserted.
Run: python -m benchmarks.bench_code [--latency S] [--repeats N] [--fan-out N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import trio

import tickloop as tl

LATENCY = 0.1  # real seconds each tool call sleeps
DEPTH = 4  # calls on the critical path: a -> c -> e -> g
CALLS = 7

# Call-by-call: dependent and independent lines mixed, as a model writes them.
# Levels: a, b, d | c, f | e | g.
CALL_BY_CALL = """\
a = fetch(key="a")
b = fetch(key="b")
c = fetch(key=a + "c")
d = fetch(key="d")
e = fetch(key=c + b)
f = fetch(key=d + "f")
g = fetch(key=e + f)
"""

# Gather style: each level of the same graph in one `asyncio.gather`.
GATHER = """\
import asyncio
a, b, d = await asyncio.gather(fetch(key="a"), fetch(key="b"), fetch(key="d"))
c, f = await asyncio.gather(fetch(key=a + "c"), fetch(key=d + "f"))
e = await fetch(key=c + b)
g = await fetch(key=e + f)
"""

EXPECTED = "acbdf"  # what `g` holds when each fetch returns its key
# The keys the 7 calls fetch: every framework must make exactly these, in any order.
EXPECTED_KEYS = sorted(["a", "b", "d", "ac", "df", "acb", "acbdf"])
FETCHED: list[str] = []  # the keys fetched by the run under way, whichever framework
STYLES = {"call-by-call": CALL_BY_CALL, "gather": GATHER}


def awaited(program: str) -> str:
    """The call-by-call program with `await` before each call (Pydantic AI's async tools)."""
    return program.replace("= fetch(", "= await fetch(")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- tickloop ---------------------------------------------------------------------------------


@tl.tool(read_only=True)
async def fetch(key: str) -> str:
    """Fetch the page under `key`; returns the key."""
    FETCHED.append(key)
    await trio.sleep(LATENCY)
    return key


@tl.tool(read_only=True)
async def noop(i: int) -> int:
    """Do nothing: the engine's own cost is what is measured."""
    return 0


def fenced(program: str) -> str:
    return f"```python\n{program}```\n"


def tickloop_run(program: str) -> float:
    model = tl.ScriptedModel([fenced(program + "final_answer(g)\n")], chunk_chars=1 << 20)
    agent = tl.Agent(model, tools=[fetch], protocol="code")
    started = time.perf_counter()
    result = agent.run()
    elapsed = time.perf_counter() - started
    assert result.output == EXPECTED, result.output
    assert len(result.records) == CALLS
    return elapsed


def tickloop_streaming(chunk_chars: int, chunk_delay: float) -> dict[str, float]:
    text = fenced(CALL_BY_CALL + "final_answer(g)\n")
    model = tl.ScriptedModel([text], chunk_chars=chunk_chars, chunk_delay=chunk_delay)
    first: list[float] = []

    def on_event(event: tl.RunEvent) -> None:
        if isinstance(event, tl.CallStarted) and not first:
            first.append(time.perf_counter())

    agent = tl.Agent(model, tools=[fetch], protocol="code", on_event=on_event)
    started = time.perf_counter()
    result = agent.run()
    elapsed = time.perf_counter() - started
    assert result.output == EXPECTED
    chunks = -(-len(text) // chunk_chars)
    return {
        "first_start": first[0] - started,
        "stream": (chunks - 1) * chunk_delay,
        "makespan": elapsed,
    }


def code_fan_out(n: int) -> float:
    program = f"rs = [noop(i=i) for i in range({n})]\nfinal_answer(len(rs))\n"
    agent = tl.Agent(
        tl.ScriptedModel([fenced(program)], chunk_chars=1 << 20),
        tools=[noop],
        protocol="code",
        max_calls=n,
    )
    started = time.perf_counter()
    result = agent.run()
    elapsed = time.perf_counter() - started
    assert result.output == n and len(result.records) == n
    return elapsed


def solution_fan_out(n: int) -> float:
    calls = [{"_tool": "noop", "i": i} for i in range(n)]
    model = tl.ScriptedModel(
        [{"calls": calls, "output": None}, {"calls": [], "output": "ok"}], chunk_chars=1 << 20
    )
    agent = tl.Agent(model, tools=[noop], max_calls=n)
    started = time.perf_counter()
    result = agent.run()
    elapsed = time.perf_counter() - started
    assert result.output == "ok" and len(result.records) == n
    return elapsed


# -- Pydantic AI CodeMode ---------------------------------------------------------------------


def pydantic_run(program: str) -> float:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai_harness import CodeMode

    returned: list[Any] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            # The sandbox's result is the program's last expression.
            return ModelResponse(parts=[ToolCallPart("run_code", {"code": program + "g\n"})])
        returned.append(messages[-1].parts[0].content)  # type: ignore[union-attr]
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(respond), capabilities=[CodeMode()])

    @agent.tool_plain
    async def fetch(key: str) -> str:
        """Fetch the page under `key`; returns the key."""
        FETCHED.append(key)
        await asyncio.sleep(LATENCY)
        return key

    started = time.perf_counter()
    agent.run_sync("go")
    elapsed = time.perf_counter() - started
    assert returned == [EXPECTED], returned
    return elapsed


# -- smolagents CodeAgent ---------------------------------------------------------------------


def smolagents_run(program: str) -> float:
    from smolagents import CodeAgent, tool
    from smolagents.models import ChatMessage, MessageRole, Model

    text = f"Thought: fetch them.\n<code>\n{program}final_answer(g)\n</code>"

    class Scripted(Model):
        def generate(
            self,
            messages: Any,
            stop_sequences: Any = None,
            response_format: Any = None,
            tools_to_call_from: Any = None,
            **kwargs: Any,
        ) -> ChatMessage:
            return ChatMessage(role=MessageRole.ASSISTANT, content=text)

    @tool
    def fetch(key: str) -> str:
        """Fetch the page under a key.

        Args:
            key: the page's key
        """
        FETCHED.append(key)
        time.sleep(LATENCY)
        return key

    agent = CodeAgent(
        tools=[fetch],
        model=Scripted(model_id="scripted"),
        verbosity_level=-1,
        additional_authorized_imports=["asyncio"],
        max_steps=1,
    )
    started = time.perf_counter()
    output = agent.run("go")
    elapsed = time.perf_counter() - started
    if output != EXPECTED:
        errors = [step.error for step in agent.memory.steps if getattr(step, "error", None)]
        reason = str(errors[0]).splitlines()[0] if errors else f"output {output!r}"
        raise RuntimeError(reason.rpartition("due to: ")[2])
    return elapsed


# -- the run ----------------------------------------------------------------------------------

FRAMEWORKS: dict[str, Callable[[str], float]] = {
    "tickloop": tickloop_run,
    "Pydantic AI CodeMode": lambda p: pydantic_run(awaited(p) if p == CALL_BY_CALL else p),
    "smolagents CodeAgent": smolagents_run,
}


def makespans(repeats: int) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}
    bound = DEPTH * LATENCY
    for name, run in FRAMEWORKS.items():
        table[name] = {}
        for style, program in STYLES.items():
            try:
                run(program)  # warm-up: imports, sandbox start
                times = []
                for _ in range(repeats):
                    FETCHED.clear()
                    times.append(run(program))
                best = min(times)
            except Exception as error:  # a peer that cannot run the style: n/a and why
                reason = str(error).splitlines()[0][:90]
                table[name][style] = {"na": reason}
                log(f"{name} {style}: n/a ({reason})")
                continue
            table[name][style] = {
                "makespan": best,
                "ratio": best / bound,
                "calls": sorted(FETCHED),  # the last run's: the same work for every one
            }
            log(f"{name} {style}: {best * 1000:.0f} ms, {best / bound:.2f}x the critical path")
    return table


def overhead(n: int, repeats: int) -> dict[str, float]:
    code_fan_out(n // 10)
    solution_fan_out(n // 10)
    codes, solutions = [], []
    for _ in range(repeats):  # interleaved, best of each
        codes.append(code_fan_out(n))
        solutions.append(solution_fan_out(n))
    code, solution = min(codes) / n, min(solutions) / n
    return {"code_us": code * 1e6, "solution_us": solution * 1e6, "ratio": code / solution}


def render(results: dict[str, Any]) -> str:
    lines = [
        f"| {CALLS} calls, critical path {DEPTH} x {LATENCY * 1000:.0f} ms | "
        + " | ".join(STYLES)
        + " |",
        "|---|" + "---|" * len(STYLES),
    ]
    for name, row in results["makespan"].items():
        cells = []
        for style in STYLES:
            cell = row[style]
            if "na" in cell:
                cells.append(f"n/a ({cell['na']})")
            else:
                cells.append(f"{cell['makespan'] * 1000:.0f} ms, {cell['ratio']:.2f}x")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    s = results["streaming"]
    o = results["overhead"]
    lines += [
        "",
        f"tickloop streaming the call-by-call program (chunk_delay): first tool start at "
        f"{s['first_start'] * 1000:.0f} ms, program streamed by {s['stream'] * 1000:.0f} ms, "
        f"makespan {s['makespan'] * 1000:.0f} ms.",
        f'Per call, fan-out of {results["fan_out"]} no-op calls: protocol="code" '
        f'{o["code_us"]:.0f} us, protocol="solution" {o["solution_us"]:.0f} us, '
        f"ratio {o['ratio']:.2f}x.",
    ]
    return "\n".join(lines)


def collect(
    latency: float = LATENCY,
    repeats: int = 3,
    fan_out: int = 1000,
    chunk_chars: int = 8,
    chunk_delay: float = 0.02,
) -> dict[str, Any]:
    """Every figure of this benchmark, as `python -m benchmarks` keeps them."""
    global LATENCY
    LATENCY = latency
    results: dict[str, Any] = {"latency": latency, "fan_out": fan_out}
    results["makespan"] = makespans(repeats)
    results["streaming"] = tickloop_streaming(chunk_chars, chunk_delay)
    results["overhead"] = overhead(fan_out, repeats)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_code", description=__doc__)
    p.add_argument("--latency", type=float, default=LATENCY, help="real seconds a tool sleeps")
    p.add_argument("--repeats", type=int, default=3, help="runs per cell, best taken")
    p.add_argument("--fan-out", type=int, default=1000, help="no-op calls for the overhead")
    p.add_argument("--chunk-chars", type=int, default=8)
    p.add_argument("--chunk-delay", type=float, default=0.02)
    p.add_argument("--json", action="store_true", help="print the results as JSON too")
    p.add_argument("--json-file", type=str, help="write the results as JSON to this file")
    args = p.parse_args(argv)
    results = collect(args.latency, args.repeats, args.fan_out, args.chunk_chars, args.chunk_delay)
    print(render(results))
    if args.json:
        print(json.dumps(results, indent=1))
    if args.json_file:
        with open(args.json_file, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

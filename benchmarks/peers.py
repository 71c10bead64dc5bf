"""Other agent frameworks on the same workloads, tools, latencies and model costs.

Each peer is driven with its own scripted-model facility, offline:

* Pydantic AI: `FunctionModel`, an async function that answers each request;
* LangGraph: a `StateGraph` of an agent node (a fake `BaseChatModel`) and the prebuilt
  `ToolNode`, the classic ReAct graph.

Neither can express a dependency between two calls of one response, so both run the
per-turn parallel strategy: request k returns the calls of level k of the DAG, the
framework runs them together, then asks again. Each request takes exactly what the same
request takes in strategy 2 (`per_turn`): the time the simulated model needs to stream
that turn's answer (with its thought), answered in one piece at the end, as a
non-streaming client sees it.

They run on asyncio. For the virtual clock, `VirtualTimeLoop` is an asyncio loop whose
clock jumps to the next timer instead of sleeping (the asyncio twin of trio's
`MockClock(autojump_threshold=0)`), so the peers' figures are exact too.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import selectors
from collections.abc import Awaitable, Callable
from typing import Any

from .simmodel import ModelCosts, scripts
from .strategies import Outcome
from .workloads import Workload

__all__ = ["PEERS", "VirtualTimeLoop", "peer_versions", "run_peer"]


# -- a virtual clock for asyncio -------------------------------------------------------------


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without waiting; when nothing is ready, moves the loop's clock to the timer."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)
        if events or timeout == 0:
            return events
        if timeout is None:  # no timer at all: only real I/O (a worker thread) can wake us
            return super().select(None)
        self.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time: `loop.time()` only moves when every task waits."""

    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(self._jumping)

    def time(self) -> float:
        return self._jumping.now


def _run(main: Callable[[], Awaitable[Outcome]], virtual: bool) -> Outcome:
    factory = VirtualTimeLoop if virtual else None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())


# -- shared pieces ---------------------------------------------------------------------------


class _Plan:
    """The per-turn script and timing a peer plays back, and what it records."""

    def __init__(self, workload: Workload, costs: ModelCosts, scale: float) -> None:
        sc = costs.scaled(scale)
        self.turns = [[node.key for node in level] for level in workload.levels()]
        self.tool_of = {node.key: node.tool for node in workload.nodes}
        self.latency = {node.key: node.latency * scale for node in workload.nodes}
        # Request k takes what strategy 2's request k takes to stream, final answer included.
        self.durations = [sc.duration(text) for text in scripts(workload, costs)["per_turn"]]
        self.requests: list[tuple[float, float]] = []
        self.calls: dict[str, tuple[float, float]] = {}
        self.start = 0.0

    async def model_turn(self, turn: int) -> None:
        now = asyncio.get_running_loop().time
        begin = now()
        await asyncio.sleep(self.durations[turn])
        self.requests.append((begin - self.start, now() - self.start))

    async def tool_call(self, key: str) -> dict[str, Any]:
        now = asyncio.get_running_loop().time
        begin = now()
        await asyncio.sleep(self.latency[key])
        self.calls[key] = (begin - self.start, now() - self.start)
        return {"key": key}

    def outcome(self, name: str, makespan: float) -> Outcome:
        if len(self.calls) != len(self.latency) or len(self.requests) != len(self.durations):
            raise RuntimeError(f"{name} did not run the whole plan")
        return Outcome(name, makespan, self.requests, self.calls, len(self.requests))


# -- Pydantic AI -----------------------------------------------------------------------------


def run_pydantic_ai(
    workload: Workload, costs: ModelCosts, scale: float, virtual: bool
) -> Outcome:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    plan = _Plan(workload, costs, scale)

    async def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(message, ModelResponse) for message in messages)
        await plan.model_turn(turn)
        if turn < len(plan.turns):
            return ModelResponse(
                parts=[
                    ToolCallPart(plan.tool_of[key], {"key": key}, tool_call_id=key)
                    for key in plan.turns[turn]
                ]
            )
        return ModelResponse(parts=[TextPart("the answer")])

    def make_tool(name: str) -> Tool:
        async def call(key: str) -> dict[str, Any]:
            """A benchmark tool: waits its latency, then returns."""
            return await plan.tool_call(key)

        return Tool(call, name=name, takes_ctx=False)

    tools = [make_tool(name) for name in workload.tools()]
    agent = Agent(FunctionModel(respond), tools=tools)

    async def main() -> Outcome:
        plan.start = asyncio.get_running_loop().time()
        await agent.run(workload.title)
        return plan.outcome("pydantic_ai", asyncio.get_running_loop().time() - plan.start)

    return _run(main, virtual)


# -- LangGraph -------------------------------------------------------------------------------


def run_langgraph(workload: Workload, costs: ModelCosts, scale: float, virtual: bool) -> Outcome:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import StructuredTool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    plan = _Plan(workload, costs, scale)

    class ScriptedChat(BaseChatModel):
        """A fake chat model: answers request k with the tool calls of turn k."""

        @property
        def _llm_type(self) -> str:
            return "tickloop-bench-scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:
            return self

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            raise NotImplementedError("the benchmark drives the graph asynchronously")

        async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                             **kwargs: Any) -> ChatResult:
            turn = sum(isinstance(message, AIMessage) for message in messages)
            await plan.model_turn(turn)
            if turn < len(plan.turns):
                calls = [
                    {"name": plan.tool_of[key], "args": {"key": key}, "id": key,
                     "type": "tool_call"}
                    for key in plan.turns[turn]
                ]
                message = AIMessage(content="", tool_calls=calls)
            else:
                message = AIMessage(content="the answer")
            return ChatResult(generations=[ChatGeneration(message=message)])

    def make_tool(name: str) -> StructuredTool:
        async def call(key: str) -> dict[str, Any]:
            return await plan.tool_call(key)

        return StructuredTool.from_function(
            coroutine=call, name=name, description="A benchmark tool: waits, then returns."
        )

    tools = [make_tool(name) for name in workload.tools()]
    model = ScriptedChat().bind_tools(tools)

    async def agent_node(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent_node)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    app = graph.compile()

    async def main() -> Outcome:
        plan.start = asyncio.get_running_loop().time()
        await app.ainvoke(
            {"messages": [("user", workload.title)]},
            {"recursion_limit": 2 * len(plan.durations) + 5},
        )
        return plan.outcome("langgraph", asyncio.get_running_loop().time() - plan.start)

    return _run(main, virtual)


PEERS: dict[str, tuple[str, Callable[..., Outcome]]] = {
    "pydantic_ai": ("pydantic-ai-slim", run_pydantic_ai),
    "langgraph": ("langgraph", run_langgraph),
}
LABELS = {"pydantic_ai": "Pydantic AI (FunctionModel)", "langgraph": "LangGraph (ToolNode)"}


def peer_versions() -> dict[str, str | None]:
    """Each peer's installed version, or None when it is not installed (then it is left out)."""
    versions: dict[str, str | None] = {}
    for name, (distribution, _) in PEERS.items():
        try:
            versions[name] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def run_peer(
    name: str, workload: Workload, costs: ModelCosts, *, scale: float = 1.0, virtual: bool = True
) -> Outcome:
    return PEERS[name][1](workload, costs, scale, virtual)

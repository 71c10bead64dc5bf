"""What `_agent` offers a driver that runs its loops elsewhere: the Temporal seam.

`tickloop.temporal` runs an agent's loops inside a workflow: the same loops (either
protocol) on the same scheduler, with its own engine, its model requests as activities
and its waits on the workflow's clock. It reaches `_agent` through this module only
(tests/test_architecture.py keeps it so), never through a private name:

- `config_of(agent)` — what one run of `agent` is configured with (an `AgentConfig`),
  and `config_with_tools(agent, config, opened)` — that with a run's listed tool sources;
- `driven(config, driver)` — that configuration with a `LoopDriver`: the engine its
  ticks run on, its model requests and its waits are the driver's;
  `config.protocol.open_loop(...)` then opens the protocol's own loop on it;
- what a workflow's child runs use: `AgentTool` (a sub-agent's call), `RunPlace`,
  `TreeServices` and `ChildSink` (its place in the tree and its events);
- what a driver's model request yields or raises: `StreamRestarted`, `StreamBroken`;
  `MAX_BACKOFF`; `visible_parameters(tool)` (the schema a model is shown).
"""

from __future__ import annotations

import dataclasses

from .._engine._sources import OpenedTools
from .._errors import ConfigurationError
from ._agent import Agent
from ._loop import AgentConfig, LoopDriver, OuterLoop, RunResult
from ._prompt import visible_parameters
from ._retry import MAX_BACKOFF, StreamBroken
from ._solution import StreamRestarted
from ._subagent import AgentTool
from ._tree import ChildSink, RunPlace, TreeServices

__all__ = [
    "MAX_BACKOFF",
    "Agent",
    "AgentConfig",
    "AgentTool",
    "ChildSink",
    "LoopDriver",
    "OuterLoop",
    "RunPlace",
    "RunResult",
    "StreamBroken",
    "StreamRestarted",
    "TreeServices",
    "config_of",
    "config_with_tools",
    "driven",
    "visible_parameters",
]


def config_of(agent: Agent) -> AgentConfig:
    """What one run of `agent` is configured with, taken now (without its tool sources'
    tools: see `config_with_tools`). An MCP prompt in its instructions is fetched by a
    local run as it starts; a workflow cannot fetch it, so it is refused, not dropped."""
    if agent._prompted is not None:
        raise ConfigurationError(
            "a tl.MCPPrompt in instructions= is not supported on Temporal yet: pass its text "
            "(await server.prompt(name, args)) instead"
        )
    return agent._config()


def config_with_tools(agent: Agent, config: AgentConfig, opened: OpenedTools) -> AgentConfig:
    """`config` with a run's tool sources, listed elsewhere (an activity): their tools
    added to the agent's, their instructions to its instructions."""
    return agent._config_with(config, opened)


def driven(config: AgentConfig, driver: LoopDriver) -> AgentConfig:
    """`config` run by `driver`: a loop opened on it asks the driver for its engine, its
    model requests and its waits."""
    return dataclasses.replace(config, driver=driver)

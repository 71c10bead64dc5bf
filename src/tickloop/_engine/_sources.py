"""Opening the tool sources of a run (MCP servers) before its tool set is built.

A `tools=` list may hold sources beside plain tools. A run opens each source in its own
task tree (the source starts whatever task owns its connection), asks it for its tools,
checks the names across every source, and only then builds the run's `ToolSet`; leaving
the block closes the sources again, in reverse order, in the same task that opened them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._core._tools import MakesTool, Tool, ToolSet, ToolSource, split_tools
from .._errors import ConfigurationError, unwrap_single

__all__ = [
    "OpenedSource",
    "OpenedTools",
    "check_sources",
    "merge_opened",
    "open_tools",
    "tool_sources",
]


@dataclass
class OpenedSource:
    """What an opened source contributes to a run."""

    label: str
    tools: list[Tool]
    instructions: str | None = None


class _Openable(Protocol):
    """A source's side: an async context manager that starts connecting on entry and
    yields an async function returning its `OpenedSource` once it is ready."""

    def open_for_run(self) -> Any: ...


@dataclass
class OpenedTools:
    """The run's tools, with the sources' instructions (for the agent's prompt)."""

    tools: ToolSet
    instructions: list[str] = field(default_factory=list)


def tool_sources(
    tools: Sequence[Tool | ToolSource | MakesTool] | Mapping[str, Tool | MakesTool] | ToolSet,
) -> list[ToolSource]:
    return split_tools(tools)[1]


@asynccontextmanager
async def open_tools(
    tools: Sequence[Tool | ToolSource | MakesTool] | Mapping[str, Tool | MakesTool] | ToolSet,
) -> AsyncIterator[OpenedTools]:
    """The run's `ToolSet`, with every source in `tools` open for the length of the block."""
    plain, sources = split_tools(tools)
    if not sources:
        yield OpenedTools(tools if isinstance(tools, ToolSet) else ToolSet(plain))
        return
    with unwrap_single():
        async with AsyncExitStack() as stack:
            waiting = []
            for source in sources:  # every source starts connecting...
                opener: _Openable = source  # type: ignore[assignment]
                waiting.append(await stack.enter_async_context(opener.open_for_run()))
            opened = [await ready() for ready in waiting]  # ...then each is waited for
            yield merge_opened(plain, opened)


def merge_opened(plain: list[Tool], opened: list[OpenedSource]) -> OpenedTools:
    """The run's tools and instructions from its plain tools and its listed sources (the
    sources listed here, or elsewhere: a Temporal run lists them through an activity)."""
    instructions = [source.instructions for source in opened if source.instructions]
    return OpenedTools(_merge(plain, opened), instructions)


def check_sources(sources: Sequence[ToolSource], approve: Any) -> None:
    """A source whose tools may require approval needs the hook, as a tool does: said
    before anything connects, not when the server is first reached."""
    if approve is None:
        needing = [source.label for source in sources if source.may_require_approval()]
        if needing:
            raise ConfigurationError(
                f"the tools of {', '.join(needing)} may require approval, but no approval "
                "hook was given (pass approve=...)"
            )


def _merge(plain: list[Tool], opened: list[OpenedSource]) -> ToolSet:
    """One tool set; a name two sources (or a source and a plain tool) share is an error
    naming both, since which one the model meant cannot be known."""
    owner: dict[str, str] = {}
    for item in plain:
        if isinstance(item, Tool):
            owner.setdefault(item.name, "a tool in tools=[...]")
    merged: list[Tool] = list(plain)
    for source in opened:
        for item in source.tools:
            if item.name in owner:
                raise ConfigurationError(
                    f"tool {item.name!r} is offered by {source.label} and by {owner[item.name]}: "
                    "give one of the servers a prefix (prefix=...) or leave the tool out "
                    "(allowed=[...])"
                )
            owner[item.name] = source.label
            merged.append(item)
    return ToolSet(merged)

"""Tool search: a big toolset kept off the menu until the model finds what it needs.

An agent with `tool_search=True` (every tool deferred), or with tools or MCP servers
made with `defer_loading=True`, shows the model a `search_tools(query)` tool and the
tools that are loaded; the others are found by a plain ranked text search over names
and descriptions (BM25 over word tokens: no embeddings, deterministic, ties in the order
the tools were given). What a `search_tools` call found joins the menu from the next
request. The menu is a function of the run's records (the search calls that ended
`done`, in call order), and each tick's `OpenTick.found` journals it, so a resume, a
replay and a fork show and accept the same tools. A call of a tool not found yet is a
structural error, "unknown tool 'x' (try search_tools)".
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._core._scheduler import CallRecord
from .._core._status import CallStatus
from .._core._tools import Tool, ToolSet
from .._errors import ConfigurationError

__all__ = ["SEARCH_TOOL", "ToolIndex", "found_tools", "menu_of", "with_tool_search"]

SEARCH_TOOL = "search_tools"
#: Tools one search returns at most (the model may search again with other words).
SEARCH_LIMIT = 5

_WORD = re.compile(r"[A-Za-z][a-z]*|[0-9]+|[A-Z]+(?![a-z])")
# BM25's usual constants: term-frequency saturation and length normalisation.
_K1, _B = 1.2, 0.75
_NAME_WEIGHT = 3  # a word of the name counts as three of the description


def words(text: str) -> list[str]:
    """Lower-case word tokens: `get_weatherForecast-v2` -> get, weather, forecast, v, 2."""
    return [word.lower() for word in _WORD.findall(text)]


class ToolIndex:
    """A BM25 index over the deferred tools' names and descriptions."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self.tools = list(tools)
        self._documents: list[Counter[str]] = []
        for tool in self.tools:
            counts: Counter[str] = Counter(words(tool.description))
            for word in words(tool.name):
                counts[word] += _NAME_WEIGHT
            self._documents.append(counts)
        lengths = [sum(document.values()) for document in self._documents]
        self._lengths = lengths
        self._average = (sum(lengths) / len(lengths)) if lengths else 1.0
        frequency: Counter[str] = Counter()
        for document in self._documents:
            frequency.update(document.keys())
        total = len(self._documents)
        self._idf = {
            word: math.log(1 + (total - count + 0.5) / (count + 0.5))
            for word, count in frequency.items()
        }

    def search(self, query: str, limit: int = SEARCH_LIMIT) -> list[Tool]:
        """The best matches for `query`, best first; only tools sharing a word with it."""
        terms = set(words(query))
        scored: list[tuple[float, int]] = []
        for position, document in enumerate(self._documents):
            score = 0.0
            norm = _K1 * (1 - _B + _B * self._lengths[position] / self._average)
            for term in terms:
                count = document.get(term, 0)
                if count:
                    score += self._idf[term] * count * (_K1 + 1) / (count + norm)
            if score > 0:
                scored.append((-score, position))
        scored.sort()
        return [self.tools[position] for _, position in scored[:limit]]


def search_tool(
    index: ToolIndex, describe: Callable[[Tool], dict[str, Any]], deferred: int
) -> Tool:
    """The `search_tools` tool over `index`; `describe` is what a found tool shows (its
    name and description; a code plan's also its stub)."""

    def search_tools(query: str) -> list[dict[str, Any]]:
        return [describe(tool) for tool in index.search(query)]

    return Tool(
        SEARCH_TOOL,
        description=(
            f"Search {deferred} more tools by what they do (words of their names and "
            "descriptions). The tools found join your tool menu from your next request, "
            "so call them then, not in the same answer."
        ),
        handler=search_tools,
        read_only=True,
        idempotent=True,
    )


def with_tool_search(
    tools: ToolSet, everything: bool, describe: Callable[[Tool], dict[str, Any]]
) -> ToolSet:
    """`tools` as a run with tool search sees them: `search_tools` added, and deferred
    every tool (`everything`, the agent's `tool_search=True`) or those made with
    `defer_loading=True`; `tools` itself when none is deferred."""
    deferred = [tool for tool in tools.values() if everything or tool.defer_loading]
    if not deferred:
        return tools
    if SEARCH_TOOL in tools:
        raise ConfigurationError(
            f"a tool is named {SEARCH_TOOL!r}, the name tool search gives its own tool; "
            "rename it, or leave tool_search and defer_loading off"
        )
    search = search_tool(ToolIndex(deferred), describe, len(deferred))
    return ToolSet([*tools.values(), search], deferred=[tool.name for tool in deferred])


def found_tools(records: Mapping[str, CallRecord], tools: ToolSet) -> tuple[str, ...]:
    """The deferred tools the run's `search_tools` calls found, in the order found."""
    if not tools.deferred:
        return ()
    found: dict[str, None] = {}
    for record in records.values():
        if record.tool != SEARCH_TOOL or record.status != CallStatus.DONE:
            continue
        for item in record.output if isinstance(record.output, list) else ():
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str) and name in tools.deferred:
                found.setdefault(name)
    return tuple(found)


def menu_of(tools: ToolSet, found: tuple[str, ...]) -> ToolSet:
    """The tools a request shows: the loaded ones, `search_tools`, and those found."""
    if not tools.deferred:
        return tools
    shown = set(found)
    return ToolSet(
        [tool for name, tool in tools.items() if name not in tools.deferred or name in shown]
    )

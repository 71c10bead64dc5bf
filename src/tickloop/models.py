"""The model-client protocol: what a new client implements (docs/models.md).

A client for `protocol="solution"` is a `ModelClient` (`stream_solution`); one for
`protocol="tools"` is a `TurnClient` (`stream_turn`, `tool_result_messages`,
`turn_format`). The other names are what those methods take and yield. Each is also
importable from `tickloop` itself, as are the ready-made clients (`tl.OpenAIChat`, ...).
"""

from ._models._base import (
    ModelClient,
    ModelError,
    SolutionRequest,
    TextDelta,
    ToolCallStarted,
    ToolResult,
    ToolSpec,
    TurnClient,
    TurnItem,
    TurnRequest,
    TurnResponse,
    TurnToolCall,
    Usage,
)

__all__ = [
    "ModelClient",
    "ModelError",
    "SolutionRequest",
    "TextDelta",
    "ToolCallStarted",
    "ToolResult",
    "ToolSpec",
    "TurnClient",
    "TurnItem",
    "TurnRequest",
    "TurnResponse",
    "TurnToolCall",
    "Usage",
]

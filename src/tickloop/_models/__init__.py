"""Model clients, one module per provider, behind one small interface (`_base.py`)."""

from ._anthropic import Anthropic
from ._base import (
    ModelClient,
    ModelError,
    SolutionRequest,
    TextDelta,
    ToolCallStarted,
    ToolResult,
    ToolSpec,
    TurnClient,
    TurnRequest,
    TurnResponse,
    TurnToolCall,
    Usage,
)
from ._openai_chat import OpenAIChat
from ._openai_responses import OpenAIResponses
from ._scripted import ScriptedModel

__all__ = [
    "Anthropic",
    "ModelClient",
    "ModelError",
    "OpenAIChat",
    "OpenAIResponses",
    "ScriptedModel",
    "SolutionRequest",
    "TextDelta",
    "ToolCallStarted",
    "ToolResult",
    "ToolSpec",
    "TurnClient",
    "TurnRequest",
    "TurnResponse",
    "TurnToolCall",
    "Usage",
]

"""Model clients, one module per provider, behind one small interface (`_base.py`)."""

from ._anthropic import Anthropic
from ._base import ModelClient, ModelError, SolutionRequest, TextDelta, Usage
from ._openai_chat import OpenAIChat
from ._scripted import ScriptedModel

__all__ = [
    "Anthropic",
    "ModelClient",
    "ModelError",
    "OpenAIChat",
    "ScriptedModel",
    "SolutionRequest",
    "TextDelta",
    "Usage",
]

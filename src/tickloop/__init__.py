"""tickloop: run LLM agents whose tool calls form a dependency graph.

The public surface is flat: everything a user needs is importable from here
(`import tickloop as tl`); the modules behind it are private.
"""

from ._agent import Agent, RunResult
from ._approval import Approve, Decision, Defer, Deny, Edit, PendingCall, Replace, Respond
from ._errors import (
    ConfigurationError,
    ExecuteError,
    MaxIterationsError,
    ReferenceSyntaxError,
    ResumeError,
    StoreError,
    TickloopError,
)
from ._expressions import Expression, Term, parse_expression
from ._jsonstream import resilient_json_parse
from ._models import (
    Anthropic,
    ModelClient,
    ModelError,
    OpenAIChat,
    ScriptedModel,
    SolutionRequest,
    TextDelta,
    Usage,
)
from ._run import ExecutionResult, execute, run_calls
from ._scheduler import CallRecord
from ._tools import Branch, CallContext, Tool, tool

__all__ = [
    "Agent",
    "Anthropic",
    "Approve",
    "Branch",
    "CallContext",
    "CallRecord",
    "ConfigurationError",
    "Decision",
    "Defer",
    "Deny",
    "Edit",
    "ExecuteError",
    "ExecutionResult",
    "Expression",
    "MaxIterationsError",
    "ModelClient",
    "ModelError",
    "OpenAIChat",
    "PendingCall",
    "ReferenceSyntaxError",
    "Replace",
    "Respond",
    "ResumeError",
    "RunResult",
    "ScriptedModel",
    "SolutionRequest",
    "StoreError",
    "Term",
    "TextDelta",
    "TickloopError",
    "Tool",
    "Usage",
    "execute",
    "parse_expression",
    "resilient_json_parse",
    "run_calls",
    "tool",
]

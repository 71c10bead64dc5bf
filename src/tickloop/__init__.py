"""tickloop: run LLM agents whose tool calls form a dependency graph.

The public surface is flat: everything a user needs is importable from here
(`import tickloop as tl`); the modules behind it are private.
"""

from ._agent._agent import Agent, RunResult
from ._agent._text_stream import TextStream
from ._core._decisions import Approve, Decision, Defer, Deny, Edit, PendingCall, Replace, Respond
from ._core._expressions import Expression, Term, parse_expression
from ._core._scheduler import CallRecord
from ._core._tools import Branch, CallContext, Tool, tool
from ._durable._store import CallInfo, PendingDecision, RunInfo, SQLiteStore
from ._durable._timeline import timeline_html
from ._engine._run import ExecutionResult, execute, run_calls
from ._errors import (
    ConfigurationError,
    ExecuteError,
    MaxIterationsError,
    ReferenceSyntaxError,
    ResumeError,
    StoreError,
    TickloopError,
)
from ._human import BrowserApproval, ConsoleApproval
from ._json._stream import resilient_json_parse
from ._mcp import MCPServer
from ._models import (
    Anthropic,
    ModelClient,
    ModelError,
    OpenAIChat,
    OpenAIResponses,
    ScriptedModel,
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
from ._observe._events import (
    CallAwaitingApproval,
    CallDecided,
    CallFinished,
    CallReady,
    CallReceived,
    CallStarted,
    EventStream,
    Redactor,
    RequestFinished,
    RequestRetried,
    RequestStarted,
    RunEnded,
    RunEvent,
    RunStarted,
    TickEnded,
    open_event_stream,
)

__all__ = [
    "Agent",
    "Anthropic",
    "Approve",
    "Branch",
    "BrowserApproval",
    "CallAwaitingApproval",
    "CallContext",
    "CallDecided",
    "CallFinished",
    "CallInfo",
    "CallReady",
    "CallReceived",
    "CallRecord",
    "CallStarted",
    "ConfigurationError",
    "ConsoleApproval",
    "Decision",
    "Defer",
    "Deny",
    "Edit",
    "EventStream",
    "ExecuteError",
    "ExecutionResult",
    "Expression",
    "MCPServer",
    "MaxIterationsError",
    "ModelClient",
    "ModelError",
    "OpenAIChat",
    "OpenAIResponses",
    "PendingCall",
    "PendingDecision",
    "Redactor",
    "ReferenceSyntaxError",
    "Replace",
    "RequestFinished",
    "RequestRetried",
    "RequestStarted",
    "Respond",
    "ResumeError",
    "RunEnded",
    "RunEvent",
    "RunInfo",
    "RunResult",
    "RunStarted",
    "SQLiteStore",
    "ScriptedModel",
    "SolutionRequest",
    "StoreError",
    "Term",
    "TextDelta",
    "TextStream",
    "TickEnded",
    "TickloopError",
    "Tool",
    "ToolCallStarted",
    "ToolResult",
    "ToolSpec",
    "TurnClient",
    "TurnRequest",
    "TurnResponse",
    "TurnToolCall",
    "Usage",
    "execute",
    "open_event_stream",
    "parse_expression",
    "resilient_json_parse",
    "run_calls",
    "timeline_html",
    "tool",
]

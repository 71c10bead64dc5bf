"""tickloop: run LLM agents whose tool calls form a dependency graph.

The public surface is flat: everything a user needs is importable from here
(`import tickloop as tl`); the modules behind it are private.

Importing the package loads none of it: each public name is imported from its module the
first time it is read (`tl.Agent`, `from tickloop import Agent`), so a script pays only
for what it uses, and httpx, jsonschema, sqlite3, networkx and the web stack load with the
parts that need them (`benchmarks/bench_import.py` holds `import tickloop` to 1.5x
`import trio`).
"""

# Only public names and dunders at module level (`dir(tickloop)` is `__all__`): what the
# loader needs is imported under private names.
import importlib as _importlib
import typing as _typing

__version__ = "0.4.0"  # the one place: pyproject.toml reads it (tool.hatch.version)

if _typing.TYPE_CHECKING:  # what type checkers and editors see: the same names, eagerly
    from ._agent._agent import Agent, RunResult
    from ._agent._replay import ReplayModel
    from ._agent._run_program import run_program
    from ._agent._text_stream import TextStream
    from ._code import ToolError, compile_program
    from ._core._budget import Budget, BudgetRequest, Price, RunUsage
    from ._core._decisions import (
        Approve,
        Decision,
        Defer,
        Deny,
        Edit,
        PendingCall,
        Plan,
        Replace,
        Respond,
    )
    from ._core._expressions import Expression, Term, parse_expression
    from ._core._guardrails import (
        GuardrailContext,
        InputGuardrail,
        OutputGuardrail,
        Pass,
        Reject,
        ReplaceResult,
        ResultGuardrail,
        ToolGuardrail,
        Trip,
    )
    from ._core._media import Audio, Image
    from ._core._questions import Accept, Cancel, Decline, Question, Sampling
    from ._core._scheduler import CallRecord
    from ._core._tools import Branch, CallContext, Tool, tool
    from ._durable._sessions import Session
    from ._durable._store import CallInfo, PendingDecision, RunInfo, SQLiteStore
    from ._durable._timeline import timeline_html
    from ._engine._run import ExecutionResult, execute, run_calls
    from ._errors import (
        BudgetExceeded,
        CodeError,
        ConfigurationError,
        ContextOverflow,
        ExecuteError,
        GuardrailTripped,
        MaxIterationsError,
        ModelError,
        ReferenceSyntaxError,
        ReplayMismatchError,
        ResumeError,
        RunStopped,
        SessionBusy,
        StoreError,
        TickloopError,
    )
    from ._human._browser import BrowserApproval
    from ._human._console import ConsoleApproval
    from ._json._stream import resilient_json_parse
    from ._mcp._oauth import OAuth
    from ._mcp._server import MCPPrompt, MCPServer
    from ._models._anthropic import Anthropic
    from ._models._base import (
        ModelClient,
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
    from ._models._function import FunctionModel
    from ._models._openai_chat import OpenAIChat
    from ._models._openai_responses import OpenAIResponses
    from ._models._scripted import ScriptedModel
    from ._observe._events import (
        CallAwaitingApproval,
        CallDecided,
        CallFinished,
        CallReady,
        CallReceived,
        CallStarted,
        EventStream,
        GuardrailChecked,
        ProgramPrinted,
        QuestionAnswered,
        QuestionAsked,
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

# Public name -> the private module that defines it.
_WHERE: dict[str, str] = {
    "Agent": "._agent._agent",
    "RunResult": "._agent._agent",
    "run_program": "._agent._run_program",
    "ReplayMismatchError": "._errors",
    "ReplayModel": "._agent._replay",
    "TextStream": "._agent._text_stream",
    "ToolError": "._code._exceptions",
    "compile_program": "._code._compile",
    "Budget": "._core._budget",
    "BudgetRequest": "._core._budget",
    "Price": "._core._budget",
    "RunUsage": "._core._budget",
    "Approve": "._core._decisions",
    "Decision": "._core._decisions",
    "Defer": "._core._decisions",
    "Deny": "._core._decisions",
    "Accept": "._core._questions",
    "Cancel": "._core._questions",
    "Decline": "._core._questions",
    "Question": "._core._questions",
    "Sampling": "._core._questions",
    "GuardrailContext": "._core._guardrails",
    "InputGuardrail": "._core._guardrails",
    "OutputGuardrail": "._core._guardrails",
    "Pass": "._core._guardrails",
    "Reject": "._core._guardrails",
    "ReplaceResult": "._core._guardrails",
    "ResultGuardrail": "._core._guardrails",
    "ToolGuardrail": "._core._guardrails",
    "Trip": "._core._guardrails",
    "GuardrailTripped": "._errors",
    "GuardrailChecked": "._observe._events",
    "Edit": "._core._decisions",
    "PendingCall": "._core._decisions",
    "Plan": "._core._decisions",
    "Replace": "._core._decisions",
    "Respond": "._core._decisions",
    "Expression": "._core._expressions",
    "Term": "._core._expressions",
    "parse_expression": "._core._expressions",
    "CallRecord": "._core._scheduler",
    "Branch": "._core._tools",
    "CallContext": "._core._tools",
    "Tool": "._core._tools",
    "Image": "._core._media",
    "Audio": "._core._media",
    "tool": "._core._tools",
    "CallInfo": "._durable._store",
    "PendingDecision": "._durable._store",
    "RunInfo": "._durable._store",
    "SQLiteStore": "._durable._store",
    "timeline_html": "._durable._timeline",
    "ExecutionResult": "._engine._run",
    "execute": "._engine._run",
    "run_calls": "._engine._run",
    "BudgetExceeded": "._errors",
    "CodeError": "._errors",
    "ConfigurationError": "._errors",
    "ContextOverflow": "._errors",
    "ExecuteError": "._errors",
    "MaxIterationsError": "._errors",
    "ReferenceSyntaxError": "._errors",
    "ResumeError": "._errors",
    "SessionBusy": "._errors",
    "Session": "._durable._sessions",
    "RunStopped": "._errors",
    "StoreError": "._errors",
    "TickloopError": "._errors",
    "BrowserApproval": "._human._browser",
    "ConsoleApproval": "._human._console",
    "resilient_json_parse": "._json._stream",
    "MCPServer": "._mcp._server",
    "MCPPrompt": "._mcp._server",
    "OAuth": "._mcp._oauth",
    "Anthropic": "._models._anthropic",
    "ModelClient": "._models._base",
    "FunctionModel": "._models._function",
    "ModelError": "._errors",
    "OpenAIChat": "._models._openai_chat",
    "OpenAIResponses": "._models._openai_responses",
    "ScriptedModel": "._models._scripted",
    "SolutionRequest": "._models._base",
    "TextDelta": "._models._base",
    "ToolCallStarted": "._models._base",
    "ToolResult": "._models._base",
    "ToolSpec": "._models._base",
    "TurnClient": "._models._base",
    "TurnRequest": "._models._base",
    "TurnResponse": "._models._base",
    "TurnToolCall": "._models._base",
    "Usage": "._models._base",
    "CallAwaitingApproval": "._observe._events",
    "CallDecided": "._observe._events",
    "CallFinished": "._observe._events",
    "CallReady": "._observe._events",
    "CallReceived": "._observe._events",
    "CallStarted": "._observe._events",
    "EventStream": "._observe._events",
    "QuestionAnswered": "._observe._events",
    "QuestionAsked": "._observe._events",
    "ProgramPrinted": "._observe._events",
    "Redactor": "._observe._events",
    "RequestFinished": "._observe._events",
    "RequestRetried": "._observe._events",
    "RequestStarted": "._observe._events",
    "RunEnded": "._observe._events",
    "RunEvent": "._observe._events",
    "RunStarted": "._observe._events",
    "TickEnded": "._observe._events",
    "open_event_stream": "._observe._events",
}

__all__ = [
    "Accept",
    "Agent",
    "Anthropic",
    "Approve",
    "Audio",
    "Branch",
    "BrowserApproval",
    "Budget",
    "BudgetExceeded",
    "BudgetRequest",
    "CallAwaitingApproval",
    "CallContext",
    "CallDecided",
    "CallFinished",
    "CallInfo",
    "CallReady",
    "CallReceived",
    "CallRecord",
    "CallStarted",
    "Cancel",
    "CodeError",
    "ConfigurationError",
    "ConsoleApproval",
    "ContextOverflow",
    "Decision",
    "Decline",
    "Defer",
    "Deny",
    "Edit",
    "EventStream",
    "ExecuteError",
    "ExecutionResult",
    "Expression",
    "FunctionModel",
    "GuardrailChecked",
    "GuardrailContext",
    "GuardrailTripped",
    "Image",
    "InputGuardrail",
    "MCPPrompt",
    "MCPServer",
    "MaxIterationsError",
    "ModelClient",
    "ModelError",
    "OAuth",
    "OpenAIChat",
    "OpenAIResponses",
    "OutputGuardrail",
    "Pass",
    "PendingCall",
    "PendingDecision",
    "Plan",
    "Price",
    "ProgramPrinted",
    "Question",
    "QuestionAnswered",
    "QuestionAsked",
    "Redactor",
    "ReferenceSyntaxError",
    "Reject",
    "Replace",
    "ReplaceResult",
    "ReplayMismatchError",
    "ReplayModel",
    "RequestFinished",
    "RequestRetried",
    "RequestStarted",
    "Respond",
    "ResultGuardrail",
    "ResumeError",
    "RunEnded",
    "RunEvent",
    "RunInfo",
    "RunResult",
    "RunStarted",
    "RunStopped",
    "RunUsage",
    "SQLiteStore",
    "Sampling",
    "ScriptedModel",
    "Session",
    "SessionBusy",
    "SolutionRequest",
    "StoreError",
    "Term",
    "TextDelta",
    "TextStream",
    "TickEnded",
    "TickloopError",
    "Tool",
    "ToolCallStarted",
    "ToolError",
    "ToolGuardrail",
    "ToolResult",
    "ToolSpec",
    "Trip",
    "TurnClient",
    "TurnRequest",
    "TurnResponse",
    "TurnToolCall",
    "Usage",
    "compile_program",
    "execute",
    "open_event_stream",
    "parse_expression",
    "resilient_json_parse",
    "run_calls",
    "run_program",
    "timeline_html",
    "tool",
]


# Hidden from type checkers, which see the imports above instead: with a module
# `__getattr__` in view they would take any name (`tl.Agnet`) as valid and `Any`.
if not _typing.TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        """A public name, imported from its module on first use and kept here after."""
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module 'tickloop' has no attribute {name!r}")
        value = getattr(_importlib.import_module(module, __name__), name)
        globals()[name] = value  # later reads skip this function
        return value


def __dir__() -> list[str]:
    """The public names, loaded or not (`__all__`), and nothing else."""
    return sorted(__all__)

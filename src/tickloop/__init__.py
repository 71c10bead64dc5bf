"""tickloop: run LLM agents whose tool calls form a dependency graph."""

from ._errors import (
    ConfigurationError,
    ExecuteError,
    MaxIterationsError,
    ReferenceSyntaxError,
    ResumeError,
    StoreError,
    TickloopError,
)

__all__ = [
    "ConfigurationError",
    "ExecuteError",
    "MaxIterationsError",
    "ReferenceSyntaxError",
    "ResumeError",
    "StoreError",
    "TickloopError",
]

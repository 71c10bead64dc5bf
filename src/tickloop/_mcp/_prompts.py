"""A server's prompts as text, for `await server.prompt(name, args)` and `tl.MCPPrompt`
(a prompt named for an agent's `instructions=`, fetched when a run starts).

A prompt is messages; as instructions it is their text, in order, separated by blank
lines (an embedded text resource counts as text). A message an instruction cannot
carry (an image, audio, a binary resource) is a `ConfigurationError` naming it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from .._errors import ConfigurationError

__all__ = ["check_arguments", "check_name", "prompt_text", "unknown_prompt"]


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a prompt name must be a non-empty string, not {name!r}")
    return name


def check_arguments(name: str, args: Mapping[str, str] | None) -> dict[str, str]:
    """MCP prompt arguments are strings, by name."""
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise ConfigurationError(
            f"prompt {name!r}: args must be a mapping of names to strings, not {args!r}"
        )
    for key, value in args.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigurationError(
                f"prompt {name!r}: argument {key!r} must be a string (MCP prompt arguments "
                f"are strings), not {type(value).__name__} {value!r}"
            )
    return dict(args)


def prompt_text(label: str, name: str, result: Any) -> str:
    parts: list[str] = []
    for number, message in enumerate(getattr(result, "messages", None) or [], 1):
        content = message.content
        kind = getattr(content, "type", None)
        text: str | None = None
        if kind == "text":
            text = content.text
        elif kind == "resource":
            text = getattr(content.resource, "text", None)
        if text is None:
            raise ConfigurationError(
                f"prompt {name!r} of MCP server {label}: message {number} is {kind or 'not text'}"
                ", which instructions cannot carry (they are text)"
            )
        if text.strip():
            parts.append(text.strip())
    return "\n\n".join(parts)


def unknown_prompt(label: str, name: str, listed: list[Any], reason: str) -> ConfigurationError:
    """The error for a prompts/get the server refused: the name's close match when the
    server has no such prompt, its arguments when it has."""
    names = [prompt.name for prompt in listed]
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        offered = ", ".join(map(repr, names)) or "none"
        return ConfigurationError(
            f"MCP server {label} has no prompt {name!r}{hint} (it has: {offered})"
        )
    prompt = next(prompt for prompt in listed if prompt.name == name)
    arguments = [
        f"{argument.name}{' (required)' if argument.required else ''}"
        for argument in prompt.arguments or []
    ]
    takes = ", ".join(arguments) or "no arguments"
    return ConfigurationError(f"MCP server {label}: prompt {name!r}: {reason} (it takes {takes})")

"""What an MCP tool call returns, as the JSON value a call writes.

Kept apart from the connection so that the conversion is plain data in, data out.
"""

from __future__ import annotations

import json
from typing import Any

from .._core._media import Audio, Image

__all__ = ["MCPToolError", "convert_result", "error_text"]


class MCPToolError(Exception):
    """The server answered a call with `isError`: the call's runtime error, whose message
    is the server's own text (the model reads it in the next request)."""


def convert_result(result: Any) -> Any:
    """`structuredContent` first; otherwise each content block as a value, one block as
    itself, several as a list, none as None."""
    if getattr(result, "is_error", False):
        raise MCPToolError(error_text(result))
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        return structured
    values = [_block(block) for block in getattr(result, "content", None) or []]
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def error_text(result: Any) -> str:
    texts = [getattr(block, "text", "") for block in getattr(result, "content", None) or []]
    text = "\n".join(part for part in texts if part)
    return text or "the tool reported an error without a message"


def _block(block: Any) -> Any:
    kind = getattr(block, "type", None)
    if kind == "text":
        return _json_or_text(block.text)
    if kind in ("image", "audio"):  # kept apart by the engine, a `$media` reference here
        media = Image if kind == "image" else Audio
        try:
            return media(block.data, block.mime_type)
        except ValueError:  # not base64, or a MIME type that is not its kind's
            return {"type": kind, "mimeType": block.mime_type, "data": block.data}
    if kind == "resource":  # an embedded resource: its text, or its URI when binary
        resource = block.resource
        text = getattr(resource, "text", None)
        return text if text is not None else str(resource.uri)
    if kind == "resource_link":
        return str(block.uri)
    # A block type newer than this code: keep what it says rather than drop it.
    dump = getattr(block, "model_dump", None)
    return dump(mode="json", by_alias=True, exclude_none=True) if dump else str(block)


def _json_or_text(text: str) -> Any:
    """Text that is JSON is the value it spells (servers without structured output often
    send `json.dumps(result)`); anything else stays text."""
    stripped = text.strip()
    if not stripped or stripped[0] not in '{["-0123456789tfn':
        return text
    try:
        return json.loads(stripped, parse_constant=_no_constant)
    except ValueError:
        return text


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")

"""A server's resources as two tools (`MCPServer(resources=True)`): what they send on the
session and how the answers become the JSON values a call writes.

`list_resources` follows every page of resources/list and resources/templates/list;
`read_resource(uri)` sends resources/read. A text content is its text; a blob whose MIME
type is an image or audio is a `$media` value (`tl.Image` / `tl.Audio`, its bytes kept by
the engine); any other blob stays base64 with its URI and MIME type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .._core._media import Audio, Image
from .._errors import ConfigurationError

__all__ = ["LIST", "READ", "RESOURCE_METHODS", "operation_for", "resource_tool_specs"]

LIST = "resources/list"
READ = "resources/read"
RESOURCE_METHODS = (LIST, READ)

#: Pages a listing may have before it counts as a server paging in circles.
MAX_PAGES = 1000


def resource_tool_specs(label: str) -> list[dict[str, Any]]:
    """The two tools, as `MCPTool` options: name (before the prefix), method, description,
    parameters. Both are read-only and idempotent (reading changes nothing)."""
    return [
        {
            "name": "list_resources",
            "method": LIST,
            "description": (
                f"List the resources of the MCP server {label}: each resource's uri, name, "
                "description and mimeType, and the resource templates (uriTemplate: fill "
                "in its {placeholders} to make a uri). Read one with read_resource."
            ),
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
        {
            "name": "read_resource",
            "method": READ,
            "description": (
                f"Read a resource of the MCP server {label} by its uri (from list_resources, "
                "or a filled-in uriTemplate). Text comes back as text; an image or audio "
                "as media."
            ),
            "parameters": {
                "type": "object",
                "properties": {"uri": {"type": "string", "description": "The resource's URI."}},
                "required": ["uri"],
                "additionalProperties": False,
            },
        },
    ]


def operation_for(method: str, params: dict[str, Any]) -> Callable[[Any], Awaitable[Any]]:
    """What a resource tool's call sends on the session; its result is the call's value."""
    if method == LIST:
        return _list_everything
    if method == READ:
        uri = params["uri"]

        async def read(session: Any) -> Any:
            return read_value(await session.read_resource(uri))

        return read
    raise ConfigurationError(f"unknown MCP method {method!r}")  # a spec from elsewhere


async def _list_everything(session: Any) -> dict[str, Any]:
    resources = await _every_page(session.list_resources, "resources")
    templates = await _every_page(session.list_resource_templates, "resource_templates")
    return {
        "resources": [_dump(item) for item in resources],
        "resourceTemplates": [_dump(item) for item in templates],
    }


async def _every_page(list_page: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
    import mcp_types

    items: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await list_page(params=params)
        items.extend(getattr(page, field) or [])
        cursor = page.next_cursor
        if not cursor:
            return items
        if cursor in seen or len(seen) >= MAX_PAGES:
            raise ValueError(f"the server's {field} listing repeats the cursor {cursor!r}")
        seen.add(cursor)


def _dump(item: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = item.model_dump(mode="json", by_alias=True, exclude_none=True)
    dumped.pop("_meta", None)  # server bookkeeping, not for the model
    return dumped


def read_value(result: Any) -> Any:
    """One content as itself, several as a list, none as None."""
    values = [_content(content) for content in getattr(result, "contents", None) or []]
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def _content(content: Any) -> Any:
    text = getattr(content, "text", None)
    if text is not None:
        return text
    blob = getattr(content, "blob", None)
    mime = getattr(content, "mime_type", None) or "application/octet-stream"
    kind = mime.split("/", 1)[0]
    if blob is not None and kind in ("image", "audio"):
        media = Image if kind == "image" else Audio
        try:
            return media(blob, mime)
        except ValueError:  # not base64, or a type the media value does not take
            pass
    return {"uri": str(content.uri), "mimeType": mime, "blob": blob}

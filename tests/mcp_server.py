"""A real MCP server for tickloop's tests, written with the `mcp` package's own server API.

`python tests/mcp_server.py` serves over stdio (the client spawns it);
`python tests/mcp_server.py --http PORT` serves streamable HTTP on 127.0.0.1:PORT/mcp.
Its tool listing comes in pages of five (three pages), so every client test follows cursors.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    AudioContent,
    EmbeddedResource,
    ImageContent,
    ListToolsResult,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

PAGE_SIZE = 5
PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()


class PagedServer(MCPServer):
    """Lists its tools PAGE_SIZE at a time; the cursor is the next index."""

    listings: int = 0

    async def _handle_list_tools(self, ctx: Any, params: Any) -> ListToolsResult:
        PagedServer.listings += 1
        tools = await self.list_tools()
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + PAGE_SIZE
        return ListToolsResult(
            tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None
        )


server = PagedServer(
    "tickloop-test",
    instructions="Pages are fetched with fetch_page; count words with word_count.",
    log_level="WARNING",
)
_in_flight = {"now": 0, "peak": 0}
_gate = anyio.Event()


@server.tool(annotations=ToolAnnotations(idempotentHint=True, readOnlyHint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fetch_page(url: str) -> dict[str, Any]:
    """Fetch a page (made up from the URL)."""
    return {"url": url, "body": f"the page at {url} says hello world"}


@server.tool()
def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


@server.tool(structured_output=False)
def shout(text: str) -> str:
    """Upper-case a text (plain text content, no structured output)."""
    return text.upper()


@server.tool(structured_output=False)
def as_json_text(n: int) -> str:
    """A JSON document sent as text."""
    return json.dumps({"n": n, "items": [1, 2]})


@server.tool()
def fail(message: str) -> str:
    """Always fails with the given message."""
    raise ToolError(message)


@server.tool()
def crash() -> str:
    """Exits the server process at once (a crash)."""
    os._exit(3)


@server.tool(annotations=ToolAnnotations(idempotentHint=True))
def crash_once(marker: str) -> str:
    """Crashes the server the first time (leaving `marker`), answers after that."""
    if not os.path.exists(marker):
        with open(marker, "w") as file:
            file.write("crashed")
        os._exit(3)
    return "survived"


@server.tool(annotations=ToolAnnotations(idempotentHint=True))
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
async def slow(seconds: float) -> str:
    """Sleeps, then answers."""
    await anyio.sleep(seconds)
    return "done"


@server.tool()
async def gather(n: int) -> int:
    """Returns once n calls of gather are in flight at the same time (or fails)."""
    global _gate
    _in_flight["now"] += 1
    _in_flight["peak"] = max(_in_flight["peak"], _in_flight["now"])
    try:
        if _in_flight["now"] >= n:
            _gate.set()
        with anyio.fail_after(20):
            await _gate.wait()
        return _in_flight["peak"]
    finally:
        _in_flight["now"] -= 1
        if _in_flight["now"] == 0:
            _gate = anyio.Event()


@server.tool(structured_output=False)
def media() -> list[Any]:
    """An image, an audio clip and an embedded text resource."""
    return [
        ImageContent(type="image", data=PIXEL, mime_type="image/png"),
        AudioContent(type="audio", data=PIXEL, mime_type="audio/wav"),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="file:///notes.txt", text="a note", mime_type="text/plain"
            ),
        ),
        TextContent(type="text", text="plain words"),
    ]


@server.tool()
def tag(labels: dict[str, str], note: str = "") -> str:
    """Attach free-form labels (a map strict structured output cannot describe)."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items())) + note


@server.tool()
def whoami(ctx: Context) -> dict[str, Any]:
    """What this request carried: a header and the _meta of the call."""
    headers = dict(ctx.headers or {})
    meta = ctx.request_context.meta
    meta_dict = {
        key: value for key, value in dict(meta or {}).items() if not key.startswith("progress")
    }
    return {"user": headers.get("x-user"), "token": headers.get("authorization"), "meta": meta_dict}


@server.tool()
def listings() -> int:
    """How many tools/list pages this server has served."""
    return PagedServer.listings


@server.resource("test://pixel.png", name="pixel", mime_type="image/png")
def pixel() -> bytes:
    """A one-pixel image (a blob resource)."""
    return base64.b64decode(PIXEL)


@server.resource("test://notes/{topic}", name="notes", mime_type="text/plain")
def notes(topic: str) -> str:
    """Notes on a topic (a resource template)."""
    return f"notes on {topic}"


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()

"""A stdio MCP server written with the `mcp` package (2.x), for docs/mcp.md's note on errors.

`plain` raises a plain exception, whose text the server library replaces with a generic
one; `told` raises `ToolError`, whose text the client receives as written.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("tickloop-errors", log_level="WARNING")


@server.tool()
def plain(message: str) -> str:
    """Fails with a plain exception."""
    raise ValueError(message)


@server.tool()
def told(message: str) -> str:
    """Fails with ToolError."""
    raise ToolError(message)


if __name__ == "__main__":
    server.run()

"""Model Context Protocol servers as tools (`tl.MCPServer`); `mcp` loads on first use."""

from ._connection import MCPConnectionError
from ._oauth import OAuth
from ._results import MCPToolError
from ._server import MCPPrompt, MCPServer, MCPTool

__all__ = ["MCPConnectionError", "MCPPrompt", "MCPServer", "MCPTool", "MCPToolError", "OAuth"]

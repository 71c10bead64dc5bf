"""A tiny MCP server for examples/mcp_agent.py: a few notes, searchable and readable.

Written with the `mcp` package's own server API; run by the example over stdio
(`python examples/servers/notes_server.py`).
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

NOTES = {
    "n1": "trio runs tasks in nurseries; a nursery waits for all of its children.",
    "n2": "MCP servers expose tools; tickloop calls them like any other tool.",
    "n3": "Cancel scopes must be exited by the task that entered them.",
}

server = MCPServer(
    "notes", instructions="Search first, then read the notes you need.", log_level="WARNING"
)
read_only = ToolAnnotations(readOnlyHint=True, idempotentHint=True)


@server.tool(annotations=read_only)
def search_notes(query: str) -> list[str]:
    """Ids of the notes that mention the query (case-insensitive)."""
    return [key for key, text in NOTES.items() if query.lower() in text.lower()]


@server.tool(annotations=read_only)
def read_note(note_id: str) -> str:
    """The text of one note."""
    return NOTES[note_id]


if __name__ == "__main__":
    server.run()

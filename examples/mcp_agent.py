"""An agent whose tools come from an MCP server: one plan searches, then reads the first
hit by reference, while the model is still writing.

The server (examples/servers/notes_server.py) is a real MCP server on the `mcp` package,
spawned over stdio; the model is scripted, so this runs offline. Needs the extra:
`pip install 'tickloop[mcp]'`. Swap in `tl.OpenAIChat("gpt-4.1-mini")` for a real model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tickloop as tl

SERVER = Path(__file__).resolve().parent / "servers" / "notes_server.py"

notes = tl.MCPServer.stdio(sys.executable, [str(SERVER)], prefix="notes", include_instructions=True)

SCRIPT = [
    {
        "calls": [
            {"_tool": "notes_search_notes", "query": "cancel", "_outputPath": "†state.hits"},
            # reads the search's result by reference: it starts as soon as the hits exist
            {
                "_tool": "notes_read_note",
                "note_id": "†state.hits.result[0]",
                "_outputPath": "†state.note",
            },
        ],
        "output": None,
    },
    {"calls": [], "output": "Exit a cancel scope in the task that entered it."},
]


def main() -> None:
    agent = tl.Agent(tl.ScriptedModel(SCRIPT, chunk_delay=0.01), tools=[notes])
    result = agent.run({"question": "What should I know about cancel scopes?"})
    print("hits:", result.state["hits"])
    print("note:", result.state["note"])
    print("answer:", result.output)
    assert result.state["note"] == {
        "result": "Cancel scopes must be exited by the task that entered them."
    }


if __name__ == "__main__":
    main()

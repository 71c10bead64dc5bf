"""An MCP server of many generated tools, for tool-search tests (issue 43), written with
the `mcp` package's own server API.

`python tests/mcp_catalog_server.py billing` serves over stdio the 60 tools of the
`billing` domain of `catalog.py`: each entity of the domain times each verb, with the
same parameters a real API's tools take.
"""

from __future__ import annotations

import sys
from typing import Any

from mcp.server.mcpserver import MCPServer

from catalog import DOMAINS, entries


def make_handler(name: str) -> Any:
    def handler(
        id: str, fields: dict[str, str] | None = None, limit: int = 10, dry_run: bool = False
    ) -> dict[str, Any]:
        return {"tool": name, "id": id, "fields": fields or {}, "limit": limit}

    return handler


def main(domain: str) -> None:
    server = MCPServer(f"catalog-{domain}", log_level="WARNING")
    for name, description in entries(domain):
        server.add_tool(make_handler(name), name=name, description=description)
    server.run("stdio")


if __name__ == "__main__":
    assert sys.argv[1] in DOMAINS, sys.argv[1]
    main(sys.argv[1])

"""A hostile MCP server for tickloop's tests: it speaks the protocol's JSON-RPC over stdio
by hand, so it can list schemas and send answers no well-behaved server library would.

`python tests/mcp_hostile_server.py SCRIPT` where SCRIPT is a JSON file:
`{"tools": [{"name": ..., "inputSchema": ...}, ...], "answers": {"tool": "raw JSON"}}`.
Each answer is the raw text of a tools/call result, written as it is (an escaped lone
surrogate, a structure 2,000 deep); "never" means the call is never answered. A tool
without an entry answers a text "ok".
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main(script_path: str) -> None:
    with open(script_path) as file:
        script = json.load(file)
    tools: list[dict[str, Any]] = script.get("tools", [])
    answers: dict[str, str] = script.get("answers", {})
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if ident is None:  # a notification: nothing to answer
            continue
        if method == "initialize":
            version = message["params"]["protocolVersion"]
            result = json.dumps(
                {
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "hostile", "version": "1"},
                }
            )
        elif method == "tools/list":
            result = json.dumps({"tools": tools})
        elif method == "tools/call":
            answer = answers.get(message["params"]["name"])
            if answer == "never":
                continue
            result = answer or json.dumps({"content": [{"type": "text", "text": "ok"}]})
        else:
            result = "{}"
        out.write('{"jsonrpc": "2.0", "id": ' + json.dumps(ident) + ', "result": ' + result + "}\n")
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1])

"""tickloop agents over A2A: serve one, or call a remote one as a tool.

```python
from tickloop import a2a             # pip install 'tickloop[a2a]'

app = a2a.app(agent, url="http://127.0.0.1:8000")      # ASGI: an A2A server for the agent
remote = a2a.RemoteAgent("http://127.0.0.1:8001", name="researcher",
                         headers={"Authorization": "Bearer ..."})   # a tool
```

`tickloop serve --a2a MODULE:AGENT` serves it on 127.0.0.1 with an access token. Tasks,
approvals (`input-required`) and the card's schemas are described in docs/web.md.
"""

from __future__ import annotations

from ._remote import RemoteAgent, RemoteAgentError
from ._server import SCHEMAS_EXTENSION, agent_card, app

__all__ = ["SCHEMAS_EXTENSION", "RemoteAgent", "RemoteAgentError", "agent_card", "app"]

"""Serve a tickloop agent to AG-UI frontends (CopilotKit, `@ag-ui/client`).

```python
from tickloop import agui            # pip install 'tickloop[agui]'

app = agui.app(agent)                # ASGI: POST / takes RunAgentInput, streams AG-UI events
```

`tickloop serve --agui MODULE:AGENT` serves it on 127.0.0.1 with an access token. The
events, the state deltas and approvals are described in docs/web.md.
"""

from __future__ import annotations

from ._app import app, run_input
from ._translate import APPROVAL_DECIDED, APPROVAL_REQUESTED, CODE_CALL, GUARDRAIL, json_patch

__all__ = [
    "APPROVAL_DECIDED",
    "APPROVAL_REQUESTED",
    "CODE_CALL",
    "GUARDRAIL",
    "app",
    "json_patch",
    "run_input",
]

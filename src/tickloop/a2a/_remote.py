"""`a2a.RemoteAgent`: a remote A2A agent (any framework's) as a tool of a local plan.

A call sends its parameters as one message — `{"task": text}` as a text part, anything
else as a data part — streams the task, and returns its artifact: a text part as a
string, a data part as its value. A remote task that fails or is rejected fails the call
with the remote's words. A remote `input-required` is waited through: the remote agent's
own person decides there (its inbox or page), and the task goes on; the call's
`timeout=` bounds the wait.

a2a-sdk's client runs on asyncio; the call runs it in a worker thread with its own loop,
so the local run (trio) goes on meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import trio

from .._core._tools import CallContext, RawTool
from .._errors import ConfigurationError, RemoteAgentError

__all__ = ["RemoteAgent", "RemoteAgentError"]

TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "what to do, in words"}},
    "required": ["task"],
    "additionalProperties": False,
}


class RemoteAgent(RawTool):
    """A tool whose call runs a task on the A2A agent at `url`.

    Its parameters are `{"task": string}` unless `parameters=` (a JSON Schema of an
    object, e.g. the remote card's input schema) says otherwise; `headers` go with every
    request (`{"Authorization": "Bearer ..."}` for a `tickloop serve --a2a` agent). The
    other options are `tl.Tool`'s.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str,
        description: str = "",
        headers: Mapping[str, str] | None = None,
        parameters: Mapping[str, Any] | None = None,
        output: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"RemoteAgent {name!r}: url must be http(s), not {url!r}")
        self.url = url
        self.headers = dict(headers or {})
        schema = dict(parameters) if parameters is not None else TASK_SCHEMA
        properties = schema.get("properties")
        if schema.get("type") != "object" or not isinstance(properties, Mapping):
            raise ConfigurationError(
                f"RemoteAgent {name!r}: parameters must be an object schema with properties"
            )
        description = description or f"Ask the remote agent {name} (A2A, {url})."
        super().__init__(name, description, schema, output, **options)

    async def run_raw(self, params: dict[str, Any], context: CallContext) -> Any:
        # The parameters the call gave, checked against `parameters`, go as they are (an
        # optional one it left out is not sent). Abandoned on cancel (a timeout): the call
        # ends now; the thread finishes alone.
        return await trio.to_thread.run_sync(self._ask_in_thread, params, abandon_on_cancel=True)

    def _ask_in_thread(self, params: dict[str, Any]) -> Any:
        return asyncio.run(self.ask(params))

    async def ask(self, params: Mapping[str, Any]) -> Any:
        """Send `params` as a message to the remote agent (asyncio) and return its output."""
        import httpx
        from a2a.client import ClientConfig, create_client
        from a2a.helpers.proto_helpers import new_data_part, new_text_part
        from a2a.types import Message, Role, SendMessageRequest, TaskState
        from google.protobuf.json_format import MessageToDict

        from ._server import plain_json

        if list(params) == ["task"] and isinstance(params["task"], str):
            part = new_text_part(params["task"])
        else:
            part = new_data_part(dict(params))
        message = Message(role=Role.ROLE_USER, message_id=_new_id(), parts=[part])
        state, parts, said = None, [], ""
        async with httpx.AsyncClient(headers=self.headers, timeout=None) as http:
            client = await create_client(self.url, client_config=ClientConfig(httpx_client=http))
            try:
                # The stream: the task, then its status and artifact updates, to the end.
                async for response in client.send_message(SendMessageRequest(message=message)):
                    if response.HasField("message"):
                        return _value_of(response.message.parts, MessageToDict, plain_json)
                    if response.HasField("task"):
                        status = response.task.status
                        parts = [p for a in response.task.artifacts for p in a.parts]
                    elif response.HasField("status_update"):
                        status = response.status_update.status
                    elif response.HasField("artifact_update"):
                        parts.extend(response.artifact_update.artifact.parts)
                        continue
                    else:
                        continue
                    state = status.state
                    said = "; ".join(part.text for part in status.message.parts if part.text)
            finally:
                await client.close()
        if state == TaskState.TASK_STATE_COMPLETED:
            return _value_of(parts, MessageToDict, plain_json)
        ended = "gave no task" if state is None else f"ended {TaskState.Name(state)}"
        raise RemoteAgentError(
            f"{self.name}: the remote task {ended}" + (f": {said}" if said else "")
        )


def _new_id() -> str:
    import uuid

    return uuid.uuid4().hex


def _value_of(parts: Any, to_dict: Any, plain: Any) -> Any:
    """The output a task's parts carry: the first data part's value, else the text."""
    for part in parts:
        if part.HasField("data"):
            return plain(to_dict(part.data))
    texts = [part.text for part in parts if part.HasField("text")]
    if not texts:
        raise RemoteAgentError("the remote agent's answer has neither text nor data")
    return "\n".join(texts)

"""A2A (docs/web.md): a2a-sdk's own client sends a message to an agent served by
`tickloop.a2a` and reads the artifact; a tickloop agent calls another over A2A as one call
of its plan (`a2a.RemoteAgent`); a waiting approval shows as `input-required`; no token,
no answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types import Message, Role, SendMessageRequest, StreamResponse, TaskState
from google.protobuf.json_format import MessageToDict

import tickloop as tl
from tickloop import a2a
from tickloop._human._guard import TokenGuard, serve_asyncio


@tl.tool
def lookup(topic: str) -> dict[str, Any]:
    """Facts about a topic."""
    return {"topic": topic, "facts": [f"{topic} has nurseries", f"{topic} has cancel scopes"]}


@tl.tool(name="lookup", requires_approval=True)
def careful_lookup(topic: str) -> dict[str, Any]:
    """Facts about a topic, once a person agrees."""
    return lookup.handler(topic)  # type: ignore[misc]


def _researcher(tool: tl.Tool = lookup, **options: Any) -> tl.Agent:
    plan = {"calls": [{"_tool": "lookup", "topic": "†input.task", "_outputPath": "†state.notes"}]}
    model = tl.ScriptedModel([plan, {"calls": [], "output": "†state.notes"}])
    return tl.Agent(
        model,
        tools=[tool],
        name="researcher",
        instructions="Research a topic.\nCite facts.",
        **options,
    )


@asynccontextmanager
async def _serving(agent: tl.Agent) -> AsyncIterator[tuple[str, str]]:
    """The agent served over A2A behind the token guard, on this asyncio loop."""
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    guard = TokenGuard(_unbuilt)

    def started(port: int) -> None:  # bound, not yet serving: the app learns its URL
        guard.app = a2a.app(agent, url=f"http://127.0.0.1:{port}/")
        bound.set_result(port)

    server = asyncio.ensure_future(
        serve_asyncio(guard, "127.0.0.1", 0, started=started, shutdown=stop.wait)
    )
    port = await asyncio.wait_for(bound, 10)
    try:
        yield f"http://127.0.0.1:{port}/", guard.token
    finally:
        stop.set()
        await server


async def _unbuilt(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("served before the app was built")


async def _send(url: str, token: str, part: Any) -> list[StreamResponse]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers) as http:
        client = await create_client(url, client_config=ClientConfig(httpx_client=http))
        message = Message(role=Role.ROLE_USER, message_id="m1", parts=[part])
        seen = [item async for item in client.send_message(SendMessageRequest(message=message))]
        await client.close()
    return seen


def _states(seen: list[StreamResponse]) -> list[str]:
    return [
        TaskState.Name(item.status_update.status.state)
        for item in seen
        if item.HasField("status_update")
    ]


def _artifact(seen: list[StreamResponse]) -> Any:
    [update] = [item.artifact_update for item in seen if item.HasField("artifact_update")]
    [part] = update.artifact.parts
    return MessageToDict(part.data) if part.HasField("data") else part.text


def test_the_a2a_client_sends_a_message_and_reads_the_artifact() -> None:
    async def main() -> tuple[list[StreamResponse], Any]:
        async with _serving(_researcher()) as (url, token):
            seen = await _send(url, token, new_text_part("trio"))
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(headers=headers) as http:
                card = (await http.get(url + ".well-known/agent-card.json")).json()
        return seen, card

    seen, card = asyncio.run(main())
    assert _states(seen)[-1] == "TASK_STATE_COMPLETED"
    assert "TASK_STATE_WORKING" in _states(seen)
    assert _artifact(seen) == {
        "topic": "trio",
        "facts": ["trio has nurseries", "trio has cancel scopes"],
    }
    assert card["name"] == "researcher" and card["description"] == "Research a topic."
    assert [skill["id"] for skill in card["skills"]] == ["researcher"]


def test_a_data_part_is_the_input_as_it_is_and_a_string_output_is_text() -> None:
    @tl.tool
    def shout(word: str, times: int) -> str:
        """Shout a word."""
        return " ".join([word.upper()] * times)

    plan = {"calls": [{"_tool": "shout", "word": "†input.word", "times": "†input.times",
                       "_outputPath": "†state.said"}]}  # fmt: skip
    model = tl.ScriptedModel([plan, {"calls": [], "output": "†state.said"}])
    agent = tl.Agent(model, tools=[shout], name="shouter")

    async def main() -> list[StreamResponse]:
        async with _serving(agent) as (url, token):
            return await _send(url, token, new_data_part({"word": "hey", "times": 2}))

    seen = asyncio.run(main())
    assert _artifact(seen) == "HEY HEY"  # 2 arrived as a whole number, not 2.0


def test_a_waiting_approval_is_input_required_until_decided() -> None:
    decided = asyncio.Event()

    async def approve(pending: tl.PendingCall) -> tl.Decision:
        await trio.sleep(0)
        # A person decides elsewhere (the inbox); the test decides once the client saw
        # input-required.
        while not decided.is_set():
            await trio.sleep(0.01)
        return tl.Approve()

    agent = _researcher(careful_lookup, approve=approve)
    seen_states: list[str] = []
    refusals: list[str] = []

    async def main() -> list[StreamResponse]:
        async with _serving(agent) as (url, token):
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(headers=headers) as http:
                client = await create_client(url, client_config=ClientConfig(httpx_client=http))
                message = Message(role=Role.ROLE_USER, message_id="m", parts=[new_text_part("x")])
                seen = []
                async for item in client.send_message(SendMessageRequest(message=message)):
                    seen.append(item)
                    if item.HasField("status_update"):
                        state = TaskState.Name(item.status_update.status.state)
                        seen_states.append(state)
                        if state == "TASK_STATE_INPUT_REQUIRED":
                            data = MessageToDict(item.status_update.status.message.parts[1].data)
                            assert data["pending"][0]["id"] == "c1.0"
                            assert data["pending"][0]["tool"] == "lookup"
                            refusals.append(await _message_to(client, item.status_update.task_id))
                            decided.set()
                await client.close()
            return seen

    seen = asyncio.run(main())
    assert seen_states.index("TASK_STATE_INPUT_REQUIRED") < len(seen_states) - 1
    assert seen_states[-2:] == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert _artifact(seen)["topic"] == "x"
    # A message to the waiting task was refused: the run went on, once, to its end.
    [refusal] = refusals
    assert "waits for decisions on c1.0" in refusal and "starts no second run" in refusal


async def _message_to(client: Any, task_id: str) -> str:
    """What the server answers a message naming `task_id`: its A2A error's words."""
    from a2a.utils.errors import A2AError

    message = Message(
        role=Role.ROLE_USER, message_id="again", task_id=task_id, parts=[new_text_part("yes")]
    )
    with pytest.raises(A2AError) as refused:
        _ = [item async for item in client.send_message(SendMessageRequest(message=message))]
    return str(refused.value)


def test_a_tickloop_agent_calls_another_over_a2a_in_one_plan() -> None:
    @tl.tool
    def summarize(facts: list[str]) -> str:
        """Summarize facts."""
        return f"{len(facts)} facts: " + "; ".join(facts)

    async def main() -> tl.RunResult:
        async with _serving(_researcher()) as (url, token):
            remote = a2a.RemoteAgent(
                url, name="researcher", headers={"Authorization": f"Bearer {token}"}
            )
            plan = {
                "calls": [
                    {"_tool": "researcher", "task": "trio", "_outputPath": "†state.research"},
                    {"_tool": "summarize", "facts": "†state.research.facts",
                     "_outputPath": "†state.summary"},
                ]
            }  # fmt: skip
            model = tl.ScriptedModel([plan, {"calls": [], "output": "†state.summary"}])
            writer = tl.Agent(model, tools=[remote, summarize])
            return await writer.run_asyncio({"topic": "trio"})

    result = asyncio.run(main())
    assert result.output == "2 facts: trio has nurseries; trio has cancel scopes"
    assert result.records["c1.0"].status == "done"
    assert result.state["research"]["topic"] == "trio"


def test_a_remote_task_that_fails_fails_the_call_with_its_words() -> None:
    model = tl.ScriptedModel(["not json"] * 3)
    broken = tl.Agent(model, tools=[lookup], name="broken", max_iterations=1)

    async def main() -> Any:
        async with _serving(broken) as (url, token):
            remote = a2a.RemoteAgent(
                url, name="broken", headers={"Authorization": f"Bearer {token}"}
            )
            calls = [{"_tool": "broken", "task": "x"}]
            return await trio_to_asyncio(lambda: tl.execute(calls, tools=[remote]))

    [record] = asyncio.run(main()).records.values()
    assert record.status == "failed"
    assert "the remote task ended TASK_STATE_FAILED" in record.error["message"]


async def trio_to_asyncio(function: Callable[[], Awaitable[Any]]) -> Any:
    from tickloop._engine._asyncio_bridge import run_trio_in_asyncio

    return await run_trio_in_asyncio(function)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": "Bearer TOKEN", "Origin": "http://evil.example"}, 403),
    ],
)
def test_the_served_agent_refuses_a_request_without_the_token(
    headers: dict[str, str], status: int
) -> None:
    ran: list[str] = []
    agent = _researcher(on_event=lambda event: ran.append(event.kind))

    async def main() -> list[int]:
        async with _serving(agent) as (url, token):
            sent = {key: value.replace("TOKEN", token) for key, value in headers.items()}
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": {"role": "ROLE_USER", "messageId": "m",
                                       "parts": [{"text": "trio"}]}},
            }  # fmt: skip
            async with httpx.AsyncClient(headers=sent) as http:
                posted = await http.post(url, json=body, headers={"A2A-Version": "1.0"})
                card = await http.get(url + ".well-known/agent-card.json")
        return [posted.status_code, card.status_code]

    assert asyncio.run(main()) == [status, status]
    assert ran == []


def test_send_message_without_streaming_returns_the_task_and_get_task_reads_it() -> None:
    from a2a.types import GetTaskRequest

    async def main() -> tuple[Any, Any]:
        async with _serving(_researcher()) as (url, token):
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(headers=headers) as http:
                config = ClientConfig(httpx_client=http, streaming=False)
                client = await create_client(url, client_config=config)
                message = Message(role=Role.ROLE_USER, message_id="m", parts=[new_text_part("x")])
                [sent] = [i async for i in client.send_message(SendMessageRequest(message=message))]
                again = await client.get_task(GetTaskRequest(id=sent.task.id))
                await client.close()
        return sent.task, again

    sent, again = asyncio.run(main())
    assert TaskState.Name(sent.status.state) == "TASK_STATE_COMPLETED"
    assert again.id == sent.id and again.status.state == sent.status.state
    [artifact] = again.artifacts
    assert MessageToDict(artifact.parts[0].data)["topic"] == "x"


def test_a_data_part_is_checked_against_the_input_schema() -> None:
    from tickloop.a2a._server import InputError, input_of

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    def message(part: Any) -> Message:
        return Message(role=Role.ROLE_USER, message_id="m", parts=[part])

    assert input_of(message(new_data_part({"n": 3})), schema) == {"n": 3}
    with pytest.raises(InputError, match="does not match the agent's schema: 'n' is a required"):
        input_of(message(new_data_part({"m": 3})), schema)
    assert input_of(message(new_text_part("hello")), schema) == {"task": "hello"}


def test_a_message_with_no_text_or_data_is_rejected_before_anything_runs() -> None:
    from a2a.helpers.proto_helpers import new_url_part

    ran: list[str] = []
    agent = _researcher(on_event=lambda event: ran.append(event.kind))

    async def main() -> list[StreamResponse]:
        async with _serving(agent) as (url, token):
            return await _send(url, token, new_url_part("https://example.com/a.png"))

    seen = asyncio.run(main())
    assert _states(seen) == ["TASK_STATE_REJECTED"]
    assert ran == []


def test_a_remote_agent_with_a_parameters_schema_sends_a_data_part() -> None:
    @tl.tool
    def shout(word: str, times: int = 1) -> str:
        """Shout a word."""
        return " ".join([word.upper()] * times)

    plan = {"calls": [{"_tool": "shout", "word": "†input.word", "times": "†input.times",
                       "_outputPath": "†state.said"}]}  # fmt: skip
    remote_agent = tl.Agent(
        tl.ScriptedModel([plan, {"calls": [], "output": "†state.said"}]), tools=[shout]
    )
    schema = {
        "type": "object",
        "properties": {"word": {"type": "string"}, "times": {"type": "integer"}, "tone": {}},
        "required": ["word", "times"],
    }

    async def main() -> Any:
        async with _serving(remote_agent) as (url, token):
            remote = a2a.RemoteAgent(
                url, name="shouter", parameters=schema, headers={"Authorization": f"Bearer {token}"}
            )
            assert remote.parameters == schema
            calls = [{"_tool": "shouter", "word": "hey", "times": 3, "_outputPath": "†state.s"}]
            return await trio_to_asyncio(lambda: tl.execute(calls, tools=[remote]))

    result = asyncio.run(main())
    assert result.state == {"s": "HEY HEY HEY"}  # "tone" left out: not sent


def test_the_card_carries_a_declared_input_schema_and_the_agents_description() -> None:
    from tickloop.a2a._server import SCHEMAS_EXTENSION, agent_card

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    declared = tl.Agent(
        tl.ScriptedModel([]), name="counter", description="Counts.", input=schema,
        instructions="First line.\nMore.",
    )  # fmt: skip
    card = agent_card(declared, "http://127.0.0.1:1/")
    params = next(e for e in card.capabilities.extensions if e.uri == SCHEMAS_EXTENSION).params
    assert card.description == "Counts."
    assert dict(params)["input"]["required"] == ["n"]
    plain = agent_card(tl.Agent(tl.ScriptedModel([]), name="p", instructions="Hi.\nx"), "u")
    plain_params = dict(
        next(e for e in plain.capabilities.extensions if e.uri == SCHEMAS_EXTENSION).params
    )
    assert plain.description == "Hi." and "input" not in plain_params


def test_a_message_to_a_paused_task_is_refused_and_starts_no_second_run(tmp_path: Any) -> None:
    """One run per task (docs/web.md "A2A"): a message naming a task waiting for
    decisions is refused with an A2A error; the paused task lists its calls' params
    and names its run."""
    from a2a.utils.errors import A2AError

    paid: list[int] = []

    @tl.tool(requires_approval=True)
    def pay(amount: int) -> str:
        """Pay an amount."""
        paid.append(amount)
        return f"paid {amount}"

    plan = {"calls": [{"_tool": "pay", "amount": 10, "_outputPath": "†state.paid"}]}
    model = tl.ScriptedModel([plan, {"calls": [], "output": "†state.paid"}] * 2)
    store = tmp_path / "runs.db"
    agent = tl.Agent(model, tools=[pay], approve=lambda pending: tl.Defer(), store=store)

    async def main() -> tuple[Any, str]:
        async with _serving(agent) as (url, token):
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(headers=headers) as http:
                config = ClientConfig(httpx_client=http, streaming=False)
                client = await create_client(url, client_config=config)
                first = Message(role=Role.ROLE_USER, message_id="m1", parts=[new_text_part("x")])
                [sent] = [i async for i in client.send_message(SendMessageRequest(message=first))]
                again = Message(
                    role=Role.ROLE_USER,
                    message_id="m2",
                    task_id=sent.task.id,
                    context_id=sent.task.context_id,
                    parts=[new_text_part("yes, pay")],
                )
                for streaming in (False, True):
                    config = ClientConfig(httpx_client=http, streaming=streaming)
                    client = await create_client(url, client_config=config)
                    with pytest.raises(A2AError) as refused:
                        _ = [
                            i async for i in client.send_message(SendMessageRequest(message=again))
                        ]
                    await client.close()
        return sent.task, str(refused.value)

    task, refusal = asyncio.run(main())
    assert TaskState.Name(task.status.state) == "TASK_STATE_INPUT_REQUIRED"
    data = MessageToDict(task.status.message.parts[1].data)
    assert data["pending"] == [{"id": "c1.0", "tool": "pay", "params": {"amount": 10}}]
    run_id = MessageToDict(task.metadata)["runId"]
    assert f"task {task.id} waits for decisions on c1.0 (run {run_id})" in refusal
    assert paid == []
    assert [run.run_id for run in tl.SQLiteStore(store).runs()] == [run_id]

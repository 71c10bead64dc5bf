"""Latent tools in code plans (PROTOCOL §14 "Tool options in programs").

A latent tool has no handler: in a plan, the model writes its result in the call's
`_output`. A program cannot, so a code plan's call of a latent tool is answered by a
one-shot request to the agent's model: the tool's description, its parameter and output
schemas, and the call's parameters; the answer is the call's result. The request is
reserved and counted like any model request (§12) by a meter of its own, since it runs
while the program's own request may still stream; the call is an ordinary call of the
scheduler (approval, records, events), and its result is journaled as any call's, so a
resume or a replay never asks again.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from .._core._tools import CallContext, RawTool, Tool, ToolSet
from .._errors import BudgetExceeded
from .._models._base import SolutionRequest

__all__ = ["LATENT_SCHEMA_NAME", "LatentAnswer", "answer_latent_tools", "latent_request"]

# What a one-shot request is called (`SolutionRequest.schema_name`): a client or a test
# model can tell it from a program's request.
LATENT_SCHEMA_NAME = "latent_result"

Ask = Callable[[SolutionRequest], Awaitable[Any]]


class LatentAnswer(RawTool):
    """A latent tool of a code plan, answered by `ask` (the loop's one-shot request)."""

    def __init__(self, latent: Tool, ask: Callable[[Tool, dict[str, Any], str], Awaitable[Any]]):
        super().__init__(
            latent.name,
            latent.description,
            latent.parameters,
            latent.output,
            requires_approval=latent.requires_approval,
            depends_on=list(latent.depends_on),
            timeout=latent.timeout,
            max_concurrency=latent.max_concurrency,
            # The model writes the result: nothing in the world changes (§15).
            read_only=True,
            idempotent=True,
        )
        self.latent = latent
        self._ask = ask

    async def run_raw(self, params: dict[str, Any], context: CallContext) -> Any:
        return await self._ask(self.latent, params, context.id)


def answer_latent_tools(
    tools: ToolSet, ask: Callable[[Tool, dict[str, Any], str], Awaitable[Any]]
) -> ToolSet:
    """`tools` with each latent tool replaced by one answered by `ask`."""
    if not any(tool.is_latent for tool in tools.values()):
        return tools
    return ToolSet(
        [LatentAnswer(tool, ask) if tool.is_latent else tool for tool in tools.values()],
        deferred=tools.deferred,
    )


def latent_request(
    tool: Tool, params: dict[str, Any], iteration: int, path: tuple[str, ...], call_id: str
) -> SolutionRequest:
    """The one-shot request that answers a call of latent `tool` with `params`."""
    output = tool.output if tool.output is not None else {}
    instructions = (
        f"You are the tool `{tool.name}`. {tool.description}\n\n"
        "Answer the call below with its result only, as JSON of the form "
        '{"result": <the result>}, where the result matches this JSON Schema:\n'
        + json.dumps(output, ensure_ascii=False)
    )
    return SolutionRequest(
        messages=[
            {"role": "system", "content": instructions},
            {"role": "user", "content": json.dumps(params, ensure_ascii=False)},
        ],
        schema={
            "type": "object",
            "properties": {"result": output},
            "required": ["result"],
            "additionalProperties": False,
        },
        iteration=iteration,
        schema_name=LATENT_SCHEMA_NAME,
        metadata={"latent_tool": tool.name, "call_id": call_id},
        path=path,
    )


def read_answer(tool: Tool, text: str) -> Any:
    """The result in a one-shot answer; ValueError saying why when there is none."""
    try:
        answer = json.loads(text)
    except ValueError:
        raise ValueError(
            f"the model's answer for latent tool {tool.name!r} is not JSON: {text[:200]!r}"
        ) from None
    if not isinstance(answer, dict) or "result" not in answer:
        raise ValueError(
            f'the model\'s answer for latent tool {tool.name!r} has no "result": {text[:200]!r}'
        )
    return answer["result"]


def budget_refusal(error: BudgetExceeded) -> RuntimeError:
    """A one-shot request the budget refused: the call fails, the program goes on."""
    return RuntimeError(f"budget: {error}")

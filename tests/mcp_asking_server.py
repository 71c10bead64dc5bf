"""An MCP server that asks its client things during its tool calls: a question for a
person (`elicitation/create`) and a request to the client's model (`sampling/createMessage`).
Written with the `mcp` package's own server API; `python tests/mcp_asking_server.py`
serves over stdio. Each tool returns what it was told, so a test sees the answer arrive.
"""

from __future__ import annotations

import warnings

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import SamplingMessage, TextContent
from pydantic import BaseModel, Field

server = MCPServer("asking")


class Shipping(BaseModel):
    city: str = Field(description="Where to ship")
    copies: int = Field(ge=1, le=10, description="How many")


@server.tool()
async def ship(item: str, ctx: Context) -> str:
    """Ship an item: asks where to and how many."""
    answer = await ctx.elicit(f"Where should {item} go?", Shipping)
    if answer.action == "accept":
        return f"shipping {answer.data.copies} x {item} to {answer.data.city}"
    return f"not shipped: {answer.action}"


async def _sample(ctx: Context, prompt: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = await ctx.request_context.session.create_message(
            [SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
            max_tokens=50,
            system_prompt="You name things.",
        )
    content = result.content
    return content.text if isinstance(content, TextContent) else str(content)


@server.tool()
async def name_it(thing: str, ctx: Context) -> str:
    """Ask the client's model for a name."""
    try:
        return f"named: {await _sample(ctx, f'Name a {thing}.')}"
    except Exception as error:
        return f"sampling refused: {error}"


@server.tool()
async def name_then_ship(thing: str, ctx: Context) -> str:
    """Ask the model for a name, then a person where to ship it."""
    name = await _sample(ctx, f"Name a {thing}.")
    answer = await ctx.elicit(f"Where should {name} go?", Shipping)
    if answer.action == "accept":
        return f"shipping {answer.data.copies} x {name} to {answer.data.city}"
    return f"{name} not shipped: {answer.action}"


if __name__ == "__main__":
    server.run()

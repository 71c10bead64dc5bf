"""jsonschema loads only when needed (docs/architecture.md): a schema pydantic made is
valid as made, and plain values of plain schemas pass the fast check, so a run of tools
made from functions, with a typed output, never loads it; a JSON Schema a user wrote
does (it is checked when given)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _loaded_after(code: str, module: str) -> bool:
    """Whether a fresh interpreter has loaded `module` after running `code`."""
    probe = f"{textwrap.dedent(code)}\nimport sys\nprint({module!r} in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return done.stdout.split()[-1] == "True"


TYPED_RUN = """
    import pydantic
    import tickloop as tl

    class Sum(pydantic.BaseModel):
        total: int

    @tl.tool
    def add(a: int, b: int) -> int:
        return a + b

    @tl.tool(output_path="†state.sums")
    async def add_all(numbers: list[int]) -> list[int]:
        return [sum(numbers)]

    model = tl.ScriptedModel(
        [{"calls": [{"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.sum"},
                    {"_tool": "add_all", "numbers": [1, 2]}]},
         {"output": {"total": "†state.sum"}}]
    )
    assert tl.Agent(model, tools=[add, add_all], output=Sum).run().output == Sum(total=3)
    assert tl.Agent(model, output=list[int]).output.schema
"""


def test_a_run_of_function_tools_with_a_typed_output_loads_no_jsonschema() -> None:
    assert not _loaded_after(TYPED_RUN, "jsonschema")


def test_a_json_schema_a_user_wrote_is_checked_with_jsonschema() -> None:
    code = """
        import tickloop as tl
        tl.Tool("summarize", parameters={"type": "object"}, output={"type": "string"})
    """
    assert _loaded_after(code, "jsonschema")
    output = """
        import tickloop as tl
        tl.Agent(tl.ScriptedModel([]), output={"type": "string"})
    """
    assert _loaded_after(output, "jsonschema")

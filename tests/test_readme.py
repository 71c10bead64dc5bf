"""The README's Quick start runs as written and gives what its comments say."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_quick_start_runs_as_written() -> None:
    quick_start = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    namespace: dict = {}
    exec(compile(quick_start, "README.md", "exec"), namespace)
    result = namespace["result"]
    assert result.errors == []
    assert result.state["words"] == 42 and result.state["page"].startswith("lorem ipsum")
    assert namespace["agent"].run({"url": "https://example.org"}).output == 42


def test_the_code_plan_example_gives_what_its_comments_say() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    example = next(block for block in blocks if "tl.run_program" in block)
    namespace: dict = {"tl": __import__("tickloop")}
    exec(compile(example, "README.md", "exec"), namespace)
    result = namespace["result"]
    assert result.errors == []
    assert result.output == 9
    assert result.printed == {1: ["sum 14"]}
    assert sorted(result.records) == [f"c1.0[{n}]" for n in range(4)]

"""The native tool-calling examples run as documented (offline, on replayed streams)."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from types import ModuleType

import pytest
import trio

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("tools_*.py"))


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_is_an_example_per_wire_format() -> None:
    names = {path.stem for path in EXAMPLES}
    assert {"tools_openai_chat", "tools_anthropic", "tools_responses"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.stem)
def test_example_runs(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = load(path).main
    if inspect.iscoroutinefunction(main):
        trio.run(main)
    else:
        main()
    assert capsys.readouterr().out.strip()

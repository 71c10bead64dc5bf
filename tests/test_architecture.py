"""The structure docs/architecture.md promises, checked on the code as it is.

`lint-imports` keeps the layers; it does not see a cycle inside one package, or one
closed by an import inside a function or under `TYPE_CHECKING`. This test does: it builds
the whole import graph with grimp (every import statement, wherever it sits) and fails
naming each cycle among tickloop's modules. (Line caps are not design, issue 39: a
module is one concept, named for it, however long that takes.)
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import grimp
import networkx as nx
import pytest


def import_cycles(package: str) -> list[list[str]]:
    """Every cycle of imports among `package`'s modules, each as a path that closes."""
    graph = grimp.build_graph(package, include_external_packages=False, cache_dir=None)
    edges = nx.DiGraph()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            edges.add_edge(module, imported)
    cycles: list[list[str]] = []
    for component in nx.strongly_connected_components(edges):
        if len(component) > 1:
            # One cycle per tangle names the modules to look at; the rest follow from it.
            cycle = next(nx.simple_cycles(edges.subgraph(component)))
            cycles.append([*cycle, cycle[0]])
    for module in graph.modules:
        if edges.has_edge(module, module):
            cycles.append([module, module])
    return cycles


def test_no_import_cycle_among_tickloop_modules() -> None:
    cycles = import_cycles("tickloop")
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


SOURCE = Path(__file__).resolve().parents[1] / "src" / "tickloop"


def test_the_check_sees_function_level_and_type_checking_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check would fail on the cycles `_agent` used to have: one edge only inside a
    function, one only under TYPE_CHECKING."""
    package = tmp_path / "tangled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "agent.py").write_text(
        textwrap.dedent(
            """
            def stream():
                from .turns import open_stream
                return open_stream
            """
        )
    )
    (package / "turns.py").write_text(
        textwrap.dedent(
            """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from .agent import stream
            def open_stream():
                pass
            """
        )
    )
    (package / "plain.py").write_text("from . import turns\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cycles = import_cycles("tangled")
    sys.modules.pop("tangled", None)
    assert len(cycles) == 1
    assert set(cycles[0]) == {"tangled.agent", "tangled.turns"}


# -- importing the package -------------------------------------------------------------------

HEAVY = ("httpx", "jsonschema", "sqlite3", "networkx", "starlette", "hypercorn", "mcp")


def _loaded_after(code: str) -> list[str]:
    """Which of HEAVY a fresh interpreter has loaded after running `code`."""
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_import_tickloop_loads_no_heavy_dependency() -> None:
    """A script pays for what it uses: importing the package imports none of the HTTP,
    schema, database, graph or web libraries."""
    assert _loaded_after("import tickloop") == []


def test_a_run_on_a_scripted_model_loads_no_http_stack() -> None:
    """A run without a real model client never imports httpx (nor a store's sqlite3, nor
    the web stack of a page it does not serve)."""
    code = textwrap.dedent(
        """
        import tickloop as tl

        @tl.tool
        def add(a: int, b: int) -> int:
            return a + b

        model = tl.ScriptedModel(
            [{"calls": [{"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.sum"}]},
             {"output": "†state.sum"}]
        )
        assert tl.Agent(model, tools=[add]).run().output == 3
        """
    )
    loaded = _loaded_after(code)
    assert "httpx" not in loaded
    assert "starlette" not in loaded and "hypercorn" not in loaded


def test_every_public_name_is_read_from_the_package_as_before() -> None:
    """Loaded on first use, each name of `__all__` is still a plain attribute of the
    package, `from tickloop import X` gives the same object, and a typo is an
    AttributeError naming it."""
    import tickloop as tl

    for name in tl.__all__:
        value = getattr(tl, name)
        namespace: dict[str, object] = {}
        exec(f"from tickloop import {name} as value", namespace)
        assert namespace["value"] is value
    assert set(tl.__all__) <= set(dir(tl))
    with pytest.raises(AttributeError, match="Agnet"):
        tl.Agnet  # noqa: B018


def attribute_reaches(root: Path) -> list[str]:
    """`file:line name` for every `getattr(x, "wants_...")`/`hasattr`: a lower layer reading
    a consumer's flag by name instead of stating the interface it needs."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in {"getattr", "hasattr"}
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and str(node.args[1].value).startswith("wants")
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.args[1].value}")
    return found


def test_no_layer_reads_a_consumers_flag_by_attribute_name() -> None:
    assert attribute_reaches(SOURCE) == []


def test_the_attribute_reach_check_finds_a_flag_read_by_name(tmp_path: Path) -> None:
    (tmp_path / "low.py").write_text('def f(x):\n    return getattr(x, "wants_notes", True)\n')
    assert attribute_reaches(tmp_path) == ["low.py:2 wants_notes"]


def test_the_driver_asks_an_action_observer_what_it_wants() -> None:
    """`_core` states the interface (`ActionObserver`); the run's events implement it."""
    from tickloop._core._observer import ActionObserver, wants
    from tickloop._observe._events import EventSink, Redactor

    class Quiet(ActionObserver):
        @property
        def wants_notes(self) -> bool:
            return False

        @property
        def wants_messages(self) -> bool:
            return False

        def __call__(self, action: object) -> None:
            pass

    assert wants(None) == (False, False)
    assert wants(print) == (True, True)  # a plain callable takes every action
    assert wants(Quiet()) == (False, False)
    assert wants(EventSink("r", Redactor(()))) == (False, False)  # nobody listens
    assert wants(EventSink("r", Redactor(()), listeners=[print])) == (True, False)


def test_tools_that_take_raw_parameters_implement_the_one_hook() -> None:
    """Issue 39: agent tools, remote A2A agents and MCP tools implement `RawTool.run_raw`;
    nothing overrides `Tool.prepare`, forges a handler's `__signature__` or caches on a
    tool."""
    from tickloop._agent._subagent import AgentTool
    from tickloop._core._tools import RawTool, Tool
    from tickloop._mcp._server import MCPTool
    from tickloop.a2a._remote import RemoteAgent

    for kind in (AgentTool, RemoteAgent, MCPTool):
        assert issubclass(kind, RawTool)
        assert kind.run_raw is not RawTool.run_raw, kind
        assert kind.prepare is Tool.prepare, kind
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        relative = path.relative_to(SOURCE).as_posix()
        for number, line in enumerate(text.splitlines(), 1):
            forged = "__signature__" in line
            prepare = "def prepare(" in line and relative != "_core/_tools.py"
            stuck = re.search(r"\btool\._\w+ *=|getattr\(tool, \"_", line) is not None
            if forged or prepare or stuck:
                found.append(f"{relative}:{number} {line.strip()}")
    found = [f for f in found if not f.startswith("_durable/_migrations.py")]  # a database's
    assert found == []


def test_the_error_tree_is_drawn_whole_in_one_docstring() -> None:
    """Issue 39: `_errors.py` draws every exception class tickloop raises on purpose, as
    httpx's `_exceptions.py` does, and defines each of them."""
    import tickloop as tl
    import tickloop.a2a as a2a
    from tickloop import _errors

    def below(kind: type[BaseException]) -> list[type[BaseException]]:
        found = []
        for sub in kind.__subclasses__():
            found += [sub, *below(sub)]
        return found

    tree = below(tl.TickloopError)
    assert {tl.ModelError, tl.ReplayMismatchError, a2a.RemoteAgentError} <= set(tree)
    assert issubclass(a2a.RemoteAgentError, RuntimeError)  # as it was
    doc = _errors.__doc__ or ""
    for kind in tree:
        assert kind.__module__ == "tickloop._errors", kind
        assert f"── {kind.__name__} " in doc, kind


def temporal_reaches_into_agent(root: Path) -> list[str]:
    """`file:line text` for every place under `root` (tickloop/temporal) that imports a
    module of `_agent` other than its seam, imports an underscore name from it, or calls
    a private method of an agent, a tool or a loop."""
    found = []
    private_call = re.compile(r"\b(agent|tool|loop|_loop)\._[a-z]\w*\b")
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and "_agent" in node.module:
                names = [alias.name for alias in node.names]
                if node.module.split(".")[-1] != "seam" or any(n.startswith("_") for n in names):
                    found.append(f"{path.name}:{node.lineno} from {node.module} import {names}")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if private_call.search(line.split("#", 1)[0]):
                found.append(f"{path.name}:{number} {line.strip()}")
    return found


def test_temporal_uses_the_agent_seam_only() -> None:
    """Issue 39: `tickloop.temporal` reaches `_agent` through `_agent/seam.py` alone."""
    assert temporal_reaches_into_agent(SOURCE / "temporal") == []


def test_the_seam_check_finds_a_reach(tmp_path: Path) -> None:
    (tmp_path / "w.py").write_text(
        "from .._agent._solution import _SolutionLoop\n"
        "from .._agent.seam import AgentConfig\n"
        "config = agent._config()\n"
    )
    assert temporal_reaches_into_agent(tmp_path) == [
        "w.py:1 from _agent._solution import ['_SolutionLoop']",
        "w.py:3 config = agent._config()",
    ]


def durable_reads_of_call_fields(root: Path) -> list[str]:
    """Lines of the durable layer, outside its codec (which spells a call's text), that
    read a call's own fields: whom a call waited on and which call an entry was are the
    scheduler's to say (`NoteReady.waits_on`, `NoteSettled.waited_on`, its actions' ids)."""
    found = []
    for path in sorted((root / "_durable").glob("*.py")):
        if path.name == "_codec.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"""["'](_outputPath|_id)["']""", line.split("#", 1)[0]):
                found.append(f"{path.name}:{number} {line.strip()}")
    return found


def test_the_durable_layer_is_told_the_arrows_and_ids_not_reading_calls() -> None:
    assert durable_reads_of_call_fields(SOURCE) == []


def test_the_call_field_check_finds_a_read(tmp_path: Path) -> None:
    (tmp_path / "_durable").mkdir()
    (tmp_path / "_durable" / "_rows.py").write_text('path = call.get("_outputPath")\n')
    assert durable_reads_of_call_fields(tmp_path) == ['_rows.py:1 path = call.get("_outputPath")']


ROW_CHANGE_FIELDS = re.compile(
    r"\.changes\.(dirty|settled|since|checkpoint|rewrite)\s*(\[.*\])?\s*=[^=]"
)


def test_only_the_row_changes_change_their_fields() -> None:
    """The rows waiting to be written have one owner (`_rows.RowChanges`): the
    journal and a resume call its methods, and write none of its fields."""
    found = [
        f"{path.relative_to(SOURCE)}:{number}"
        for path in sorted(SOURCE.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ROW_CHANGE_FIELDS.search(line)
    ]
    assert found == []
    assert ROW_CHANGE_FIELDS.search("self.changes.dirty = dict(rows)")
    assert ROW_CHANGE_FIELDS.search("self.changes.dirty[call_id] = row")

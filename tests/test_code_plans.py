"""Code plans through the public API (PROTOCOL §14): the model writes Python, every call
in it is a call of the run.

Timing is on trio's virtual clock (`MockClock(autojump_threshold=0)`): tools sleep a
known time, the model streams at a known pace, and what started when is read from the
call records (`started`, `finished`, on the run's clock).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

import tickloop as tl


def run_on_mock_clock(agent: tl.Agent[Any], input: Any = None, **options: Any) -> Any:
    async def main() -> Any:
        return await agent.run_async(input, **options)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def fenced(program: str) -> str:
    return f"```python\n{program.strip()}\n```\n"


SECOND = 1.0


@tl.tool(read_only=True)
async def fetch(url: str) -> str:
    """Fetch a page (one second)."""
    await trio.sleep(SECOND)
    return f"page of {url}"


@tl.tool(read_only=True)
async def search(query: str) -> list[str]:
    """Search (one second)."""
    await trio.sleep(SECOND)
    return [f"{query}/a", f"{query}/b", f"{query}/c"]


sent: list[dict[str, Any]] = []


@tl.tool
async def send(to: str, body: str) -> dict[str, Any]:
    """Send a message: a side effect (one second)."""
    await trio.sleep(SECOND)
    sent.append({"to": to, "body": body})
    return {"sent": True}


@tl.tool(read_only=True)
async def broken(url: str) -> str:
    """Always fails."""
    await trio.sleep(SECOND)
    raise RuntimeError(f"cannot reach {url}")


@pytest.fixture(autouse=True)
def _clear_sent() -> None:
    sent.clear()


# -- the request ------------------------------------------------------------------------


def test_the_request_shows_tools_as_python_stubs() -> None:
    lookup = tl.Tool(
        "find-page",
        "Find a page by its title.",
        parameters={
            "type": "object",
            "properties": {
                "lang": {"type": "string", "enum": ["en", "de"], "default": "en"},
                "title": {"type": "string", "description": "the title"},
                "limit": {"type": "integer"},
                "from": {"type": "string"},
            },
            "required": ["title"],
        },
        output={
            "type": "object",
            "properties": {"url": {"type": "string"}, "score": {"type": "number"}},
            "required": ["url", "score"],
        },
        handler=lambda title, lang="en", limit=None: {"url": title, "score": 1.0},
        read_only=True,
    )
    model = tl.ScriptedModel([fenced('final_answer("done")')])
    result = tl.Agent(model, tools=[lookup], protocol="code").run({"topic": "trio"})
    assert result.output == "done"
    [system, user] = model.requests[0]["messages"]
    stubs = system["content"]
    # Required first, then optional in schema order; Literal for an enum, defaults,
    # mangled names (`-` -> `_`, a keyword gets `_`), the output as a TypedDict.
    assert "class FindPageResult(TypedDict):\n    url: str\n    score: float" in stubs
    assert (
        "def find_page(title: str, lang: Literal['en', 'de'] = 'en', limit: int | None = None, "
        "from_: str | None = None) -> FindPageResult:"
        in stubs.replace("\n    ", " ").replace("(\n", "(").replace(",\n)", ")")
        or "def find_page(\n    title: str,\n    lang: Literal['en', 'de'] = 'en',\n"
        "    limit: int | None = None,\n    from_: str | None = None,\n) -> FindPageResult:"
        in stubs
    )
    assert "Find a page by its title." in stubs
    assert "final_answer(value)" in stubs
    assert "task_input = {'topic': 'trio'}" in user["content"]
    assert model.requests[0]["schema"] is None  # a plain-text answer: no JSON schema


def test_names_that_collide_once_mangled_are_a_configuration_error() -> None:
    one = tl.Tool("get-page", "a", {"type": "object"}, handler=lambda: 1)
    two = tl.Tool("get_page", "b", {"type": "object"}, handler=lambda: 2)
    with pytest.raises(tl.ConfigurationError, match="'get-page' and 'get_page'"):
        tl.Agent(tl.ScriptedModel([]), tools=[one, two], protocol="code")
    # Only code plans care: the other protocols call tools by their own names.
    tl.Agent(tl.ScriptedModel([]), tools=[one, two])


def test_a_latent_tool_is_answered_by_a_one_shot_request_counted_in_the_budget(
    tmp_path: Any,
) -> None:
    """PROTOCOL §14 "Tool options in programs": a program cannot write a latent call's
    result, so the agent's model answers it in a request of its own (the tool's
    description, schemas and the call's parameters), counted like any request and
    journaled as the call's result: a replay does not ask again."""
    summarize = tl.Tool(
        "summarize",
        "Summarize a text in three words.",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        output={"type": "string"},
    )
    asked: list[dict[str, Any]] = []

    def answer(request: dict[str, Any]) -> Any:
        if request["schema"] is None:  # the program's request
            return fenced('s = summarize(text="a long text")\nfinal_answer(s.upper())')
        asked.append(request)
        return {"result": "short and sweet"}

    db = tmp_path / "runs.db"
    agent = tl.Agent(
        tl.FunctionModel(answer), tools=[summarize], protocol="code", store=db,
        budget=tl.Budget(requests=5),
    )  # fmt: skip
    result = run_on_mock_clock(agent, run_id="r1")
    assert result.output == "SHORT AND SWEET"
    [one_shot] = asked
    assert '"a long text"' in one_shot["messages"][-1]["content"]
    assert "Summarize a text in three words." in one_shot["messages"][0]["content"]
    assert one_shot["schema"]["properties"]["result"] == {"type": "string"}
    assert result.usage.requests == 2
    assert result.records["c1.0"].status == "done"
    again = agent.replay("r1", store=db)  # the model and the call from the record
    assert again.output == "SHORT AND SWEET" and len(asked) == 1
    # With no room for it, the one-shot request is refused: the call fails at its site.
    tight = tl.Agent(
        tl.FunctionModel(answer), tools=[summarize], protocol="code",
        budget=tl.Budget(requests=1),
    )  # fmt: skip
    with pytest.raises(tl.BudgetExceeded):
        run_on_mock_clock(tight)
    assert len(asked) == 1


def test_a_depends_on_reference_reads_the_variables_the_earlier_statements_left() -> None:
    """PROTOCOL §14 "Tool options in programs": `†state.token` is the variable `token`
    as the statements before the call left it; absent, the call raises ToolError of type
    structural and is never made."""
    used: list[str] = []

    @tl.tool(depends_on=["†state.token"])
    def use(x: str) -> str:
        """Use the token."""
        used.append(x)
        return "used " + x

    @tl.tool(read_only=True)
    async def login() -> str:
        """Log in."""
        await trio.sleep(1)
        return "t0k"

    program = fenced(
        "try:\n"
        "    early = use(x='before')\n"
        "except ToolError as e:\n"
        "    early = e.type + ': ' + e.message\n"
        "token = login()\n"
        "late = use(x=token)\n"
        "final_answer([early, late])"
    )
    agent = tl.Agent(tl.ScriptedModel([program]), tools=[use, login], protocol="code")
    result = run_on_mock_clock(agent)
    early, late = result.output
    assert early.startswith("structural: use depends on †state.token")
    assert late == "used t0k" and used == ["t0k"]  # the first call was never made
    assert [record.tool for record in result.records.values()] == ["login", "use"]


def test_read_only_is_described_and_shown_in_events() -> None:
    assert fetch.describe()["options"]["read_only"] is True
    assert send.describe()["options"]["read_only"] is False
    events: list[tl.RunEvent] = []
    model = tl.ScriptedModel(
        [fenced('a = fetch(url="x")\nb = send(to="bob", body=a)\nfinal_answer(b)')]
    )
    agent = tl.Agent(model, tools=[fetch, send], protocol="code", on_event=events.append)
    run_on_mock_clock(agent)
    received = {event.call_id: event for event in events if isinstance(event, tl.CallReceived)}
    assert received["c1.0"].read_only and not received["c1.1"].read_only
    records = run_on_mock_clock(agent).records
    assert records["c1.0"].read_only and not records["c1.1"].read_only
    assert (received["c1.0"].line, received["c1.1"].line) == (1, 2)


# -- streaming and readiness ------------------------------------------------------------


def test_the_first_call_starts_while_the_model_is_still_writing() -> None:
    """A gated model: it sends the rest of the program only once the first call has
    finished, so the run can end only if calls run while the stream is open."""
    ran = trio.Event()

    class Gated:
        async def stream_solution(self, request: tl.SolutionRequest) -> Any:
            if request.iteration > 1:
                raise AssertionError("one program is enough")
            # A statement is complete once the next line has come whole (it could have
            # been an `else:`), so the first call waits for line 2, not for the rest.
            yield tl.TextDelta('```python\na = fetch(url="https://a")\nb = fetch(url=a)\n')
            with trio.fail_after(60):
                await ran.wait()
            yield tl.TextDelta("final_answer(b)\n```\n")

    def on_event(event: tl.RunEvent) -> None:
        if isinstance(event, tl.CallFinished) and event.call_id == "c1.0":
            ran.set()

    agent = tl.Agent(Gated(), tools=[fetch], protocol="code", on_event=on_event)  # type: ignore[arg-type]
    result = run_on_mock_clock(agent)
    assert result.output == "page of page of https://a"
    assert [(r.id, r.line) for r in result.records.values()] == [("c1.0", 1), ("c1.1", 2)]


def test_calls_start_as_their_statements_complete_on_a_paced_stream() -> None:
    program = fenced(
        """
a = fetch(url="https://a")
b = fetch(url="https://b")
c = fetch(url="https://c")
note = "the model is still writing this long line, and more lines after it"
more = "so the program streams for a good while after its first calls complete"
final_answer([a, b, c])
"""
    )
    events: list[tl.RunEvent] = []
    # Eight characters every half second: the program takes ~15 s to stream.
    model = tl.ScriptedModel([program], chunk_chars=8, chunk_delay=0.5)
    agent = tl.Agent(model, tools=[fetch], protocol="code", on_event=events.append)
    result = run_on_mock_clock(agent)
    assert result.output == ["page of https://a", "page of https://b", "page of https://c"]
    [finished] = [e for e in events if isinstance(e, tl.RequestFinished)]
    [started] = [e for e in events if isinstance(e, tl.RequestStarted)]
    for record in result.records.values():
        # Each call ran to its end while the model was still writing.
        assert record.finished is not None and record.finished < finished.time
    assert result.records["c1.0"].started - started.time < 5  # once line 2 arrived
    assert [(r.id, r.line) for r in result.records.values()] == [
        ("c1.0", 1),
        ("c1.1", 2),
        ("c1.2", 3),
    ]


def test_variables_are_the_state_one_write_per_changed_variable() -> None:
    program = fenced(
        """
a = fetch(url="x")
b = 2
print("got", a)
final_answer(b)
"""
    )
    events: list[tl.RunEvent] = []
    model = tl.ScriptedModel([program])
    agent = tl.Agent(model, tools=[fetch], protocol="code", on_event=events.append)
    result = run_on_mock_clock(agent)
    assert result.output == 2
    assert result.state == {"a": "page of x", "b": 2}
    writes = [
        (m["_path"], m["_outputMethod"], m.get("_line"))
        for m in result.messages
        if m["type"] == "data" and m["kind"] == "state"
    ]
    assert writes == [("†state.a", "set", 1), ("†state.b", "set", 2)]
    assert result.printed == {1: ["got page of x"]}
    printed = [e for e in events if isinstance(e, tl.ProgramPrinted)]
    assert [(e.iteration, e.line, e.text) for e in printed] == [(1, 3, "got page of x")]


def test_a_program_without_final_answer_is_shown_in_the_next_request() -> None:
    first = fenced('page = fetch(url="x")\nprint(len(page))\n')
    second = fenced("final_answer(page)")
    model = tl.ScriptedModel([first, second])
    result = run_on_mock_clock(tl.Agent(model, tools=[fetch], protocol="code"))
    assert result.output == "page of x"
    assert result.iterations == 2
    shown = model.requests[1]["messages"][-1]["content"]
    assert "## Program 1" in shown and 'page = fetch(url="x")' in shown
    assert "Printed:\n9" in shown
    assert "page = 'page of x'" in shown  # the variables


def test_a_call_with_side_effects_waits_for_every_earlier_call() -> None:
    program = fenced(
        """
a = fetch(url="x")
s = send(to="bob", body="hello")
b = fetch(url="y")
final_answer(s)
"""
    )
    result = run_on_mock_clock(
        tl.Agent(tl.ScriptedModel([program]), tools=[fetch, send], protocol="code")
    )
    records = result.records
    # The read-only call after it did not wait; the side effect waited for `a`.
    assert records["c1.1"].started >= records["c1.0"].finished
    assert records["c1.2"].started < records["c1.1"].finished


def test_a_side_effect_after_an_uncaught_failure_never_runs() -> None:
    program = fenced(
        """
a = broken(url="x")
s = send(to="bob", body="hello")
final_answer(s)
"""
    )
    model = tl.ScriptedModel([program, fenced('final_answer("gave up")')])
    result = run_on_mock_clock(tl.Agent(model, tools=[broken, send], protocol="code"))
    assert result.output == "gave up"
    assert sent == []
    assert "c1.1" not in result.records
    shown = model.requests[1]["messages"][-1]["content"]
    assert "cannot reach x" in shown and "line 1" in shown


def test_model_chosen_ids_may_not_look_like_call_paths() -> None:
    @tl.tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    result = tl.run_calls(
        [{"_tool": "add", "a": 1, "b": 2, "_id": "c1.0[1]", "_outputPath": "†state.x"}],
        tools=[add],
    )
    [error] = result.errors
    assert "'[', ']' or '>'" in error["data"]["error"]["message"]
    assert result.state == {}


def test_unset_removes_a_key_from_the_state() -> None:
    result = tl.run_calls([], tools=[], state={"a": 1, "b": 2})
    log = result._log
    log.append(
        {
            "type": "data",
            "kind": "state",
            "_path": "†state.a",
            "_outputMethod": "unset",
            "data": {"a": None},
        }
    )
    log.append(
        {
            "type": "data",
            "kind": "state",
            "_path": "†state.zz",
            "_outputMethod": "unset",
            "data": {"zz": None},
        }
    )
    assert result.state == {"b": 2}


# -- approvals --------------------------------------------------------------------------


def test_a_gated_call_asks_with_resolved_params_while_independent_statements_finish() -> None:
    asked: list[tuple[str, dict[str, Any], int | None, float]] = []

    @tl.tool(requires_approval=True)
    async def pay(to: str, cents: int) -> str:
        """Pay someone."""
        return f"paid {cents} to {to}"

    async def approve(call: tl.PendingCall) -> tl.Decision:
        asked.append((call.id, call.params, call.line, trio.current_time()))
        await trio.sleep(10)  # a person takes ten seconds
        return tl.Approve()

    program = fenced(
        """
who = search(query="payee")
p = pay(to=who[0], cents=500)
x = fetch(url="independent")
y = fetch(url=x)
final_answer([p, y])
"""
    )
    agent = tl.Agent(
        tl.ScriptedModel([program]), tools=[search, fetch, pay], protocol="code", approve=approve
    )
    result = run_on_mock_clock(agent)
    assert result.output == ["paid 500 to payee/a", "page of page of independent"]
    [(call_id, params, line, _)] = asked
    assert (call_id, params, line) == ("c1.1", {"to": "payee/a", "cents": 500}, 2)
    # The independent statements finished while the hook was still deciding.
    hook_answered = result.records["c1.1"].started
    assert result.records["c1.3"].finished < hook_answered


def test_a_denied_call_ends_the_program_at_its_line() -> None:
    @tl.tool(requires_approval=True)
    async def pay(to: str, cents: int) -> str:
        """Pay someone."""
        return "paid"

    program = fenced('p = pay(to="x", cents=5)\nfinal_answer(p)')
    model = tl.ScriptedModel([program, fenced('final_answer("no")')])
    agent = tl.Agent(model, tools=[pay], protocol="code", approve=lambda call: tl.Deny("too much"))
    result = run_on_mock_clock(agent)
    assert result.output == "no"
    assert result.records["c1.0"].status == "denied"
    shown = model.requests[1]["messages"][-1]["content"]
    assert "too much" in shown and "line 1" in shown


# -- run_program ------------------------------------------------------------------------


def test_run_program_runs_one_program_without_a_model() -> None:
    @tl.tool
    def double(n: int) -> int:
        """Double."""
        return n * 2

    result = tl.run_program(
        "x = double(n=start)\nprint(x)\nfinal_answer(x)\n", tools=[double], state={"start": 21}
    )
    assert result.output == 42
    assert result.state == {"start": 21, "x": 42}
    assert result.printed == {1: ["42"]}
    with pytest.raises(tl.TickloopError):
        tl.run_program("x = (", tools=[double])


def test_solution_requests_are_unchanged() -> None:
    model = tl.ScriptedModel([{"calls": [], "output": 1}])
    tl.Agent(model, tools=[fetch]).run()
    assert isinstance(model.requests[0]["schema"], dict)
    assert json.dumps(model.requests[0]["schema"])


# -- sub-agents and budgets --------------------------------------------------------------


def test_a_program_calls_an_agent_tool_as_a_sub_agent() -> None:
    """An agent tool is a function of the program; the child may use any protocol, a
    code plan included, and its calls are named under the parent's call path."""
    researcher = tl.Agent(
        tl.ScriptedModel([{"calls": [], "output": "notes on trio"}]),
        name="researcher",
        description="Research a topic.",
    )
    coder = tl.Agent(
        tl.ScriptedModel([fenced('p = fetch(url="https://trio")\nfinal_answer(len(p))')]),
        name="coder",
        tools=[fetch],
        protocol="code",
    )
    program = fenced(
        """
notes = researcher(task="trio")
size = coder(task="measure")
final_answer({"notes": notes, "size": size})
"""
    )
    agent = tl.Agent(tl.ScriptedModel([program]), tools=[researcher, coder], protocol="code")
    result = run_on_mock_clock(agent)
    assert result.output == {"notes": "notes on trio", "size": len("page of https://trio")}
    assert result.records["c1.1/c1.0"].status == "done"  # the code child's own call
    assert result.records["c1.1/c1.0"].line == 1
    assert result.state == {"notes": "notes on trio", "size": 20}


def test_a_budget_refusal_is_a_tool_error_of_type_budget() -> None:
    program = fenced(
        """
pages = [fetch(url=u) for u in ["a", "b", "c", "d", "e"]]
final_answer(pages)
"""
    )
    fallback = fenced('final_answer("over budget")')
    model = tl.ScriptedModel([program, fallback])
    agent = tl.Agent(model, tools=[fetch], protocol="code", budget=tl.Budget(tool_calls=3))
    result = run_on_mock_clock(agent)
    assert result.output == "over budget"
    statuses = sorted(record.status for record in result.records.values())
    assert statuses == ["done", "done", "done", "failed", "failed"]
    refused = [r for r in result.records.values() if r.status == "failed"]
    assert all(r.error["type"] == "budget" for r in refused)
    assert result.usage.tool_calls == 3
    shown = model.requests[1]["messages"][-1]["content"]
    assert "budget" in shown and "line 1" in shown


# -- durability ---------------------------------------------------------------------------


def test_a_deferred_call_pauses_the_program_and_a_resume_goes_on(tmp_path: Any) -> None:
    paid: list[int] = []

    @tl.tool(requires_approval=True)
    async def pay(to: str, cents: int) -> str:
        """Pay someone."""
        paid.append(cents)
        return f"paid {cents} to {to}"

    program = fenced(
        """
who = fetch(url="payee")
p = pay(to=who, cents=500)
after = fetch(url=p)
final_answer(after)
"""
    )

    def agent(answers: list[str]) -> tl.Agent[Any]:
        return tl.Agent(
            tl.ScriptedModel(answers),
            tools=[fetch, pay],
            protocol="code",
            approve=lambda call: tl.Defer(),
            store=tmp_path / "runs.db",
        )

    first = run_on_mock_clock(agent([program]), run_id="pay-1")
    assert first.status == "paused"
    [pending] = first.pending
    assert (pending.id, pending.params, pending.line) == (
        "c1.1",
        {"to": "page of payee", "cents": 500},
        2,
    )
    assert paid == [] and "c1.2" not in first.records

    async def resume() -> Any:
        return await agent([]).resume_async("pay-1", decisions={"c1.1": tl.Approve()})

    done = trio.run(resume, clock=trio.testing.MockClock(autojump_threshold=0))
    assert done.status == "done"
    assert done.output == "page of paid 500 to page of payee"
    assert paid == [500]
    assert done.records["c1.0"].status == "done"
    assert done.state["p"] == "paid 500 to page of payee"


def test_trace_and_the_store_show_each_code_calls_line(tmp_path: Any) -> None:
    from tickloop._cli._main import main

    program = fenced('a = fetch(url="x")\nb = fetch(url=a)\nfinal_answer(b)')
    agent = tl.Agent(
        tl.ScriptedModel([program]), tools=[fetch], protocol="code", store=tmp_path / "r.db"
    )
    run_on_mock_clock(agent, run_id="traced")
    store = tl.SQLiteStore(tmp_path / "r.db")
    assert [(call.id, call.line) for call in store.calls("traced")] == [("c1.0", 1), ("c1.1", 2)]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["trace", "traced", "--store", str(tmp_path / "r.db")]) == 0
    assert "fetch @1" in out.getvalue() and "fetch @2" in out.getvalue()


# -- the critical path, whatever the style --------------------------------------------------


@tl.tool(read_only=True)
async def step(x: int) -> int:
    """One second of work."""
    await trio.sleep(SECOND)
    return x + 1


CALL_BY_CALL = """
a = await step(x=1)
b = await step(x=2)
c = await step(x=3)
d = await step(x=a)
e = await step(x=b)
f = await step(x=c)
g = await step(x=d + e)
final_answer([f, g])
"""

WITH_GATHER = """
import asyncio
a, b, c = await asyncio.gather(step(x=1), step(x=2), step(x=3))
d, e, f = await asyncio.gather(step(x=a), step(x=b), step(x=c))
g = await step(x=d + e)
final_answer([f, g])
"""

IN_A_LOOP = """
firsts = [step(x=i) for i in [1, 2, 3]]
seconds = []
for value in firsts:
    seconds.append(step(x=value))
final_answer([seconds[2], step(x=seconds[0] + seconds[1])])
"""


@pytest.mark.parametrize(
    "program", [CALL_BY_CALL, WITH_GATHER, IN_A_LOOP], ids=["calls", "gather", "loop"]
)
def test_read_only_calls_finish_within_five_percent_of_the_critical_path(program: str) -> None:
    """Seven one-second calls whose longest chain is three: a serial run takes 7 s; the
    program, however written, takes its critical path, 3 s (PROTOCOL §14 "Readiness")."""

    async def main() -> tuple[Any, float]:
        agent = tl.Agent(tl.ScriptedModel([fenced(program)]), tools=[step], protocol="code")
        start = trio.current_time()
        result = await agent.run_async()
        return result, trio.current_time() - start

    result, took = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert result.output == [5, 8]
    assert len(result.records) == 7
    critical_path = 3 * SECOND
    assert critical_path <= took <= critical_path * 1.05


def test_a_denied_call_caught_by_try_lets_the_program_go_on() -> None:
    @tl.tool(requires_approval=True)
    async def pay(to: str, cents: int) -> str:
        """Pay someone."""
        return "paid"

    program = fenced(
        """
try:
    p = pay(to="x", cents=5)
except ToolError as error:
    p = f"not paid ({error.type}: {error.message})"
final_answer(p)
"""
    )
    agent = tl.Agent(
        tl.ScriptedModel([program]),
        tools=[pay],
        protocol="code",
        approve=lambda call: tl.Deny("too much"),
    )
    result = run_on_mock_clock(agent)
    assert result.output == "not paid (denied: too much)"
    assert result.iterations == 1


def test_a_side_effect_after_a_caught_failure_runs() -> None:
    program = fenced(
        """
try:
    a = broken(url="x")
except ToolError:
    a = "fallback"
s = send(to="bob", body=a)
final_answer(s)
"""
    )
    result = run_on_mock_clock(
        tl.Agent(tl.ScriptedModel([program]), tools=[broken, send], protocol="code")
    )
    assert result.output == {"sent": True}
    assert sent == [{"to": "bob", "body": "fallback"}]
    assert result.records["c1.1"].started >= result.records["c1.0"].finished


def test_max_eval_seconds_is_measured_by_the_driver_and_ends_the_program() -> None:
    """The machine reads no clock: the driver times each `step` and stops the program
    past `max_eval_seconds` (PROTOCOL §14 "Limits"); the error names the limit, and the
    loop goes on."""
    busy = fenced("total = 0\nfor i in range(10**8):\n    total += i\nfinal_answer(total)")
    model = tl.ScriptedModel([busy, fenced('final_answer("gave up")')])
    agent = tl.Agent(model, tools=[fetch], protocol="code", max_steps=10**12, max_eval_seconds=0.05)
    result = agent.run()
    assert result.output == "gave up"
    shown = model.requests[1]["messages"][-1]["content"]
    assert "max_eval_seconds" in shown and "line 2" in shown
    [error] = [e for e in result.errors if "max_eval_seconds" in e["data"]["error"]["message"]]
    assert error["data"]["error"]["line"] == 2


def test_a_code_run_replays_from_its_record_and_forks(tmp_path: Any) -> None:
    ran: list[str] = []

    @tl.tool(read_only=True)
    def page(url: str) -> str:
        """Fetch a page."""
        ran.append(url)
        return "page " + url

    program = fenced('a = page(url="x")\nb = page(url=a)\nprint(b)\nfinal_answer(b)')
    db = tmp_path / "runs.db"
    agent = tl.Agent(tl.ScriptedModel([program]), tools=[page], protocol="code", store=db)
    first = agent.run(run_id="r1")
    assert (first.output, ran) == ("page page x", ["x", "page x"])
    ran.clear()
    again = agent.replay("r1", store=db)  # the model and every call from the record
    assert (again.output, again.printed, ran) == ("page page x", {1: ["page page x"]}, [])
    forked = agent.fork("r1", "r2", store=db, rerun=["c1.0"])
    assert forked.output == "page page x" and ran == ["x"]  # only the call named re-ran


def test_a_fork_reruns_a_code_call_whose_inputs_changed_and_asks_its_approval_again(
    tmp_path: Any,
) -> None:
    """A code plan's calls read variables, which no recorded arrow names: a fork reuses a
    call's outcome (and its decision) only for the parameters it ran with."""
    ran: list[str] = []
    version = ["v1"]
    asked: list[dict[str, Any]] = []

    @tl.tool(read_only=True)
    def price(item: str) -> str:
        """Today's price of an item."""
        ran.append(item)
        return f"{item}@{version[0]}"

    @tl.tool(requires_approval=True)
    def buy(quote: str) -> str:
        """Buy at a quote."""
        ran.append("buy " + quote)
        return "bought " + quote

    def approve(call: tl.PendingCall) -> tl.Approve:
        asked.append(call.params)
        return tl.Approve()

    program = fenced('q = price(item="tea")\nr = buy(quote=q)\nfinal_answer(r)')
    db = tmp_path / "runs.db"
    agent = tl.Agent(
        tl.ScriptedModel([program]), tools=[price, buy], protocol="code", store=db,
        approve=approve,
    )  # fmt: skip
    assert agent.run(run_id="r1").output == "bought tea@v1"
    assert asked == [{"quote": "tea@v1"}]
    ran.clear()
    version[0] = "v2"
    forked = agent.fork("r1", "r2", store=db, rerun=["c1.0"])
    # The price changed, so the purchase that read it is a new call: asked and run.
    assert forked.output == "bought tea@v2"
    assert ran == ["tea", "buy tea@v2"]
    assert asked == [{"quote": "tea@v1"}, {"quote": "tea@v2"}]
    # Re-run again with the same price: the purchase is reused, not asked nor run.
    ran.clear()
    again = agent.fork("r2", "r3", store=db, rerun=["c1.0"])
    assert again.output == "bought tea@v2" and ran == ["tea"]
    assert len(asked) == 2


def test_a_final_answer_not_of_the_output_type_is_shown_with_its_program() -> None:
    model = tl.ScriptedModel([fenced('final_answer("three")'), fenced("final_answer(3)")])
    agent = tl.Agent(model, protocol="code", output=int)
    assert agent.run().output == 3
    second = model.requests[1]["messages"][-1]["content"]
    program_one = second[second.index("## Program 1") :]
    assert "Your final answer was not accepted: final_answer:" in program_one
    assert "'three' is not of type 'integer'" in program_one

"""Agents the Temporal tests run, importable by a worker subprocess
(`python -m tickloop temporal worker tests.temporal_agents:NAME`).

Tools count their side effects in files under $TICKLOOP_TEST_DIR, so a test in another
process can tell how many times each call really ran.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import trio

import tickloop as tl
from tickloop import temporal as tlt


def _mark(kind: str, key: str) -> None:
    """Append one line to a side-effect counter file (one line per run of a call)."""
    directory = Path(os.environ.get("TICKLOOP_TEST_DIR", "."))
    with open(directory / f"{kind}.count", "a") as counter:
        counter.write(f"{key} {os.getpid()}\n")


# -- a little of everything (solution protocol) ------------------------------------------


@tl.tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    await trio.sleep(0.01)
    return a + b


@tl.tool
def mul(a: int, b: int) -> int:
    """Multiply two integers (sync: it runs in a thread)."""
    return a * b


@tl.tool(requires_approval=lambda params: params["cents"] > 100)
def charge(customer: str, cents: int) -> dict:
    """Charge a customer."""
    return {"customer": customer, "cents": cents}


@tl.tool
def boom(x: int) -> int:
    """Always fails."""
    raise ValueError(f"no {x}")


def approve(call: tl.PendingCall) -> tl.Decision:
    if call.params["customer"] == "mallory":
        return tl.Deny("not her")
    if call.params["customer"] == "test":
        return tl.Respond({"customer": "test", "cents": 0})
    return tl.Edit({**call.params, "cents": call.params["cents"] - 1})


MIXED_SCRIPT = [
    {
        "calls": [
            {"_tool": "add", "a": 1, "b": 2, "_outputPath": "†state.x"},
            {"_tool": "mul", "a": "†state.x", "b": 10, "_outputPath": "†state.y"},
            {"_tool": "charge", "customer": "alice", "cents": 500, "_outputPath": "†state.c1"},
            {"_tool": "charge", "customer": "mallory", "cents": 900, "_outputPath": "†state.c2"},
            {"_tool": "charge", "customer": "test", "cents": 700, "_outputPath": "†state.c3"},
            {"_tool": "charge", "customer": "bob", "cents": 50, "_outputPath": "†state.c4"},
            {"_tool": "boom", "x": 3, "_outputPath": "†state.z"},
            {"_tool": "add", "a": "†state.z", "b": 1, "_outputPath": "†state.never"},
            {"_tool": "nope"},
        ],
        "output": None,
    },
    {"calls": [], "output": {"y": "†state.y", "c1": "†state.c1"}},
]


def mixed_agent(name: str = "mixed", **options: object) -> tl.Agent:
    return tl.Agent(
        tl.ScriptedModel(MIXED_SCRIPT, **options),  # type: ignore[arg-type]
        tools=[add, mul, charge, boom],
        approve=approve,
        name=name,
    )


# -- native tool calling -------------------------------------------------------------------


def _call(name: str, arguments: dict) -> dict:
    return {"name": name, "arguments": arguments}


def tools_agent(name: str = "native") -> tl.Agent:
    model = tl.ScriptedModel(
        [
            {"tool_calls": [_call("add", {"a": 2, "b": 3}), _call("mul", {"a": 4, "b": 5})]},
            {"tool_calls": [_call("boom", {"x": 1})]},
            "All done: 5 and 20.",
        ]
    )
    return tl.Agent(model, tools=[add, mul, boom], protocol="tools", name=name)


# -- eagerness: a slow stream -----------------------------------------------------------------


def slow_agent(name: str = "slow") -> tl.Agent:
    script = [
        {
            "calls": [
                {"_tool": "add", "a": i, "b": 1, "_outputPath": f"†state.v{i}"} for i in range(6)
            ],
            "output": None,
        },
        {"calls": [], "output": "done"},
    ]
    return tl.Agent(
        tl.ScriptedModel(script, chunk_chars=8, chunk_delay=0.05), name=name, tools=[add]
    )


# -- the crash test --------------------------------------------------------------------------


@tl.tool
def quick(key: str) -> str:
    """Finishes at once (its side effect must happen once only)."""
    _mark("quick", key)
    return key


@tl.tool
def slow_once(key: str) -> str:
    """Not idempotent: a crash while it runs must leave it failed, not re-run."""
    _mark("slow_once", key)
    time.sleep(float(os.environ.get("TICKLOOP_SLOW", "60")))
    return key


@tl.tool(idempotent=True)
def slow_again(key: str) -> str:
    """Idempotent: a crash while it runs re-runs it (quickly, the second time)."""
    _mark("slow_again", key)
    runs = (Path(os.environ.get("TICKLOOP_TEST_DIR", ".")) / "slow_again.count").read_text()
    if len(runs.splitlines()) == 1:
        time.sleep(float(os.environ.get("TICKLOOP_SLOW", "60")))
    return key


@tl.tool(requires_approval=True)
def pay(cents: int) -> int:
    """Needs a person."""
    _mark("pay", str(cents))
    return cents


CRASH_SCRIPT = [
    {
        "calls": [
            {"_tool": "quick", "key": "q", "_outputPath": "†state.q"},
            {"_tool": "slow_once", "key": "s1", "_outputPath": "†state.s1"},
            {"_tool": "slow_again", "key": "s2", "_outputPath": "†state.s2"},
            {"_tool": "pay", "cents": 42, "_outputPath": "†state.paid"},
        ],
        "output": None,
    },
    {"calls": [], "output": "finished"},
]

crash_agent = tl.Agent(
    tl.ScriptedModel(CRASH_SCRIPT),
    tools=[quick, slow_once, slow_again, pay],
    approve=tlt.ask_person,
    name="crashy",
)


# -- the scale test ---------------------------------------------------------------------------


# Idempotent, as a pure function is: Temporal recovers an activity task lost between the
# server and a busy worker only by the heartbeat timeout and a retry, which runs an
# idempotent call again and ends any other "interrupted" (docs/temporal.md).
@tl.tool(idempotent=True)
async def work(i: int) -> int:
    """A short async call."""
    await trio.sleep(0.01)
    return i * 2


FAN_OUT = 50
FAN_SCRIPT = [
    {
        "calls": [{"_tool": "work", "i": i, "_outputPath": f"†state.r{i}"} for i in range(FAN_OUT)],
        "output": None,
    },
    {"calls": [], "output": "done"},
]

fan_agent = tl.Agent(tl.ScriptedModel(FAN_SCRIPT), tools=[work], name="fan")
# The same fan-out under a budget of 9 tool calls (PROTOCOL §12).
budget_fan_agent = tl.Agent(
    tl.ScriptedModel(FAN_SCRIPT),
    tools=[work],
    name="fan-budget",
    budget=tl.Budget(tool_calls=9),
)


# -- a model activity killed mid-stream ---------------------------------------------------------

RESTREAM_SCRIPT = [
    {
        "calls": [
            {"_tool": "quick", "key": f"k{i}", "_outputPath": f"†state.k{i}"} for i in range(6)
        ],
        "output": None,
    },
    {"calls": [], "output": "restreamed"},
]

restream_agent = tl.Agent(
    tl.ScriptedModel(RESTREAM_SCRIPT, chunk_chars=8, chunk_delay=0.05),
    tools=[quick],
    name="restream",
)


# -- a code plan (PROTOCOL §14) ----------------------------------------------------------


@tl.tool(read_only=True)
async def plus(a: int, b: int) -> int:
    """Add two integers (read-only)."""
    await trio.sleep(0.01)
    return a + b


CODE_PROGRAM = """```python
x = plus(a=1, b=2)
y = plus(a=x, b=10)
c = charge(customer="alice", cents=500)
try:
    boom(x=y)
except ToolError as error:
    print("boom failed:", error.message)
final_answer({"y": y, "c": c})
```
"""


def code_agent(name: str = "coder") -> tl.Agent:
    return tl.Agent(
        tl.ScriptedModel([CODE_PROGRAM], chunk_chars=8, chunk_delay=0.05),
        tools=[plus, charge, boom],
        approve=approve,
        name=name,
        protocol="code",
    )


# -- plan review (PROTOCOL §15): the agent's own review, an activity ----------------------


def review_everything(plan: tl.Plan) -> dict[str, tl.Decision]:
    """Approves every gated call and site it is shown."""
    return {key: tl.Approve() for key in [*(call.id for call in plan.calls), *plan.sites]}


def hook_not_asked(call: tl.PendingCall) -> tl.Decision:
    return tl.Deny("the approval hook was asked")


REVIEWED_PROGRAM = """```python
for who in ["alice", "bob"]:
    charge(customer=who, cents=500)
final_answer("paid")
```
"""

REVIEWED_PLAN = [
    {
        "calls": [
            {"_tool": "charge", "customer": "alice", "cents": 500, "_outputPath": "†state.a"},
            {"_tool": "charge", "customer": "bob", "cents": 500, "_outputPath": "†state.b"},
        ],
        "output": None,
    },
    {"calls": [], "output": "paid"},
]


def reviewed_agent(protocol: str = "code") -> tl.Agent:
    script = [REVIEWED_PROGRAM] if protocol == "code" else REVIEWED_PLAN
    return tl.Agent(
        tl.ScriptedModel(script),  # type: ignore[arg-type]
        tools=[charge],
        approve=hook_not_asked,
        review_plan=review_everything,
        name=f"reviewed-{protocol}",
        protocol=protocol,  # type: ignore[arg-type]
    )

"""`tl.ConsoleApproval()` driven through a pipe, as a script's user would drive it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import trio

import tickloop as tl

SCRIPT = textwrap.dedent(
    """
    import json
    import tickloop as tl

    @tl.tool
    def fetch(n: int) -> int:
        return n

    @tl.tool(requires_approval=True)
    def charge(customer: str, cents: int, api_key: str = "") -> dict:
        return {"customer": customer, "cents": cents, "key": api_key}

    @tl.tool(requires_approval=True)
    def refund(note: str) -> str:
        return "refunded"

    @tl.tool
    def email(receipt: dict) -> str:
        return "sent"

    plan = [
        {"_tool": "fetch", "n": 250, "_outputPath": "†state.amount"},
        {"_tool": "charge", "customer": "ada", "cents": "†state.amount", "api_key": "sk-1",
         "_outputPath": "†state.receipt"},
        {"_tool": "email", "receipt": "†state.receipt", "_outputPath": "†state.mail"},
        {"_tool": "refund", "note": "†state.mail", "_outputPath": "†state.refund"},
    ]
    result = tl.run_calls(plan, tools=[fetch, charge, refund, email],
                          approve=tl.ConsoleApproval())
    print(json.dumps({"state": result.state,
                      "statuses": {k: r.status for k, r in result.records.items()},
                      "errors": [e["data"]["error"]["message"] for e in result.errors]}))
    """
)


def _run(tmp_path: Path, typed: str) -> tuple[dict, str]:
    script = tmp_path / "console_script.py"
    script.write_text(SCRIPT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        input=typed,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_a_person_edits_through_a_pipe_until_the_schema_accepts_then_denies(
    tmp_path: Path,
) -> None:
    typed = "\n".join(
        [
            "maybe",  # not a choice: asked again
            "e",
            '{"customer": "ada", "cents": "lots", "api_key": "[redacted]"}',  # schema error
            "{",  # JSON over several lines
            '  "customer": "ada", "cents": 199,',
            '  "api_key": "[redacted]"}',
            "d",
            "too much",
            "",
        ]
    )
    outcome, shown = _run(tmp_path, typed)
    # The edit ran with the edited amount and the secret the person never saw.
    assert outcome["state"]["receipt"] == {"customer": "ada", "cents": 199, "key": "sk-1"}
    assert outcome["statuses"]["c1.3"] == "denied"
    assert any("too much" in message for message in outcome["errors"])
    # What the person was shown: resolved parameters, redacted, with their sources.
    assert "approval needed: c1.1 charge" in shown
    assert '"cents": 250' in shown and '"api_key": "[redacted]"' in shown
    assert "sk-1" not in shown
    assert "values from: c1.0" in shown and "waiting on it: c1.2" in shown
    assert "please type a, d, e or r" in shown
    assert "not accepted: the parameters do not match the tool's schema: at cents:" in shown


def test_respond_and_approve_through_a_pipe(tmp_path: Path) -> None:
    outcome, _ = _run(tmp_path, 'r\n{"customer": "ada", "cents": 1, "key": "-"}\na\n')
    assert outcome["state"]["receipt"] == {"customer": "ada", "cents": 1, "key": "-"}
    assert outcome["state"]["refund"] == "refunded"
    assert outcome["state"]["mail"] == "sent"


def test_a_closed_pipe_denies_fail_closed(tmp_path: Path) -> None:
    outcome, _ = _run(tmp_path, "")
    assert outcome["statuses"]["c1.1"] == "denied"
    assert outcome["statuses"]["c1.2"] == "invalid"  # what it would have written never came
    assert any("input ended" in message for message in outcome["errors"])


def test_other_calls_keep_running_while_the_console_waits() -> None:
    """The hook blocks a worker thread only: an independent call finishes meanwhile."""
    typed = io.StringIO()
    finished: list[str] = []
    gate = trio.Event()

    @tl.tool(requires_approval=True)
    def slow_gate(n: int) -> int:
        return n

    @tl.tool
    async def independent() -> str:
        finished.append("independent")
        gate.set()
        return "ok"

    class SlowInput(io.StringIO):
        """The person types only after the independent call has finished."""

        def readline(self, *args: object) -> str:
            trio.from_thread.run(gate.wait)
            return "a\n"

    hook = tl.ConsoleApproval(input=SlowInput(), output=typed)

    async def main() -> tl.ExecutionResult:
        return await tl.execute(
            [
                {"_tool": "slow_gate", "n": 1, "_outputPath": "†state.g"},
                {"_tool": "independent", "_outputPath": "†state.i"},
            ],
            tools=[slow_gate, independent],
            approve=hook,
        )

    result = trio.run(main)
    assert result.state == {"g": 1, "i": "ok"}
    assert finished == ["independent"]


def test_what_the_model_chose_cannot_rewrite_the_console() -> None:
    """A call id and parameters carrying a terminal-reset sequence or a right-to-left
    override are shown as escapes: the person reads what will run. (An id holding "["
    is refused on arrival since PROTOCOL §14, so the id's sequence has none.)"""
    typed = io.StringIO()

    @tl.tool(requires_approval=True)
    def pay(to: str) -> str:
        """Pay someone."""
        return to

    hook = tl.ConsoleApproval(input=io.StringIO("a\n"), output=typed)
    result = tl.run_calls(
        [{"_tool": "pay", "to": "bob\u202eevil", "_id": "x\x1bc", "_outputPath": "†state.p"}],
        tools=[pay],
        approve=hook,
    )
    shown = typed.getvalue()
    assert result.state == {"p": "bob\u202eevil"}  # the value itself is untouched
    assert "\x1b" not in shown and "\u202e" not in shown
    assert "x\\x1bc" in shown and "bob\\u202eevil" in shown

"""A terminal chat over a session: every line you type is one run of the session, which
starts from the conversation so far (docs/sessions.md).

    python examples/chat.py --chat                  # type lines; an empty line ends it
    python examples/chat.py                         # a short conversation, played
    python examples/chat.py --chat --store chat.db --session me   # resume it later

Runs offline on a `FunctionModel` that answers from the history it is given; put a real
client in `make_model` (e.g. `tl.OpenAIChat("gpt-4o-mini")`) and it is a real chat.
The store keeps the conversation: run it again with the same --store and --session and
it goes on where it stopped (`tickloop sessions --store chat.db` lists them).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import tickloop as tl

PLAYED = ["My name is Ada.", "I am planning a trip to Oslo.", "What do you know about me?"]


def answer(request: dict[str, Any]) -> str:
    """A stand-in for a model: it repeats what the earlier user turns said."""
    said = [m["content"] for m in request["messages"] if m["role"] == "user"]
    *earlier, last = said
    if not earlier:
        return f"Noted: {last!r}. This is the start of our conversation."
    return f"Noted: {last!r}. Earlier you told me: " + " / ".join(earlier)


def make_model() -> tl.TurnClient:
    return tl.FunctionModel(answer)


def chat(agent: tl.Agent[Any], session: str, lines: list[str] | None) -> None:
    """Run each line as the session's next run; read them from the terminal when None."""
    while True:
        if lines is None:
            try:
                line = input("you> ").strip()
            except EOFError:
                break
        elif lines:
            line = lines.pop(0)
            print(f"you> {line}")
        else:
            break
        if not line:
            break
        try:
            result = agent.run(line, session=session, session_busy="raise")
        except tl.SessionBusy as busy:  # another process is using this session
            print(f"(busy: {busy}; try again)")
            continue
        print(f"agent> {result.output}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chat", action="store_true", help="read lines from the terminal")
    parser.add_argument("--store", help="the store file (default: a temporary one)")
    parser.add_argument("--session", default="chat", help="the session's id")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(arguments.store or Path(folder) / "chat.db")
        agent: tl.Agent[Any] = tl.Agent(make_model(), protocol="tools", store=path)
        chat(agent, arguments.session, None if arguments.chat else list(PLAYED))
        session = tl.SQLiteStore(path).session(arguments.session)
        print(f"the session {session.id!r} holds {len(session.runs)} runs")
        if not arguments.chat:
            assert "My name is Ada." in str(session.history[-1]["output"])


if __name__ == "__main__":
    main()

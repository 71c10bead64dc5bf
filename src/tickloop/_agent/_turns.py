"""The native tool-calling loop (PROTOCOL §9): the seeds' `turn()` on the tick engine.

The model is driven through its own function-calling API instead of writing a solution.
Each tool call of a response becomes an ordinary wire call, handed to the same engine the
solution protocol uses, so native calls still run in parallel, wait on `depends_on` and
prescribed output paths, and pass the approval hook. Only the edges differ: arguments come
as text (parsed with the resilient parser), and results go back as messages in the
provider's own wire format, one per call, in request order.

The conversation lives in the log like everything else, so a run can resume from any
`ExecuteError.messages`: `text` messages hold what people wrote, and `data` messages of
kind `turn` (pushed, so the `turn` view is the whole exchange) hold the provider's wire
messages verbatim: an assistant turn with every part the model sent, reasoning included,
then its tool results. See docs/tool-calling.md.

With a store the run is durable (PROTOCOL §10, docs/durability.md) on the same journal as
the solution protocol: the engine journals its events, and every message this loop
appends (the first user message, each turn, each result batch, each feedback) is
journaled as it is appended. A model's response is recorded, handed to the tick and its
stream closed in one synchronous step, so one commit holds all three. A resume replays
the journal, settles the calls (`DurableRun.reopen`), then `_TurnLoop._recover` finishes
the interrupted iteration from the log: a recorded response is never asked for again.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial
from typing import Any

import trio

from .._core._expressions import MAX_NESTING
from .._core._log import (
    MAX_VALUE_DEPTH,
    SURROGATE_FAULT,
    ContextLog,
    has_surrogate,
    shape_fault,
    storable,
)
from .._core._media import media_refs
from .._core._scheduler_io import NoteSettled
from .._core._status import FINAL_STATUSES, CallStatus
from .._core._tools import ToolSet
from .._durable._recording import TURN_KIND  # the data kind of the provider's messages
from .._durable._resume import DurableRun
from .._errors import ConfigurationError
from .._json._stream import resilient_json_parse_with_strategy
from .._models._base import (
    ModelError,
    TextDelta,
    ToolCallStarted,
    ToolResult,
    ToolSpec,
    TurnClient,
    TurnRequest,
    TurnResponse,
    TurnToolCall,
    Usage,
)
from .._observe._events import EventSink, RequestFinished, RunEvent
from ._compaction import COMPACT_GUIDE, latest_compaction
from ._loop import AgentConfig, LoopProtocol, OuterLoop, structural
from ._prompt import chat_key, conversation_summary, visible_parameters
from ._retry import StreamBroken, stream_with_retries

__all__ = ["TOOLS", "TURN_KIND", "ToolCallingProtocol", "check_turn_configuration", "turns_in"]

_REFERENCE_MARK = "†"


def check_turn_configuration(model: Any, tools: ToolSet) -> None:
    """What protocol "tools" needs, checked before anything runs."""
    missing = [name for name in ("stream_turn", "tool_result_messages") if not hasattr(model, name)]
    if missing or not isinstance(getattr(model, "turn_format", None), str):
        raise ConfigurationError(
            f"{model!r} cannot drive native tool calling (protocol='tools'): it needs "
            "stream_turn, tool_result_messages and turn_format"
        )
    latent = [name for name, tool in tools.items() if tool.is_latent]
    if latent:
        raise ConfigurationError(
            f"latent tool(s) {', '.join(map(repr, latent))} have no handler, and with "
            "protocol='tools' the model cannot write a result itself; give them a handler "
            "or use protocol='solution'"
        )


def turns_in(log: ContextLog) -> int:
    """Requests the log records: the model's turns, broken ones included."""
    entries = log.view(TURN_KIND) or ()
    return sum(
        1 for entry in entries if isinstance(entry, dict) and entry.get("role") == "assistant"
    )


class ToolCallingProtocol(LoopProtocol):
    name = "tools"

    def check(self, model: Any, tools: ToolSet) -> None:
        check_turn_configuration(model, tools)

    def iterations_in(self, log: ContextLog) -> int:
        return turns_in(log)

    def open_loop(
        self,
        config: AgentConfig,
        log: ContextLog,
        events: EventSink,
        durable: DurableRun | None,
        on_text: Callable[[str], Any] | None = None,
    ) -> OuterLoop:
        """`on_text` receives the final answer's text as it streams (and only that:
        tool-call turns are never shown, see `_TurnLoop._attempt`)."""
        return _TurnLoop(config, log, events, on_text, durable)


TOOLS = ToolCallingProtocol()


class _TurnLoop(OuterLoop):
    """One run of the native tool-calling protocol."""

    protocol = TOOLS
    final_answer = "answer"

    def __init__(
        self,
        config: AgentConfig,
        log: ContextLog,
        on_event: Callable[[RunEvent], Any] | None,
        on_text: Callable[[str], Any] | None,
        durable: DurableRun | None = None,
    ) -> None:
        check_turn_configuration(config.model, config.tools)
        assert isinstance(config.model, TurnClient)  # what the check just made sure of
        self.model: TurnClient = config.model
        self.format: str = self.model.turn_format
        self.on_text = on_text
        self._specs: tuple[ToolSet, list[ToolSpec]] | None = None  # by menu (`specs`)
        self._settled = trio.Event()
        self._rejected: dict[str, str] = {}  # call id -> why its arguments make no call
        super().__init__(config, log, on_event, durable)
        self._check_log_format()

    async def specs(self) -> list[ToolSpec]:
        """The functions the next request offers: its menu's (tool search: a part)."""
        menu = await self._menu()
        if self._specs is None or self._specs[0] is not menu:
            specs = [
                ToolSpec(tool.name, tool.description, visible_parameters(tool))
                for tool in menu.values()
            ]
            self._specs = (menu, specs)
        return self._specs[1]

    def _action_listener(self) -> Callable[[Any], None] | None:
        return self._on_action  # it waits for `NoteSettled`, listened to or not

    def _on_action(self, action: Any) -> None:
        if isinstance(action, NoteSettled):
            self._settled.set()
        self.events(action)

    def _check_log_format(self) -> None:
        for entry in self.log.view(TURN_KIND) or ():
            if isinstance(entry, dict) and entry.get("format") not in (None, self.format):
                raise ConfigurationError(
                    f"this log's conversation was made in the {entry.get('format')!r} wire "
                    f"format, and {self.model!r} speaks {self.format!r}: resume it with the "
                    "same kind of model client"
                )

    # -- the outer loop -------------------------------------------------------------------

    def _before_session(self) -> None:
        self._check_log_format()  # again: a resumed run's log came from its journal
        self._start_conversation()

    def _start_conversation(self) -> None:
        """A fresh run opens with the input as the user's message, written to the log so
        that a resumed run shows the model exactly the same conversation."""
        for message in self.log.messages:
            if message.get("type") == "text" and message.get("role") in ("user", "assistant"):
                return
            if message.get("type") == "data" and message.get("kind") == TURN_KIND:
                return
        # A session run's history (PROTOCOL §16) opens the conversation as the turns it
        # was: each earlier input and answer, a compaction's summary for those it covers.
        for entry in self.log.view("history") or ():
            if not isinstance(entry, dict):
                continue
            if "summary" in entry:
                summary = "Summary of our earlier conversation: " + str(entry["summary"])
                self._append({"type": "text", "role": "user", "text": summary})
                continue
            self._append({"type": "text", "role": "user", "text": _as_text(entry.get("input"))})
            self._append(
                {"type": "text", "role": "assistant", "text": _as_text(entry.get("output"))}
            )
        value = self.log.view("input")
        if value is None:
            return
        self._append({"type": "text", "role": "user", "text": _as_text(value)})

    async def _turn_request(self, iteration: int) -> TurnRequest:
        return TurnRequest(
            system=self._system(),
            conversation=self._conversation(),
            tools=await self.specs(),
            iteration=iteration,
            path=self._path(),
            media=self.engine_media(),
        )

    async def _iterate(self, iteration: int) -> tuple[bool, Any]:
        request = await self._turn_request(iteration)
        if await self._fit_window(iteration, request):
            request = await self._turn_request(iteration)
        opened = await self._open_request(request, iteration)
        if opened is None:
            return False, None  # the budget hook deferred: the run pauses before asking
        reservation, before = opened
        try:
            response = await self._ask(request)
        except StreamBroken as broken:
            self._metered(reservation, before, "", cut_off=True)
            # Text of it was already shown, so it could not be retried whole; nothing ran.
            # The next iteration asks again with the same conversation.
            self._emit(RequestFinished, iteration=iteration, error=f"broke off: {broken}")
            self._append_turn(
                {"role": "assistant", "iteration": iteration, "broken": True, "messages": []}
            )
            self.engine.report(structural(f"the model's answer broke off: {broken}"))
            self.engine.close_stream()
            await self._end_tick()
            return False, None
        except BaseException:
            self.meter.release(reservation)
            raise
        answer = response.text + "".join(call.arguments for call in response.tool_calls)
        self._metered(reservation, before, answer, cut_off=False)
        self._emit(RequestFinished, iteration=iteration)
        # Recorded, handed over and closed in one synchronous step (no checkpoint), so a
        # durable run commits the response together with every call it made.
        self._append_turn(
            {
                "role": "assistant",
                "iteration": iteration,
                "text": response.text,
                "tool_calls": [
                    {
                        "id": id,
                        "provider_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                    }
                    for id, call in zip(
                        _call_ids(iteration, response), response.tool_calls, strict=True
                    )
                ],
                **({"reasoning": response.reasoning} if response.reasoning else {}),
                "messages": response.messages,
            }
        )
        self._hand_over(iteration, response)
        if not await self._end_tick():
            return False, None  # paused on a deferred call: the results wait for it
        if not response.tool_calls:
            return self._judge(iteration, response.text)
        await self._send_results(iteration, response)
        return False, None

    def _hand_over(
        self, iteration: int, response: TurnResponse, handed: set[str | None] | None = None
    ) -> None:
        """Give the tick a response's calls (a final answer: its fault, if it has one),
        then close the stream. `handed`: what a resumed journal shows was given already."""
        handed = handed or set()
        if response.tool_calls:
            for id, call in zip(_call_ids(iteration, response), response.tool_calls, strict=True):
                if id not in handed:
                    self._dispatch(id, call)
        elif None not in handed:
            _, problem = self._final_output(response.text)
            if problem is not None:
                self.engine.report(structural(problem), {"output": response.text})
        self.engine.close_stream()

    async def _end_tick(self) -> bool:
        """Wait for the tick whose stream is closed; False when it paused (tl.Defer)."""
        outcome = await self.engine.wait_tick()
        self.paused = bool(outcome.paused)
        return not self.paused

    async def _send_results(self, iteration: int, response: TurnResponse) -> None:
        """Once every call of the response has its final status, append their results."""
        ids = _call_ids(iteration, response)
        await self._wait_for(ids)
        results = [
            self._result(id, call) for id, call in zip(ids, response.tool_calls, strict=True)
        ]
        self._append_turn(
            {
                "role": "tool",
                "iteration": iteration,
                "results": [
                    {"id": id, "content": result.content, "is_error": result.is_error}
                    for id, result in zip(ids, results, strict=True)
                ],
                "messages": self.model.tool_result_messages(response, results),
            }
        )

    # -- resuming a durable run -----------------------------------------------------------

    async def _recover(self) -> tuple[bool, Any]:
        """Finish the iteration a crash or a pause interrupted; (done, output) as
        `_iterate`. The calls are settled first, as for the solution protocol; then the
        log says where the iteration was: a response that was recorded is never asked for
        again, its results are sent once every call has ended, and a final answer is
        judged (again: judging is a pure function of its text). A request that had not
        answered left nothing behind: its empty tick is closed and the same iteration
        asked again."""
        durable, engine = self.durable, self.engine
        if durable is None or not durable.reopen(engine):
            return False, None
        scheduler = engine.scheduler
        iteration = scheduler.iteration
        entry = self._recorded_turn(iteration)
        response = None if entry is None or entry.get("broken") else response_of(entry)
        if scheduler.stream_open:
            if response is not None:  # only a journal cut inside the one-commit step above
                self._hand_over(iteration, response, durable.handed)
            else:
                engine.close_stream()
        if scheduler.tick_active:
            await self._end_tick()
        else:
            self.paused = bool(scheduler.deferred)
        if response is None or self.paused:
            return False, None
        if not response.tool_calls:
            return self._judge(iteration, response.text, feedback=not self._fed_back())
        if not self._results_recorded(iteration):
            await self._send_results(iteration, response)
        return False, None

    def _recorded_turn(self, iteration: int) -> dict[str, Any] | None:
        """The model's recorded response of `iteration` (the log's last), or None."""
        for entry in reversed(self.log.view(TURN_KIND) or ()):
            if isinstance(entry, dict) and entry.get("role") == "assistant":
                return entry if entry.get("iteration") == iteration else None
        return None

    def _results_recorded(self, iteration: int) -> bool:
        entries = self.log.view(TURN_KIND) or ()
        last = entries[-1] if entries else None
        return (
            isinstance(last, dict)
            and last.get("role") == "tool"
            and last.get("iteration") == iteration
        )

    def _fed_back(self) -> bool:
        """Whether the last answer's rejection was told already (a user text after it)."""
        for message in reversed(self.log.messages):
            if message.get("type") == "text" and message.get("role") == "user":
                return True
            if message.get("type") == "data" and message.get("kind") == TURN_KIND:
                return False
        return False

    async def _wait_for(self, ids: Sequence[str]) -> None:
        """Until every call has its final status, fire-and-forget ones included: in this
        protocol each call's result goes back to the model, written to the state or not."""
        records = self.engine.records
        driver = self.config.driver
        if driver is not None:
            await driver.wait_until(
                lambda: all(records[id].status in FINAL_STATUSES for id in ids if id in records)
            )
            return
        while not all(records[id].status in FINAL_STATUSES for id in ids if id in records):
            self._settled = trio.Event()
            await self._settled.wait()

    # -- the request ----------------------------------------------------------------------

    def _system(self) -> str | None:
        parts = [self.config.instructions.strip()] if self.config.instructions else []
        parts += [
            str(message.get("text", ""))
            for message in self.log.messages
            if message.get("type") == "text" and message.get("role") == "system"
        ]
        schema = self.config.output.schema
        if schema is not None and not self.config.output.is_text:
            parts.append(
                "When you have the final answer, reply without calling a tool, with only a "
                "JSON value (no prose, no code fence) that matches this JSON Schema:\n"
                + json.dumps(schema, ensure_ascii=False)
            )
        return "\n\n".join(parts) if parts else None

    def _conversation(self) -> list[dict[str, Any]]:
        """The conversation the next request shows: the newest compaction's summary in
        place of the turns it covers (PROTOCOL §16), in a user's message next to it, so
        two user messages never follow each other and no tool call loses its result."""
        summary, covers = latest_compaction(self.log)
        covered = set(covers)
        conversation: list[dict[str, Any]] = []
        at: int | None = None  # where the summary is shown: the first turn it covers
        for key, item in self._items():
            if key not in covered:
                conversation.append(item)
            elif summary is not None and at is None:
                at = len(conversation)
                conversation.append({"role": "user", "text": conversation_summary(summary)})
        if at is not None:
            _merge_user_texts(conversation, at)  # with what follows it
            _merge_user_texts(conversation, at - 1)  # with what precedes it
        return conversation

    def compactable_turns(self) -> list[tuple[str, str]]:
        """The newest compaction's summary, then every earlier turn it does not cover but
        the last (PROTOCOL §16): a text said before the first assistant turn (a
        session's history) but the input, and each assistant turn with all its tool
        results, reasoning and what was said after it, so a call never loses its result.
        The input and the last turn (the last results and errors) are never compacted."""
        summary, covers = latest_compaction(self.log)
        covered = set(covers)
        items = self._items()
        last = items[-1][0] if items else None  # the last turn's, or the input's
        turns: dict[str, list[str]] = {}
        for key, item in items:
            if key is not None and key not in covered and key != last:
                turns.setdefault(key, []).append(json.dumps(item, ensure_ascii=False))
        first = [("compaction", conversation_summary(summary))] if summary is not None else []
        return [*first, *((key, "\n".join(parts)) for key, parts in turns.items())]

    def _items(self) -> list[tuple[str | None, dict[str, Any]]]:
        """The conversation's items, each with the turn it belongs to: "iteration N" (its
        assistant turn's) from the first assistant turn on; before it, "message N" (its
        place in the log) for each text but the last, the input, which has None."""
        items: list[tuple[str | None, dict[str, Any]]] = []
        key: str | None = None
        opening: list[int] = []  # the texts before the first assistant turn
        for index, message in enumerate(self.log.messages):
            kind = message.get("type")
            if kind == "text" and message.get("role") in ("user", "assistant"):
                if key is None:
                    opening.append(len(items))
                text = str(message.get("text", ""))
                items.append((key or chat_key(index), {"role": message["role"], "text": text}))
            elif kind == "data" and message.get("kind") == TURN_KIND:
                entry = message.get("data")
                if not isinstance(entry, dict):
                    continue
                if entry.get("role") == "assistant":
                    key = f"iteration {entry.get('iteration')}"
                if entry.get("broken") or not entry.get("messages"):
                    continue
                keep = entry.get("role") == "tool" or bool(entry.get("tool_calls"))
                item = {
                    "format": entry.get("format", self.format),
                    "messages": entry["messages"],
                    "keep_reasoning": keep,
                }
                items.append((key, item))
        if opening:
            items[opening[-1]] = (None, items[opening[-1]][1])  # the input
        return items

    def _summary_request(self, iteration: int, chat: list[dict[str, Any]]) -> TurnRequest:
        """A compaction request in the model's own API: no tools, the turns as text."""
        text = "\n\n".join(str(message["content"]) for message in chat)
        return TurnRequest(
            system=COMPACT_GUIDE,
            conversation=[{"role": "user", "text": text}],
            tools=[],
            iteration=iteration,
            path=self._path(),
        )

    async def _ask_for_text(self, request: Any, parts: list[str]) -> None:
        """A plain-text answer (the response's text) to a request without tools."""

        def on_item(item: Any) -> None:
            if isinstance(item, Usage):
                self._reported(item)
            elif isinstance(item, TurnResponse):
                parts[:] = [item.text]

        driver = self.config.driver
        if driver is not None:
            await driver.request_turn(request, on_item)
            return
        await stream_with_retries(
            lambda: self.model.stream_turn(request),
            on_item,
            attempts=self.config.max_llm_retries,
            rng=self.config.rng,
            on_retry=partial(self._on_retry, request.iteration),
        )

    async def _ask(self, request: TurnRequest) -> TurnResponse:
        response: TurnResponse | None = None

        def on_item(item: TextDelta | Usage | TurnResponse) -> None:
            nonlocal response
            if isinstance(item, Usage):
                self._reported(item)
            elif isinstance(item, TextDelta):
                if self.on_text is not None:
                    self.on_text(item.text)
            else:
                response = item

        driver = self.config.driver
        if driver is not None:  # the request is its driver's (an activity)
            await driver.request_turn(request, on_item)
            assert response is not None  # or it raised
            return response
        try:
            await stream_with_retries(
                lambda: self._attempt(request),
                on_item,
                attempts=self.config.max_llm_retries,
                rng=self.config.rng,
                on_retry=partial(self._on_retry, request.iteration),
            )
        except StreamBroken:
            raise
        except Exception as error:
            raise self._request_failed(error) from error
        assert response is not None  # `_attempt` ends with one or raises
        return response

    async def _attempt(
        self, request: TurnRequest
    ) -> AsyncIterator[TextDelta | Usage | TurnResponse]:
        """One request, held back until it is complete, except a final answer's text.

        Holding back means a failure before the end is retried whole (nothing ran, nothing
        was shown). Text is shown live only to a reader (`on_text`), only while the
        response has not called a tool, and only once it has begun with something other
        than whitespace: the first thing a response streams decides (the seeds' rule), as
        providers stream tool calls from the start. A response that calls tools after
        some text (a preamble) stops being shown at its first call.
        """
        held: list[Usage | TurnResponse] = []
        live: bool | None = None if self.on_text is not None else False
        waiting: list[str] = []
        async for item in self.model.stream_turn(request):
            if isinstance(item, ToolCallStarted):
                live = False
            elif isinstance(item, TextDelta):
                if live is None:
                    waiting.append(item.text)
                    if item.text.strip():
                        live = True
                        yield TextDelta("".join(waiting))
                elif live:
                    yield item
            elif isinstance(item, Usage | TurnResponse):
                held.append(item)
        if not any(isinstance(item, TurnResponse) for item in held):
            raise ModelError(
                f"{self.model!r} ended its stream without a complete response", status=None
            )
        for item in held:
            yield item

    # -- calls and results ----------------------------------------------------------------

    def _dispatch(self, id: str, call: TurnToolCall) -> None:
        """Hand one provider call to the engine; or, when its arguments cannot make a
        call at all, report the fault (its result is an error, see `_result`)."""
        if call.name not in self.config.tools:  # "unknown tool", recorded (escaped: storable)
            self.engine.receive(storable({"_tool": call.name, "_id": id}))
            return
        arguments, problem = self._arguments(call)
        if problem is not None:
            self._rejected[id] = problem
            self.engine.report(
                structural(problem), {"_tool": call.name, "_id": id, "_arguments": call.arguments}
            )
            return
        self.engine.receive({"_tool": call.name, **_literal(arguments), "_id": id})

    def _arguments(self, call: TurnToolCall) -> tuple[Any, str | None]:
        """A known tool's call's arguments, or why they cannot make a call."""
        tools = self.config.tools
        if not call.arguments.strip() and not tools[call.name].parameters.get("properties"):
            arguments: Any = {}  # a tool without parameters: some servers send nothing at all
        else:
            arguments, _ = resilient_json_parse_with_strategy(call.arguments)
        problem: str | None = None
        if arguments is None:
            problem = f"got arguments that are not valid JSON ({_jsonstructural(call.arguments)})"
        elif not isinstance(arguments, dict):
            problem = "got arguments that are not a JSON object (a JSON array)"
        elif (shape := shape_fault(arguments, MAX_NESTING)) is not None:
            problem = f"got arguments that cannot make a call: {shape}"
        else:
            meta = sorted(key for key in arguments if key.startswith("_"))
            if meta:
                problem = (
                    f"got argument {meta[0]!r}, which is not one of its parameters "
                    f"({', '.join(tools[call.name].parameters.get('properties', {})) or 'none'})"
                )
        if problem is not None:
            return None, f"Tool {call.name!r} {problem}; send the arguments as one JSON object"
        return arguments, None

    def _result(self, id: str, call: TurnToolCall) -> ToolResult:
        record = self.engine.records.get(id)
        if record is None:  # its arguments made no call (known again after a resume)
            problem = self._rejected.get(id) or self._arguments(call)[1]
            return ToolResult(f"Error: {problem}", is_error=True)
        error = record.error or {}
        message = str(error.get("message", ""))
        name = call.name
        if record.status == CallStatus.DONE:
            output = record.output
            content = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
            return ToolResult(content, media=tuple(media_refs(output)))
        if record.status == CallStatus.FAILED:
            return ToolResult(f"Error: Tool {name!r} failed: {message}", is_error=True)
        if record.status == CallStatus.DENIED:
            return ToolResult(f"Error: Tool {name!r} was denied: {message}", is_error=True)
        if record.status == CallStatus.SKIPPED:
            return ToolResult(
                f"Error: Tool {name!r} was skipped: a value it depends on will not be written",
                is_error=True,
            )
        if name not in self.config.tools:
            known = ", ".join(self.config.tools) or "none"
            return ToolResult(
                f"Error: Tool {name!r} does not exist; the tools are: {known}", is_error=True
            )
        return ToolResult(f"Error: Tool {name!r} was not run: {message}", is_error=True)

    # -- the final answer -----------------------------------------------------------------

    def _reject_output(self, feedback: str, output: Any) -> None:
        """A final answer an output guardrail rejected (PROTOCOL §15), told as a bad one is."""
        self._append(
            {
                "type": "text",
                "role": "user",
                "text": f"Your final answer was not accepted: {feedback}. Reply again.",
            }
        )

    def _judge(self, iteration: int, text: str, *, feedback: bool = True) -> tuple[bool, Any]:
        """A final answer's verdict: (True, output), or the model is told why not."""
        output, problem = self._final_output(text)
        if problem is None:
            if self.durable is not None:
                self.durable.verdict(iteration, output)  # the run's stored output
            return True, output
        if feedback:
            self._append(
                {
                    "type": "text",
                    "role": "user",
                    "text": f"Your final answer was not accepted: {problem}. Reply again with "
                    "only a JSON value that matches the schema.",
                }
            )
        return False, None

    def _final_output(self, text: str) -> tuple[Any, str | None]:
        """The answer's output as JSON data (the text itself without an output schema),
        or why it is not one; `spec.convert` makes it typed at the end of the run."""
        spec = self.config.output
        if has_surrogate(text):  # it could never be stored or sent on as the output
            return None, f"the final answer {SURROGATE_FAULT}"
        if spec.schema is None or spec.is_text:  # output=str: the answer's text itself
            return text, None
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            value, strategy = resilient_json_parse_with_strategy(text)
            if strategy == "none":
                return None, f"the final answer is not JSON ({_jsonstructural(text)})"
        fault = shape_fault(value, MAX_VALUE_DEPTH)
        if fault is not None and SURROGATE_FAULT in fault:  # "\\ud800" decodes to one
            return None, f"the final answer {fault}"
        try:
            problem = spec.check(value)
        except RecursionError:
            problem = "the final answer nests too deeply to be checked against the output schema"
        if problem is not None:
            return None, problem
        return value, None

    def _append_turn(self, entry: dict[str, Any]) -> None:
        """Record a turn. A lone surrogate or 1e999 anywhere in what the provider sent
        (the arguments text as its client gave it, a call's name or id, the text, its
        messages) is recorded escaped (`storable`): the turn is kept as near to what came
        as JSON holds, and the call it made is that call's structural error on arrival
        (`_dispatch`), never a failed write of the turn."""
        self._append(
            {
                "type": "data",
                "kind": TURN_KIND,
                "_outputMethod": "push",
                "data": storable({"format": self.format, **entry}),
            }
        )


def _merge_user_texts(conversation: list[dict[str, Any]], at: int) -> None:
    """Join the items at `at` and `at + 1` when both are a user's text (one is the
    summary of a compaction), so two user messages never follow each other."""
    if at < 0 or at + 1 >= len(conversation):
        return
    first, second = conversation[at], conversation[at + 1]
    if all(item.get("role") == "user" and "text" in item for item in (first, second)):
        conversation[at : at + 2] = [
            {"role": "user", "text": f"{first['text']}\n\n{second['text']}"}
        ]


def _call_ids(iteration: int, response: TurnResponse) -> list[str]:
    return [f"c{iteration}.{index}" for index in range(len(response.tool_calls))]


def response_of(entry: dict[str, Any]) -> TurnResponse:
    """A recorded assistant turn as the response it was (what results are paired with)."""
    return TurnResponse(
        text=str(entry.get("text", "")),
        tool_calls=[
            TurnToolCall(str(call.get("provider_id", "")), str(call["name"]), call["arguments"])
            for call in entry.get("tool_calls") or ()
        ],
        messages=list(entry.get("messages") or ()),
        reasoning=entry.get("reasoning"),
    )


def _literal(value: Any) -> Any:
    """Model arguments are literals: a string that starts with `†` would otherwise be read
    as a reference, so it is escaped (`††x` is the literal `†x`, PROTOCOL §3)."""
    if isinstance(value, str):
        return _REFERENCE_MARK + value if value.startswith(_REFERENCE_MARK) else value
    if isinstance(value, dict):
        return {key: _literal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_literal(item) for item in value]
    return value


def _jsonstructural(text: str) -> str:
    try:
        json.loads(text)
    except ValueError as error:
        return str(error)
    except RecursionError:
        return "nested too deeply"
    return "a JSON value, but not an object"


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

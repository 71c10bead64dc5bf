"""The question desk: where an MCP server's questions and model requests meet a run.

A server asks in the middle of one of its tool calls; the call was started by a run, and
that run says how to answer: its `questions=` hook (a `tl.Question`, answered with a
verdict) and its model (a `tl.Sampling`, answered with text). A run puts its desk in the
context (`answering_with`); every task it starts inherits it, so an MCP tool finds the
desk of the run that called it (`current_desk`), a child run's own below a sub-agent.

Every answer is journaled under its call and its place among that call's exchanges
(`c1.0#0`, `c1.0#1`...), committed before the server gets it: when the call runs again
(a resume after a pause or a crash) and the server asks the same thing in the same
place, the journal answers, and neither the hook nor the model is asked again. A call
parked on a deferred question takes the verdict a person recorded for it in the store
(`SQLiteStore.decide`), given here as `parked_verdicts`.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

import trio

from .._core._decisions import Defer
from .._core._questions import (
    Accept,
    Decline,
    Question,
    QuestionHook,
    Sampling,
    Verdict,
    check_answer,
    normalize_verdict,
    not_a_verdict,
    verdict_from_dict,
    verdict_to_dict,
)
from .._errors import ConfigurationError, describe_error, is_call_error
from ._asking import call_hook, passing_here

__all__ = [
    "QUESTION_NOTE",
    "SAMPLED_NOTE",
    "QuestionDesk",
    "SamplingRefused",
    "answering_with",
    "check_questions",
    "current_desk",
]

_log = logging.getLogger("tickloop")

QUESTION_NOTE = "question"  # a server's question and its verdict (or that it was deferred)
SAMPLED_NOTE = "sampled"  # a server's model request and the text that answered it

#: How many times the hook is asked the same question while its answers do not match the
#: question's schema; then the question is declined (docs/decisions.md).
ASKS_PER_QUESTION = 3

_DESK: contextvars.ContextVar[QuestionDesk | None] = contextvars.ContextVar(
    "tickloop_question_desk", default=None
)


class SamplingRefused(Exception):
    """A server's model request that is not answered; the words go back to the server."""


class QuestionJournal(Protocol):
    """What the desk needs of a durable run's journal."""

    def note(self, name: str, **data: Any) -> None: ...

    def commit(self, call_id: str | None = None, *, rows: bool = False) -> None: ...


#: Answers a `Sampling` with (text, model name); raises SamplingRefused.
Sampler = Callable[[Sampling], Awaitable[tuple[str, str]]]


def check_questions(hook: Any) -> None:
    """A `questions=` that is not callable is the caller's mistake, said before anything runs."""
    if hook is not None and not callable(hook):
        raise ConfigurationError(
            f"questions must be a function of a tl.Question (or tl.ConsoleApproval(), "
            f"tl.BrowserApproval()), not {hook!r}"
        )


def current_desk() -> QuestionDesk | None:
    """The desk of the run whose task this is; None outside any run that answers."""
    return _DESK.get()


@contextmanager
def answering_with(desk: QuestionDesk) -> Iterator[None]:
    """Make `desk` the one the tasks started inside the block find."""
    token = _DESK.set(desk)
    try:
        yield
    finally:
        _DESK.reset(token)


class QuestionDesk:
    """One run's answers to its MCP servers' questions and model requests."""

    def __init__(
        self,
        hook: QuestionHook | None,
        *,
        sampler: Sampler | None = None,
        journal: QuestionJournal | None = None,
        recorded: Mapping[str, Mapping[str, Any]] | None = None,
        parked_verdicts: dict[str, Any] | None = None,
        run_id: str | None = None,
        on_question: Callable[[Question, Verdict | None], None] | None = None,
        defers: bool = True,
        no_model: str = (
            "this client has no model to answer with (a run of calls without an "
            "agent: give the server sampling=fn)"
        ),
    ) -> None:
        self.hook = hook
        # False where a call cannot be parked for a person (a Temporal worker's activity):
        # a `tl.Defer()` is then declined.
        self.defers = defers
        self.no_model = no_model  # why a model request is refused without a `sampler`
        # Told of each question put to the hook (verdict None) and of its verdict: the
        # run's events (`question.asked`, `question.answered`), for pages and AG-UI.
        self.on_question = on_question
        self.sampler = sampler
        self.journal = journal
        # Answers journaled by earlier processes of the run, by key (`c1.0#0`).
        self.recorded: Mapping[str, Mapping[str, Any]] = recorded if recorded is not None else {}
        # Verdicts a person recorded for calls parked on a deferred question, by call id;
        # each answers that call's deferred question once.
        self.parked_verdicts: dict[str, Any] = (
            parked_verdicts if parked_verdicts is not None else {}
        )
        self.run_id = run_id
        # Exchanges (questions and model requests) of each call in this process, counted
        # from 0 in the order the server made them: a call that runs again makes them again
        # in the same order, so its n-th exchange finds its n-th answer.
        self._exchanges: dict[str, int] = {}
        # One question before a person at a time, as approvals are (PROTOCOL §6).
        self._asking = trio.Lock()

    def inherit(self, hook: QuestionHook | None) -> QuestionHook | None:
        """The hook a child run's desk uses: its own, else this (its parent's) one."""
        return hook if hook is not None else self.hook

    # -- questions ----------------------------------------------------------------------

    async def elicit(
        self, server: str, call_id: str | None, message: str, schema: dict[str, Any] | None
    ) -> Verdict:
        """The verdict on a server's question: from the journal, a recorded verdict for a
        parked call, or the hook (Decline without one). Defer parks the call."""
        key = self._key(call_id)
        shown = {"message": message, "schema": schema, "server": server}
        earlier = self.recorded.get(key) if key is not None else None
        asked_before = earlier is not None and _same(earlier, shown)
        if asked_before:
            assert earlier is not None
            journaled = verdict_from_dict(earlier.get("verdict") or {})
            if journaled is not None:
                return journaled
        question = Question(message, schema, server, call_id, self.run_id)
        if asked_before and call_id in self.parked_verdicts:
            given = self.parked_verdicts.pop(str(call_id))
            problem = check_answer(question, given.data) if isinstance(given, Accept) else None
            if problem is None:
                self._journal(key, call_id, QUESTION_NOTE, shown, verdict=verdict_to_dict(given))
                return given  # type: ignore[no-any-return]
            _log.warning(
                "the verdict recorded for call %s does not match its question's schema (%s); "
                "the question is asked again",
                call_id,
                problem,
            )
            question = dataclasses.replace(question, problem=problem)
        verdict = await self._ask(question)
        if isinstance(verdict, Defer):
            self._journal(key, call_id, QUESTION_NOTE, shown, deferred=True)
        else:
            self._journal(key, call_id, QUESTION_NOTE, shown, verdict=verdict_to_dict(verdict))
        return verdict

    async def _ask(self, question: Question) -> Verdict:
        if self.hook is None:
            return Decline()  # nobody to ask (API.md: without a hook, declined)
        self._tell(question, None)
        verdict = await self._ask_hook(question)
        if isinstance(verdict, Defer) and not self.defers:
            _log.warning(
                "a question of %s cannot wait for a person here (a Temporal activity); declined",
                question.server,
            )
            verdict = Decline()
        self._tell(question, verdict)
        return verdict

    def _tell(self, question: Question, verdict: Verdict | None) -> None:
        if self.on_question is None:
            return
        try:
            self.on_question(question, verdict)
        except Exception:  # a listener's bug never stops the question
            _log.exception("telling the run's events of a question failed")

    async def _ask_hook(self, question: Question) -> Verdict:
        assert self.hook is not None  # `_ask` answers without one
        async with self._asking:
            for _ in range(ASKS_PER_QUESTION):
                try:
                    answer = await call_hook(self.hook, question)
                except BaseException as error:
                    if not is_call_error(error, passing_here()):
                        raise
                    _log.warning(
                        "questions hook bug: it raised %s on a question of %s; declined",
                        describe_error(error),
                        question.server,
                    )
                    return Decline()
                verdict = normalize_verdict(answer)
                if verdict is None:
                    _log.warning(
                        "questions hook bug: %s; the question of %s is declined",
                        not_a_verdict(answer),
                        question.server,
                    )
                    return Decline()
                if not isinstance(verdict, Accept):
                    return verdict
                problem = check_answer(question, verdict.data)
                if problem is None:
                    return verdict
                _log.warning(
                    "the answer to a question of %s does not match its schema (%s); asked again",
                    question.server,
                    problem,
                )
                question = dataclasses.replace(question, problem=problem)
        _log.warning(
            "no answer matching the schema of a question of %s in %d tries; declined",
            question.server,
            ASKS_PER_QUESTION,
        )
        return Decline()

    # -- model requests -----------------------------------------------------------------

    async def sample(
        self,
        sampling: Sampling,
        *,
        answer: Callable[[Sampling], Any] | None,
        approve: bool,
    ) -> tuple[str, str]:
        """(text, model) for a server's model request: from the journal, else (after the
        hook's approval when asked for) from the server's `sampling=` function or the
        run's model. Raises SamplingRefused."""
        key = self._key(sampling.call_id)
        request = sampling.to_dict()
        earlier = self.recorded.get(key) if key is not None else None
        if earlier is not None and earlier.get("note") == SAMPLED_NOTE:
            if earlier.get("request") == request and isinstance(earlier.get("text"), str):
                return earlier["text"], str(earlier.get("model") or "journal")
        if approve:
            question = Question(
                f"MCP server {sampling.server} asks the model to answer a request",
                None,
                sampling.server,
                sampling.call_id,
                self.run_id,
                sampling=sampling,
            )
            verdict = await self._ask(question)
            if not isinstance(verdict, Accept):
                raise SamplingRefused("the user did not let this request reach the model")
        if answer is not None:
            text = await self._answer_with(answer, sampling)
            model = getattr(answer, "__name__", "sampling")
        elif self.sampler is not None:
            text, model = await self.sampler(sampling)
        else:
            raise SamplingRefused(self.no_model)
        self._journal(
            key, sampling.call_id, SAMPLED_NOTE, {}, request=request, text=text, model=model
        )
        return text, model

    async def _answer_with(self, answer: Callable[[Sampling], Any], sampling: Sampling) -> str:
        try:
            text = await call_hook(answer, sampling)
        except BaseException as error:
            if not is_call_error(error, passing_here()):
                raise
            raise SamplingRefused(f"the client's sampling function failed: {error}") from None
        if not isinstance(text, str):
            raise SamplingRefused("the client's sampling function did not return text")
        return text

    # -- the journal --------------------------------------------------------------------

    def _key(self, call_id: str | None) -> str | None:
        if call_id is None:
            return None  # not tied to a call: not journaled (docs/decisions.md)
        number = self._exchanges.get(call_id, 0)
        self._exchanges[call_id] = number + 1
        return f"{call_id}#{number}"

    def _journal(
        self, key: str | None, call_id: str | None, name: str, shown: dict[str, Any], **data: Any
    ) -> None:
        if key is None or self.journal is None:
            return
        self.journal.note(name, key=key, call_id=call_id, **shown, **data)
        self.journal.commit()  # stored before the server is answered


def _same(earlier: Mapping[str, Any], shown: Mapping[str, Any]) -> bool:
    return all(earlier.get(name) == value for name, value in shown.items())

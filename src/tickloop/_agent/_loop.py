"""The outer loop's shape (PROTOCOL §8), shared by both protocols, and its result.

The solution protocol (`_agent._SolutionLoop`) and native tool calling
(`_turns._TurnLoop`) differ in what one iteration does; how a run resumes, counts its
iterations, stops at the limit and reports its result is the same, and lives here once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core._decisions import PendingCall
from .._core._log import ContextLog
from .._core._scheduler import CallRecord
from .._engine._engine import Engine
from .._engine._run import ExecutionResult
from .._errors import MaxIterationsError, _RunStopped
from .._models._base import Usage

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["OuterLoop", "RunResult"]


class RunResult(ExecutionResult):
    """What a run ended with. `output` is typed when the agent's output is a pydantic model.

    Everything an `ExecutionResult` has (state, views, errors, messages, records), plus
    what only a run with a model has.
    """

    def __init__(
        self,
        output: Any,
        log: ContextLog,
        records: dict[str, CallRecord],
        iterations: int,
        usage: Usage | None = None,
        *,
        run_id: str | None = None,
        status: str = "done",
        pending: list[PendingCall] | None = None,
    ) -> None:
        super().__init__(log, records, pending)
        self.output = output
        self.iterations = iterations
        self.usage = usage or Usage()
        self.run_id = run_id
        self.status = status

    def __repr__(self) -> str:
        return (
            f"<RunResult {self.status} after {self.iterations} iterations, "
            f"{len(self.records)} calls, output={self.output!r}>"
        )


class OuterLoop:
    """What the loops of both protocols share: resume, count, limit, iterate, result.

    A subclass sets `agent`, `log`, `engine`, `usage` and `paused`, and says how to
    recover a resumed run, how many iterations the log already holds, and what one
    iteration does; the shape of a run is kept here, once.
    """

    agent: Agent
    log: ContextLog
    engine: Engine
    usage: Usage
    paused: bool
    final_answer = "output"  # what the iteration-limit message says never came

    async def run(self) -> RunResult:
        self._before_session()
        stopped: _RunStopped | None = None
        async with self.engine.session():
            try:
                done, output = await self._recover()  # a resumed run: what it left open
                iteration = self._iterations_done()  # a resumed log continues its count
                while not done and not self.paused:
                    iteration += 1
                    if iteration > self.agent.max_iterations:
                        raise MaxIterationsError(
                            f"the agent made {self.agent.max_iterations} requests without a "
                            f"final {self.final_answer}; raise max_iterations or check the "
                            "tools and instructions",
                            self.log.messages,
                        )
                    done, output = await self._iterate(iteration)
            except _RunStopped as error:
                # The run stops on its own (iteration limit, model unreachable), not on
                # the caller's cancel: the session still ends normally, so fire-and-forget
                # calls finish and their late errors are flushed into the log (§4).
                stopped = error
        if stopped is not None:
            stopped.messages = list(self.log.messages)  # with what the session flushed
            raise stopped
        paused = self.paused
        return RunResult(
            None if paused else self.agent.output.convert(output),
            self.log,
            self.engine.records,
            self._iterations_done(),
            self.usage,
            status="paused" if paused else "done",
            pending=self.engine.scheduler.deferred if paused else None,
        )

    def _before_session(self) -> None:
        """Checks a loop makes before anything runs (none by default)."""

    async def _recover(self) -> tuple[bool, Any]:
        raise NotImplementedError

    def _iterations_done(self) -> int:
        raise NotImplementedError

    async def _iterate(self, iteration: int) -> tuple[bool, Any]:
        raise NotImplementedError

"""An MCP server's model requests (`sampling/createMessage`), answered by the run's model.

The request is the run's like any other model request (PROTOCOL §12): room is reserved
for it before it is sent (a budget without room refuses it, and the server is told why),
and what it used replaces the reservation when it ends, through the run's `RequestMeter`,
so it counts in `RunUsage` and a durable run journals the spending. Its text is journaled
by the question desk (`_engine._questions`), so a call that runs again is answered from
the journal and the model is not asked twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._core._questions import Sampling
from .._engine._questions import SamplingRefused
from .._errors import BudgetExceeded
from .._models._base import SolutionRequest
from ._budgeting import RequestMeter, model_name

__all__ = ["ModelSampler"]


class ModelSampler:
    """Answers a `Sampling` with the run's model, metered in the run's budget."""

    def __init__(
        self,
        model: Any,
        new_meter: Callable[[], RequestMeter],
        path: tuple[str, ...],
        iteration: Callable[[], int],
    ) -> None:
        self.model = model
        # A meter of its own per request: the run's request may be in flight meanwhile.
        self.new_meter = new_meter
        self.path = path
        self.iteration = iteration  # the run's iteration now (a request carries it)

    async def __call__(self, sampling: Sampling) -> tuple[str, str]:
        if getattr(self.model, "stream_solution", None) is None:
            raise SamplingRefused("the agent's model client cannot answer a plain request")
        messages = [{"role": "system", "content": sampling.system}] if sampling.system else []
        messages += [dict(message) for message in sampling.messages]
        request = SolutionRequest(
            messages,
            None,  # plain text, as a code plan's request asks
            max(1, self.iteration()),
            metadata={"sampling": sampling.server},
            path=self.path,
            max_output_tokens=sampling.max_tokens,
        )
        meter = self.new_meter()
        try:
            reservation = await meter.reserve(request, list)
        except BudgetExceeded as error:
            raise SamplingRefused(f"the run's budget has no room for it: {error}") from None
        if reservation is None:
            raise SamplingRefused("the run's budget has no room for it (the budget hook deferred)")
        try:
            text = await meter.answer(reservation, self.model, request)
        except Exception as error:
            raise SamplingRefused(f"the model request failed: {error}") from None
        return text, model_name(self.model) or type(self.model).__name__

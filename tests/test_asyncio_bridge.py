"""Awaiting trio runs from asyncio: concurrent jobs share one guest run; cancel works."""

from __future__ import annotations

import asyncio
import warnings

import pytest
import trio

from tickloop._engine._asyncio_bridge import run_trio_in_asyncio


def test_concurrent_jobs_run_together_and_the_guest_ends_cleanly() -> None:
    order: list[str] = []

    async def job(name: str, delay: float) -> str:
        order.append(f"start {name}")
        await trio.sleep(delay)
        order.append(f"end {name}")
        return name

    async def main() -> list[str]:
        return await asyncio.gather(
            run_trio_in_asyncio(lambda: job("slow", 0.05)),
            run_trio_in_asyncio(lambda: job("fast", 0.01)),
        )

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an abandoned guest run would warn
        assert asyncio.run(main()) == ["slow", "fast"]
    assert order == ["start slow", "start fast", "end fast", "end slow"]


def test_a_later_job_starts_a_new_guest_after_the_first_ended() -> None:
    async def main() -> list[int]:
        first = await run_trio_in_asyncio(lambda: _value(1))
        second = await run_trio_in_asyncio(lambda: _value(2))
        return [first, second]

    assert asyncio.run(main()) == [1, 2]


async def _value(value: int) -> int:
    await trio.sleep(0)
    return value


def test_errors_reach_the_asyncio_caller() -> None:
    async def boom() -> None:
        await trio.sleep(0)
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        asyncio.run(run_trio_in_asyncio(boom))


def test_cancelling_the_asyncio_task_cancels_the_trio_run() -> None:
    reached: list[str] = []

    async def forever() -> None:
        try:
            await trio.sleep_forever()
        finally:
            reached.append("trio side unwound")

    async def main() -> None:
        task = asyncio.ensure_future(run_trio_in_asyncio(forever))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert reached == ["trio side unwound"]

"""The cancel scope around one run (venturi/worker/runscope.py): what the executor relied
on anyio's CancelScope for, kept. Real tasks on the running loop; every wait has a
deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio
import pytest

from venturi.worker.runscope import SHIELD_POLL, RunScope

LONG = 30.0  # a wait that only a cancellation ends within the test's deadline


async def _waiting_run(after: Callable[[], Awaitable[object]] | None = None,
                       ) -> tuple[asyncio.Task[object], RunScope]:
    """A run in a task of its own, waiting inside its scope; once out, ``after()``."""
    entered = asyncio.Event()
    scopes: list[RunScope] = []

    async def run() -> object:
        with RunScope() as scope:
            scopes.append(scope)
            entered.set()
            await asyncio.sleep(LONG)
        return None if after is None else await after()

    task = asyncio.ensure_future(run())
    await asyncio.wait_for(entered.wait(), 5)
    return task, scopes[0]


async def test_a_cancelled_run_stops_at_its_await_and_the_scope_absorbs_it() -> None:
    async def after() -> str:
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        await asyncio.sleep(0)  # nothing left pending for the next await
        return "after"

    task, scope = await _waiting_run(after)
    scope.cancel()
    assert await asyncio.wait_for(task, 5) == "after"
    assert scope.cancel_called


async def test_a_run_that_catches_the_cancellation_is_cancelled_at_its_next_await() -> None:
    caught = 0

    async def run() -> int:
        nonlocal caught
        with RunScope() as scope:
            scope.cancel()
            for _ in range(3):
                try:
                    await asyncio.sleep(LONG)
                except asyncio.CancelledError:
                    caught += 1  # a handler that swallows it, and goes on
        return caught

    assert await asyncio.wait_for(run(), 5) == 3


async def test_a_cancel_after_the_last_await_leaves_nothing_behind() -> None:
    async def run() -> bool:
        with RunScope() as scope:
            await asyncio.sleep(0)
            scope.cancel()  # the run ends before another await
        await asyncio.sleep(0.01)  # outside the scope: not cancelled
        task = asyncio.current_task()
        assert task is not None
        return scope.cancel_called and task.cancelling() == 0

    assert await asyncio.wait_for(run(), 5)


async def test_a_cancellation_from_outside_goes_through_the_scope() -> None:
    for also_the_scope in (False, True):
        task, scope = await _waiting_run()
        if also_the_scope:  # the run's own stop and the worker's, at the same moment
            scope.cancel()
        task.cancel()  # the worker stopping its slots, say
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        assert task.cancelled()


async def test_an_anyio_shield_inside_the_run_holds_the_cancellation_back() -> None:
    cleaned = asyncio.Event()

    async def run() -> None:
        with RunScope() as scope:
            scope.cancel()
            try:
                await asyncio.sleep(LONG)
            except asyncio.CancelledError:
                with anyio.CancelScope(shield=True):
                    await asyncio.sleep(0.05)  # the cleanup: several turns of the loop
                    cleaned.set()
                await asyncio.sleep(LONG)  # out of the shield: cancelled again

    await asyncio.wait_for(run(), 5)
    assert cleaned.is_set()


async def test_a_shield_around_the_scope_does_not_hold_its_cancellation_back() -> None:
    async def run() -> bool:
        with anyio.CancelScope(shield=True), RunScope() as scope:
            scope.cancel()
            await asyncio.sleep(LONG)
        return scope.cancel_called

    assert await asyncio.wait_for(run(), 5)


async def test_a_run_inside_its_own_task_group_and_deadlines_is_stopped() -> None:
    async def run() -> bool:
        with RunScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(asyncio.sleep, LONG)
                with anyio.move_on_after(LONG):
                    scope.cancel()
                    await asyncio.sleep(LONG)
        return scope.cancel_called

    assert await asyncio.wait_for(run(), 5)


async def test_outside_a_task_it_says_so() -> None:
    def outside() -> None:
        with RunScope():
            pass

    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def call() -> None:
        try:
            outside()
        except RuntimeError as exc:
            future.set_exception(exc)
        else:
            future.set_result(None)

    loop.call_soon(call)
    with pytest.raises(RuntimeError, match="inside a task"):
        await asyncio.wait_for(future, 5)


async def test_a_shielded_cleanup_does_not_keep_the_loop_spinning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """anyio's scope waits for the shield to end; so does this one, looking again every
    ``SHIELD_POLL``, not at every turn of the loop (thousands in 0.2 s)."""
    looks = 0
    deliver = RunScope._deliver

    def counted(self: RunScope) -> None:
        nonlocal looks
        looks += 1
        deliver(self)

    monkeypatch.setattr(RunScope, "_deliver", counted)
    loop = asyncio.get_running_loop()
    cancelled = delivered = 0.0

    async def run() -> None:
        nonlocal cancelled, delivered
        with RunScope() as scope:
            with anyio.CancelScope(shield=True):
                scope.cancel()
                cancelled = loop.time()
                await asyncio.sleep(0.2)
            try:
                await asyncio.sleep(LONG)
            finally:
                delivered = loop.time()

    await asyncio.wait_for(run(), 5)
    # Looks while the cancel waited, by its own length (a loaded machine stretches the
    # 0.2 s sleep): every SHIELD_POLL, give or take, not every turn of the loop.
    waited = delivered - cancelled
    assert 0 < looks < waited / SHIELD_POLL * 3 + 2, (looks, waited)

"""Glue between asyncio and the model: change notification, waiting, timer ticks."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from reference_impl.model.broker_state import ReferenceState
from reference_impl.model.clock import Clock

TICK_INTERVAL_S = 0.02


class BrokerRuntime:
    """Owns the shared state and lets handlers wait for it to change."""

    def __init__(self, state: ReferenceState, clock: Clock) -> None:
        self.state = state
        self.clock = clock
        self._changed = asyncio.Condition()
        self._ticker: asyncio.Task | None = None

    async def notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[], bool], timeout_ms: int) -> bool:
        """Wait until predicate() holds or timeout_ms passes; returns predicate()."""
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        async with self._changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining)
                except asyncio.TimeoutError:
                    return predicate()
            return True

    def start_ticker(self) -> None:
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def stop_ticker(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            try:
                await self._ticker
            except asyncio.CancelledError:
                pass
            self._ticker = None

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_INTERVAL_S)
            self.state.tick()
            await self.notify()

"""The priority floor that keeps low tiers moving under a flood
(docs/concepts/priorities.md, "The floor: low tiers keep moving").

Claims are numbered by a per-worker counter. Of every ten consecutive claim
positions, one is reserved for tier 2 (low) and one for tier 1 (normal); the
other eight follow plain priority order. A reservation its tier cannot use
falls through to priority order (the store does that), so no slot idles.
Over any 100 consecutive claims while every tier has runnable work, tier 0
gets 80, tiers 1 and 2 get 10 each: above the >= 50 / >= 10 / >= 10 that page promises.
"""

from __future__ import annotations

LOW_POSITION = 0
NORMAL_POSITION = 5
CYCLE = 10


class Fairness:
    def __init__(self) -> None:
        self._counter = 0

    def split(self, batch: int) -> tuple[int, int]:
        """(reserved low, reserved normal) slots for the next ``batch`` claims: the order
        of ``ClaimRequest.reservations()``."""
        positions = [(self._counter + i) % CYCLE for i in range(batch)]
        return positions.count(LOW_POSITION), positions.count(NORMAL_POSITION)

    def advance(self, claimed: int) -> None:
        self._counter = (self._counter + claimed) % CYCLE

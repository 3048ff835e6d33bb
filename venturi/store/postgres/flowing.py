"""Flow control: a kind's pause and limits in ``{prefix}kinds``, and the claim of
limited kinds (docs/concepts/flow-control.md).

A limited claim is a short transaction of its own: ``lock_kinds`` makes the claimers
of a limited kind take turns, and ``claim_limited``, a later statement and so a later
snapshot, counts the claims every earlier turn committed. Counting in the statement
that takes the lock would read a snapshot older than the lock. While no kind of the
claim is near its limits, ``claim_limited_fast`` first tries it in one statement: it
takes its turn only if its snapshot is provably current, and claims nothing otherwise.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from ...notices import encode, kinds_message
from ..base import ClaimRequest, KindChange, KindState, LimitedClaim, Limits, Rate
from ..flow import held_by
from . import rows
from .driver import Row
from .operations import Operations


def _limits(concurrency: int | None, count: int | None, period: dt.timedelta | None) -> Limits:
    rate = Rate(count, period) if count is not None and period is not None else None
    return Limits(concurrency, rate)


def _state(r: Row, counted: bool) -> KindState:
    operator, code = _limits(r[2], r[3], r[4]), _limits(r[5], r[6], r[7])
    if not counted:
        return KindState(r[0], bool(r[1]), operator, code)
    state = KindState(r[0], bool(r[1]), operator, code, int(r[8]), int(r[9]), int(r[10]))
    held = held_by(state.paused, state.limits, state.claimed, state.started_in_window)
    return KindState(state.kind, state.paused, operator, code, state.pending, state.claimed,
                     state.started_in_window, held)


class Flowing(Operations):
    # Sets of limited kinds whose last claim found one near its limits, so the next one
    # skips the fast path (docs/concepts/flow-control.md).
    _tight: set[tuple[str, ...]]

    async def claim_limited(self, request: ClaimRequest) -> LimitedClaim:
        if request.limit <= 0 or not request.leases:
            return LimitedClaim()
        kinds = sorted(request.leases)
        low, normal = request.reservations()
        args = (kinds, [request.leases[k] for k in kinds], request.limit, normal, low,
                request.claimed_by)
        tight = tuple(kinds)
        if tight not in self._tight:
            # One statement, its own transaction: it claims only when its snapshot is
            # current and every kind has room for the whole batch (flow.sql).
            found = await self._fetch("claim_limited_fast", *args, keep=True)
            if found:
                return LimitedClaim([rows.job(r) for r in found], near=frozenset(found[0][-1]))
        async with self.driver.session(keep=True) as ex, ex.atomic("venturi_claim"):
            await self._execute("lock_kinds", self.prefix, kinds, on=ex)
            found = await self._fetch("claim_limited", *args, on=ex)
            jobs = [rows.job(r) for r in found]
            considered = int(found[0][-2]) if found else 0
            near = frozenset(found[0][-1]) if found else frozenset()
            held: list[Row] = []
            if len(jobs) < request.limit:
                held = await self._fetch("limited_held", kinds, on=ex)
        # Near a limit the fast path would claim nothing: go straight to the full claim
        # until one leaves every kind of this set with room again.
        if held or near or considered > len(jobs):
            self._tight.add(tight)
        else:
            self._tight.discard(tight)
        due = [r[2] for r in held if r[2] is not None]
        return LimitedClaim(jobs, more=considered > len(jobs), retry_at=min(due, default=None),
                            held=tuple((r[0], r[1]) for r in held), near=near)

    async def control_kind(self, change: KindChange) -> None:
        rate = change.rate
        await self._execute(
            "control_kind", change.kind, change.paused, change.set_concurrency,
            change.concurrency, change.set_rate, rate.count if rate else None,
            rate.period if rate else None, encode(kinds_message([change.kind])))

    async def declare_kinds(self, limits: Mapping[str, Limits]) -> None:
        if not limits:
            return
        kinds = sorted(limits)
        await self._execute(
            "declare_kinds", kinds, [limits[k].concurrency for k in kinds],
            [r.count if (r := limits[k].rate) else None for k in kinds],
            [r.period if (r := limits[k].rate) else None for k in kinds],
            encode(kinds_message(kinds)))

    async def kind_controls(self, kinds: Sequence[str] | None = None) -> list[KindState]:
        found = await self._fetch("kind_controls", None if kinds is None else list(kinds))
        return [_state(r, counted=False) for r in found]

    async def wake_kinds(self, kinds: Sequence[str]) -> None:
        if kinds:
            await self._execute("notify_kinds", sorted(kinds))

    async def kind_states(self) -> list[KindState]:
        return [_state(r, counted=True) for r in await self._fetch("kind_states")]

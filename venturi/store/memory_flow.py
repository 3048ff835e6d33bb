"""MemoryStore's flow control: ``{prefix}kinds`` and the limited claim in memory,
with the semantics of ``postgres/flow.sql`` (docs/concepts/flow-control.md)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Mapping, Sequence

from ..notices import encode, kinds_message
from .base import ClaimRequest, JobRecord, KindChange, KindState, LimitedClaim, Limits, Status
from .flow import NO_LIMITS, held_by
from .memory_views import MemoryViews

Partition = tuple[str, str | None]


@dataclasses.dataclass(slots=True)
class _Kind:
    paused: bool = False
    operator: Limits = NO_LIMITS
    code: Limits = NO_LIMITS

    def state(self, kind: str) -> KindState:
        return KindState(kind, self.paused, self.operator, self.code)


class MemoryFlow(MemoryViews):
    """The flow-control half of MemoryStore (a mixin: the store holds the rows)."""

    def _notify(self, channel: str, payload: str) -> None:
        raise NotImplementedError

    def _runnable(self, kinds: Mapping[str, dt.timedelta], now: dt.datetime,
                  tier: int | None = None) -> list[JobRecord]:
        raise NotImplementedError

    def _claim_picked(self, request: ClaimRequest, picked: list[JobRecord],
                      now: dt.datetime) -> list[JobRecord]:
        raise NotImplementedError

    def _flow_init(self) -> None:
        self._kinds: dict[str, _Kind] = {}
        self._starts: list[tuple[str, str | None, dt.datetime]] = []

    def _controlled(self, kind: str) -> bool:
        """Left to claim_limited: paused, or under a limit."""
        k = self._kinds.get(kind)
        return k is not None and (k.paused or k.state(kind).limits.any)

    async def control_kind(self, change: KindChange) -> None:
        k = self._kinds.setdefault(change.kind, _Kind())
        if change.paused is not None:
            k.paused = change.paused
        op = k.operator
        if change.set_concurrency:
            op = dataclasses.replace(op, concurrency=change.concurrency)
        if change.set_rate:
            op = dataclasses.replace(op, rate=change.rate)
        k.operator = op
        self._notify("control", encode(kinds_message([change.kind])))

    async def declare_kinds(self, limits: Mapping[str, Limits]) -> None:
        changed = []
        for kind in sorted(limits):
            k = self._kinds.setdefault(kind, _Kind())
            if k.code != limits[kind]:
                k.code = limits[kind]
                changed.append(kind)
        if changed:
            self._notify("control", encode(kinds_message(sorted(limits))))

    async def kind_controls(self, kinds: Sequence[str] | None = None) -> list[KindState]:
        return [k.state(name) for name, k in sorted(self._kinds.items())
                if kinds is None or name in kinds]

    async def wake_kinds(self, kinds: Sequence[str]) -> None:
        for kind in sorted(kinds):
            self._notify("jobs", kind)

    async def kind_states(self) -> list[KindState]:
        now = self._now()
        pending: Counter[str] = Counter()
        claimed: Counter[str] = Counter()
        for j in self._jobs.values():
            if j.status is Status.PENDING:
                pending[j.kind] += 1
            elif j.status is Status.CLAIMED:
                claimed[j.kind] += 1
        out = []
        for name in sorted(set(self._kinds) | set(pending) | set(claimed)):
            state = self._kinds.get(name, _Kind()).state(name)
            rate = state.limits.rate
            started = 0 if rate is None else sum(
                1 for kind, _, at in self._starts if kind == name and at > now - rate.period)
            out.append(dataclasses.replace(
                state, pending=pending[name], claimed=claimed[name], started_in_window=started,
                held=held_by(state.paused, state.limits, claimed[name], started)))
        return out

    async def claim_limited(self, request: ClaimRequest) -> LimitedClaim:
        if request.limit <= 0 or not request.leases:
            return LimitedClaim()
        now = self._now()
        limits = {kind: self._kinds.get(kind, _Kind()).state(kind).limits
                  for kind in request.leases if not self._paused(kind)}
        self._starts = [s for s in self._starts
                        if (r := limits.get(s[0], NO_LIMITS).rate) is None
                        or s[2] > now - r.period] if limits else self._starts
        room = self._room(limits, now)
        full = {p for p, r in room.items() if r <= 0}
        open_kinds = {k: request.leases[k] for k in limits}
        found = [j for j in self._claim_order(request, open_kinds, now)
                 if (j.kind, j.limit_key) not in full]
        found = found[:request.limit]
        taken: Counter[Partition] = Counter()
        picked = []
        for j in sorted(found, key=lambda j: (j.priority, j.visible_at, j.id)):
            p = (j.kind, j.limit_key)
            left = room.get(p, _least(limits[j.kind].concurrency, _count(limits[j.kind])))
            if left is not None and taken[p] >= left:
                continue
            taken[p] += 1
            picked.append(j)
        picked_ids = {j.id for j in picked}
        ordered = [j for j in found if j.id in picked_ids]
        jobs = self._claim_picked(request, ordered, now)
        for j in jobs:
            if limits[j.kind].rate is not None:
                self._starts.append((j.kind, j.limit_key, now))
        near = set()
        for (kind, key), n in taken.items():
            most = _least(limits[kind].concurrency, _count(limits[kind]))
            left = room.get((kind, key), most)
            if left is not None and most is not None and 2 * (left - n) < most:
                near.add(kind)
        if len(jobs) >= request.limit:
            return LimitedClaim(jobs, more=len(found) > len(jobs), near=frozenset(near))
        held = set()
        for (kind, key), left in self._room(limits, now).items():
            if left > 0:
                continue
            lim = limits[kind]
            if lim.concurrency is not None and sum(
                    1 for j in self._jobs.values() if j.status is Status.CLAIMED
                    and (j.kind, j.limit_key) == (kind, key)) >= lim.concurrency:
                held.add((kind, "concurrency"))
            if lim.rate is not None and sum(
                    1 for k, c, at in self._starts if (k, c) == (kind, key)
                    and at > now - lim.rate.period) >= lim.rate.count:
                held.add((kind, "rate"))
        return LimitedClaim(jobs, more=len(found) > len(jobs),
                            retry_at=self._retry_at(limits, now), held=tuple(sorted(held)),
                            near=frozenset(near))

    def _paused(self, kind: str) -> bool:
        k = self._kinds.get(kind)
        return k is not None and k.paused

    def _claim_order(self, request: ClaimRequest, leases: Mapping[str, dt.timedelta],
                     now: dt.datetime) -> list[JobRecord]:
        """Every runnable job of ``leases``' kinds in the order the plain claim takes
        them (reserved slots first)."""
        low, normal = request.reservations()
        head = self._runnable(leases, now, 2)[:low] + self._runnable(leases, now, 1)[:normal]
        taken = {j.id for j in head}
        return head + [j for j in self._runnable(leases, now) if j.id not in taken]

    def _room(self, limits: Mapping[str, Limits], now: dt.datetime) -> dict[Partition, int]:
        """Room left in each partition that has claims or starts counted against it."""
        claimed: Counter[Partition] = Counter()
        started: Counter[Partition] = Counter()
        for j in self._jobs.values():
            if j.status is Status.CLAIMED and j.kind in limits \
                    and limits[j.kind].concurrency is not None:
                claimed[(j.kind, j.limit_key)] += 1
        for kind, key, at in self._starts:
            rate = limits[kind].rate if kind in limits else None
            if rate is not None and at > now - rate.period:
                started[(kind, key)] += 1
        room = {}
        for p in set(claimed) | set(started):
            lim = limits[p[0]]
            conc = None if lim.concurrency is None else lim.concurrency - claimed[p]
            window = None if lim.rate is None else lim.rate.count - started[p]
            left = _least(conc, window)
            if left is not None:
                room[p] = left
        return room

    def _retry_at(self, limits: Mapping[str, Limits], now: dt.datetime) -> dt.datetime | None:
        first: dict[Partition, dt.datetime] = {}
        n: Counter[Partition] = Counter()
        for kind, key, at in self._starts:
            rate = limits[kind].rate if kind in limits else None
            if rate is not None and at > now - rate.period:
                p = (kind, key)
                n[p] += 1
                first[p] = min(first.get(p, at), at)
        due = [first[p] + limits[p[0]].rate.period  # type: ignore[union-attr]
               for p in n if n[p] >= limits[p[0]].rate.count]  # type: ignore[union-attr]
        return min(due, default=None)


def _count(limits: Limits) -> int | None:
    return None if limits.rate is None else limits.rate.count


def _least(a: int | None, b: int | None) -> int | None:
    values = [v for v in (a, b) if v is not None]
    return min(values) if values else None

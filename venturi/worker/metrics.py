"""Prometheus metrics of one worker, on a registry of its own (docs/operations/metrics.md)."""

from __future__ import annotations

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..store.base import Store
from .health import DatabaseHealth

_LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
                    60, 300)
_RUN_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600)


class KindMetrics:
    """The per-kind children, resolved once (``labels()`` is a locked dict lookup)."""

    __slots__ = ("claimed", "completed", "pickup", "run")

    def __init__(self, m: WorkerMetrics, kind: str) -> None:
        self.claimed = m.claimed.labels(kind)
        self.completed = m.completed.labels(kind)
        self.pickup = m.pickup_seconds.labels(kind)
        self.run = m.run_seconds.labels(kind)


class WorkerMetrics:
    """Counters and histograms the worker's services update; ``registry`` is what
    ``/metrics`` exposes. Per-job work here is a few dict lookups."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.claimed = Counter("venturi_jobs_claimed", "Jobs claimed.", ["kind"], registry=r)
        self.completed = Counter("venturi_jobs_completed", "Runs that completed.", ["kind"],
                                 registry=r)
        self.retried = Counter("venturi_jobs_retried", "Runs that failed and will retry.",
                               ["kind"], registry=r)
        self.dead = Counter("venturi_jobs_dead", "Jobs that went dead.", ["kind"], registry=r)
        self.paused = Counter("venturi_jobs_paused", "Runs that paused.", ["kind"], registry=r)
        self.released = Counter("venturi_jobs_released", "Runs released at drain.", ["kind"],
                                registry=r)
        self.lost = Counter("venturi_leases_lost", "Runs abandoned because their claim was lost.",
                            ["kind"], registry=r)
        self.run_seconds = Histogram("venturi_job_run_seconds", "Handler run time.", ["kind"],
                                     buckets=_RUN_BUCKETS, registry=r)
        self.pickup_seconds = Histogram(
            "venturi_job_pickup_seconds", "Claim time minus visible time.", ["kind"],
            buckets=_LATENCY_BUCKETS, registry=r)
        self.in_flight = Gauge("venturi_jobs_in_flight", "Jobs held by this worker.", registry=r)
        self.queue_depth = Gauge("venturi_queue_depth", "Runnable pending jobs (sampled).",
                                 ["kind"], registry=r)
        self.oldest_runnable = Gauge(
            "venturi_queue_oldest_runnable_seconds",
            "Age of the oldest runnable job since it became visible (sampled).", ["kind"],
            registry=r)
        self.kind_limited = Counter(
            "venturi_kind_limited", "Times a claim found a kind held back (by: concurrency, "
            "rate, paused; docs/concepts/flow-control.md).", ["kind", "by"], registry=r)
        self.kind_limited_wait = Histogram(
            "venturi_kind_limited_wait_seconds",
            "How long a held-back kind waited for budget: from the claim that found it held "
            "back to its next claimed job.", ["kind"], buckets=_RUN_BUCKETS, registry=r)
        self.waker_reconnects = Counter("venturi_waker_reconnects",
                                        "LISTEN connection re-establishments.", registry=r)
        self.db_unavailable = Counter("venturi_db_unavailable",
                                      "Times a service lost the database.", registry=r)

    def for_kind(self, kind: str) -> KindMetrics:
        return KindMetrics(self, kind)


class QueueSampler:
    """Queue depth and lag for ``/metrics``, sampled every ``interval`` seconds so that a
    scrape costs no query."""

    def __init__(self, store: Store, metrics: WorkerMetrics, db: DatabaseHealth,
                 interval: float) -> None:
        self._store = store
        self._metrics = metrics
        self._db = db
        self._interval = interval

    async def run(self) -> None:
        m = self._metrics
        seen: set[str] = set()
        while True:
            snap = await self._db.retry("sampler", self._store.stats)
            kinds = set(snap.pending_by_kind) | set(snap.oldest_pending_age) | seen
            for kind in kinds:
                m.queue_depth.labels(kind).set(snap.pending_by_kind.get(kind, 0))
                age = snap.oldest_pending_age.get(kind)
                m.oldest_runnable.labels(kind).set(age.total_seconds() if age else 0)
            seen = kinds
            await anyio.sleep(self._interval)

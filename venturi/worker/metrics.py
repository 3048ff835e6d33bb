"""Prometheus metrics of one worker, on a registry of its own (docs/operations/metrics.md)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import cast

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ..store.base import Store
from .health import DatabaseHealth

_go_float = cast(Callable[[float], str], floatToGoString)  # the ``le`` label's spelling

_LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
                    60, 300)
_RUN_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600)


class HistogramChild:
    """One label value's histogram, counted in plain Python: observing is a bisect and
    two additions. ``prometheus_client``'s own ``Histogram`` takes a lock per bucket and
    per sum on every observation, which measured ≈ 7 % of a worker's CPU at a few
    thousand jobs a second (two observations per job; docs/operations/metrics.md).
    Observed from the worker's event loop only; a scrape from another thread reads a
    copy, consistent enough for a rate (a sum may lead its buckets by one job)."""

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        # bucket ``le=b`` counts amount <= b: the first bound not below amount
        self.counts[bisect_left(self._bounds, amount)] += 1
        self.sum += amount


class Histograms(Collector):
    """A histogram with one label, ``kind``: ``labels(kind)`` as ``prometheus_client``'s,
    exposed with the same name, buckets and samples (no ``_created``)."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self._name = name
        self._doc = documentation
        self._bounds = tuple(float(b) for b in buckets)
        self._les = [_go_float(b) for b in self._bounds] + ["+Inf"]
        self._children: dict[str, HistogramChild] = {}
        registry.register(self)

    def labels(self, kind: str) -> HistogramChild:
        child = self._children.get(kind)
        if child is None:
            child = self._children[kind] = HistogramChild(self._bounds)
        return child

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self._name, self._doc, labels=["kind"])

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._doc, labels=["kind"])
        for kind, child in list(self._children.items()):
            counts, total = list(child.counts), child.sum
            cumulative, buckets = 0, []
            for le, count in zip(self._les, counts, strict=True):
                cumulative += count
                buckets.append((le, float(cumulative)))
            family.add_metric([kind], buckets, total)
        yield family


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
    ``/metrics`` exposes. Per-job work here is a few dict lookups. One per worker: the
    histograms are counted without locks, for one event loop."""

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
        self.run_seconds = Histograms("venturi_job_run_seconds", "Handler run time.",
                                      _RUN_BUCKETS, r)
        self.pickup_seconds = Histograms("venturi_job_pickup_seconds",
                                         "Claim time minus visible time.", _LATENCY_BUCKETS, r)
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
        self.kind_limited_wait = Histograms(
            "venturi_kind_limited_wait_seconds",
            "How long a held-back kind waited for budget: from the claim that found it held "
            "back to its next claimed job.", _RUN_BUCKETS, r)
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

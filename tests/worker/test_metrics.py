"""The worker's lock-free histograms expose what prometheus_client's own would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from venturi.worker.metrics import _RUN_BUCKETS, WorkerMetrics

# on a bound, just above one, below the first, above the last, zero, repeated values
VALUES = [0.0, 0.0005, 0.001, 0.0010001, 0.003, 1, 1.0, 59.9, 60, 3600, 3600.5, 1e9, 0.02]


def _lines(registry: CollectorRegistry, name: str) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines()
            if name in line and "_created" not in line]


def test_histogram_exposition_matches_prometheus_client() -> None:
    ours = WorkerMetrics()
    theirs = CollectorRegistry()
    reference = Histogram("venturi_job_run_seconds", "Handler run time.", ["kind"],
                          buckets=_RUN_BUCKETS, registry=theirs)
    for i, value in enumerate(VALUES):
        kind = "a" if i % 3 else "b"
        ours.run_seconds.labels(kind).observe(value)
        reference.labels(kind).observe(value)
    got = _lines(ours.registry, "venturi_job_run_seconds")
    assert got == _lines(theirs, "venturi_job_run_seconds")
    assert 'venturi_job_run_seconds_bucket{kind="a",le="+Inf"}' in "\n".join(got)


def test_histogram_child_is_the_same_per_kind_and_counts_each_bucket_once() -> None:
    m = WorkerMetrics()
    child = m.pickup_seconds.labels("k")
    assert m.pickup_seconds.labels("k") is child
    for value in (0.001, 0.0011, 400.0):
        child.observe(value)
    # le=0.001 holds the first, le=0.002 the second, +Inf the third (above 300)
    assert child.counts[0] == 1 and child.counts[1] == 1 and child.counts[-1] == 1
    assert sum(child.counts) == 3 and child.sum == 400.0021


def test_registry_refuses_a_second_collector_of_the_same_name() -> None:
    m = WorkerMetrics()
    try:
        Histogram("venturi_job_pickup_seconds", "dup", ["kind"], registry=m.registry)
    except ValueError as exc:
        assert "Duplicated" in str(exc)
    else:
        raise AssertionError("the registry took a duplicate of venturi_job_pickup_seconds")

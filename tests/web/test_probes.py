"""/healthz, /readyz and /metrics on the web stack answer as the worker's own
server does (tests/worker/test_http.py), from a real worker Health and metrics."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.web.conftest import serve
from venturi import Queue
from venturi.web import create_app, create_probe_app
from venturi.worker import Health
from venturi.worker.metrics import WorkerMetrics

pytestmark = pytest.mark.timeout(60)


def _healthy() -> Health:
    h = Health()
    h.alive = h.db_ok = h.listening = True
    return h


@pytest.mark.parametrize("with_dashboard", [False, True])
async def test_probes_report_the_health_they_are_given(web_queue: Queue,
                                                       with_dashboard: bool) -> None:
    health = _healthy()
    metrics = WorkerMetrics()
    metrics.completed.labels("embed").inc(3)
    app = (create_app(web_queue, health=health, metrics=metrics.registry) if with_dashboard
           else create_probe_app(health=health, metrics=metrics.registry))
    async with serve(app) as served, served.client() as http:
        r = await http.get("/healthz")
        assert (r.status_code, r.text) == (200, "ok\n")
        r = await http.get("/readyz")
        assert (r.status_code, r.text) == (200, "ready\n")

        health.draining = True
        r = await http.get("/readyz")
        assert (r.status_code, r.text) == (503, "draining\n")
        assert (await http.get("/healthz")).status_code == 200  # alive while draining

        health.db_ok = False
        health.listening = False
        health.alive = False
        r = await http.get("/readyz")
        assert r.status_code == 503
        assert r.text == "database unreachable; listen inactive; draining; not running\n"
        r = await http.get("/healthz")
        assert (r.status_code, r.text) == (503, "not alive\n")

        r = await http.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        done = {tuple(s.labels.items()): s.value
                for fam in text_string_to_metric_families(r.text) for s in fam.samples
                if s.name == "venturi_jobs_completed_total"}
        assert done == {(("kind", "embed"),): 3}

        r = await http.post("/metrics")
        assert (r.status_code, r.text) == (405, "method not allowed\n")
        r = await http.head("/healthz")
        assert r.status_code == 503 and r.content == b""

        r = await http.get("/nope")
        assert r.status_code == 404
        if not with_dashboard:
            assert r.text == "not found\n"


async def test_probes_are_absent_unless_given(web_queue: Queue) -> None:
    async with serve(create_app(web_queue)) as served, served.client() as http:
        for path in ("/healthz", "/readyz", "/metrics"):
            assert (await http.get(path)).status_code == 404

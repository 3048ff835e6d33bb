"""Read commands end to end: migrate, stats, jobs, job, workers."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid

import venturi
from tests.cli_app_tasks import Echo, Reject
from tests.helpers import MIGRATIONS
from tests.tracing.recording import Recorded
from venturi.store.base import Action

from .conftest import APP, Cli, claim, one_line_error, settle


def test_migrate_prints_what_it_applied_then_nothing(bare: Cli) -> None:
    first = bare.ok("migrate")
    assert first.stdout.splitlines() == [f"applied {name}" for name in MIGRATIONS]
    second = bare.ok("migrate")
    assert "applied" not in second.stdout
    assert "up to date" in second.stdout
    doc = json.loads(bare.ok("migrate", "--json").stdout)
    assert doc == {"prefix": bare.prefix, "applied": []}


def test_stats_counts_per_kind_as_table_and_json(cli: Cli) -> None:
    async def setup(q: venturi.Queue) -> None:
        await q.enqueue(Echo(uri="file:///a"))
        await q.enqueue(Echo(uri="file:///b"))
        await q.enqueue(Echo(uri="file:///c"), delay=dt.timedelta(hours=1))
        await q.enqueue(Reject())
        await q.enqueue(Reject())
        await settle(q, "cli.reject", Action.KILL, "unsupported-format", limit=1)
        await claim(q, "cli.reject")

    cli.do(setup)
    doc = json.loads(cli.ok("stats", "--json").stdout)
    assert list(doc) == ["at", "kinds", "totals"]
    by_kind = {row["kind"]: row for row in doc["kinds"]}
    echo = by_kind["cli.echo"]
    assert (echo["runnable"], echo["scheduled"], echo["claimed"], echo["dead"]) == (2, 1, 0, 0)
    assert 0 <= echo["oldest_runnable_age_seconds"] < 60
    reject = by_kind["cli.reject"]
    assert (reject["runnable"], reject["claimed"], reject["dead"]) == (0, 1, 1)
    assert reject["oldest_runnable_age_seconds"] is None
    assert doc["totals"] == {"pending": 3, "claimed": 1, "completed": 0, "dead": 1}

    text = cli.ok("stats").stdout.splitlines()
    assert text[0].split() == ["KIND", "RUNNABLE", "SCHEDULED", "CLAIMED", "DEAD", "OLDEST",
                               "RUNNABLE", "HELD", "BY"]
    echo_line = next(line for line in text if line.startswith("cli.echo"))
    assert echo_line.split()[:5] == ["cli.echo", "2", "1", "0", "0"]
    assert echo_line.split()[5].endswith("s")  # an age like "0s"
    assert echo_line.split()[6] == "-"  # nothing holds it back (docs/concepts/flow-control.md)
    assert text[-1] == "total: 3 pending, 1 claimed, 0 completed, 1 dead"
    # Columns line up: each header starts where its values start.
    header = text[0]
    assert header.index("SCHEDULED") + len("SCHEDULED") == echo_line.index(" 1 ") + 2


def test_stats_watch_refreshes_a_bounded_number_of_times(cli: Cli) -> None:
    cli.do(lambda q: q.enqueue(Echo(uri="file:///w")))
    text = cli.ok("stats", "--watch", "--interval", "0.05s", "--iterations", "3").stdout
    assert text.count("venturi stats") == 3
    assert text.count("total: 1 pending") == 3
    lines = cli.ok("stats", "--watch", "--interval", "10ms", "--iterations", "2", "--json")
    docs = [json.loads(line) for line in lines.stdout.splitlines()]
    assert len(docs) == 2 and all(d["totals"]["pending"] == 1 for d in docs)
    one_line_error(cli("stats", "--watch", "--interval", "soon"), code=2)


def test_jobs_pages_newest_first_with_a_cursor(cli: Cli) -> None:
    async def setup(q: venturi.Queue) -> list[str]:
        return [str((await q.enqueue(Echo(uri=f"file:///{i}"))).id) for i in range(5)]

    ids = cli.do(setup)
    first = json.loads(cli.ok("jobs", "--limit", "2", "--json").stdout)
    assert list(first) == ["jobs", "next_cursor"]
    assert [j["id"] for j in first["jobs"]] == ids[::-1][:2]
    assert first["next_cursor"] == ids[3]
    job = first["jobs"][0]
    assert list(job) == [
        "id", "kind", "status", "priority", "priority_name", "subject", "dedup_key", "payload",
        "carry", "periodic", "run_count", "failure_count", "max_failures", "created_at",
        "visible_at", "claimed_by", "claim_expires_at", "finished_at", "trace_id", "result",
        "waiting",
    ]
    assert job["payload"] == {"uri": "file:///4", "words": 1}
    assert (job["status"], job["priority_name"], job["subject"]) == ("pending", "normal",
                                                                     "file:///4")
    dt.datetime.fromisoformat(job["created_at"])

    second = json.loads(cli.ok("jobs", "--limit", "2", "--before", first["next_cursor"],
                               "--json").stdout)
    assert [j["id"] for j in second["jobs"]] == ids[::-1][2:4]
    last = json.loads(cli.ok("jobs", "--limit", "2", "--before", second["next_cursor"],
                             "--json").stdout)
    assert [j["id"] for j in last["jobs"]] == [ids[0]]
    assert last["next_cursor"] is None

    text = cli.ok("jobs", "--limit", "2").stdout.splitlines()
    assert text[0].split()[:3] == ["ID", "KIND", "STATUS"]
    assert text[1].startswith(ids[4])
    assert "just now" in text[1] or "s ago" in text[1]
    assert text[-1] == f"next page: --before {ids[3]}"
    assert "next page" not in cli.ok("jobs", "--limit", "10").stdout


def test_jobs_filters_by_kind_status_and_finish_time(cli: Cli) -> None:
    async def setup(q: venturi.Queue) -> None:
        await q.enqueue(Echo(uri="file:///x"))
        await q.enqueue(Reject())
        await q.enqueue(Reject())
        await settle(q, "cli.reject", Action.KILL, "unsupported-format", limit=1)

    cli.do(setup)

    def kinds(*args: str) -> list[tuple[str, str]]:
        doc = json.loads(cli.ok("jobs", "--json", *args).stdout)
        return [(j["kind"], j["status"]) for j in doc["jobs"]]

    assert kinds("--kind", "cli.echo") == [("cli.echo", "pending")]
    assert kinds("--status", "dead") == [("cli.reject", "dead")]
    assert kinds("--since", "1h") == [("cli.reject", "dead")]
    assert kinds("--kind", "cli.reject", "--status", "pending") == [("cli.reject", "pending")]
    assert "--since" in one_line_error(cli("jobs", "--since", "1x"), code=2)
    assert "--since" in one_line_error(cli("jobs", "--since", "1h", "--status", "pending"), 2)
    assert "--status" in one_line_error(cli("jobs", "--status", "sleeping"), code=2)
    assert "cursor" in one_line_error(cli("jobs", "--before", "not-a-cursor"))


def test_job_shows_the_row_and_its_whole_journal(cli: Cli) -> None:
    async def setup(q: venturi.Queue) -> str:
        job = await q.enqueue(Reject(reason="too-big"))
        await settle(q, "cli.reject", Action.KILL, "too-big")
        await q.retry(ids=[job.id])
        return str(job.id)

    id = cli.do(setup)
    doc = json.loads(cli.ok("job", id, "--json").stdout)
    assert list(doc) == ["job", "journal"]
    assert doc["job"]["id"] == id and doc["job"]["status"] == "pending"
    assert [(e["run_no"], e["outcome"], e["note"]) for e in doc["journal"]] == [
        (1, "dead", "too-big"), (1, "redriven", doc["journal"][1]["note"])]
    assert list(doc["journal"][0]) == ["id", "run_no", "outcome", "recorded_at", "note",
                                       "attachment"]

    text = cli.ok("job", id).stdout
    assert f"id             {id}" in text
    assert "payload        {\"reason\":\"too-big\"}" in text
    assert "journal (2 entries)" in text
    journal = text.split("journal (2 entries)")[1].strip().splitlines()
    assert journal[0].split() == ["RUN", "OUTCOME", "RECORDED", "NOTE", "ATTACHMENT"]
    assert journal[1].split()[:2] == ["1", "dead"] and "too-big" in journal[1]
    assert journal[2].split()[:2] == ["1", "redriven"]
    assert "trace id       -" in text and doc["job"]["trace_id"] is None  # not traced


def test_job_shows_the_trace_that_enqueued_it(cli: Cli, spans: Recorded) -> None:
    id = cli.do(lambda q: q.enqueue(Echo(uri="file:///traced"))).id
    (send,) = spans.named("send cli.echo")
    assert json.loads(cli.ok("job", str(id), "--json").stdout)["job"]["trace_id"] == send[
        "trace_id"]
    assert f"trace id       {send['trace_id']}" in cli.ok("job", str(id)).stdout


def test_job_unknown_or_malformed_id_is_one_line(cli: Cli) -> None:
    missing = str(uuid.uuid4())
    assert f"unknown job id {missing}" in one_line_error(cli("job", missing))
    assert "not a UUID" in one_line_error(cli("job", "nope"))


def test_workers_lists_heartbeats_with_relative_times(cli: Cli) -> None:
    now = dt.datetime.now(dt.UTC)

    async def setup(q: venturi.Queue) -> None:
        await q.store.heartbeat(venturi.WorkerInfo(
            name="box:41", boot_id="b1", host="box", pid=41, kinds=["cli.echo", "cli.reject"],
            concurrency=8, in_flight=3, started_at=now - dt.timedelta(minutes=5),
            last_seen=now))

    cli.do(setup)
    text = cli.ok("workers").stdout.splitlines()
    assert text[0].split() == ["NAME", "HOST", "PID", "KINDS", "CONCURRENCY", "IN-FLIGHT",
                               "STARTED", "HEARTBEAT", "STATE"]
    row = text[1]
    assert row.split()[:6] == ["box:41", "box", "41", "cli.echo,cli.reject", "8", "3"]
    assert "ago" in row and row.rstrip().endswith("running")
    doc = json.loads(cli.ok("workers", "--json").stdout)
    (w,) = doc["workers"]
    assert list(w) == ["name", "boot_id", "host", "pid", "kinds", "concurrency", "in_flight",
                       "draining", "started_at", "last_heartbeat"]
    assert (w["name"], w["pid"], w["in_flight"], w["draining"]) == ("box:41", 41, 3, False)


def test_global_options_work_before_or_after_the_command(cli: Cli) -> None:
    cli.do(lambda q: q.enqueue(Echo(uri="file:///g")))
    no_env = {"VENTURI_DSN": None, "VENTURI_PREFIX": None}
    placements = [
        ["--dsn", cli.dsn, "--prefix", cli.prefix, "--json", "stats"],
        ["stats", "--dsn", cli.dsn, "--prefix", cli.prefix, "--json"],
        ["--json", "--dsn", cli.dsn, "stats", "--prefix", cli.prefix],
    ]
    for args in placements:
        result = cli(*args, env=no_env)
        assert result.exit_code == 0, (args, result.output)
        assert json.loads(result.stdout)["totals"]["pending"] == 1
    # An explicit option beats the environment, on either side of the command.
    bogus = {"VENTURI_DSN": "postgresql://nobody@127.0.0.1:1/none", "VENTURI_PREFIX": "other_"}
    for args in (["--dsn", cli.dsn, "--prefix", cli.prefix, "stats"],
                 ["stats", "--dsn", cli.dsn, "--prefix", cli.prefix]):
        result = cli(*args, env=bogus)
        assert result.exit_code == 0, result.output
        assert "total: 1 pending" in result.stdout
    # The app module can come from VENTURI_APP too.
    result = cli("enqueue", "cli.echo", "--payload", '{"uri": "file:///e"}',
                 env={"VENTURI_APP": APP})
    assert result.exit_code == 0, result.output
    assert os.environ.get("VENTURI_APP") is None


def test_version_and_help() -> None:
    from typer.testing import CliRunner
    from venturi.cli import app

    runner = CliRunner()
    assert runner.invoke(app, ["--version"]).stdout.strip() == f"venturi {venturi.__version__}"
    text = runner.invoke(app, ["--help"]).stdout
    for command in ("worker", "migrate", "stats", "jobs", "job", "cancel", "retry", "cleanup",
                    "drain", "workers", "enqueue"):
        assert f" {command} " in text, command


def test_colour_and_refresh_in_place_only_on_a_terminal(cli: Cli) -> None:
    import pty
    import subprocess

    from .conftest import ROOT, venturi_script

    cli.do(lambda q: q.enqueue(Echo(uri="file:///tty")))
    plain = cli.ok("stats", "--watch", "--interval", "10ms", "--iterations", "2").stdout
    assert "\x1b" not in plain

    main, child = pty.openpty()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    environ.update(VENTURI_DSN=cli.dsn, VENTURI_PREFIX=cli.prefix, TERM="xterm")
    proc = subprocess.Popen(
        [venturi_script(), "stats", "--watch", "--interval", "10ms", "--iterations", "2"],
        stdin=child, stdout=child, stderr=child, cwd=ROOT, env=environ)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert proc.wait(timeout=30) == 0
    shown = b"".join(chunks).decode()
    assert shown.count("\x1b[H\x1b[2J") == 2  # redrawn in place, once per refresh
    assert "\x1b[1m" in shown  # bold headers on a terminal
    assert "Traceback" not in shown



def test_pooler_flag_is_a_global_switch(cli: Cli) -> None:
    """--pooler (statement cache off, for PgBouncer in transaction mode) goes before the
    subcommand like --dsn, or comes from VENTURI_POOLER."""
    assert "total: 0 pending" in cli.ok("--pooler", "stats").stdout
    result = cli("stats", env={"VENTURI_POOLER": "1"})
    assert result.exit_code == 0 and "total: 0 pending" in result.stdout

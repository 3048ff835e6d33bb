"""Commands that change the queue: enqueue, cancel, retry, cleanup."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import venturi
from tests.cli_app_tasks import Echo, Reject
from venturi.store.base import Action

from .conftest import APP, Cli, one_line_error, settle


def _count(cli: Cli, **kw: object) -> int:
    return cli.do(lambda q: q.count(**kw))  # type: ignore[arg-type]


def test_enqueue_checks_the_payload_and_inserts(cli: Cli) -> None:
    out = cli.ok("enqueue", "cli.echo", "--app", APP, "--payload", '{"uri": "file:///a"}')
    assert out.stdout.startswith("enqueued ") and "(cli.echo)" in out.stdout
    id = out.stdout.split()[1]
    job = cli.do(lambda q: q.job(id))
    assert job is not None
    assert (job.kind, job.payload, job.priority) == ("cli.echo", {"uri": "file:///a", "words": 1},
                                                     int(venturi.Priority.NORMAL))

    doc = json.loads(cli.ok("enqueue", "cli.echo", "--app", APP, "--payload",
                            '{"uri": "file:///b", "words": 3}', "--delay", "5m",
                            "--priority", "high", "--json").stdout)
    assert list(doc) == ["id", "kind", "merged"] and doc["merged"] is False
    later = cli.do(lambda q: q.job(doc["id"]))
    assert later is not None and later.priority == int(venturi.Priority.HIGH)
    wait = later.visible_at - later.created_at
    assert dt.timedelta(minutes=4, seconds=59) <= wait <= dt.timedelta(minutes=5, seconds=1)
    stats = json.loads(cli.ok("stats", "--json").stdout)
    assert stats["kinds"][0]["scheduled"] == 1

    # A task with defaults only needs no payload.
    assert cli.ok("enqueue", "cli.reject", "--app", APP).stdout.startswith("enqueued ")


def test_enqueue_refuses_a_payload_that_does_not_fit(cli: Cli) -> None:
    def refused(payload: str, code: int = 1) -> str:
        return one_line_error(cli("enqueue", "cli.echo", "--app", APP, "--payload", payload),
                              code)

    assert "unknown field(s) ['url']" in refused('{"url": "file:///a"}')
    assert "field 'words' has the wrong type" in refused('{"uri": "file:///a", "words": "3"}')
    assert "missing field(s) ['uri']" in refused("{}")
    assert "--payload: not valid JSON" in refused("{uri: 1}", code=2)
    assert "--payload: must be a JSON object" in refused("[1]", code=2)
    assert _count(cli) == 0  # nothing was inserted


def test_enqueue_unknown_kind_bad_module_and_bad_options(cli: Cli) -> None:
    line = one_line_error(cli("enqueue", "cli.nope", "--app", APP))
    assert "unknown task kind 'cli.nope'" in line and "cli.echo, cli.refresh, cli.reject" in line
    line = one_line_error(cli("enqueue", "cli.echo", "--app", "tests.no_such_module"))
    assert "--app tests.no_such_module: no module named 'tests.no_such_module'" in line
    line = one_line_error(cli("enqueue", "cli.echo", "--app", "tests.conftest"))
    assert "defines no venturi.Task subclasses" in line
    assert "--delay" in one_line_error(cli("enqueue", "cli.echo", "--app", APP, "--payload",
                                           '{"uri": "u"}', "--delay", "later"), code=2)
    assert "--priority" in one_line_error(cli("enqueue", "cli.echo", "--app", APP, "--payload",
                                              '{"uri": "u"}', "--priority", "urgent"), code=2)
    missing_app = cli("enqueue", "cli.echo", "--payload", '{"uri": "u"}')
    assert missing_app.exit_code == 2 and "--app" in missing_app.output
    assert _count(cli) == 0


def test_cancel_by_id_and_by_subject_with_confirmation(cli: Cli) -> None:
    async def setup(q: venturi.Queue) -> list[str]:
        ids = [str((await q.enqueue(Echo(uri=f"file:///docs/{i}"))).id) for i in range(3)]
        ids.append(str((await q.enqueue(Echo(uri="file:///other"))).id))
        return ids

    ids = cli.do(setup)
    # One job: no question asked.
    assert cli.ok("cancel", ids[0]).stdout.strip() == "removed 1 job"
    # Two would go: asked; "no" removes nothing and fails.
    refused = cli("cancel", "--subject", "file:///docs", input="n\n")
    assert refused.exit_code == 1 and "Cancel 2 jobs in subtree file:///docs?" in refused.stderr
    assert "nothing cancelled" in refused.stderr
    assert _count(cli, subject="file:///docs") == 2
    unanswered = cli("cancel", "--subject", "file:///docs", input="")
    assert unanswered.exit_code == 1
    assert unanswered.stderr.splitlines()[-1].startswith("venturi: error: not confirmed")
    assert _count(cli, subject="file:///docs") == 2
    accepted = cli("cancel", "--subject", "file:///docs/", input="y\n")
    # (the runner echoes the typed answer onto stdout, as a terminal would)
    assert accepted.exit_code == 0 and accepted.stdout.splitlines()[-1] == "removed 2 jobs"
    assert _count(cli) == 1
    assert json.loads(cli.ok("cancel", "--subject", "file:///none", "--json").stdout) == {
        "removed": 0}


def test_cancel_many_ids_with_yes_and_its_usage_errors(cli: Cli) -> None:
    ids = cli.do(lambda q: q.enqueue_many([Echo(uri=f"file:///{i}") for i in range(3)]))
    unknown = str(uuid.uuid4())
    line = one_line_error(cli("cancel", str(ids[0]), unknown, "--yes"))
    assert f"unknown job id {unknown}" in line and _count(cli) == 3
    doc = json.loads(cli.ok("cancel", "--yes", "--json", *map(str, ids[:2])).stdout)
    assert doc == {"removed": 2}
    one_line_error(cli("cancel"), code=2)
    one_line_error(cli("cancel", str(ids[2]), "--subject", "file:///2"), code=2)
    assert "empty" in one_line_error(cli("cancel", "--subject", "///"), code=2)
    assert _count(cli) == 1


def test_retry_redrives_dead_jobs_by_id_and_by_kind(cli: Cli) -> None:
    async def setup(q: venturi.Queue) -> tuple[list[str], str]:
        dead = [str((await q.enqueue(Reject())).id) for _ in range(3)]
        await settle(q, "cli.reject", Action.KILL, "unsupported-format")
        alive = str((await q.enqueue(Echo(uri="file:///live"))).id)
        return dead, alive

    dead, alive = cli.do(setup)
    result = cli("retry", dead[0], alive)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "retried 1 job"
    assert f"skipped {alive}: it is pending, not dead" in result.stderr
    journal = cli.do(lambda q: q.journal(dead[0]))
    assert [e.outcome for e in journal] == [venturi.Outcome.DEAD, venturi.Outcome.REDRIVEN]
    job = cli.do(lambda q: q.job(dead[0]))
    assert job is not None and job.status is venturi.Status.PENDING and job.failure_count == 0

    doc = json.loads(cli.ok("retry", "--kind", "cli.reject", "--status", "dead",
                            "--json").stdout)
    assert doc == {"retried": 2}
    assert _count(cli, kind="cli.reject", statuses=["dead"]) == 0
    assert cli.ok("retry", "--kind", "cli.reject").stdout.strip() == "retried 0 jobs"

    assert "--status" in one_line_error(cli("retry", "--kind", "cli.reject", "--status",
                                            "pending"), code=2)
    one_line_error(cli("retry"), code=2)
    missing = str(uuid.uuid4())
    assert f"unknown job id {missing}" in one_line_error(cli("retry", missing))


def test_cleanup_deletes_finished_jobs_older_than_the_cutoff(cli: Cli) -> None:
    async def setup(q: venturi.Queue) -> None:
        await q.enqueue_many([Echo(uri="file:///1"), Echo(uri="file:///2")])
        await settle(q, "cli.echo", Action.COMPLETE)
        await q.enqueue(Reject())
        await settle(q, "cli.reject", Action.KILL, "no")
        await q.enqueue(Echo(uri="file:///pending"))

    cli.do(setup)
    assert cli.ok("cleanup", "--older-than", "7d").stdout.startswith("removed 0 jobs finished")
    doc = json.loads(cli.ok("cleanup", "--older-than", "0s", "--status", "completed",
                            "--json").stdout)
    assert list(doc) == ["removed", "finished_before"] and doc["removed"] == 2
    assert _count(cli, statuses=["dead"]) == 1
    text = cli.ok("cleanup", "--older-than", "0s", "--kind", "cli.reject").stdout
    assert text.startswith("removed 1 job finished before ")
    assert _count(cli) == 1  # the pending job is never cleaned up

    assert "--older-than" in one_line_error(cli("cleanup", "--older-than", "a week"), code=2)
    assert "--status" in one_line_error(cli("cleanup", "--older-than", "1d", "--status",
                                            "pending"), code=2)
    assert cli("cleanup").exit_code == 2


def test_enqueue_reports_a_dedup_merge(cli: Cli) -> None:
    first = json.loads(cli.ok("enqueue", "cli.refresh", "--app", APP, "--payload",
                              '{"uri": "file:///r"}', "--json").stdout)
    assert first["merged"] is False
    second = cli.ok("enqueue", "cli.refresh", "--app", APP, "--payload", '{"uri": "file:///r"}')
    assert second.stdout.strip() == f"merged into pending job {first['id']} (cli.refresh)"
    assert _count(cli) == 1


def test_cancel_workflow_removes_its_unfinished_steps_only(cli: Cli) -> None:
    async def setup(q: venturi.Queue) -> tuple[str, str]:
        wf = venturi.Workflow("doc")
        first = wf.add(Echo(uri="file:///wf/1"), name="embed")
        summarize = wf.add(Echo(uri="file:///wf/2"), after=[first], name="summarize")
        wf.add(Echo(uri="file:///wf/3"), after=[summarize], name="index")
        id = await q.enqueue_workflow(wf)
        await settle(q, "cli.echo", Action.COMPLETE)  # embed (the only step visible)
        await q.enqueue(Echo(uri="file:///other"))
        return str(id), str(first.id)

    id, first = cli.do(setup)
    refused = cli("cancel", "--workflow", id, input="n\n")
    assert refused.exit_code == 1 and f"Cancel 2 jobs of workflow {id}?" in refused.stderr
    assert _count(cli) == 4
    doc = json.loads(cli.ok("cancel", "--workflow", id, "--yes", "--json").stdout)
    assert doc == {"removed": 2}
    state = cli.do(lambda q: q.workflow(id))
    assert [s.status for s in state.steps] == [venturi.Status.COMPLETED, None, None]
    assert state.steps[0].id == uuid.UUID(first)
    assert _count(cli) == 2  # the completed step and the job outside the workflow
    # Nothing left to cancel: no question, nothing removed.
    assert cli.ok("cancel", "--workflow", id).stdout.strip() == "removed 0 jobs"

    unknown = str(uuid.uuid4())
    line = one_line_error(cli("cancel", "--workflow", unknown, "--json"))
    assert f"unknown workflow id {unknown}" in line and "nothing changed" in line
    assert "not a UUID" in one_line_error(cli("cancel", "--workflow", "wf-1"), code=2)
    one_line_error(cli("cancel", "--workflow", id, "--subject", "file:///wf"), code=2)
    one_line_error(cli("cancel", first, "--workflow", id), code=2)
    assert _count(cli) == 2

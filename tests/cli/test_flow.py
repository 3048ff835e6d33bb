"""Flow control commands: kinds, pause, resume, limits (docs/concepts/flow-control.md)."""

from __future__ import annotations

import json

from tests.cli_app_tasks import Echo

from .conftest import Cli, one_line_error


def test_pause_resume_and_kinds(cli: Cli) -> None:
    # Nothing enqueued, declared or controlled: nothing to list, and the message says so.
    assert cli.ok("kinds").stdout == (
        "no kinds yet: none declared by a worker, paused, limited, pending or claimed\n")
    cli.do(lambda q: q.enqueue(Echo(uri="file:///a")))
    # No worker declared the kind yet: its pending job shows it.
    pending = json.loads(cli.ok("kinds", "--json").stdout)["kinds"]
    assert [(k["kind"], k["pending"], k["paused"], k["held"]) for k in pending] == [
        ("cli.echo", 1, False, None)]
    assert cli.ok("pause", "cli.echo", "other").stdout == "paused cli.echo\npaused other\n"
    doc = json.loads(cli.ok("kinds", "--json").stdout)
    rows = {k["kind"]: k for k in doc["kinds"]}
    assert rows["cli.echo"]["paused"] and rows["cli.echo"]["held"] == "paused"
    assert rows["cli.echo"]["pending"] == 1
    assert list(rows["cli.echo"]) == [
        "kind", "paused", "concurrency", "concurrency_source", "rate", "rate_source",
        "pending", "claimed", "started_in_window", "held"]
    table = cli.ok("kinds").stdout
    assert table.splitlines()[0].split() == [
        "KIND", "PAUSED", "CONCURRENCY", "RATE", "PENDING", "CLAIMED", "HELD", "BY"]
    assert "paused" in table.splitlines()[1]

    assert json.loads(cli.ok("resume", "cli.echo", "--json").stdout) == {"resumed": ["cli.echo"]}
    states = {k.kind: k for k in cli.do(lambda q: q.kinds())}
    assert not states["cli.echo"].paused and states["other"].paused


def test_limits_set_and_clear(cli: Cli) -> None:
    out = cli.ok("limits", "cli.echo", "--concurrency", "3", "--rate", "10/s").stdout
    assert out == "cli.echo: concurrency 3 (operator), rate 10/s (operator)\n"
    doc = json.loads(cli.ok("limits", "cli.echo", "--rate", "100/m", "--json").stdout)
    assert (doc["concurrency"], doc["rate"], doc["rate_source"]) == (3, "100/m", "operator")
    cleared = json.loads(cli.ok("limits", "cli.echo", "--clear", "--json").stdout)
    assert (cleared["concurrency"], cleared["rate"]) == (None, None)


def test_bad_flow_arguments_are_one_line_errors(cli: Cli) -> None:
    for args in (["limits", "cli.echo"], ["limits", "cli.echo", "--rate", "10/day"],
                 ["limits", "cli.echo", "--concurrency", "0"],
                 ["limits", "cli.echo", "--clear", "--concurrency", "2"],
                 ["pause", " spaced "]):
        result = cli(*args)
        assert result.exit_code == 2, (args, result.output)
        one_line_error(result, code=2)

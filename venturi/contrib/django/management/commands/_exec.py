"""Management commands that are the ``venturi`` CLI: this process becomes it.

The library never imports the CLI (tests/cli/test_layering.py), and a worker is
best the process its supervisor started (signals, exit codes, pid), so the command
replaces the ``manage.py`` process with ``venturi ...`` on the same interpreter,
with the project's directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

CLI = "import sys; from venturi.cli import main; sys.argv[0] = {prog!r}; sys.exit(main())"


def become_cli(prog: str, args: list[str], env: Mapping[str, str] | None = None) -> None:
    """Run ``venturi *args`` in place of this process; never returns."""
    environ = dict(os.environ)
    environ.update(env or {})
    project = os.path.dirname(os.path.abspath(sys.argv[0]))
    paths = [p for p in (project, environ.get("PYTHONPATH")) if p]
    environ["PYTHONPATH"] = os.pathsep.join(paths)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-c", CLI.format(prog=prog), *args], environ)

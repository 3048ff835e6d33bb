"""An ``--app`` module whose import waits for the test's go-ahead: the test knows the
``venturi worker`` process is importing the application while it is held here.

``VENTURI_TEST_GATE`` names a directory: the module creates ``importing`` in it, then
waits (at most a minute) until the test creates ``go``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.cli_app_tasks import Echo

__all__ = ["Echo"]

_gate = Path(os.environ["VENTURI_TEST_GATE"])
(_gate / "importing").touch()
_deadline = time.monotonic() + 60
while not (_gate / "go").exists():
    if time.monotonic() > _deadline:
        raise SystemExit("tests.cli.gated_app: the test never opened the gate")
    time.sleep(0.01)

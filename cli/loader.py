"""``--app MODULE``: import the user's task module and find its tasks."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

import venturi
from venturi.task import registered

from .session import fail


def import_app(name: str) -> ModuleType:
    """Import ``name`` the way ``python -m`` would find it from the current directory.

    A console script does not put the working directory on ``sys.path``; an
    operator running ``venturi worker --app myproject.tasks`` from the project
    expects it to be there, as uvicorn and celery do.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except venturi.VenturiError as exc:  # a malformed Task class, for one
        fail(f"--app {name}: {exc}")
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            fail(f"--app {name}: no module named {exc.name!r} (is it on PYTHONPATH?)")
        fail(f"--app {name}: importing it failed: ModuleNotFoundError: {exc}")
    except SyntaxError as exc:
        fail(f"--app {name}: syntax error in {exc.filename} line {exc.lineno}: {exc.msg}")
    except Exception as exc:
        fail(f"--app {name}: importing it failed: {type(exc).__name__}: {exc}")


def app_tasks(name: str) -> dict[str, type[venturi.Task]]:
    """The tasks ``name`` defines or imports, by kind (it may be a package: tasks
    defined in its submodules count too). No tasks at all is an error."""
    module = import_app(name)
    exported = {id(v) for v in vars(module).values()}
    tasks = {
        kind: cls for kind, cls in sorted(registered().items())
        if cls.__module__ == module.__name__
        or cls.__module__.startswith(module.__name__ + ".")
        or id(cls) in exported
    }
    if not tasks:
        fail(f"--app {name}: the module defines no venturi.Task subclasses")
    return tasks


def pick(tasks: dict[str, type[venturi.Task]], kind: str) -> type[venturi.Task]:
    """The task for ``kind``, or one line naming the kinds the module does define."""
    try:
        return tasks[kind]
    except KeyError:
        fail(str(venturi.UnknownKind(kind, list(tasks))))

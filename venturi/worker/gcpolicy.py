"""The garbage collector's young-generation threshold while workers run
(docs/operations/sizing.md, "Garbage collection").

CPython collects its youngest generation after every 700 net container allocations. A
worker allocates a few dozen per job (the claimed row, its record, the task, the
settlement) and holds hundreds of them in flight, so at a few thousand jobs a second it
collected a hundred and fifty times a second, each pass walking the jobs in flight, and
those collections promoted enough to set off a full one (≈ 50 ms with every slot stopped)
every second or two. A higher threshold lets those objects die by reference counting
first. It is process-wide: the first worker to start sets it, if the process's is lower;
the last to stop puts the process's back, unless someone else changed it meanwhile."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()  # workers may start and stop in threads of their own
_holders = 0
_saved: tuple[int, int, int] | None = None  # the process's thresholds before the first holder
_ours: int | None = None  # the young threshold the first holder set, or None: left alone


@contextlib.contextmanager
def young_threshold(threshold: int | None) -> Iterator[None]:
    """Hold the young generation's threshold at ``threshold`` or above while inside
    (None: leave the collector alone). A process whose threshold is already higher, or
    whose collector is off, is left as it is."""
    global _holders, _saved, _ours
    if threshold is None:
        yield
        return
    with _lock:
        if _holders == 0:
            _saved = gc.get_threshold()
            young, *older = _saved
            if gc.isenabled() and 0 < young < threshold:
                gc.set_threshold(threshold, *older)
                _ours = threshold
            else:
                _ours = None
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                if _ours is not None and _saved is not None and gc.get_threshold()[0] == _ours:
                    gc.set_threshold(*_saved)
                _saved = _ours = None

"""venturi's benchmark suite: ``python -m benchmarks run`` and ``python -m benchmarks explain``.

Every scenario measures venturi beside a raw asyncpg reference in the same run,
because on a shared machine only ratios taken side by side mean anything.
Scenarios register themselves in :data:`benchmarks.harness.SCENARIOS`.
"""

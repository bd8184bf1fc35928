"""Python's cyclic garbage collector held back while a fedrun process starts.

Importing torch and composing Hydra's config make a great many objects that live as long as the process. Under
CPython's default thresholds (700, 10, 10) the collector walks them again and again before a run's first round,
young and full collections alike, a part of every job's start that a sweep pays per job (``python
scripts/bench/startup_bench.py`` times the start). Nothing made then is garbage worth a pause, so the youngest
generation's threshold is raised from the command's start until the run is built (``hold_collector`` /
``release_collector``); the rounds then collect under the thresholds the process had.
"""

from __future__ import annotations

import gc

STARTUP_THRESHOLDS = (100_000, 10, 10)  # allocations less deallocations before a young collection; then as CPython's
_held: tuple[int, ...] | None = None  # the thresholds to give back


def hold_collector() -> None:
    """Raise the collector's thresholds for start-up (again after ``release_collector``: a sweep's next job)."""
    global _held
    if _held is None:
        _held = gc.get_threshold()
        gc.set_threshold(*STARTUP_THRESHOLDS)


def release_collector() -> None:
    """The thresholds the process had before ``hold_collector``; nothing where they were not raised (a script that
    runs experiments without the command)."""
    global _held
    if _held is not None:
        gc.set_threshold(*_held)
        _held = None

"""A command's process ends without the interpreter's own teardown.

Once torch is imported, CPython's shutdown (a last garbage collection over every object, then the objects of every
module freed one by one) takes a third of a second or more on a 2-core machine, after the command's work is done:
a cost every ``fedrun`` process pays, and every job a scheduler submits. The operating system frees an ending
process's memory at once, so a console script, when its ``main`` returns or exits, does what Python's shutdown does
that matters (shuts the executors' threads down and waits for the threads that are not daemons, runs the exit
handlers: logging's flush, W&B's, multiprocessing's) and flushes its output, then ends the process (``os._exit``)
with ``main``'s exit status.

Only the console scripts end this way: a script that calls ``fedrun.cli.main()`` itself (to register a part of its
own first) goes on after it as usual. An uncaught exception takes Python's usual way out (its traceback, then the
teardown).
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn


def ends_process(main: Callable[[], int | None]) -> Callable[[], NoReturn]:
    """``main`` (returning its exit status, or None for 0) as a console script's entry point that ends the process
    when it is done (see the module)."""

    @functools.wraps(main)
    def command() -> NoReturn:
        try:
            status = main()
        except SystemExit as e:
            status = e.code
        if status is not None and not isinstance(status, int):  # sys.exit("message"): printed, status 1
            print(status, file=sys.stderr)
            status = 1
        exit_now(status or 0)

    return command


def exit_now(status: int) -> NoReturn:
    """End the process with ``status`` after the parts of Python's shutdown that have an effect outside it."""
    threading._shutdown()  # as Python's shutdown does first: the threads' exit hooks (executors'), then the joins
    atexit._run_exitfuncs()  # in reverse order of registration, as at a normal exit
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be written to it
            pass
    os._exit(status)

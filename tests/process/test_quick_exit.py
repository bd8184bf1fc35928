"""The console script's way out (fedrun/process/quick_exit.py): the status, output, threads and exit handlers of a
normal exit, without the interpreter's teardown."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import atexit, os, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor
    from fedrun.process.quick_exit import ends_process

    class Freed:  # a module's object: the interpreter's teardown frees it, and its __del__ says so
        def __del__(self):
            os.write(1, b" teardown")

    held = Freed()
    pool = ThreadPoolExecutor(1)

    def late():
        time.sleep(0.2)
        print(" thread", end="")

    def main():
        print("work", end="")  # no newline: stays in the buffer of a pipe until flushed
        atexit.register(lambda: print(" atexit", end=""))
        threading.Thread(target=late).start()
        pool.submit(print, " pool", end="")  # the pool is left running: its module's exit hook stops it
        {end}

    {call}
""")


def _run(end: str, call: str = "ends_process(main)()") -> subprocess.CompletedProcess:
    code = SCRIPT.format(end=end, call=call)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def _said(stdout: str) -> tuple[str, set[str], str]:
    """The script's first word, the words of its threads (in either order) and the rest."""
    words = stdout.split()
    return words[0], set(words[1:3]), " ".join(words[3:])


@pytest.mark.parametrize("end, status", [("return None", 0), ("return 3", 3), ("sys.exit(2)", 2),
                                         ("sys.exit()", 0)])
def test_the_process_ends_with_mains_status_output_threads_and_exit_handlers_but_no_teardown(end, status):
    proc = _run(end)
    assert proc.returncode == status, proc.stderr
    # the threads finished (the executor's stopped by its exit hook) before the handlers ran, as Python does
    assert _said(proc.stdout) == ("work", {"thread", "pool"}, "atexit")
    assert proc.stderr == ""


def test_the_control_a_normal_exit_does_tear_the_interpreter_down():
    """Without the entry point, the same script's module object is freed at exit: the test above can see it."""
    proc = _run("return 0", call="sys.exit(main())")
    assert proc.returncode == 0, proc.stderr
    assert _said(proc.stdout) == ("work", {"thread", "pool"}, "atexit teardown")


def test_an_exit_with_a_message_prints_it_and_ends_with_status_1():
    proc = _run("sys.exit('no such dataset')")
    assert proc.returncode == 1
    assert proc.stderr.strip() == "no such dataset"
    assert _said(proc.stdout) == ("work", {"thread", "pool"}, "atexit")


def test_an_uncaught_exception_takes_pythons_way_out():
    proc = _run("raise ValueError('bad value')")
    assert proc.returncode == 1
    assert "ValueError: bad value" in proc.stderr
    assert _said(proc.stdout) == ("work", {"thread", "pool"}, "atexit teardown")

"""``fedrun <args>`` as a test runs it: in the test process by default, in a fresh interpreter when asked.

A fresh ``python -m fedrun.cli`` costs a test an interpreter's start, torch's and Hydra's imports and the data's load
before its first round (seconds on 2 cores); in the test process those are paid once per session. The in-process call
runs what the console script runs (``fedrun.cli.main``) with the command's surroundings set as a new process would
have them (``sys.argv``, the working directory, the environment) and gives back, after it, what a run changes in the
process it runs in and a later test would otherwise see: the logging configuration Hydra installs, the collector's
thresholds ``hold_collector`` raises, torch's thread count, the failed jobs a sweep lists. Hydra clears its own
globals (GlobalHydra, HydraConfig) at the end of each call.

Tests about the process itself (exit by signal, what a fresh process imports, stdout of a launcher's worker
processes) ask for ``fresh_process=True``; ``tests/test_cli_runner.py`` checks that both ways write the same run
files. ``fedrun_in_this_process`` does the same for library code that starts ``python -m fedrun.cli`` itself (a
script's job lists, ``fedrun-table``'s sweeps).
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

CLI_FILE = str(Path(__file__).resolve().parents[1] / "fedrun" / "cli.py")


def run_cli(*args: str, cwd: Path, env: dict | None = None, check: bool = True,
            fresh_process: bool = False) -> subprocess.CompletedProcess:
    """``fedrun <args>`` run in ``cwd`` with ``env`` added to the environment (and HYDRA_FULL_ERROR=0, as a user has
    it): its exit status, stdout and stderr. ``check``: a non-zero status fails the test with its stderr."""
    env = {"HYDRA_FULL_ERROR": "0", **(env or {})}
    run = _in_a_process if fresh_process else _in_this_process
    proc = run(list(args), Path(cwd), env)
    if check and proc.returncode != 0:
        raise AssertionError(f"fedrun {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def fedrun_in_this_process(monkeypatch, module) -> None:
    """``module``'s ``subprocess.run`` and ``subprocess.Popen`` of ``[sys.executable, "-m", "fedrun.cli", ...]`` run
    that command in the test process (its output passed on to the test's stdout and stderr, as a child's would be);
    every other command, and the rest of ``subprocess``, as they are."""
    monkeypatch.setattr(module, "subprocess", _RoutedSubprocess())


class _RoutedSubprocess:
    def __getattr__(self, name):
        return getattr(subprocess, name)

    @staticmethod
    def _fedrun(cmd, kwargs) -> subprocess.CompletedProcess | None:
        if list(cmd[:3]) != [sys.executable, "-m", "fedrun.cli"]:
            return None
        env = {k: v for k, v in (kwargs.get("env") or {}).items() if os.environ.get(k) != v}
        done = run_cli(*cmd[3:], cwd=Path(kwargs.get("cwd") or os.getcwd()), env=env, check=False)
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        return done

    def run(self, cmd, *args, **kwargs):
        done = self._fedrun(cmd, kwargs)
        return subprocess.run(cmd, *args, **kwargs) if done is None else done

    def Popen(self, cmd, *args, **kwargs):  # noqa: N802 (subprocess's name)
        done = self._fedrun(cmd, kwargs)
        return subprocess.Popen(cmd, *args, **kwargs) if done is None else _Ended(done.returncode)


class _Ended:
    """A Popen whose command has already run: its status at once."""

    def __init__(self, returncode: int):
        self.returncode = returncode

    def wait(self, timeout=None) -> int:
        return self.returncode

    def poll(self) -> int:
        return self.returncode


def _in_a_process(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedrun.cli", *args], cwd=cwd, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600)


def _in_this_process(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    from fedrun import cli
    from fedrun.process import startup
    from fedrun.rundir.sweeps import FAILED_JOBS

    out, err = io.StringIO(), io.StringIO()
    status = 0
    with _process_state_kept(), pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        patch.chdir(cwd)
        for key, value in env.items():
            patch.setenv(key, value)
        patch.setattr(sys, "argv", [CLI_FILE, *args])
        FAILED_JOBS.clear()
        try:
            cli.main()
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                status = e.code or 0
            else:  # sys.exit("message"): printed, status 1, as the console script does
                print(e.code, file=sys.stderr)
                status = 1
        finally:
            FAILED_JOBS.clear()
            startup.release_collector()
    return subprocess.CompletedProcess(["fedrun", *args], status, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _process_state_kept():
    """What a run sets process-wide, given back after it: the loggers' handlers and levels (Hydra's
    ``dictConfig`` replaces them, and its file handler on the run's log would stay open), the collector's thresholds,
    torch's thread count."""
    thresholds, threads = gc.get_threshold(), torch.get_num_threads()
    loggers = {name: logger for name, logger in logging.Logger.manager.loggerDict.items()
               if isinstance(logger, logging.Logger)}
    kept = {name: (logger.handlers[:], logger.level, logger.propagate, logger.disabled)
            for name, logger in [("", logging.root), *loggers.items()]}
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        torch.set_num_threads(threads)
        for name, logger in [("", logging.root), *logging.Logger.manager.loggerDict.items()]:
            if not isinstance(logger, logging.Logger):
                continue
            handlers, level, propagate, disabled = kept.get(name, ([], logging.NOTSET, True, False))
            for handler in logger.handlers:
                if handler not in handlers:
                    handler.close()
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate, logger.disabled = propagate, disabled

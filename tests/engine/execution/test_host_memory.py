"""hardware.host_memory: freed host blocks stay in the process (fedrun/engine/execution/host_memory.py)."""

import platform

import pytest

from fedrun.engine.run.simulation import Simulation

def test_keep_raises_glibcs_thresholds_once_and_only_when_asked(cfg_factory, monkeypatch):
    """host_memory=keep sets mallopt's mmap threshold to its 64-bit maximum and the trim threshold far above it
    (glibc's defaults move with the blocks freed, and a step's working set is handed back and page-faulted in
    again: results/bench); =system leaves the C library alone."""
    from fedrun.engine.execution import host_memory

    calls = []

    class Libc:
        def __init__(self, name):
            self.mallopt = self

        def __call__(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.setattr(host_memory.ctypes, "CDLL", Libc)
    monkeypatch.setattr(host_memory, "_kept", False)
    Simulation.from_config(cfg_factory("data=digits", "model=logreg", "hardware.host_memory=system"))
    assert calls == []
    Simulation.from_config(cfg_factory("data=digits", "model=logreg", "hardware.host_memory=keep"))
    Simulation.from_config(cfg_factory("data=digits", "model=logreg", "hardware.host_memory=keep"))
    assert calls == [(host_memory.M_MMAP_THRESHOLD, 32 * 2**20), (host_memory.M_TRIM_THRESHOLD, 2**30)]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_glibc_takes_the_thresholds():
    from fedrun.engine.execution.host_memory import keep_freed_memory

    assert keep_freed_memory()

"""A pytest plugin that fails a default-suite test taking longer than the budget, unless it is marked ``slow``.

The default suite stays within its minutes only while no test drifts into a long end-to-end run: a test whose setup
and call together take more than ``FEDRUN_TEST_BUDGET_S`` seconds (45 unless set; 0 turns the check off, as
``make coverage`` does, where tracing slows every test) fails with its time and the two ways out: make it smaller, or
mark it ``@pytest.mark.slow`` so that it runs with ``make test-slow``. A module- or session-scoped fixture's setup
counts toward the first test that uses it, so a shared run is budgeted once.
"""

from __future__ import annotations

import os

import pytest

DEFAULT_BUDGET_S = 45.0  # room for a slower machine and a second worker beside each test (docs/development.md)


def pytest_configure(config):
    """The budget, read once per session (a test that sets the variable for an inner pytest does not change it)."""
    config.stash[_BUDGET_S] = float(os.environ.get("FEDRUN_TEST_BUDGET_S", DEFAULT_BUDGET_S))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    limit = item.config.stash[_BUDGET_S]
    if limit <= 0 or item.get_closest_marker("slow") is not None:
        return
    if report.when == "setup":
        item.stash[_SETUP_S] = call.duration
        return
    if report.when != "call" or not report.passed:
        return
    took = item.stash.get(_SETUP_S, 0.0) + call.duration
    if took > limit:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} took {took:.1f} s (setup and call), over the default suite's budget of "
                           f"{limit:g} s a test (FEDRUN_TEST_BUDGET_S). Make it smaller (docs/development.md says "
                           f"how), or mark it @pytest.mark.slow so that `make test-slow` runs it")


_BUDGET_S = pytest.StashKey[float]()
_SETUP_S = pytest.StashKey[float]()

"""The default suite's per-test time budget (tests/time_budget.py) fails a slow test that is not marked slow."""

DUMMY = """
import time
import pytest

def test_quick():
    pass

def test_sleeps_past_the_budget():
    time.sleep(0.6)

@pytest.mark.slow
def test_marked_slow_sleeps_past_the_budget():
    time.sleep(0.6)

@pytest.fixture(scope="module")
def shared_run():
    time.sleep(0.6)

def test_a_shared_fixture_counts_toward_its_first_user(shared_run):
    pass

def test_a_failing_test_is_reported_as_its_own_failure():
    time.sleep(0.6)
    assert False, "its own assertion"
"""


def test_a_test_over_the_budget_fails_unless_marked_slow(pytester, monkeypatch):
    monkeypatch.setenv("FEDRUN_TEST_BUDGET_S", "0.3")
    pytester.makeini("[pytest]\nmarkers = slow: long\n")
    pytester.makepyfile(test_dummy=DUMMY)
    result = pytester.runpytest("-p", "time_budget", "-q")
    outcomes = {r.nodeid.split("::")[-1]: r.outcome for r in result.reprec.getreports("pytest_runtest_logreport")
                if r.when == "call"}
    assert outcomes == {"test_quick": "passed", "test_sleeps_past_the_budget": "failed",
                        "test_marked_slow_sleeps_past_the_budget": "passed",
                        "test_a_shared_fixture_counts_toward_its_first_user": "failed",
                        "test_a_failing_test_is_reported_as_its_own_failure": "failed"}
    text = result.stdout.str()
    assert "test_sleeps_past_the_budget took 0.6 s" in text and "@pytest.mark.slow" in text
    assert "its own assertion" in text


def test_a_budget_of_zero_turns_the_check_off(pytester, monkeypatch):
    monkeypatch.setenv("FEDRUN_TEST_BUDGET_S", "0")
    pytester.makepyfile(test_dummy="import time\n\ndef test_sleeps():\n    time.sleep(0.4)\n")
    pytester.runpytest("-p", "time_budget", "-q").assert_outcomes(passed=1)

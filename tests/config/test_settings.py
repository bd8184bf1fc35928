"""A run's config is typed and checked once (fedrun/config/settings.py, fedrun/config/checks.py): the engine gets
:class:`RunSettings`, and every range rule, every check across groups and the parts' combination check runs once per
run, from the command line as in-process."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

from fedrun.config import checks, settings
from fedrun.config.schema import Section
from fedrun.config.settings import RunSettings

REQUIREMENTS = {r.check.__name__ for r in checks.REQUIREMENTS}  # before a test counts them


@pytest.fixture
def counted(monkeypatch):
    """How often each node's rules ran (by its prefix: ``fl``, ``hardware``, ``algo.local``, ...), each requirement
    across groups (by name) and the parts' combination check, from a process that has typed no config yet."""
    calls = Counter()
    monkeypatch.setattr(settings, "_TYPED", settings.Kept())
    monkeypatch.setattr(checks, "_VALID", settings.Kept())
    problems = Section.problems

    def counting_problems(self):
        calls[self.prefix] += 1
        return problems(self)

    monkeypatch.setattr(Section, "problems", counting_problems)
    def counting(requirement):
        return lambda run, spec: calls.update([requirement.check.__name__]) or requirement.check(run, spec)

    requirements = tuple(checks.Requirement(counting(r), r.needs_data) for r in checks.REQUIREMENTS)
    monkeypatch.setattr(checks, "REQUIREMENTS", requirements)
    combination = checks.check_parts
    monkeypatch.setattr(checks, "check_parts", lambda algo: calls.update(["check_parts"]) or combination(algo))
    return calls


def every_rule() -> set[str]:
    from fedrun.algorithms.schema import SCHEMAS
    from fedrun.config.schema import GROUPS, SECTIONS

    return ({*SECTIONS, *GROUPS} | {f"algo.{part}" for part in SCHEMAS}
            | REQUIREMENTS | {"check_parts"})


def test_each_rule_runs_once_in_a_run_from_the_command_line(tmp_path, monkeypatch, counted):
    """``fedrun ...`` checks the command line before Hydra makes the run's folder, and the run itself gets the
    same config: the pre-check's typed settings serve the run, so no rule runs twice."""
    from fedrun.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["fedrun", "data=digits", "model=logreg", "fl.rounds=1", "fl.lr=0.05",
                                      "progress=false", "logger=csv", f"hydra.run.dir={tmp_path / 'run'}"])
    main()
    assert (tmp_path / "run" / "metrics.csv").is_file()
    assert set(counted) == every_rule(), set(counted) ^ every_rule()
    assert set(counted.values()) == {1}, {k: v for k, v in counted.items() if v != 1}


def test_a_run_in_process_types_its_config_once_and_the_engine_gets_the_settings(tmp_path, cfg_factory, counted):
    """run_experiment checks the composed config once and builds the Simulation from the typed settings."""
    from fedrun.engine.run import simulation
    from fedrun.engine.run.experiment import run_experiment

    given = []
    built = simulation.Simulation.__init__

    def recording(self, run, *args, **kwargs):
        given.append(run)
        built(self, run, *args, **kwargs)

    cfg = cfg_factory("data=digits", "model=logreg", "fl.rounds=1")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simulation.Simulation, "__init__", recording)
        run_experiment(cfg, tmp_path)
    assert set(counted.values()) == {1}, {k: v for k, v in counted.items() if v != 1}
    (run,) = given
    assert isinstance(run, RunSettings) and run.fl.rounds == 1 and run.algo.local.name == "sgd"


def test_a_bad_value_is_said_each_time_and_a_good_config_is_kept_by_its_values(cfg_factory, counted):
    """A refused config is refused again (its typing is kept, its problems said each time); a checked one is found
    by its values, so a config equal in every value is not checked again and one differing in a value is."""
    from fedrun.errors import ConfigError

    bad = cfg_factory("data=digits", "model=logreg", "fl.lr=-1")
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"fl.lr=-1.0: must be > 0"):
            checks.validate(bad)
    good = cfg_factory("data=digits", "model=logreg")
    first = checks.validate(good)
    assert checks.validate(cfg_factory("data=digits", "model=logreg")) is first
    assert checks.validate(cfg_factory("data=digits", "model=logreg", "fl.lr=0.01")) is not first
    assert counted["fl"] == 3  # the bad config's typing kept; the good one and its variant typed once each

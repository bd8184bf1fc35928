"""The collector held back while a run starts (fedrun/process/startup.py), and given back for its rounds."""

import gc

from fedrun.process import startup
from fedrun.engine.run.experiment import run_experiment
from fedrun.engine.run.simulation import Simulation


def test_the_collector_is_held_while_the_run_is_built_and_given_back_for_its_rounds(cfg_factory, tmp_path,
                                                                                    monkeypatch):
    seen = {}
    build, step = Simulation.__init__, Simulation.run_round

    def init(self, cfg, **kwargs):
        seen["building"] = gc.get_threshold()
        build(self, cfg, **kwargs)

    def run_round(self, rnd):
        seen.setdefault("rounds", gc.get_threshold())
        return step(self, rnd)

    monkeypatch.setattr(Simulation, "__init__", init)
    monkeypatch.setattr(Simulation, "run_round", run_round)
    before = gc.get_threshold()
    assert before != startup.STARTUP_THRESHOLDS
    try:
        startup.hold_collector()
        startup.hold_collector()  # a sweep's job holds it again: the thresholds to give back stay the process's
        run_experiment(cfg_factory("data=digits", "model=logreg", "fl.rounds=2", "logger=none", "progress=false"),
                       tmp_path)
    finally:
        startup.release_collector()
    assert seen == {"building": startup.STARTUP_THRESHOLDS, "rounds": before}
    assert gc.get_threshold() == before


def test_release_without_hold_changes_nothing():
    before = gc.get_threshold()
    startup.release_collector()
    assert gc.get_threshold() == before

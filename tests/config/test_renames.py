"""A renamed setting is read in its old spelling wherever a user or an earlier run wrote it: on the command line (with a
note), in a run's saved config.yaml and overrides, and in its checkpoints; a run made before ``algo/selector`` became
``algo/step_selector`` is the same run after it."""

from __future__ import annotations

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from fedrun.config.renames import renamed_overrides, upgraded
from fedrun.engine.run.experiment import run_experiment
from fedrun.errors import StaleRunError
from fedrun.rundir.checkpoint import checkpoints, config_fingerprint
from fedrun.rundir.files import CONFIG_FILE, OVERRIDES_FILE, finished_summary

BASE = ["data=digits", "model=logreg", "fl.num_clients=6", "fl.clients_per_round=3", "fl.batch_size=16",
        "algo=grab_fedavg", "algo.step_selector.alpha=0.5", "checkpoint.every=1"]


def test_each_form_of_an_old_override_is_read_in_the_new_spelling_with_a_note():
    args = ["-m", "algo/selector=herd,random", "algo.selector.alpha=0.3", "+algo.selector.x=1", "~algo.selector.y",
            "algo.selectors=1", "fl.lr=0.1"]
    new, notes = renamed_overrides(args)
    assert new == ["-m", "algo/step_selector=herd,random", "algo.step_selector.alpha=0.3", "+algo.step_selector.x=1",
                   "~algo.step_selector.y", "algo.selectors=1", "fl.lr=0.1"]
    assert len(notes) == 4 and notes[1] == ("algo.selector.alpha is now algo.step_selector.alpha (the old spelling "
                                            "is read for this release). Fix: algo.step_selector.alpha=0.3")


def test_the_command_line_runs_an_old_spelling_as_the_new_one(tmp_path):
    from conftest import run_cli

    proc = run_cli("algo=bherd", "algo/selector=random", "algo.selector.alpha=0.3", "fl.rounds=1", "data=digits",
                   "model=logreg", "progress=false", f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert "fedrun: note: algo/selector is now algo/step_selector" in proc.stderr
    saved = yaml.safe_load((tmp_path / CONFIG_FILE).read_text())["algo"]["step_selector"]
    assert saved["name"] == "random" and saved["alpha"] == 0.3


def _as_before_the_rename(run_dir, cfg) -> None:
    """Rewrite a run directory as fedrun wrote it before the rename: its config.yaml, Hydra's record of its overrides
    and its checkpoints (their state and fingerprint) under ``selector``."""
    old = OmegaConf.to_container(cfg, resolve=True)
    old["algo"] = {("selector" if k == "step_selector" else k): v for k, v in old["algo"].items()}
    (run_dir / CONFIG_FILE).write_text(yaml.safe_dump(old))
    (run_dir / OVERRIDES_FILE).parent.mkdir(exist_ok=True)
    (run_dir / OVERRIDES_FILE).write_text(yaml.safe_dump([o.replace("step_selector", "selector") for o in BASE]))
    for path in checkpoints(run_dir):
        saved = torch.load(path, weights_only=True)
        state = saved["simulation"]["state"]
        state["selector"] = state.pop("step_selector")
        saved["config_fingerprint"] = config_fingerprint(OmegaConf.create(old), rounds=saved["rounds"])
        torch.save(saved, path)


def test_a_run_made_before_the_rename_is_the_same_run_to_resume_and_to_the_staleness_check(tmp_path, cfg_factory):
    reference = run_experiment(cfg_factory(*BASE, "fl.rounds=4"), tmp_path / "reference")
    run_dir = tmp_path / "old"
    short = cfg_factory(*BASE, "fl.rounds=2")
    run_experiment(short, run_dir)
    _as_before_the_rename(run_dir, short)

    assert finished_summary(run_dir, short)["status"] == "finished", "the same run, not a stale one"
    with pytest.raises(StaleRunError, match=r"algo\.step_selector\.alpha: 0\.5 there, 0\.7 asked"):
        finished_summary(run_dir, cfg_factory(*BASE, "fl.rounds=2", "algo.step_selector.alpha=0.7"))
    # extended from its checkpoint (GraB's stale means restored from the old name): the uninterrupted run's result
    extended = run_experiment(cfg_factory(*BASE, "fl.rounds=4", "resume=true"), run_dir)
    assert extended["extended_from_rounds"] == 2 and extended["final_test_acc"] == reference["final_test_acc"]


def test_reports_and_tables_read_an_old_run_under_the_new_keys(tmp_path, cfg_factory):
    from fedrun.papers.table_summary import _grid_values
    from fedrun.rundir.report import load_runs

    cfg = cfg_factory(*BASE, "fl.rounds=1", "checkpoint.every=0")
    run_experiment(cfg, tmp_path)
    _as_before_the_rename(tmp_path, cfg)
    row = load_runs([tmp_path]).iloc[0]
    assert row["algo.step_selector.alpha"] == 0.5 and "algo.selector.alpha" not in row
    assert _grid_values(tmp_path, ["algo.step_selector.alpha", "algo/step_selector"], {})[
        "algo.step_selector.alpha"] == "0.5"
    assert upgraded({"algo": {"selector": {"name": "herd"}}}) == {"algo": {"step_selector": {"name": "herd"}}}


def test_a_tests_cached_composition_of_an_old_spelling_notes_it_on_every_call():
    """conftest.make_cfg composes an override list once per session; each call is a fresh copy and notes the old
    spelling again, as composing it afresh does."""
    from conftest import make_cfg

    args = ("data=digits", "algo=grab_fedavg", "algo.selector.alpha=0.3")
    for _ in range(2):
        with pytest.warns(FutureWarning, match="algo.selector.alpha is now algo.step_selector.alpha"):
            cfg = make_cfg(*args)
        assert cfg.algo.step_selector.alpha == 0.3
        cfg.algo.step_selector.alpha = 0.9  # the copy, not the session's composition

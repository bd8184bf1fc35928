"""Start-up notes (fedrun/config/advice.py): BHerd's E/alpha step said in one line where it is likely to surprise."""

from __future__ import annotations

import logging

from fedrun.config.advice import preset_steps, selected_step_note
from fedrun.config.checks import validate
from fedrun.engine.run.experiment import run_experiment


def test_bherds_step_is_said_at_start_for_lenet5_at_the_default_lr_and_not_for_the_papers_settings(cfg_factory):
    """The card's first command (LeNet-5 at lr 0.1, alpha 0.5: a step of 0.2, twice the largest any preset trains
    LeNet-5 with) gets the line, naming the step, the paper's setting and results/bherd; BHerd's own presets, FedAvg,
    alpha = 1 and a smaller lr do not."""
    note = selected_step_note(validate(cfg_factory("algo=bherd", "data=mnist")))
    assert note is not None
    assert "0.1 x 1/0.5 = 0.2" in note and "lenet5" in note and "experiment=bherd_svm_mnist" in note
    assert "results/bherd/README.md" in note
    for quiet in (["experiment=bherd_svm_mnist", "algo=bherd"], ["experiment=bherd_cnn_cifar10", "algo=bherd"],
                  ["experiment=bherd_rnn_imdb", "algo=bherd"], ["algo=fedavg"],
                  ["algo=bherd", "algo.step_selector.alpha=1"], ["algo=bherd", "fl.lr=0.05"]):
        assert selected_step_note(validate(cfg_factory(*quiet))) is None, quiet
    random_steps = validate(cfg_factory("algo=fedavg", "algo/step_selector=random"))
    assert selected_step_note(random_steps) is not None  # the same scaling
    steps = preset_steps()
    assert steps["lenet5"] == 0.1 and steps["svm"] == 0.05 and steps["cnn_bherd"] == 2 * 2.0e-4


def test_a_run_says_it_in_its_log_before_round_one(cfg_factory, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="fedrun"):
        run_experiment(cfg_factory("data=digits", "model=cnn3", "algo=bherd", "fl.rounds=1", "fl.num_clients=2",
                                   "fl.clients_per_round=2", "fl.local_epochs=0.1"), tmp_path)
    said = [r.getMessage() for r in caplog.records if "E/alpha" in r.getMessage()]
    assert len(said) == 1 and "cnn3" in said[0]


def test_help_says_it_beside_algo_bherd():
    from fedrun.cli import app_help

    text = app_help([])
    assert "algo=bherd applies the selected steps times E/alpha" in text and "experiment=bherd_svm_mnist" in text


def test_the_last_line_repeats_the_reason_for_a_diverged_run_and_not_for_a_good_one(cfg_factory, tmp_path, caplog):
    """A BHerd run on LeNet-5-like steps far past the presets' (lr 100: it diverges at once) ends with where it fell
    and the start-up note again; the same run at alpha = 1 and a small lr ends with its accuracy alone."""
    common = ["data=digits", "model=cnn3", "algo=bherd", "fl.rounds=3", "fl.num_clients=2", "fl.clients_per_round=2",
              "fl.local_epochs=0.1", "hardware.device=cpu"]
    last = {}
    for name, extra in (("diverged", ["fl.lr=1e30"]), ("good", ["fl.lr=0.01", "algo.step_selector.alpha=1"])):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="fedrun"):
            summary = run_experiment(cfg_factory(*common, *extra), tmp_path / name)
        last[name] = (summary, [r.getMessage() for r in caplog.records if "final test accuracy" in r.getMessage()])
    summary, lines = last["diverged"]
    assert summary["status"] == "diverged" and len(lines) == 1
    assert f"it diverged at round {summary['diverged_round']}. As said at the start, " in lines[0]
    assert "applies the selected steps times E/alpha" in lines[0]
    summary, lines = last["good"]
    assert summary["status"] == "finished" and len(lines) == 1 and "As said" not in lines[0]
    assert "diverged at" not in lines[0] and "below its best" not in lines[0]


def test_a_run_that_ends_far_below_its_best_says_by_how_much():
    from fedrun.engine.run.experiment import ending_note

    fell = {"status": "finished", "final_test_acc": 0.6052, "best_test_acc": 0.9811, "best_round": 6}
    assert ending_note(fell, None) == "; it ended 0.3759 below its best (round 6)"
    assert ending_note(fell, "note: x").endswith("below its best (round 6). As said at the start, x")
    assert ending_note(fell | {"final_test_acc": 0.95}, "note: x") == ""  # within 0.1 of its best
    assert ending_note({"status": "interrupted", "rounds_completed": 2}, "note: x") == ""  # no rounds evaluated

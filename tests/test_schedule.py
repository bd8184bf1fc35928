"""GIFT's Gradient Consistency and tau rule against hand computations."""

import csv

import pytest
import torch

from fedrun.algorithms.schedule import GIFT, FixedSchedule, gradient_consistency
from fedrun.engine.simulation import run_experiment


def test_consistency_is_one_when_updates_agree_and_zero_when_they_cancel():
    agree = GIFT(beta=0.0)
    assert agree.observe(torch.tensor([[1.0, 2.0], [3.0, 0.5], [0.2, 0.1]]))["gift_C"] == pytest.approx(1.0)
    cancel = GIFT(beta=0.0)
    assert cancel.observe(torch.tensor([[1.0, -2.0], [-1.0, 2.0]]))["gift_C"] == pytest.approx(0.0)
    mixed = torch.tensor([[1.0, -2.0], [-1.0, 2.1]])
    assert 0 < GIFT(beta=0.0).observe(mixed)["gift_C"] < 0.05


def test_pooled_emas_after_three_hand_made_rounds():
    g = GIFT(beta=0.5)
    rounds = [torch.tensor([[1.0, -1.0], [2.0, 1.0]]), torch.tensor([[-2.0, 0.0]]), torch.tensor([[0.0, 4.0]])]
    for u in rounds:
        c = g.observe(u)["gift_C"]
    # P: r1 sum relu = (3, 1) -> (1.5, 0.5); r2 (0, 0) -> (0.75, 0.25); r3 (0, 4) -> (0.375, 2.125)
    # N: r1 (0, -1) -> (0, -0.5); r2 (-2, 0) -> (-1, -0.25); r3 (0, 0) -> (-0.5, -0.125)
    torch.testing.assert_close(g.positive, torch.tensor([0.375, 2.125], dtype=torch.float64))
    torch.testing.assert_close(g.negative, torch.tensor([-0.5, -0.125], dtype=torch.float64))
    assert c == pytest.approx(gradient_consistency(torch.tensor([0.375, 2.125]), torch.tensor([-0.5, -0.125])))
    assert c == pytest.approx(float(torch.tensor([-0.125, 2.0]).norm() / (torch.tensor([0.375, 2.125]).norm()
                                                                           + torch.tensor([-0.5, -0.125]).norm())))


def test_tau_halves_after_two_rounds_without_decrease_and_the_count_restarts():
    g = GIFT(tau0=100)
    taus = [g.advance(c) for c in (0.9, 0.8, 0.8, 0.85, 0.9, 0.7, 0.75, 0.8)]
    #                              first dec  =1   =2:halve =1  dec  =1   =2:halve
    assert taus == [100, 100, 100, 50, 50, 50, 50, 25]
    assert g.halvings == 2
    tiny = GIFT(tau0=1)
    assert [tiny.advance(c) for c in (0.5, 0.5, 0.5)] == [1, 1, 1]  # never below 1


def test_relaxation_adds_steps_after_decreasing_rounds_only_until_the_first_halving():
    g = GIFT(tau0=10, relax=True, relax_after=3, relax_step=5)
    taus = [g.advance(c) for c in (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)]
    assert taus == [10, 10, 10, 15, 15, 15, 20]  # +5 after each 3 consecutive decreases
    taus = [g.advance(c) for c in (0.3, 0.3)]  # two without decrease: halve
    assert taus == [20, 10]
    taus = [g.advance(c) for c in (0.2, 0.1, 0.05, 0.01)]  # decreasing again, but relaxation has ended
    assert taus == [10, 10, 10, 10]
    plain = GIFT(tau0=10)
    assert [plain.advance(c) for c in (0.9, 0.8, 0.7, 0.6)] == [10] * 4


def test_fixed_schedule_is_epochs_times_samples_over_batch():
    assert FixedSchedule().local_steps(1000, 1.0, 64) == 15 and FixedSchedule().local_steps(10, 0.1, 64) == 1


def test_gift_runs_from_config_and_logs_its_tau_and_consistency(tmp_path, cfg_factory):
    run_experiment(cfg_factory("data=digits", "model=logreg", "fl.rounds=6", "fl.clients_per_round=4",
                               "algo/schedule=gift", "algo.schedule.tau0=8", "algo.schedule.patience=1"), tmp_path)
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert float(rows[0]["tau"]) == 8 and all(0 <= float(r["gift_C"]) <= 1 for r in rows)
    for prev, row in zip(rows, rows[1:]):
        assert float(row["tau"]) == float(prev["next_tau"])  # each round runs the tau the last one chose
    replay = GIFT(tau0=8, patience=1)  # the logged C_r sequence drives the logged taus
    assert [float(replay.advance(float(r["gift_C"]))) for r in rows] == [float(r["next_tau"]) for r in rows]

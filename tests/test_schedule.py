"""GIFT's Gradient Consistency and tau rule against hand computations."""

import csv

import numpy as np
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


def test_earliest_reporters_keep_exactly_the_ceiling_of_the_fraction_reproducibly():
    from fedrun.engine.cohort import earliest_reporters, report_delays

    for n in (10, 25, 100, 7):
        delays = report_delays(n, seed=3, round_=5)
        kept = earliest_reporters(delays, 0.4)
        assert len(kept) == -(-4 * n // 10) and list(kept) == sorted(kept)
        assert delays[kept].max() <= np.delete(delays, kept).min()  # nobody left out reported earlier
        assert np.array_equal(kept, earliest_reporters(report_delays(n, seed=3, round_=5), 0.4))
    assert not np.array_equal(report_delays(100, 3, 5), report_delays(100, 3, 6))  # a fresh draw each round
    assert np.array_equal(earliest_reporters(np.array([2.0, 1.0, 1.0, 3.0]), 0.5), [1, 2])  # ties by id


def test_simulated_time_is_parallel_compute_plus_last_report_plus_transfer(tmp_path, cfg_factory):
    from fedrun.engine.simulation import Simulation

    cfg = cfg_factory("data=digits", "model=logreg", "fl.num_clients=10", "participation=earliest",
                      "participation.fraction=0.3", "timing=simulated", "timing.step_time_s=0.5",
                      "timing.bandwidth_mbps=8")
    sim = Simulation(cfg)
    out = sim.run_round(1)
    cohort, last = sim.participants(1)
    assert [p.id for p in out.plans] == list(cohort) and len(cohort) == 3
    transfer = 2 * sim.model_bytes * 8 / 8e6
    assert out.diagnostics["sim_round_s"] == pytest.approx(max(p.tau for p in out.plans) * 0.5 + last + transfer)
    run_experiment(cfg_factory("data=digits", "model=logreg", "fl.rounds=3", "timing=simulated",
                               "timing.step_time_s=0.5"), tmp_path)
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert float(rows[-1]["sim_time_s"]) == pytest.approx(sum(float(r["sim_round_s"]) for r in rows))


def test_gift_presets_run_a_few_rounds_from_the_cli(tmp_path):
    from conftest import run_cli

    run_cli("experiment=gift_lenet5_mnist", "fl.rounds=3", "algo.schedule.tau0=2", "progress=false",
            f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["num_clients"]) for r in rows] == [40, 40, 40]  # the earliest 40% of 100 clients
    assert float(rows[0]["tau"]) == 2 and all(float(r["sim_round_s"]) > 0 for r in rows)
    for preset in ("gift_lenet5_cifar10", "gift_vgg16_cifar10", "gift_lenet5_fashion_mnist"):
        job = run_cli(f"experiment={preset}", "--cfg", "job", cwd=tmp_path).stdout
        assert "name: gift" in job and "name: earliest" in job and "client_fraction: 0.01" in job

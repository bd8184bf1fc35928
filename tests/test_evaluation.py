"""What a run reports about its models beyond the pooled test accuracy: FedGH's Acc_l readings on hand-made cases."""

import numpy as np
import pytest
import torch
from conftest import register_tiny

from fedrun.engine.cohort import ClientPlan
from fedrun.engine.executor import CohortResult
from fedrun.engine.simulation import RoundOutput, Simulation


def two_users(monkeypatch, cfg_factory):
    """User 0 holds one test sample (class 0), user 1 three (classes 1, 1, 0); a 2-d logistic regression."""
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 0.5]], dtype=np.float32)
    register_tiny(monkeypatch, "two_users", x, np.array([0, 1, 1, 0]), x_test=x, y_test=np.array([0, 1, 1, 0]),
                  classes=2, users=np.array([0, 1, 1, 1]), test_users=np.array([0, 1, 1, 1]))
    return Simulation(config(cfg_factory, "fl.rounds=1"))


def config(cfg_factory, *overrides):
    cfg = cfg_factory("model=logreg", "partition=natural", "fl.num_clients=2", "fl.clients_per_round=2",
                      *overrides)
    cfg.data = {"name": "two_users", "root": None}
    return cfg


def step_with(sim, clients, updates):
    plans = [ClientPlan(c, 1, 1, torch.zeros(1, 1, dtype=torch.long)) for c in clients]
    result = CohortResult(torch.stack(updates), [{}] * len(clients), torch.zeros(len(clients)), [None] * len(clients),
                          {}, None)
    return RoundOutput(1, plans, torch.full((len(clients),), 1 / len(clients)), result, 0, 0, {},
                       start=torch.zeros(sim.model.dim))


def test_each_acc_l_reading_on_a_hand_made_two_user_case(monkeypatch, cfg_factory):
    sim = two_users(monkeypatch, cfg_factory)
    # the global model is right on user 0's sample and on the first of user 1's three
    hits, units = torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.ones(4)
    # the clients' local models: client 0 predicts class 0 everywhere, client 1 class 1 (logreg: w (2x2), then b)
    always = {c: torch.tensor([0.0, 0.0, 0.0, 0.0, float(c == 0), float(c == 1)]) for c in (0, 1)}
    both = sim.user_accuracies(hits, units, step_with(sim, [0, 1], [always[0], always[1]]))
    assert both["local_acc"] == pytest.approx((1 + 1 / 3) / 2)  # per user, then the mean over users
    assert both["local_acc_round"] == pytest.approx((1 + 1 / 3) / 2)
    assert both["local_acc_round_samples"] == pytest.approx(2 / 4)  # = the pooled accuracy
    assert both["local_model_acc"] == pytest.approx((1 + 2 / 3) / 2)  # own models: 1/1 and 2/3
    assert both["local_model_acc_samples"] == pytest.approx(3 / 4)
    one = sim.user_accuracies(hits, units, step_with(sim, [1], [always[1]]))
    assert one["local_acc"] == both["local_acc"], "over all users whoever took part"
    assert one["local_acc_round"] == pytest.approx(1 / 3) == one["local_acc_round_samples"]
    assert one["local_model_acc"] == pytest.approx(2 / 3) == one["local_model_acc_samples"]
    assert set(sim.user_accuracies(hits, units, None)) == {"local_acc"}


def test_a_natural_run_logs_every_reading(monkeypatch, cfg_factory, tmp_path):
    import csv

    from fedrun.engine.simulation import run_experiment

    two_users(monkeypatch, cfg_factory)
    run_experiment(config(cfg_factory, "fl.rounds=2", "fl.batch_size=2"), tmp_path / "run")
    with open(tmp_path / "run" / "metrics.csv") as f:
        row = list(csv.DictReader(f))[-1]
    for key in ("local_acc", "local_acc_round", "local_acc_round_samples", "local_model_acc",
                "local_model_acc_samples"):
        assert 0 <= float(row[key]) <= 1, key
    assert float(row["local_acc_round_samples"]) == pytest.approx(float(row["test_acc"])), "every user took part"

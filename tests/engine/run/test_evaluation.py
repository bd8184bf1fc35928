"""What a run reports about its models beyond the pooled test accuracy: FedGH's Acc_l readings on hand-made cases."""

import numpy as np
import pytest
import torch
from conftest import register_tiny

from fedrun.engine.run.sampling import ClientPlan
from fedrun.algorithms.base import CohortResult
from fedrun.algorithms.round import RoundOutput
from fedrun.engine.run.simulation import Simulation


def two_users(monkeypatch, cfg_factory, order=(0, 1, 2, 3)):
    """User 0 holds one test sample (class 0), user 1 three (classes 1, 1, 0); a 2-d logistic regression. ``order``:
    the test samples' order (the users' samples interleaved or not)."""
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 0.5]], dtype=np.float32)
    y, order = np.array([0, 1, 1, 0]), list(order)
    register_tiny(monkeypatch, "two_users", x, y, x_test=x[order], y_test=y[order], classes=2,
                  users=np.array([0, 1, 1, 1]), test_users=np.array([0, 1, 1, 1])[order])
    return Simulation.from_config(config(cfg_factory, "fl.rounds=1"))


def config(cfg_factory, *overrides):
    cfg = cfg_factory("model=logreg", "partition=natural", "fl.num_clients=2", "fl.clients_per_round=2",
                      "hardware.device=cpu", *overrides)  # hand-made models on the CPU
    cfg.data.name = "two_users"
    return cfg


def step_with(sim, clients, updates):
    plans = [ClientPlan(c, 1, 1, torch.zeros(1, 1, dtype=torch.long)) for c in clients]
    result = CohortResult(torch.stack(updates), [{}] * len(clients), torch.zeros(len(clients)), [None] * len(clients),
                          {}, None)
    return RoundOutput(1, plans, torch.full((len(clients),), 1 / len(clients)), result, 0, 0, {},
                       start=torch.zeros(sim.model.dim))


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (2, 0, 3, 1)])
def test_each_acc_l_reading_on_a_hand_made_two_user_case(monkeypatch, cfg_factory, order):
    sim = two_users(monkeypatch, cfg_factory, order)
    # the global model is right on user 0's sample and on the first of user 1's three
    hits, units = torch.tensor([1.0, 1.0, 0.0, 0.0])[list(order)], torch.ones(4)
    # the clients' local models: client 0 predicts class 0 everywhere, client 1 class 1 (logreg: w (2x2), then b)
    always = {c: torch.tensor([0.0, 0.0, 0.0, 0.0, float(c == 0), float(c == 1)]) for c in (0, 1)}
    both = sim.evaluation.user_accuracies(sim.state, hits, units, step_with(sim, [0, 1], [always[0], always[1]]))
    assert both["local_acc"] == pytest.approx((1 + 1 / 3) / 2)  # per user, then the mean over users
    assert both["local_acc_round"] == pytest.approx((1 + 1 / 3) / 2)
    assert both["local_acc_round_samples"] == pytest.approx(2 / 4)  # = the pooled accuracy
    assert both["local_model_acc"] == pytest.approx((1 + 2 / 3) / 2)  # own models: 1/1 and 2/3
    assert both["local_model_acc_samples"] == pytest.approx(3 / 4)
    one = sim.evaluation.user_accuracies(sim.state, hits, units, step_with(sim, [1], [always[1]]))
    assert one["local_acc"] == both["local_acc"], "over all users whoever took part"
    assert one["local_acc_round"] == pytest.approx(1 / 3) == one["local_acc_round_samples"]
    assert one["local_model_acc"] == pytest.approx(2 / 3) == one["local_model_acc_samples"]
    assert set(sim.evaluation.user_accuracies(sim.state, hits, units, None)) == {"local_acc"}
    users = sim.evaluation._users  # who owns which test sample: worked out once per run
    assert [ix.tolist() for ix in users.samples] == [[order.index(0)], sorted(order.index(i) for i in (1, 2, 3))]
    assert sim.evaluation._users is users


def test_a_natural_run_logs_every_reading(monkeypatch, cfg_factory, tmp_path):
    import csv

    from fedrun.engine.run.experiment import run_experiment

    two_users(monkeypatch, cfg_factory)
    run_experiment(config(cfg_factory, "fl.rounds=2", "fl.batch_size=2"), tmp_path / "run")
    with open(tmp_path / "run" / "metrics.csv") as f:
        row = list(csv.DictReader(f))[-1]
    for key in ("local_acc", "local_acc_round", "local_acc_round_samples", "local_model_acc",
                "local_model_acc_samples"):
        assert 0 <= float(row[key]) <= 1, key
    assert float(row["local_acc_round_samples"]) == pytest.approx(float(row["test_acc"])), "every user took part"


def test_bank_evaluations_on_a_hand_made_case_two_models_two_owners(monkeypatch, cfg_factory):
    """Client 0 holds only class 0, client 1 only class 1; model A always says 0, model B always says 1. Each
    owner prefers the model that is right on its data (eq. 18), so every held-out sample scored by its owner's model
    is right, while either model alone is right on half of the pooled test set; the oracle is right everywhere."""
    x = np.array([[1.0, 0.0]] * 10 + [[0.0, 1.0]] * 10, dtype=np.float32)
    y = np.array([0] * 10 + [1] * 10)
    register_tiny(monkeypatch, "owners", x, y, classes=2, users=np.repeat([0, 1], 10))
    cfg = cfg_factory("algo=mafsvrg", "model=logreg", "partition=natural", "fl.num_clients=2",
                      "fl.clients_per_round=2", "eval.holdout=0.3", "eval.personalized=true", "algo.bank.models=2",
                      "hardware.device=cpu")  # hand-made models on the CPU
    cfg.data.name = "owners"
    sim = Simulation.from_config(cfg)
    assert [len(ix) for ix in sim.holdout] == [3, 3] and [len(ix) for ix in sim.partition.indices] == [7, 7]
    assert not set(np.concatenate(sim.holdout)) & set(np.concatenate(sim.partition.indices)), "held out of training"
    assert [float(sim.state.clients[c]["n"]) for c in (0, 1)] == [7, 7], "FSVRG's n_i: the training samples only"
    always = lambda c: torch.tensor([0.0, 0.0, 0.0, 0.0, 3.0 * (c == 0), 3.0 * (c == 1)])  # noqa: E731
    sim.state.bank = sim.algo.bank.start(sim.state.params, sim.num_clients) | {
        "models": torch.stack([always(0), always(1)])}
    assert sim.evaluation.preferred_models(sim.state).tolist() == [0, 1]
    out = sim.evaluation.evaluate(sim.state)
    assert out["test_acc"] == pytest.approx(0.5) and out["bank_mean_acc"] == pytest.approx(0.5)
    assert out["oracle_acc"] == pytest.approx(1.0)
    assert out["owner_acc"] == pytest.approx(1.0)
    assert sim.evaluation.evaluate_personalized(sim.state, 1, sim.lr(1)) == pytest.approx(1.0)
    sim.state.bank["models"] = torch.stack([always(1), always(0)])  # swapped: the preferences follow the models
    assert sim.evaluation.preferred_models(sim.state).tolist() == [1, 0]
    assert sim.evaluation.evaluate(sim.state)["owner_acc"] == pytest.approx(1.0)
    # one global model: each owner's held-out samples are scored by it
    cfg = cfg_factory("algo=fsvrg", "model=logreg", "partition=natural", "fl.num_clients=2", "fl.clients_per_round=2",
                      "eval.holdout=0.3")
    cfg.data.name = "owners"
    single = Simulation.from_config(cfg)
    single.state.params = always(0)
    assert "oracle_acc" not in single.evaluation.evaluate(single.state)
    assert single.evaluation.evaluate(single.state)["owner_acc"] == pytest.approx(0.5)


def test_a_bank_with_another_loss_evaluates_its_preferences_through_that_loss(tmp_path):
    """Zhao et al.'s eq. 18 exists once: the preferences a personalised evaluation reads are the training's, for any
    loss (the SVM's squared hinge here; a cross-entropy copy raised IndexError at the bank's first evaluation)."""
    import json

    from conftest import run_cli

    run_cli("algo=mafsvrg", "algo.local.scaling=none", "model=svm", "data=digits", "eval.personalized=true",
            "eval.holdout=0.2", "algo.bank.threshold=1", "fl.rounds=3", "fl.num_clients=8", "fl.clients_per_round=4",
            "partition=classes", "partition.classes_per_client=2", "progress=false",
            f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished"
    header = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0]
    assert {"personal_acc", "owner_acc", "oracle_acc"} <= set(header.split(","))


def test_the_personalised_protocol_scores_each_client_on_its_classes_test_samples(monkeypatch, cfg_factory):
    """Zhao et al.'s protocol, scored from each model's per-class hits on the whole test set, equals its definition
    client by client (each client's model on the test samples of the classes it trains on), with one global model
    and with a bank's preferred models; a client whose classes have no test sample is left out of the mean."""
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2, 2, 3], 6)  # clients (natural users): {0}, {1, 2}, {2}, {3}; no test sample of class 3
    users = np.repeat([0, 1, 1, 2, 3], 6)
    x = rng.normal(size=(len(y), 3)).astype(np.float32)
    y_test = np.array([0, 0, 1, 2, 2, 2, 1, 0, 2])
    x_test = rng.normal(size=(len(y_test), 3)).astype(np.float32)
    register_tiny(monkeypatch, "by_class", x, y, x_test=x_test, y_test=y_test, classes=4, users=users)

    def simulation(algo, *overrides):
        cfg = cfg_factory(f"algo={algo}", "model=logreg", "partition=natural", "fl.num_clients=4",
                          "fl.clients_per_round=4", "eval.personalized=true", "hardware.device=cpu", *overrides)
        cfg.data.name = "by_class"
        return Simulation.from_config(cfg)

    def by_definition(sim, models_of_clients):
        accs = []
        for c, ix in enumerate(sim.evaluation.client_indices):
            mask = torch.isin(sim.data.y_test, torch.unique(sim.data.y_train[torch.as_tensor(ix)]))
            if mask.any():
                accs.append(sim.model.evaluate(models_of_clients[c], sim.state.buffers, sim.data.x_test[mask],
                                               sim.data.y_test[mask])[0])
        return float(np.mean(accs)), len(accs)

    single = simulation("fsvrg")
    single.state.params = torch.as_tensor(rng.normal(size=single.model.dim), dtype=torch.float32)
    expected, scored = by_definition(single, [single.state.params] * 4)
    assert scored == 3 and single.evaluation.evaluate_personalized(single.state, 1, 0.1) == expected
    always = lambda k: torch.tensor([0.0] * 12 + [3.0 * (k == j) for j in range(4)])  # noqa: E731 (logreg: W, then b)
    single.state.params = always(2)  # right on 0 of client 0's 3 samples, 4 of client 1's 6, all 4 of client 2's
    assert single.evaluation.evaluate_personalized(single.state, 1, 0.1) == pytest.approx((0 + 4 / 6 + 1) / 3)

    bank = simulation("mafsvrg", "algo.bank.models=2")
    bank.state.bank = bank.algo.bank.start(bank.state.params, bank.num_clients) | {
        "models": torch.stack([always(0), always(2)])}
    preferred = bank.evaluation.preferred_models(bank.state).tolist()
    assert preferred[:3] == [0, 1, 1], "each client prefers the model that is right on its own training data"
    assert bank.evaluation.evaluate_personalized(bank.state, 1, 0.1) == pytest.approx((1 + 4 / 6 + 1) / 3)
    bank.state.bank["models"] = torch.as_tensor(rng.normal(size=(2, bank.model.dim)), dtype=torch.float32)
    preferred = bank.evaluation.preferred_models(bank.state).tolist()
    expected, _ = by_definition(bank, [bank.state.bank["models"][m] for m in preferred])
    assert bank.evaluation.evaluate_personalized(bank.state, 1, 0.1) == expected

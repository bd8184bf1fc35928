"""FedAvg and centralized SGD against hand computations and plain PyTorch."""

import copy

import numpy as np
import pytest
import torch
from conftest import register_tiny

from fedrun.algorithms.schema import make
from fedrun.engine.run.sampling import plan_client, plan_cohort, sample_clients
from fedrun.engine.run.simulation import Simulation

FIXED = make("schedule", "fixed")


def local_steps(num_samples: int, epochs: float, batch_size: int) -> int:
    """tau_i of the fixed schedule (floor(E n_i / B), at least 1)."""
    return FIXED.local_steps(FIXED.init(), num_samples, epochs, batch_size)


def softmax_regression_gd(w, b, x, y, lr):
    """One SGD step of softmax regression with mean cross-entropy, in float64 numpy."""
    z = x @ w.T + b
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    g = p / len(y)
    return w - lr * g.T @ x, b - lr * g.sum(axis=0)


def test_fedavg_round_on_tiny_linear_problem_equals_hand_computation(monkeypatch, cfg_factory):
    rng = np.random.default_rng(3)
    sizes = [2, 4, 6, 5]
    users = np.repeat(np.arange(4), sizes)
    x = rng.normal(size=(sum(sizes), 3))
    y = rng.integers(0, 2, sum(sizes))
    register_tiny(monkeypatch, "tiny", x, y, users=users)
    cfg = cfg_factory("model=logreg", "partition=natural", "fl.num_clients=4", "fl.clients_per_round=3",
                      "fl.local_epochs=1", "fl.batch_size=2", "fl.lr=0.3", "seed=5", "hardware=cpu")
    cfg.data.name = "tiny"
    sim = Simulation.from_config(cfg)
    w0 = sim.state.params.double().numpy().copy()
    out = sim.run_round(1)

    cohort = [p.id for p in out.plans]
    assert cohort == sample_clients(4, 3, 5, 1).tolist() and len(set(cohort)) == 3
    assert [p.tau for p in out.plans] == [local_steps(sizes[c], 1, 2) for c in cohort]  # unequal tau_i
    n = np.array([sizes[c] for c in cohort], dtype=float)
    total = np.zeros_like(w0)
    for plan, p_i in zip(out.plans, n / n.sum()):  # p_i renormalised over the round's clients
        wk, bk = w0[:6].reshape(2, 3), w0[6:]
        for batch in plan.batches.numpy():
            assert set(users[batch]) == {plan.id}
            wk, bk = softmax_regression_gd(wk, bk, x[batch], y[batch], 0.3)
        total += p_i * (np.concatenate([wk.ravel(), bk]) - w0)
    np.testing.assert_allclose(sim.state.params.double().numpy(), w0 + total, rtol=0, atol=1e-6)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("fused", [False, True])
def test_fedavg_one_client_one_epoch_equals_centralized_sgd(cfg_factory, layout, fused):
    """Bit for bit plain PyTorch fed the same image layout (hardware.layout), with the layers computed one by one
    (hardware.native=false); with cnn3's first convolution, pooling and ReLU as one kernel (the default), to
    float32 rounding."""
    from fedrun.model.native import fused_conv
    from fedrun.model.functional import channels_last

    if fused and not fused_conv.enabled():
        pytest.skip("the fused kernel cannot be built here")
    cfg = cfg_factory("data=digits", "model=cnn3", "partition=iid", "fl.num_clients=1", "fl.clients_per_round=1",
                      "fl.local_epochs=1", "fl.batch_size=32", "fl.lr=0.1", "seed=7", "hardware=cpu",
                      "hardware.executor=loop", f"hardware.layout={layout}", f"hardware.native={fused}")
    laid_out = channels_last if layout == "channels_last" else (lambda x: x)
    sim = Simulation.from_config(cfg)
    w0 = sim.state.params.clone()
    module = copy.deepcopy(sim.model.module)  # plain PyTorch from the same initial weights
    with torch.no_grad():
        for p, v in zip(module.parameters(), sim.model.unflatten(w0).values()):
            p.copy_(v)
    out = sim.run_round(1)
    plan = plan_client(0, sim.partition.indices[0], local_steps(len(sim.labels), 1.0, 32), 32, 7, 1, True, "cpu")
    assert torch.equal(plan.batches, out.plans[0].batches)
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    module.train()
    for batch in plan.batches:
        opt.zero_grad()
        sim.model.objective.loss(module(laid_out(sim.data.x_train[batch])), sim.data.y_train[batch]).backward()
        opt.step()
    expected = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    # the client's local training is bit-for-bit torch.optim.SGD over the same batches (to rounding, fused) ...
    if fused:
        torch.testing.assert_close(out.result.updates[0], expected - w0, rtol=1e-4, atol=1e-6)
    else:
        assert torch.equal(out.result.updates[0], expected - w0)
    # ... and the server's w + 1.0 * (w_1 - w) differs from w_1 only by float rounding
    torch.testing.assert_close(sim.state.params, expected, rtol=0, atol=1e-6)


def test_centralized_pools_all_data_into_one_client(cfg_factory):
    sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "algo=centralized", "fl.num_clients=7",
                                             "fl.clients_per_round=7"))
    assert sim.num_clients == 1 and len(sim.partition.indices[0]) == len(sim.labels)
    out = sim.run_round(1)
    assert out.plans[0].tau == local_steps(len(sim.labels), 1.0, 64)


def test_same_config_and_seed_give_identical_models(cfg_factory):
    def final(seed):
        sim = Simulation.from_config(cfg_factory("data=digits", "model=cnn3", "fl.clients_per_round=4", f"seed={seed}",
                                                 "hardware.deterministic=true"))  # on a GPU; a CPU's kernels always are
        for r in (1, 2):
            sim.run_round(r)
        return sim.state.params

    assert torch.equal(final(1), final(1))
    assert not torch.equal(final(1), final(2))


def test_batch_orders_and_cohorts_do_not_depend_on_the_algorithm(cfg_factory):
    plans = {}
    for algo in ("fedavg", "centralized"):
        sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", f"algo={algo}",
                                                 "fl.clients_per_round=3"))
        plans[algo] = sim.run_round(2).plans
    fedavg = Simulation.from_config(cfg_factory("data=digits", "model=mlp",
                                                "fl.clients_per_round=3")).run_round(2).plans
    assert [p.id for p in fedavg] == [p.id for p in plans["fedavg"]]
    assert all(torch.equal(a.batches, b.batches) for a, b in zip(fedavg, plans["fedavg"]))


@pytest.mark.parametrize("reshuffle", [True, False])
def test_a_cohorts_plans_moved_in_one_copy_are_each_clients_own(reshuffle):
    """plan_cohort gives every client the plan plan_client gives it (clients of several sizes and step counts, one
    with more steps than an epoch), its minibatches views of one tensor."""
    indices = [np.arange(s, s + n) for s, n in ((0, 30), (30, 7), (37, 55), (92, 12))]
    clients, taus = [3, 0, 2], [4, 2, 9]
    plans = plan_cohort(clients, indices, taus, 8, 5, 3, reshuffle, "cpu")
    for plan, c, tau in zip(plans, clients, taus):
        alone = plan_client(c, indices[c], tau, 8, 5, 3, reshuffle, "cpu")
        assert (plan.id, plan.num_samples, plan.tau) == (alone.id, alone.num_samples, alone.tau)
        assert torch.equal(plan.batches, alone.batches)
    assert plans[0].batches.untyped_storage().data_ptr() == plans[2].batches.untyped_storage().data_ptr()
    assert plan_cohort([], indices, [], 8, 5, 3, reshuffle, "cpu") == []


def test_no_reshuffle_keeps_one_order_per_client_across_rounds():
    ix = np.arange(100, 150)
    a = plan_client(3, ix, 5, 10, 0, 1, False, "cpu")
    b = plan_client(3, ix, 5, 10, 0, 2, False, "cpu")
    c = plan_client(3, ix, 5, 10, 0, 2, True, "cpu")
    assert torch.equal(a.batches, b.batches) and not torch.equal(b.batches, c.batches)
    assert sorted(a.batches.flatten().tolist()) == ix.tolist()  # one epoch = every sample once


def test_fractional_and_multi_epoch_steps():
    ix = np.arange(95)
    assert local_steps(95, 0.1, 10) == 1  # floor(0.95) -> at least 1
    two = plan_client(0, ix, local_steps(95, 2.0, 10), 10, 0, 1, True, "cpu")
    assert two.tau == 19 and two.batches.shape == (19, 10)
    assert sorted(two.batches.flatten().tolist()[:95]) == ix.tolist()  # the first epoch holds every sample once
    small = plan_client(0, np.arange(4), local_steps(4, 1.0, 10), 10, 0, 1, True, "cpu")
    assert small.tau == 1 and small.batches.shape == (1, 4)  # a client smaller than B uses all it has


def test_local_accuracy_is_the_mean_over_users_of_their_own_test_accuracy(monkeypatch, cfg_factory):
    """FedGH's Acc_l (LEAF's metric) beside Acc_g, the accuracy on the pooled test set."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(12, 3)), rng.integers(0, 2, 12)
    x_test, y_test = rng.normal(size=(7, 3)), np.array([0, 1, 1, 0, 1, 0, 0])
    test_users = np.array([0, 0, 0, 0, 1, 2, 2])  # unequal test splits: Acc_l weighs users, Acc_g samples
    register_tiny(monkeypatch, "tiny", x, y, x_test, y_test, users=np.repeat(np.arange(3), 4), test_users=test_users)
    cfg = cfg_factory("model=logreg", "partition=natural", "fl.num_clients=3", "fl.clients_per_round=3", "hardware=cpu")
    cfg.data.name = "tiny"
    sim = Simulation.from_config(cfg)
    logits = torch.tensor(x_test, dtype=torch.float32) @ sim.state.params[:6].view(2, 3).T + sim.state.params[6:]
    hits = (logits.argmax(1).numpy() == y_test)
    per_user = [hits[test_users == u].mean() for u in range(3)]
    out = sim.evaluation.evaluate(sim.state)
    assert out["test_acc"] == hits.mean() and out["local_acc"] == np.mean(per_user)
    cfg_iid = cfg_factory("model=logreg", "partition=iid", "fl.num_clients=3", "fl.clients_per_round=3", "hardware=cpu")
    cfg_iid.data.name = "tiny"
    iid = Simulation.from_config(cfg_iid)
    assert "local_acc" not in iid.evaluation.evaluate(iid.state)  # only users' own splits make Acc_l


def test_a_run_that_diverges_stops_with_its_metrics_and_status(tmp_path, cfg_factory):
    from fedrun.engine.run.experiment import run_experiment

    summary = run_experiment(cfg_factory("data=digits", "model=logreg", "fl.rounds=6", "fl.clients_per_round=4",
                                         "fl.lr=1e38", "eval.every=3"), tmp_path)
    assert summary["status"] == "diverged" and summary["rounds_completed"] == summary["diverged_round"] < 6
    rows = (tmp_path / "metrics.csv").read_text().strip().splitlines()[1:]
    assert int(rows[-1].split(",")[0]) == summary["diverged_round"]  # the diverging round is recorded too
    import json
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "diverged"

"""Client-level DP (algo/privacy=dp_fedavg): identities, hand computations, the noise's distribution, and epsilon
against dp-accounting's own computation and a published value."""

import math

import numpy as np
import pytest
import torch
from conftest import register_tiny, run_cli

from fedrun.algorithms.privacy import accounting
from fedrun.algorithms.privacy.accounting import Sampling, epsilon, rounds_within
from fedrun.algorithms.schema import make
from fedrun.engine.run.sampling import poisson_clients
from fedrun.engine.run.simulation import Simulation
from fedrun.engine.run.state import ServerState
from fedrun.errors import ConfigError

dp_accounting = accounting.dp_accounting()  # imported as fedrun imports it (its logging tamed first)
pld, rdp = dp_accounting.pld, dp_accounting.rdp

SMALL = ["data=digits", "model=mlp", "fl.clients_per_round=4", "fl.batch_size=32", "hardware.executor=loop",
         "hardware.dtype=float64"]


def dp(sampling="uniform", rate=None, per_round=4, **settings):
    return make("privacy", "dp_fedavg", **{"seed": 0, "rounds": 10, "sampling": sampling, "rate": rate,
                                           "clients_per_round": per_round, **settings})


def mean(updates, weights, uploads):
    return weights.to(updates.dtype) @ updates


def trained(cfg, rounds):
    sim = Simulation.from_config(cfg)
    for r in range(1, rounds + 1):
        sim.run_round(r)
    return sim


def test_without_noise_or_clipping_it_is_fedavg_bit_for_bit(cfg_factory):
    fedavg = trained(cfg_factory(*SMALL, "algo=fedavg", "algo.aggregator.weighting=uniform"), 2)
    private = trained(cfg_factory(*SMALL, "algo=dp_fedavg", "algo.privacy.noise_multiplier=0",
                                  "algo.privacy.clip=inf"), 2)
    assert torch.equal(fedavg.state.params, private.state.params)
    clipped = trained(cfg_factory(*SMALL, "algo=dp_fedavg", "algo.privacy.noise_multiplier=0",
                                  "algo.privacy.clip=0.01"), 2)
    assert not torch.equal(fedavg.state.params, clipped.state.params)


def test_each_update_is_clipped_to_C_in_its_own_direction():
    part = dp(noise_multiplier=0, clip=0.5)
    updates = torch.tensor([[3.0, 4.0], [0.1, -0.2], [0.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    seen = {}

    def record(clipped, weights, uploads):
        seen["clipped"], seen["weights"] = clipped, weights
        return mean(clipped, weights, uploads)

    state, total, logged = part.release(part.init(None, 8), updates, None, {}, record, 1)
    norms = torch.linalg.vector_norm(seen["clipped"], dim=1)
    assert (norms <= 0.5 + 1e-15).all()
    assert torch.allclose(seen["clipped"][0], torch.tensor([0.3, 0.4], dtype=torch.float64))
    assert torch.equal(seen["clipped"][1:3], updates[1:3])  # within C: as sent
    assert torch.allclose(seen["clipped"][3], torch.tensor([-0.5, 0.0], dtype=torch.float64))
    assert torch.equal(seen["weights"], torch.full((4,), 0.25, dtype=torch.float64))  # 1 / m, m = K = 4
    assert logged["dp_within_clip"] == 0.5 and state["released"] == 1


def test_the_noise_has_standard_deviation_z_C_over_the_expected_cohort():
    part = dp(noise_multiplier=1.3, clip=0.7, per_round=5)
    state = part.init(None, 10)
    zeros = torch.zeros(5, 200_000, dtype=torch.float64)
    _, noise, _ = part.release(state, zeros, None, {}, mean, 3)
    assert noise.std().item() == pytest.approx(1.3 * 0.7 / 5, rel=0.01)  # the std's standard error: 0.16%
    assert abs(noise.mean().item()) < 4 * 1.3 * 0.7 / 5 / math.sqrt(200_000)
    again, other = part.release(state, zeros, None, {}, mean, 3)[1], part.release(state, zeros, None, {}, mean, 4)[1]
    assert torch.equal(noise, again) and not torch.equal(noise, other)  # a function of (seed, round)
    poisson = dp(sampling="poisson", rate=0.25, noise_multiplier=1.0, clip=2.0)
    _, noise, _ = poisson.release(poisson.init(None, 40), zeros, None, {}, mean, 1)
    assert noise.std().item() == pytest.approx(2.0 / 10, rel=0.01)  # m = q N = 10, whoever joined


def test_adaptive_clipping_follows_andrew_et_al_by_hand():
    part = dp(noise_multiplier=0, clip=1.0, target_quantile=0.5, clip_lr=0.2, count_noise=1e-12)
    updates = torch.tensor([[0.5, 0.0], [0.0, 0.7], [3.0, 0.0], [0.1, 0.0]], dtype=torch.float64)
    state, _, logged = part.release(part.init(None, 8), updates, None, {}, mean, 1)
    assert logged["dp_clip"] == 1.0
    assert state["clip"] == pytest.approx(math.exp(-0.2 * (3 / 4 - 0.5)), rel=1e-9)  # 3 of 4 within C
    # Theorem 1: the update's noise sigma = (z^-2 - (2 sigma_b)^-2)^(-1/2), so that the two releases are one of z
    assert dp(noise_multiplier=1.0, target_quantile=0.5, count_noise=1.0).update_noise(8) == pytest.approx(
        (1 - 0.25) ** -0.5)
    assert dp(noise_multiplier=1.0, target_quantile=0.5).update_noise(80) == pytest.approx(
        (1 - (2 * 4 / 20) ** -2) ** -0.5)  # sigma_b = m / 20 by default, m = 4 of 80
    with pytest.raises(ConfigError, match="must be < 2 count_noise"):
        dp(noise_multiplier=1.0, target_quantile=0.5).init(None, 8)  # sigma_b = 4 / 20


def test_epsilon_is_dp_accountings_for_each_sampling():
    z, delta = 1.1, 1e-5
    acc = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(100, 10, dp_accounting.GaussianDpEvent(z)), 7)
    assert epsilon("rdp", Sampling("uniform", None, 10), 100, z, 7, delta) == acc.get_epsilon(delta)
    acc = pld.PLDAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(z)), 7)
    assert epsilon("pld", Sampling("poisson", 0.1, 0), 100, z, 7, delta) == acc.get_epsilon(delta)
    assert epsilon("rdp", Sampling("uniform", None, 10), 100, 0.0, 7, delta) == math.inf
    with pytest.raises(ValueError, match="no bound for cohorts drawn without replacement"):
        epsilon("pld", Sampling("uniform", None, 10), 100, z, 7, delta)


def test_the_accountant_reproduces_abadi_et_al():
    """Abadi et al. (CCS 2016, Sec. 3.1): q = 0.01, sigma = 4, delta = 1e-5, T = 10000 give epsilon ~ 1.26 by the
    moments accountant. The library's RDP at the moments accountant's integer orders, converted as it converts
    (eps = min_alpha RDP(alpha) + log(1/delta) / (alpha - 1)), gives that number; fedrun's epsilon (the library's
    tighter conversion over more orders) is below it."""
    orders = list(range(2, 33))
    acc = rdp.RdpAccountant(orders=orders)
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(4.0)), 10_000)
    moments = min(r + math.log(1e5) / (a - 1) for r, a in zip(acc._rdp, orders))  # the library's RDP per order
    assert round(moments, 2) == 1.26
    ours = epsilon("rdp", Sampling("poisson", 0.01, 0), 60_000, 4.0, 10_000, 1e-5)
    assert 0.9 < ours < moments


def test_a_target_epsilon_refuses_the_rounds_beyond_it():
    sampling = Sampling("uniform", None, 10)
    fit = rounds_within(3.0, "rdp", sampling, 100, 1.0, 1e-5, 500)
    assert epsilon("rdp", sampling, 100, 1.0, fit, 1e-5) <= 3.0 < epsilon("rdp", sampling, 100, 1.0, fit + 1, 1e-5)
    dp(per_round=10, noise_multiplier=1.0, target_epsilon=3.0, rounds=fit).init(None, 100)
    with pytest.raises(ConfigError, match=f"Fix: fl.rounds={fit} "):
        dp(per_round=10, noise_multiplier=1.0, target_epsilon=3.0, rounds=fit + 1).init(None, 100)


def test_poisson_sampling_takes_each_client_at_its_rate():
    draws = [poisson_clients(50, 0.2, 7, r) for r in range(1, 4001)]
    sizes = np.array([len(d) for d in draws])
    assert abs(sizes.mean() - 10) < 4 * math.sqrt(50 * 0.2 * 0.8 / len(draws))
    share = np.bincount(np.concatenate(draws), minlength=50) / len(draws)
    assert np.abs(share - 0.2).max() < 4 * math.sqrt(0.2 * 0.8 / len(draws))
    assert all((np.diff(d) > 0).all() for d in draws)  # sorted, no repeats


def test_a_round_no_client_joined_releases_only_the_noise(cfg_factory):
    """Poisson sampling at 5% of 4 clients leaves most rounds empty: under DP-FedAvg the model takes the noise
    (accounted like any round); without a mechanism it stays."""
    poisson = [*SMALL, "fl.num_clients=4", "participation=poisson", "participation.rate=0.05"]
    empty = next(r for r in range(1, 50) if not len(poisson_clients(4, 0.05, 0, r)))
    for algo, moves in (("dp_fedavg", True), ("fedavg", False)):
        sim = Simulation.from_config(cfg_factory(*poisson, f"algo={algo}", "seed=0"))
        before = sim.state.params.clone()
        out = sim.run_round(empty)
        assert out.plans == [] and math.isnan(out.train_loss)
        assert (not torch.equal(before, sim.state.params)) == moves
    assert sim.algo.report(sim.state) == {}
    private = Simulation.from_config(cfg_factory(*poisson, "algo=dp_fedavg", "seed=0"))
    private.run_round(empty)
    assert private.algo.report(private.state)["epsilon"] == epsilon(
        "rdp", Sampling("poisson", 0.05, 4), 4, 1.0, 1, 1e-5)


def test_a_checkpoint_from_before_privacy_resumes(cfg_factory):
    sim = Simulation.from_config(cfg_factory(*SMALL, "algo=dp_fedavg"))
    sim.run_round(1)
    saved = sim.state.to_plain()
    assert saved["privacy"]["released"] == 1
    del saved["privacy"]
    initial = Simulation.from_config(cfg_factory(*SMALL, "algo=dp_fedavg")).state
    assert ServerState.from_plain(saved, sim.device, initial).privacy == initial.privacy


def test_each_evaluated_row_carries_epsilon_and_bad_combinations_exit_2(tmp_path):
    run_cli("algo=dp_fedavg", "data=digits", "model=logreg", "fl.rounds=3", "fl.num_clients=20",
            "participation=poisson", "participation.rate=0.3", "algo.privacy.accountant=pld", "progress=false",
            "hydra.run.dir=run", cwd=tmp_path)
    import pandas as pd

    rows = pd.read_csv(tmp_path / "run" / "metrics.csv")
    for r, eps in zip(rows["round"], rows["epsilon"]):
        acc = pld.PLDAccountant()
        acc.compose(dp_accounting.PoissonSampledDpEvent(0.3, dp_accounting.GaussianDpEvent(1.0)), int(r))
        assert eps == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
    bad = run_cli("algo=scaffold", "algo/privacy=dp_fedavg", "algo/harmonizer=fedgh", "algo/step_selector=grab",
                  "participation=earliest", "data=digits", "progress=false", cwd=tmp_path, check=False)
    assert bad.returncode == 2
    for reason in ("control-variate change dc_i goes to the server in the clear", "weighs each clipped update alike",
                   "a harmoniser changes each update by the others'", "GraB's server keeps each client's mean step",
                   "participation='earliest': cannot be accounted"):
        assert reason in bad.stderr
    fixed_pld = run_cli("algo=dp_fedavg", "algo.privacy.accountant=pld", "data=digits", cwd=tmp_path, check=False)
    assert fixed_pld.returncode == 2 and "has no bound for participation=uniform" in fixed_pld.stderr


def dpsgd_rule(z=0.0, clip=0.5):
    return make("local", "dpsgd", clip=clip, noise_multiplier=z, batch_size=8)


def test_dpsgds_clipped_per_sample_gradients_equal_a_loop_over_samples(cfg_factory):
    sim = Simulation.from_config(cfg_factory(*SMALL, "algo/local=dpsgd", "algo.local.noise_multiplier=0"))
    rule, model = dpsgd_rule(), sim.model
    w = sim.state.params + 0.1 * torch.randn_like(sim.state.params)
    state = {"w": w, "buffers": {}}
    x, y = sim.data.x_train[:8], sim.data.y_train[:8]
    losses, grads = rule.per_sample_gradients(model, state, x, y)
    by_loop = []
    for j in range(8):
        loss, g = model.loss_and_grad(w, {}, x[j:j + 1], y[j:j + 1])
        assert torch.allclose(loss, losses[j]) and torch.allclose(g, grads[j])
        by_loop.append(g * min(1.0, 0.5 / float(torch.linalg.vector_norm(g))))
    assert torch.allclose(rule.private_gradient(grads), torch.stack(by_loop).mean(dim=0))
    assert (torch.linalg.vector_norm(grads, dim=1) > 0.5).any()  # some were clipped


def test_dpsgds_noise_has_standard_deviation_z_C_over_B_and_its_epsilon_is_the_librarys():
    noise = dpsgd_rule(z=1.3, clip=0.5).private_gradient(torch.zeros(8, 100_000, dtype=torch.float64))
    assert noise.std().item() == pytest.approx(1.3 * 0.5 / 8, rel=0.02)
    clients = {0: {"dp_steps": torch.tensor(30.0), "dp_rate": torch.tensor(0.1, dtype=torch.float64)},
               1: {"dp_steps": torch.tensor(50.0), "dp_rate": torch.tensor(0.05, dtype=torch.float64)}}
    acc = rdp.RdpAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.3)), 50)
    assert dpsgd_rule(z=1.3).spent(clients) == {"sample_epsilon": acc.get_epsilon(1e-5)}  # the worst q and steps


def test_a_vectorised_dpsgd_cohort_equals_the_loop_and_counts_each_clients_steps(cfg_factory, monkeypatch):
    common = [*SMALL[:-2], "hardware.dtype=float64", "algo/local=dpsgd", "algo.local.noise_multiplier=0",
              "fl.clients_per_round=10"]
    loop = Simulation.from_config(cfg_factory(*common, "hardware.executor=loop"))
    vmap = Simulation.from_config(cfg_factory(*common, "hardware.executor=vmap"))
    for r in (1, 2):
        out = loop.run_round(r)
        vmap.run_round(r)
    torch.testing.assert_close(loop.state.params, vmap.state.params)
    for plan in out.plans:
        assert float(loop.state.clients[plan.id]["dp_steps"]) == 2 * plan.tau  # the same tau both rounds
    register_tiny(monkeypatch, "tiny", np.random.default_rng(0).normal(size=(40, 3, 32, 32)),
                  np.arange(40) % 4, kind="image")
    cfg = cfg_factory("model=mobilenetv2", "model.width_mult=0.25", "fl.num_clients=4", "fl.clients_per_round=4",
                      "algo/local=dpsgd")
    cfg.data.name = "tiny"
    with pytest.raises(ConfigError, match="per-sample gradients need a model without BatchNorm"):
        Simulation.from_config(cfg)

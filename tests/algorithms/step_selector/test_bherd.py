"""BHerd's herding (Algorithm 2) and GraB's balancing, against direct implementations and hand-made cases."""

import csv

import numpy as np
import pytest
import torch
from conftest import run_cli
from omegaconf import OmegaConf

from fedrun.algorithms.step_selector.grab import grab_order
from fedrun.algorithms.step_selector.herd import centred_gram, herd_order, num_selected
from fedrun.data.fixtures import write_cifar, write_imdb
from fedrun.engine.run.experiment import run_experiment
from fedrun.engine.run.simulation import Simulation


def direct_algorithm2(z: np.ndarray, k: int) -> list[int]:
    """Algorithm 2 as printed: centre, then k times argmin ||s + z_mu|| over the remaining ones (O(tau^2 d))."""
    c = z - z.mean(axis=0)
    s, remaining, order = np.zeros(z.shape[1]), list(range(len(z))), []
    for _ in range(k):
        norms = [np.linalg.norm(s + c[j]) for j in remaining]
        j = remaining[int(np.argmin(norms))]  # first minimum: the lowest index on ties
        order.append(j)
        remaining.remove(j)
        s = s + c[j]
    return order


@pytest.mark.parametrize("tau,d,seed", [(7, 3, 0), (20, 50, 1), (33, 5, 2)])
def test_gram_herding_equals_direct_algorithm2(tau, d, seed):
    z = np.random.default_rng(seed).normal(size=(tau, d))
    for k in (1, tau // 2, tau):
        assert herd_order(torch.tensor(z), k) == direct_algorithm2(z, k)


def test_gram_herding_breaks_ties_like_the_direct_loop():
    z = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [-1.0, -1.0], [-1.0, -1.0]])
    assert herd_order(torch.tensor(z), 6) == direct_algorithm2(z, 6)
    # centred = z (mean 0); norms 1,1,1,1,sqrt2,sqrt2 -> 0 (lowest of four ties); then s = [1,0] and
    # ||s + c_j|| = sqrt2, 2, sqrt2, 1, 1 for j = 1..5 -> 4 (lowest of two ties)
    assert herd_order(torch.tensor(z), 2) == [0, 4]


@pytest.mark.parametrize("alpha,tau,k", [(0.5, 5, 3), (0.5, 4, 2), (0.3, 10, 3), (0.25, 10, 3), (0.1, 4, 1),
                                         (0.01, 50, 1), (1.0, 7, 7)])
def test_alpha_tau_rounds_half_up_and_keeps_at_least_one(alpha, tau, k):
    assert num_selected(alpha, tau) == k


def test_exact_ties_go_to_the_lowest_index_however_rounding_falls():
    # two steps: their centred gradients are opposite, so the first pick is an exact tie, whatever the values
    for seed in range(20):
        z = torch.randn(2, 300, generator=torch.Generator().manual_seed(seed)) * 10 ** (seed % 5 - 2)
        assert herd_order(z, 1) == [0]
    # the identity: every centred row has the same norm, and every next pick ties among the rest. Algorithm 2 in
    # exact rational arithmetic takes them in index order; in floating point the direct loop does not
    eye = torch.eye(6)
    assert herd_order(eye, 6) == exact_algorithm2([[int(i == j) for j in range(6)] for i in range(6)], 6)
    assert herd_order(eye, 6) == [0, 1, 2, 3, 4, 5]
    two = torch.tensor([[3.0, -1.0], [1.0, 2.0]])
    assert herd_order(two, 1) == exact_algorithm2([[3, -1], [1, 2]], 1) == [0]


def exact_algorithm2(rows: list[list[int]], k: int) -> list[int]:
    """Algorithm 2 on integer rows in exact rational arithmetic: ties are true ties, taken at the lowest index."""
    from fractions import Fraction

    tau, d = len(rows), len(rows[0])
    mean = [Fraction(sum(r[i] for r in rows), tau) for i in range(d)]
    c = [[Fraction(r[i]) - mean[i] for i in range(d)] for r in rows]
    s, remaining, order = [Fraction(0)] * d, list(range(tau)), []
    for _ in range(k):
        norms = [sum((s[i] + c[j][i]) ** 2 for i in range(d)) for j in remaining]
        j = remaining[norms.index(min(norms))]
        order.append(j)
        remaining.remove(j)
        s = [s[i] + c[j][i] for i in range(d)]
    return order


def test_near_ties_beyond_the_tolerance_pick_the_true_minimum():
    # rows 0 and 1 are equally far from the mean but for 1e-6 of row 0's squared norm: far beyond the tolerance
    z = torch.tensor([[1.0 + 1e-6, 0.0], [0.0, -1.0], [-1.0 - 1e-6, 1.0]], dtype=torch.float64)
    c = z - z.mean(0)
    assert herd_order(z, 1) == [int(torch.argmin((c * c).sum(1)))] == direct_algorithm2(z.numpy(), 1)


def step_gradients(sim, plan, w0) -> torch.Tensor:
    """A client's local SGD from w0 over its plan's batches, written out: its step gradients z_1..z_tau (tau, d)."""
    w, steps = w0.clone(), []
    for batch in plan.batches:
        _, g = sim.model.loss_and_grad(w, {}, sim.data.x_train[batch], sim.data.y_train[batch])
        steps.append(g)
        w = w - sim.settings.fl.lr * g
    return torch.stack(steps)


def test_the_random_control_sends_a_seeded_uniform_subset_scaled_as_bherd(cfg_factory):
    common = ["data=digits", "model=logreg", "algo=bherd", "algo/step_selector=random", "fl.clients_per_round=3",
              "fl.batch_size=16", "hardware.executor=loop"]
    sim = Simulation.from_config(cfg_factory(*common))
    assert sim.algo.step_selector.name == "random" and sim.settings.fl.reshuffle is False
    orders = {r: sim.algo.step_selector.order({}, torch.zeros(20, 3), 4, r, 10, "cpu") for r in (1, 2)}
    assert sorted(orders[1]) == list(range(20)) and orders[1] != orders[2], "a fresh permutation every round"
    selector = Simulation.from_config(cfg_factory(*common)).algo.step_selector
    assert orders[1] == selector.order({}, torch.zeros(20, 3), 4, 1, 10, "cpu")
    w0 = sim.state.params.clone()
    out = sim.run_round(1)
    expected = torch.zeros_like(w0)
    for plan, p in zip(out.plans, out.weights):
        z = step_gradients(sim, plan, w0)
        k = num_selected(0.5, plan.tau)
        expected += p * z[sim.algo.step_selector.order({}, z, plan.id, 1, k, "cpu")[:k]].sum(0)
    torch.testing.assert_close(sim.state.params, w0 - sim.settings.fl.lr * 2.0 * expected, rtol=1e-5, atol=1e-6)
    # the residual: how far each client's asked-for step is from FedAvg's, 0 when every step is selected
    assert out.diagnostics["herd_residual"] > 0
    full = Simulation.from_config(cfg_factory(*common, "algo.step_selector.alpha=1.0")).run_round(1)
    assert full.diagnostics["herd_residual"] == pytest.approx(0.0, abs=1e-6)


def test_herding_non_finite_steps_does_not_crash_and_the_run_stops_as_diverged(tmp_path, cfg_factory):
    z = torch.tensor([[float("nan"), 1.0], [2.0, float("inf")], [1.0, 1.0]])
    assert sorted(herd_order(z, 3)) == [0, 1, 2]
    summary = run_experiment(cfg_factory("data=digits", "model=svm", "algo=bherd", "fl.lr=1e3", "fl.rounds=10",
                                         "fl.clients_per_round=3"), tmp_path / "run")
    assert summary["status"] == "diverged"


def test_one_selected_step_is_the_one_closest_to_the_mean():
    z = np.random.default_rng(3).normal(size=(15, 4))
    closest = int(np.argmin(np.linalg.norm(z - z.mean(axis=0), axis=1)))
    assert herd_order(torch.tensor(z), 1) == [closest]


def test_grab_balancing_follows_its_sign_rule_on_a_hand_made_sequence():
    z = torch.tensor([[1.0, 0.0], [1.0, 0.1], [-1.0, 0.0], [0.5, 0.5], [0.0, -1.0]], dtype=torch.float64)
    # m_stale = 0: s = 0 -> t0 front (s=[1,0]); t1: s.c = 1 > 0 -> back (s=[0,-0.1]); t2: s.c = 0 -> front
    # (s=[-1,-0.1]); t3: s.c = -0.55 -> front (s=[-0.5,0.4]); t4: s.c = -0.4 -> front
    assert grab_order(z, torch.zeros(2, dtype=torch.float64)) == [0, 2, 3, 4, 1]
    # a stale mean shifts every step before the sign test: c = z - [1, 0] = [0,0], [0,.1], [-2,0], [-.5,.5], [-1,-1]
    # t0, t1, t2: s.c = 0 -> front (s = [-2, .1]); t3: s.c = 1.05 -> back (s = [-1.5, -.4]); t4: s.c = 1.9 -> back
    assert grab_order(z, torch.tensor([1.0, 0.0], dtype=torch.float64)) == [0, 1, 2, 4, 3]


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_bherd_with_alpha_one_reproduces_fedavg_metrics_exactly(tmp_path, cfg_factory):
    common = ["data=digits", "model=logreg", "fl.rounds=3", "fl.clients_per_round=6", "fl.batch_size=16",
              "fl.reshuffle=false"]  # one batch protocol for both (BHerd's default is the fixed order)
    run_experiment(cfg_factory(*common, "algo=fedavg"), tmp_path / "fedavg")
    run_experiment(cfg_factory(*common, "algo=bherd", "algo.step_selector.alpha=1.0"), tmp_path / "bherd")
    fedavg, bherd = _rows(tmp_path / "fedavg" / "metrics.csv"), _rows(tmp_path / "bherd" / "metrics.csv")
    for a, b in zip(fedavg, bherd):
        assert {k: v for k, v in a.items() if k != "elapsed_s"} == {k: b[k] for k in a if k != "elapsed_s"}
    assert "herd_dist_mean" in bherd[0]


def test_herding_keeps_a_fixed_batch_order_by_default_and_baselines_reshuffle(cfg_factory):
    assert cfg_factory("algo=bherd").fl.reshuffle is False
    assert cfg_factory("algo=grab_fedavg").fl.reshuffle is False
    assert cfg_factory("algo=fedavg").fl.reshuffle is True
    assert cfg_factory("algo=bherd", "fl.reshuffle=true").fl.reshuffle is True  # Fig. 7's RR protocol


def test_bherd_sends_the_herded_sum_scaled_by_e_over_alpha(cfg_factory):
    sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "algo=bherd",
                                             "algo.step_selector.alpha=0.5",
                                             "fl.clients_per_round=3", "fl.batch_size=16", "fl.local_epochs=1",
                                             "hardware.executor=loop"))
    w0 = sim.state.params.clone()
    out = sim.run_round(1)
    expected = torch.zeros_like(w0)
    for plan, p in zip(out.plans, out.weights):
        z = step_gradients(sim, plan, w0)
        k = num_selected(0.5, plan.tau)
        g_i = z[herd_order(z, k)].sum(0)  # eq. 5
        expected += p * g_i
    # eq. 6: w <- w - eta * E / alpha * sum_i p_i g_i
    torch.testing.assert_close(sim.state.params, w0 - sim.settings.fl.lr * (1.0 / 0.5) * expected, rtol=1e-5, atol=1e-6)


def test_decayed_learning_rate_halves_eta_from_the_milestone(cfg_factory):
    sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "fl.lr=0.2", "fl.lr_milestones=[3,5]"))
    assert [sim.lr(r) for r in (1, 2, 3, 4, 5, 6)] == [0.2, 0.2, 0.1, 0.1, 0.05, 0.05]


def test_herding_reports_the_memory_of_the_stored_gradients(cfg_factory):
    sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "algo=bherd", "fl.clients_per_round=3"))
    out = sim.run_round(1)
    expected = sum(p.tau for p in out.plans) * sim.model.dim * 4 / 2**20
    assert out.diagnostics["steps_mb"] == pytest.approx(expected)
    assert set(out.diagnostics) >= {"agg_grad_mean", "agg_grad_var", "herd_dist_mean", "herd_dist_max"}


def test_gram_matrix_in_column_blocks_equals_the_whole():
    z = torch.randn(9, 50, dtype=torch.float64)
    centre = z.mean(0)
    whole = (z - centre) @ (z - centre).T
    torch.testing.assert_close(centred_gram(z, centre, block=7), whole)
    assert herd_order(z, 5, block=7) == herd_order(z, 5)


@pytest.mark.parametrize("algo", ["bherd", "grab_fedavg"])
def test_steps_kept_in_host_memory_with_a_blocked_gram_give_the_same_run(tmp_path, cfg_factory, algo):
    common = ["data=digits", "model=logreg", "fl.rounds=2", "fl.clients_per_round=4", "fl.batch_size=16",
              f"algo={algo}", "hardware.dtype=float64"]
    run_experiment(cfg_factory(*common, "hardware.step_store=device"), tmp_path / "device")
    sim = Simulation.from_config(cfg_factory(*common, "hardware.step_store=host", "hardware.gram_block=13"))
    assert sim.step_store == torch.device("cpu") and sim.gram_block == 13
    run_experiment(cfg_factory(*common, "hardware.step_store=host", "hardware.gram_block=13"), tmp_path / "host")
    device, host = _rows(tmp_path / "device" / "metrics.csv"), _rows(tmp_path / "host" / "metrics.csv")
    for a, b in zip(device, host, strict=True):
        assert float(a["test_loss"]) == pytest.approx(float(b["test_loss"]), rel=1e-12)
        assert a["test_acc"] == b["test_acc"] and a["herd_dist_mean"][:10] == b["herd_dist_mean"][:10]


def test_bherd_experiment_presets_run_two_rounds_from_the_cli(tmp_path):
    write_cifar(tmp_path / "data", "cifar10", per_file=5)
    write_imdb(tmp_path / "data", per_folder=10)
    for preset, extra in [("bherd_svm_mnist", []), ("bherd_cnn_cifar10", [f"data.root={tmp_path / 'data'}"]),
                          ("bherd_rnn_imdb", [f"data.root={tmp_path / 'data'}", "data.max_len=20"])]:
        run_dir = tmp_path / preset
        run_cli(f"experiment={preset}", "algo=bherd", "fl.rounds=2", "progress=false", f"hydra.run.dir={run_dir}",
                *extra, cwd=tmp_path)
        rows = _rows(run_dir / "metrics.csv")
        assert len(rows) == 2 and "herd_dist_mean" in rows[0], preset


def test_the_fig5a_and_fig8_presets_sweep_the_papers_grids(tmp_path):
    for fig, key, values in [("fig5a", "algo.step_selector.alpha", "0.1,0.3,0.5,0.7,1.0"),
                             ("fig8a", "fl.local_epochs", "0.1,0.5,1.0,1.5,2.0"),
                             ("fig8b", "fl.batch_size", "10,50,100,500,1000"),
                             ("fig8c", "fl.num_clients", "1,5,10,15")]:
        hydra = run_cli(f"experiment=bherd_{fig}", "--cfg", "hydra", cwd=tmp_path).stdout
        assert f"{key}: {values}" in hydra and "partition: case1,case2" in hydra


@pytest.mark.slow  # ten jobs; the grid's values are checked above, each job's settings by test_table's checks
def test_fig5a_sweep_preset_runs_its_grid(tmp_path):
    sweep = tmp_path / "fig5a"
    run_cli("-m", "experiment=bherd_fig5a", "fl.rounds=1", "fl.batch_size=2000", "progress=false",
            f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    configs = [OmegaConf.load(p) for p in sorted(sweep.glob("*/config.yaml"))]
    grid = {(c.partition.name, c.algo.step_selector.alpha) for c in configs}
    assert grid == {(case, a) for case in ("case1", "case2") for a in (0.1, 0.3, 0.5, 0.7, 1.0)}


def test_the_control_preset_sweeps_selectors_and_rates_and_case2_readings_compose(tmp_path, cfg_factory):
    hydra = run_cli("experiment=bherd_control", "--cfg", "hydra", cwd=tmp_path).stdout
    assert "algo/step_selector: all,herd,random" in hydra and "fl.lr: 2e-4,0.01,0.05" in hydra
    control = cfg_factory("experiment=bherd_control").partition
    assert (control.split, control.label_deal) == ("labels", "task")
    task = cfg_factory("experiment=bherd_svm_mnist", "partition=case2_task").partition
    assert (task.name, task.split, task.label_deal) == ("case2", "samples", "task")


@pytest.mark.slow  # nine jobs; what they sweep and their partition are checked above
def test_bherd_control_preset_runs_its_grid(tmp_path):
    sweep = tmp_path / "control"
    run_cli("-m", "experiment=bherd_control", "fl.rounds=2", "fl.batch_size=6000", "progress=false",
            f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    configs = [OmegaConf.load(p) for p in sorted(sweep.glob("*/config.yaml"))]
    assert {(c.algo.step_selector.name, c.fl.lr) for c in configs} == {(s, lr) for s in ("all", "herd", "random")
                                                                   for lr in (2e-4, 0.01, 0.05)}
    assert all((c.partition.split, c.partition.label_deal) == ("labels", "task") for c in configs)
    assert all(len(_rows(p.parent / "metrics.csv")) == 2 for p in sweep.glob("*/config.yaml"))

"""FedGH and DGT against their algorithms written directly on vectors, and hand-made cases."""

import json

import numpy as np
import pytest
import torch

from fedrun.algorithms.harmonizer.dgt import dgt_coefficients
from fedrun.algorithms.harmonizer.fedgh import fedgh_coefficients
from fedrun.algorithms.harmonizer.gram import conflict_statistics
from fedrun.algorithms.schema import make


def direct_fedgh(u: np.ndarray, orders) -> np.ndarray:
    """FedGH Algorithm 1 on vectors: g_k projected in turn against the unmodified copies g~_j."""
    out = u.copy()
    for k in range(len(u)):
        for j in orders[k]:
            dot = out[k] @ u[j]
            if dot < 0:
                out[k] = out[k] - dot / (u[j] @ u[j]) * u[j]
    return out


def even(k: int) -> torch.Tensor:
    return torch.full((k,), 1 / k, dtype=torch.float64)


def test_fedgh_leaves_non_conflicting_updates_unchanged():
    u = torch.tensor([[1.0, 0.2, 0.0], [0.5, 1.0, 0.1], [0.3, 0.0, 2.0]], dtype=torch.float64)
    assert (u @ u.T >= 0).all()
    torch.testing.assert_close(make("harmonizer", "fedgh", seed=0)({}, u, even(3), [0, 1, 2], 1)[1], u)


def test_two_conflicting_updates_each_end_orthogonal_to_the_others_original():
    u = torch.tensor([[1.0, 1.0], [-1.0, 0.2]], dtype=torch.float64)
    _, out, _ = make("harmonizer", "fedgh", seed=0)({}, u, even(2), [0, 1], 1)
    assert float(out[0] @ u[1]) == pytest.approx(0, abs=1e-12)
    assert float(out[1] @ u[0]) == pytest.approx(0, abs=1e-12)


def test_three_clients_by_hand():
    u = np.array([[1.0, 0.0], [-1.0, 1.0], [0.0, -1.0]])
    orders = [[1, 2], [2, 0], [0, 1]]
    # client 0: . g1 = -1 -> g0 - (-1/2) g1 = [0.5, 0.5]; . g2 = -0.5 -> + 0.5 g2 = [0.5, 0]
    # client 1: . g2 = -1 -> g1 + g2 = [-1, 0]; . g0 = -1 -> + g0 = [0, 0]
    # client 2: . g0 = 0 (no conflict); . g1 = -1 -> g2 + g1 / 2 = [-0.5, -0.5]
    expected = np.array([[0.5, 0.0], [0.0, 0.0], [-0.5, -0.5]])
    coef = fedgh_coefficients(torch.tensor(u @ u.T), orders)
    np.testing.assert_allclose((coef.numpy() @ u), expected, atol=1e-12)
    np.testing.assert_allclose(direct_fedgh(u, orders), expected, atol=1e-12)


def test_gram_fedgh_equals_direct_algorithm_on_random_updates():
    rng = np.random.default_rng(0)
    u = rng.normal(size=(8, 30))
    orders = [list(rng.permutation([j for j in range(8) if j != k])) for k in range(8)]
    coef = fedgh_coefficients(torch.tensor(u @ u.T), orders)
    np.testing.assert_allclose(coef.numpy() @ u, direct_fedgh(u, orders), rtol=1e-9, atol=1e-12)


def test_fedgh_order_is_seeded():
    u = torch.randn(6, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    a, b = (make("harmonizer", "fedgh", seed=3)({}, u, even(6), list(range(6)), 4)[1] for _ in range(2))
    torch.testing.assert_close(a, b)


def test_dgt_calibration_reaches_the_target_similarity_and_updates_baselines():
    rng = np.random.default_rng(2)
    u = torch.tensor(rng.normal(size=(5, 12)))
    gram = u @ u.T
    baselines = torch.tensor([0.9, -0.9, 0.5, 0.9, -0.9], dtype=torch.float64)
    coef, phi, new = dgt_coefficients(gram, baselines, momentum=0.5)
    out = coef @ u
    for k in range(5):
        pop = u.sum(0) - u[k]
        cos = float(out[k] @ pop / (out[k].norm() * pop.norm()))
        if phi[k] < baselines[k]:
            assert cos == pytest.approx(float(baselines[k]), abs=1e-9)  # rotated to the baseline it targeted
        else:
            torch.testing.assert_close(out[k], u[k])  # above its baseline: unchanged
    assert (phi < baselines).any() and (phi >= baselines).any()
    torch.testing.assert_close(new, 0.5 * baselines + 0.5 * phi)  # eq. 8 either way


def test_dgt_keeps_baselines_of_clients_that_sit_out():
    dgt = make("harmonizer", "dgt", momentum=0.5)
    u = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    weights = torch.full((3,), 1 / 3, dtype=torch.float64)
    state, _, _ = dgt(dgt.init(), u, weights, [0, 1, 2], 1)
    kept = state["baselines"][2]
    state, _, _ = dgt(state, u[:2], weights[:2] * 1.5, [0, 1], 2)
    assert state["baselines"][2] == kept and set(state["baselines"]) == {0, 1, 2}


@pytest.mark.parametrize("name, settings", [("dgt", {"momentum": 0.5}), ("fedgh", {"seed": 3})])
def test_norm_only_control_sends_the_base_updates_scaled_by_the_logged_ratio(name, settings):
    """Either harmoniser's step-length control: its own coefficients and state, the clients' own updates sent, each
    scaled so that the aggregate is as long as the harmonised one."""
    u = torch.randn(6, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    u[3] = -u[:3].sum(0)  # a client against the rest: it calibrates (DGT), it conflicts (FedGH)
    p = torch.tensor([0.1, 0.2, 0.1, 0.3, 0.2, 0.1], dtype=torch.float64)
    part, control = make("harmonizer", name, **settings), make("harmonizer", name, **settings, mode="norm_only")
    start = part.init()
    if name == "dgt":
        start = {"baselines": {k: 0.2 for k in range(6)}}
    after, harmonised, info = part(start, u, p, list(range(6)), 1)
    after_control, scaled, info_control = control(start, u, p, list(range(6)), 1)
    assert info == info_control and after == after_control, "the same coefficients are computed"
    assert not torch.allclose(harmonised, u), "the case harmonises"
    ratio = info[f"{name}_norm_ratio"]
    assert ratio == pytest.approx(float((p @ harmonised).norm() / (p @ u).norm()))
    assert ratio != pytest.approx(1.0)
    torch.testing.assert_close(scaled, u * ratio)
    assert float((p @ scaled).norm()) == pytest.approx(float((p @ harmonised).norm()))


def test_norm_only_control_without_anything_to_harmonise_is_the_base_algorithm():
    u = torch.randn(6, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    p = torch.tensor([0.1, 0.2, 0.1, 0.3, 0.2, 0.1], dtype=torch.float64)
    calm = make("harmonizer", "dgt", momentum=0.5, mode="norm_only")  # every update above its baseline
    _, same, info = calm({"baselines": {k: -1.0 for k in range(6)}}, u, p, list(range(6)), 2)
    assert info["dgt_norm_ratio"] == pytest.approx(1.0) and info["dgt_calibrated"] == 0
    torch.testing.assert_close(same, u)
    agreeing = u.abs()  # no pair conflicts: FedGH projects nothing
    _, same, info = make("harmonizer", "fedgh", seed=0, mode="norm_only")({}, agreeing, p, list(range(6)), 2)
    assert info["fedgh_norm_ratio"] == pytest.approx(1.0)
    torch.testing.assert_close(same, agreeing)


def test_conflict_statistics_on_constructed_updates():
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    stats = conflict_statistics(u)
    # pairs: (0,1) cos 0, (0,2) cos -1, (1,2) cos 0
    assert stats["conflict_ratio"] == pytest.approx(1 / 3)
    assert stats["cos_min"] == pytest.approx(-1.0)
    assert stats["cos_mean"] == pytest.approx(-1 / 3)
    # to the sum of the others: u0 vs [-1, 1] -> -1/sqrt2; u1 vs [0, 0] -> 0; u2 vs [1, 1] -> -1/sqrt2
    assert stats["cos_to_others"] == pytest.approx((-2 / np.sqrt(2)) / 3)


def test_harmonizers_plug_into_any_base_algorithm_and_log_conflicts(tmp_path, cfg_factory):
    from fedrun.engine.run.experiment import run_experiment

    common = ["data=digits", "model=logreg", "fl.rounds=2", "partition.alpha=0.1", "fl.clients_per_round=6",
              "diagnostics.conflicts=true", "diagnostics.similarity_every=2"]
    for algo in ("fedavg", "fedprox", "fednova", "feddecorr", "scaffold"):
        for harmonizer in ("fedgh", "dgt"):
            run = tmp_path / f"{algo}-{harmonizer}"
            run_experiment(cfg_factory(*common, f"algo={algo}", f"algo/harmonizer={harmonizer}"), run)
            header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
            assert {"pre_conflict_ratio", "post_conflict_ratio", "pre_cos_min", "post_cos_to_others"} <= set(header)
            saved = np.load(run / "similarity" / "round_00002.npz")
            assert saved["before"].shape == (6, 6) and saved["after"].shape == (6, 6)


def test_fedgh_removes_every_conflict_it_projects(cfg_factory):
    from fedrun.engine.run.simulation import Simulation

    sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "partition.alpha=0.05",
                                             "fl.clients_per_round=8",
                                             "algo/harmonizer=fedgh", "diagnostics.conflicts=true"))
    out = sim.run_round(1)
    assert out.diagnostics["pre_conflict_ratio"] > 0
    assert out.diagnostics["post_cos_min"] >= out.diagnostics["pre_cos_min"]


def test_fedgh_leaf_presets_run_two_rounds_from_the_cli_on_leaf_fixtures(tmp_path):
    """FedGH Table I's LEAF settings (LEAF's models, users as clients) on fixtures in LEAF's JSON layout."""
    from conftest import run_cli

    from fedrun.data.fixtures import write_leaf

    tasks = {"femnist": "fedgh_femnist", "celeba": "fedgh_celeba", "sent140": "fedgh_sent140",
             "shakespeare": "fedgh_shakespeare", "reddit": "fedgh_reddit"}
    for task in tasks:
        write_leaf(tmp_path / "data", task, users=3, per_user=6)
    sweep = tmp_path / "sweep"
    run_cli("--multirun", f"experiment={','.join(tasks.values())}", "algo/harmonizer=fedgh",
            f"data.root={tmp_path / 'data'}", "fl.num_clients=3", "fl.clients_per_round=2", "fl.rounds=2",
            "fl.batch_size=4", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    jobs = sorted((p for p in sweep.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    assert len(jobs) == len(tasks)
    for job, (task, preset) in zip(jobs, tasks.items()):
        summary = json.loads((job / "summary.json").read_text())
        assert summary["status"] == "finished" and "final_local_acc" in summary, preset
        assert f"leaf_{task}" in (job / "config.yaml").read_text()


def test_fedgh_partner_orders_are_each_clients_seeded_permutation_of_the_others():
    """Row k: the others (every row but k) in the order of the permutation seeded per (seed, 0xF6, round, client)."""
    from fedrun.algorithms.harmonizer.fedgh import partner_orders

    clients = [7, 3, 11, 0, 5]
    orders = partner_orders(2, 9, clients)
    assert orders.shape == (5, 4)
    for k, client in enumerate(clients):
        others = [j for j in range(5) if j != k]
        perm = np.random.default_rng([2, 0xF6, 9, client]).permutation(4)
        assert orders[k].tolist() == [others[i] for i in perm]
    assert partner_orders(2, 9, [4]).shape == (1, 0)

"""FSVRG and MA-/GA-FSVRG (Zhao et al.): hand-computed scalings and steps, the grouping's linear algebra and stopping
rule, the acceleration step, identities with plain FSVRG, HOG features and the macro/micro metrics."""

import math
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import register_tiny
from sklearn.metrics import precision_recall_fscore_support

from fedrun.algorithms.bank.bank import accelerate, kmeans, mean_centre, principal_subspace
from fedrun.algorithms.local.fsvrg import feature_scalings
from fedrun.model.zoo import affine_parameter_features
from fedrun.algorithms.schema import make
from fedrun.data.hog import hog
from fedrun.engine.run.experiment import run_experiment
from fedrun.engine.run.simulation import Simulation
from fedrun.errors import ConfigError
from fedrun.engine.run.metrics import classification_metrics

SPARSE = np.array([[1, 0, 2], [0, 0, 1],  # client 0
                   [3, 0, 0], [1, 1, 0], [0, 2, 0]], dtype=np.float32)  # client 1
SPARSE_Y = np.array([0, 1, 0, 1, 1])
USERS = np.array([0, 0, 1, 1, 1])


def test_lambda_and_a_r_on_a_hand_made_sparse_dataset(monkeypatch, cfg_factory):
    """n_i^j = [[1, 0, 2], [2, 2, 0]], n^j = [3, 2, 2], n = 5, n_i = [2, 3]: Lambda_i^j = (n^j / n) / (n_i^j / n_i)
    (1 where n_i^j = 0, eq. 21), omega^j = [2, 1, 1] clients hold feature j, A_r = |S^r| / omega^j (eq. 59)."""
    lam = feature_scalings(torch.tensor([[1.0, 0, 2], [2, 2, 0]]), torch.tensor([2.0, 3.0]))
    torch.testing.assert_close(lam, torch.tensor([[3 / 5 * 2 / 1, 1.0, 2 / 5 * 2 / 2],
                                                  [3 / 5 * 3 / 2, 2 / 5 * 3 / 2, 1.0]]))
    assert affine_parameter_features((3,), 2).tolist() == [0, 1, 2, 0, 1, 2, 3, 3]  # W (2 x 3) row-major, then the bias

    register_tiny(monkeypatch, "sparse", SPARSE, SPARSE_Y, users=USERS)
    cfg = cfg_factory("model=logreg", "partition=natural", "fl.num_clients=2", "fl.clients_per_round=2", "algo=fsvrg",
                      "hardware=cpu", "hardware.dtype=float64")
    cfg.data.name = "sparse"
    sim = Simulation.from_config(cfg)
    torch.testing.assert_close(sim.state.clients[0]["lam"].double(),
                               torch.tensor([1.2, 1.0, 0.4, 1.2, 1.0, 0.4, 1.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(sim.state.clients[1]["lam"].double(),
                               torch.tensor([0.9, 0.6, 1.0, 0.9, 0.6, 1.0, 1.0, 1.0], dtype=torch.float64))
    a_r = 2 / sim.state.local["omega"]
    assert a_r.tolist() == [1, 2, 2, 1, 2, 2, 1, 1]
    before = sim.state.params.clone()
    out = sim.run_round(1)
    aggregated = out.weights @ out.result.updates  # n_i / n^r weighted mean of w_i - w (eq. 60 for one model)
    torch.testing.assert_close(sim.state.params - before, a_r.to(aggregated.dtype) * aggregated)


def test_fsvrg_steps_follow_eqs_20_to_23(monkeypatch, cfg_factory):
    """Two local steps of client 1 recomputed by hand: d = Lambda (g(w; z) - g(w0; z)) + g_anchor + wd w0 + ..."""
    register_tiny(monkeypatch, "sparse", SPARSE, SPARSE_Y, users=USERS)
    lr, wd = 0.6, 0.1
    cfg = cfg_factory("model=logreg", "partition=natural", "fl.num_clients=2", "fl.clients_per_round=2", "algo=fsvrg",
                      "fl.batch_size=1", "fl.local_epochs=1", f"fl.lr={lr}", f"fl.weight_decay={wd}", "hardware=cpu",
                      "hardware.dtype=float64", "hardware.executor=loop")
    cfg.data.name = "sparse"
    sim = Simulation.from_config(cfg)
    sim.state.params = torch.randn(sim.model.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    w0 = sim.state.params.clone()
    plans = sim.plans(sim.state, [0, 1], 1)
    x, y = sim.data.x_train, sim.data.y_train

    def grad(w, idx):
        return sim.model.loss_and_grad(w, {}, x[idx], y[idx])[1]

    full = [sum(grad(w0, torch.tensor([i])) for i in ix) / len(ix) for ix in sim.partition.indices]
    anchor = (2 * full[0] + 3 * full[1]) / 5  # eq. 16: n_i / n^r
    lam, step = sim.state.clients[1]["lam"].double(), lr / 3
    w = w0.clone()
    for batch in plans[1].batches:
        d = lam * ((grad(w, batch) + wd * w) - (grad(w0, batch) + wd * w0)) + anchor + wd * w0
        w = w - step * d
    out = sim.run_round(1)
    torch.testing.assert_close(out.result.updates[1], w - w0)


@pytest.mark.parametrize("bank", ["ma", "ga"])
def test_one_model_and_a_threshold_beyond_the_run_is_plain_fsvrg(monkeypatch, cfg_factory, bank):
    register_tiny(monkeypatch, "sparse", SPARSE, SPARSE_Y, users=USERS)
    final = {}
    for algo in ("fsvrg", f"{bank}fsvrg"):
        extra = ["algo.bank.models=1", "algo.bank.threshold=10"] if algo != "fsvrg" else []
        cfg = cfg_factory("model=logreg", "partition=natural", "fl.num_clients=2", "fl.clients_per_round=2",
                          f"algo={algo}", "fl.batch_size=1", "fl.lr=0.5", "fl.weight_decay=0.01", "hardware=cpu",
                          "hardware.dtype=float64", *extra)
        cfg.data.name = "sparse"
        sim = Simulation.from_config(cfg)
        for rnd in (1, 2, 3):
            sim.run_round(rnd)
        final[algo] = sim.state.params
    assert torch.equal(final["fsvrg"], final[f"{bank}fsvrg"])


def test_mean_centring_keeps_pairwise_distances_eq_27_and_the_projection_is_eq_38():
    points = torch.randn(7, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    centred, mean = mean_centre(points)
    torch.testing.assert_close(centred.sum(dim=0), torch.zeros(40, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(torch.cdist(centred, centred), torch.cdist(points, points))  # eq. 27
    basis, projected, values = principal_subspace(centred, 3)
    gram_values, gram_vectors = torch.linalg.eigh(centred @ centred.T)
    top = gram_vectors[:, -3:].flip(1)
    direct = top * gram_values[-3:].flip(0).sqrt()  # Lambda^1/2 V^T, transposed: one row per point (eq. 38)
    signs = torch.sign((projected * direct).sum(dim=0))  # eigenvectors are defined up to sign
    torch.testing.assert_close(projected * signs, direct)
    torch.testing.assert_close(centred @ basis, projected)  # U^T w_i
    torch.testing.assert_close(basis.T @ basis, torch.eye(3, dtype=torch.float64), atol=1e-10, rtol=0)
    torch.testing.assert_close(values, gram_values[-3:].flip(0))


def test_kmeans_stops_by_the_eq_42_sum_at_a_fixed_point_or_at_the_limit():
    centres = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    exact = centres.repeat_interleave(3, dim=0)  # every point on its centre: the sum reaches 0 <= 1e-4
    got, assign, iterations, total = kmeans(exact, centres + 0.5)
    assert iterations == 1 and total <= 1e-4 and assign.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    torch.testing.assert_close(got, centres)
    spread = exact + torch.randn(9, 2, generator=torch.Generator().manual_seed(2))
    got, assign, iterations, total = kmeans(spread, centres)
    assert total > 1e-4 and 1 < iterations < 100  # the sum cannot reach 1e-4: it stops when nothing changes
    again = torch.cdist(spread, got).argmin(dim=1)
    assert torch.equal(again, assign)  # a fixed point
    assert kmeans(spread, torch.tensor([[5.0, 5.0], [6.0, 5.0], [5.0, 6.0]]), max_iter=1)[2] == 1
    _, assign, _, _ = kmeans(exact, torch.tensor([[0.0, 0.0], [10.0, 0.0], [100.0, 100.0]]))
    assert 2 not in assign.tolist()  # an empty group keeps its centre


def test_one_acceleration_step_equals_eqs_62_to_64_by_hand():
    w, g = torch.tensor([[1.0, -2.0]]), torch.tensor([[0.5, -0.1]])
    m0, v0 = torch.tensor([[0.2, 0.0]]), torch.tensor([[0.01, 0.04]])
    b1, b2, alpha, eps, r = 0.5, 0.999, 0.02, 1e-8, 3
    m = b1 * m0 + (1 - b1) * g
    v = b2 * v0 + (1 - b2) * g**2
    expected = w - alpha * (1 - b1) * math.sqrt((1 - b2**r) / (1 - b2)) * m / torch.sqrt(v + eps)
    got, m_new, v_new = accelerate(w, g, m0, v0, r, alpha, b1, b2, eps, "paper")
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close((m_new, v_new), (m, v))
    adam, _, _ = accelerate(w, g, m0, v0, r, alpha, b1, b2, eps, "adam")
    torch.testing.assert_close(adam, w - alpha * (m / (1 - b1**r)) / (torch.sqrt(v / (1 - b2**r)) + eps))


def test_hog_of_a_single_edge_puts_its_energy_in_the_edges_orientation_bin():
    image = torch.zeros(1, 28, 28)
    image[:, :, 14:] = 1.0  # dark left, bright right: gradient along +x, angle 0 -> bin 0
    features = hog(image, normalize="none").reshape(64, 9)
    assert features.sum(dim=0).argmax() == 0 and features[:, 1:].sum() == 0
    assert features[:, 0].sum() > 0
    flipped = hog(1 - image, normalize="none").reshape(64, 9)  # bright left: angle pi -> bin floor(pi / (2pi/9)) = 4
    assert flipped.sum(dim=0).argmax() == 4 and flipped.sum(dim=0)[[0, 1, 2, 3, 5, 6, 7, 8]].sum() == 0
    horizontal = torch.zeros(1, 28, 28)
    horizontal[:, 14:, :] = 1.0  # bright bottom, y downwards: angle pi/2 -> bin 2
    assert hog(horizontal, normalize="none").reshape(64, 9).sum(dim=0).argmax() == 2
    unit = hog(image, normalize="l2")
    torch.testing.assert_close(unit.norm(dim=1), torch.ones(1))
    assert unit.shape == (1, 576)


def test_macro_and_micro_metrics_match_scikit_learn():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 5, 200)
    pred = np.where(rng.random(200) < 0.6, y, rng.integers(0, 4, 200))  # class 4 is never predicted
    ours = classification_metrics(torch.from_numpy(pred), torch.from_numpy(y), 6)
    for average in ("macro", "micro"):
        p, r, f, _ = precision_recall_fscore_support(y, pred, average=average, zero_division=0)
        assert (ours[f"{average}_precision"], ours[f"{average}_recall"], ours[f"{average}_f1"]) == pytest.approx(
            (p, r, f))
    assert ours["accuracy"] == pytest.approx(float((pred == y).mean()))


def test_a_bank_round_groups_accelerates_logs_and_resumes_exactly(monkeypatch, cfg_factory, tmp_path):
    rng = np.random.default_rng(4)
    x = np.abs(rng.normal(size=(120, 6))).astype(np.float32) * (rng.random((120, 6)) < 0.7)
    y = (x[:, 0] > x[:, 1]).astype(np.int64) + 2 * (x[:, 2] > 0.5)
    register_tiny(monkeypatch, "banked", x, y)

    def cfg(*more):
        c = cfg_factory("model=logreg", "partition=classes", "partition.classes_per_client=[1,2]",
                        "fl.num_clients=12", "fl.clients_per_round=6", "algo=gafsvrg", "algo.bank.models=3",
                        "algo.bank.threshold=2", "fl.batch_size=1", "fl.lr=2", "fl.weight_decay=0.01", "fl.rounds=6",
                        "hardware=cpu", "hardware.dtype=float64", "eval.personalized=true", "eval.class_metrics=true",
                        "checkpoint.every=2", *more)
        c.data.name = "banked"
        return c

    straight = run_experiment(cfg(), tmp_path / "straight")
    rows = (tmp_path / "straight" / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    for column in ("bank0_acc", "bank_mean_acc", "group0_size", "prefer2", "kmeans_iterations", "server_s",
                   "macro_f1", "micro_recall", "personal_acc"):
        assert column in header
    last = dict(zip(header, rows[-1].split(",")))
    assert sum(int(float(last[f"group{c}_size"])) for c in range(3)) == 6  # the round's clients, grouped
    assert sum(int(float(last[f"prefer{c}"])) for c in range(3)) == 6
    assert 0 <= float(last["group_is_preferred"]) <= 1
    assert straight["status"] == "finished"
    copy = tmp_path / "resumed"
    shutil.copytree(tmp_path / "straight", copy)
    (copy / "summary.json").unlink()
    (copy / "checkpoint_0000006.pt").unlink()  # as if killed in round 6, after the checkpoint of round 4 ...
    (copy / "metrics.csv").write_text("\n".join(rows[:3]) + "\n")  # ... and the rows after round 2 lost
    resumed = run_experiment(cfg("resume=true"), copy)
    assert resumed["resumed_from_round"] == 4  # a bank round (threshold 2): the bank comes from the checkpoint
    timeless = [pd.read_csv(d / "metrics.csv").drop(columns=["elapsed_s", "server_s"])
                for d in (copy, tmp_path / "straight")]
    pd.testing.assert_frame_equal(*timeless)


def test_fsvrg_presets_run_two_rounds_from_the_cli_and_bad_combinations_are_refused(tmp_path, cfg_factory):
    from conftest import run_cli

    from fedrun.config.checks import validate
    from fedrun.data.fixtures import write_cifar
    from fedrun.errors import ConfigError

    write_cifar(tmp_path / "data", "cifar10", per_file=20)
    runs = {"fsvrg_mnist": ["algo=gafsvrg", "algo.bank.threshold=1", "fl.clients_per_round=20"],
            "fsvrg_cifar10": [f"data.root={tmp_path / 'data'}", "fl.num_clients=12", "fl.clients_per_round=6",
                              "algo.bank.threshold=1"]}
    for preset, extra in runs.items():
        run_dir = tmp_path / preset
        run_cli(f"experiment={preset}", "fl.rounds=2", "eval.personalized=false", *extra, f"hydra.run.dir={run_dir}",
                cwd=tmp_path)
        header = (run_dir / "metrics.csv").read_text().splitlines()[0]
        assert "bank_mean_acc" in header and "macro_f1" in header  # round 2 ran the bank
    with pytest.raises(ConfigError, match="algo.local.scaling=features with model=mlp"):
        validate(cfg_factory("algo=fsvrg", "model=mlp"))
    with pytest.raises(ConfigError, match="algo/bank=ma with algo/local=sgd"):
        validate(cfg_factory("algo=fedavg", "algo/bank=ma"))


def test_a_bank_refuses_parts_its_rounds_cannot_use(cfg_factory):
    from fedrun.config.checks import validate
    from fedrun.errors import ConfigError

    with pytest.raises(ConfigError, match="algo/bank=ga with algo/harmonizer=fedgh"):
        validate(cfg_factory("experiment=fsvrg_mnist", "algo=gafsvrg", "algo/harmonizer=fedgh"))


def test_personalised_evaluation_uses_each_clients_preferred_model_of_eq_18(monkeypatch, cfg_factory):
    rng = np.random.default_rng(5)
    x = np.abs(rng.normal(size=(90, 4))).astype(np.float32)
    y = (x[:, 0] > x[:, 1]).astype(np.int64) + (x[:, 2] > 1)
    register_tiny(monkeypatch, "pref", x, y)
    cfg = cfg_factory("model=logreg", "partition=classes", "partition.classes_per_client=[1,2]", "fl.num_clients=9",
                      "fl.clients_per_round=5", "algo=mafsvrg", "algo.bank.models=3", "algo.bank.threshold=1",
                      "fl.batch_size=1", "fl.lr=1", "fl.weight_decay=0.01", "hardware=cpu", "hardware.dtype=float64")
    cfg.data.name = "pref"
    sim = Simulation.from_config(cfg)
    for rnd in (1, 2, 3):
        sim.run_round(rnd)
    models = sim.state.bank["models"]
    losses, _ = sim.full_losses_and_gradients(sim.state, models, range(sim.num_clients))
    direct = (losses + 0.005 * (models**2).sum(dim=1)).argmin(dim=1)
    assert torch.equal(sim.evaluation.preferred_models(sim.state), direct)


def test_a_r_counted_over_the_rounds_clients(monkeypatch, cfg_factory):
    """``algo.local.omega=round``: omega^j counts the round's clients holding feature j (they send which they hold),
    A_r = |S^r| / omega^j, and 1 for a feature none of them holds; ``all`` (eq. 59 as printed) counts every client."""
    x = np.array([[1, 0, 2, 0], [0, 0, 1, 0],  # client 0 holds features 0 and 2
                  [3, 0, 0, 0], [1, 1, 0, 0],  # client 1: 0 and 1
                  [0, 2, 0, 1], [0, 1, 0, 0]], dtype=np.float32)  # client 2: 1 and 3
    register_tiny(monkeypatch, "sparse3", x, np.array([0, 1, 0, 1, 1, 0]), users=np.array([0, 0, 1, 1, 2, 2]))
    cfg = cfg_factory("model=logreg", "partition=natural", "fl.num_clients=3", "fl.clients_per_round=2",
                      "algo=fsvrg", "algo.local.omega=round", "hardware=cpu", "hardware.dtype=float64")
    cfg.data.name = "sparse3"
    sim = Simulation.from_config(cfg)
    before = sim.state.params.clone()
    out = sim.run_round(1)
    held = {0: {0, 2}, 1: {0, 1}, 2: {1, 3}}
    per_feature = []
    for j in range(5):  # feature 4: the bias's constant feature, held by everyone
        omega = sum(j in held[p.id] or j == 4 for p in out.plans)
        per_feature.append(2 / omega if omega else 1.0)
    a_r = torch.tensor(per_feature[:4] * 2 + per_feature[4:] * 2, dtype=torch.float64)  # W (2 x 4), then the bias
    torch.testing.assert_close(sim.state.params - before, a_r * (out.weights @ out.result.updates))
    assert not torch.equal(a_r, 2 / sim.state.local["omega"].double())  # differs from counting all three clients


@pytest.mark.parametrize("kind", ["ma", "ga"])
def test_a_diverged_round_gives_models_that_are_not_finite_rather_than_an_error(kind):
    """Clients whose training diverged send NaN: the grouping returns NaN models (the engine then stops the run as
    diverged) instead of raising in the eigensolver."""
    bank = make("bank", kind, models=3)
    state = bank.start(torch.zeros(4), num_clients=5)
    for bad in (float("nan"), 1e30):  # NaN, or finite but beyond float32 once squared for the Gram matrix
        points = torch.randn(5, 4)
        points[2, 1] = bad
        moved, assign, info = bank.regroup(state["models"], points, state["models"], torch.full((4,), 0.5),
                                           ga_step=0.1)
        assert moved.shape == (3, 4) and torch.isnan(moved).all() and assign.shape == (5,)
    state = bank.accelerate_to(state, moved, torch.zeros(3, 4))
    assert not torch.isfinite(state["models"]).any() and state["accelerated"] == 1


def test_grouping_by_preference_takes_each_clients_preferred_model_as_its_group():
    """grouping=preference (a departure from Zhao et al., to test): the groups are the preferences of eq. 18, each
    centre the mean of its clients' projected points mapped back by eq. 43, and a model nobody preferred keeps its
    seed."""
    gen = torch.Generator().manual_seed(5)
    points = torch.randn(6, 10, dtype=torch.float64, generator=gen)
    seeds = torch.randn(3, 10, dtype=torch.float64, generator=gen)
    prefer = torch.tensor([2, 0, 2, 0, 0, 2])
    bank = make("bank", "ma", models=3, grouping="preference")
    centres, assign, basis, info = bank.group(points, seeds, prefer)
    assert torch.equal(assign, prefer) and info["kmeans_iterations"] == 0
    centred, mean = mean_centre(points)
    for c in (0, 2):
        expected = (centred[prefer == c] @ basis).mean(dim=0) @ basis.T + mean
        torch.testing.assert_close(centres[c], expected)
    torch.testing.assert_close(centres[1], (seeds[1] @ basis) @ basis.T + mean)  # nobody preferred model 1
    kmeans_groups = make("bank", "ma", models=3).group(points, seeds, prefer)[1]
    assert not torch.equal(kmeans_groups, prefer)  # the case separates the two groupings
    with pytest.raises(ConfigError, match="algo.bank.grouping='nearest'"):
        make("bank", "ma", grouping="nearest")

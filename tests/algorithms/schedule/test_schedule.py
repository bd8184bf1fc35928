"""GIFT's Gradient Consistency and tau rule against hand computations."""

import csv
import json
import math

import numpy as np
import pytest
import torch

from fedrun.algorithms.schedule.afl import afl_objective
from fedrun.algorithms.schedule.feedback import RoundFeedback
from fedrun.algorithms.schedule.gift import gradient_consistency
from fedrun.algorithms.schema import make
from fedrun.config.checks import validate
from fedrun.engine.run.experiment import run_experiment
from fedrun.errors import ConfigError
from conftest import with_values


class Stepping:
    """A schedule with its state threaded through its calls as the engine threads it (``state`` for the tests)."""

    def __init__(self, schedule):
        self.schedule, self.state = schedule, schedule.init()

    def observe(self, fb: RoundFeedback) -> dict[str, float]:
        if fb.probe is not None:  # the points this schedule asks for now, in its order, as the engine probes them
            fb.probed = probed(self.schedule.probes(self.state), fb)
        given, snapshot = self.state, dict(self.state)
        self.state, logged = self.schedule.observe(given, fb)
        assert _same(given, snapshot), "observe changed the state it was given"
        return logged

    def advance(self, c: float) -> int:
        self.state = self.schedule.advance(self.state, c)
        return self.state["tau"]

    def local_steps(self, *args) -> int:
        return self.schedule.local_steps(self.state, *args)

    def __getattr__(self, name):
        return getattr(self.schedule, name)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(x is y for x, y in zip(a.values(), b.values()))


def stepping(*args, **kwargs) -> Stepping:
    return Stepping(make("schedule", *args, **kwargs))


def feedback(updates=None, probe=None, **kw) -> RoundFeedback:
    """A round's feedback for a schedule under test: the given updates, placeholders elsewhere; ``probe(points)``
    gives the clients' objectives at a point, evaluated for the points the schedule asks for (``probed``) when it
    observes it, or at once for ``estimate`` (AFL's points)."""
    updates = torch.zeros(1, 1) if updates is None else updates
    base = dict(updates=updates, local_params=updates, old_params=torch.zeros(updates.shape[1]),
                new_params=torch.zeros(updates.shape[1]), sizes=torch.ones(len(updates)), lr=0.1, lr0=0.1)
    fb = RoundFeedback(**(base | kw))
    fb.probe = probe
    return fb


def probed(names, fb: RoundFeedback) -> dict:
    points = {"old": fb.old_params, "new": fb.new_params, "local": fb.local_params}
    return {name: fb.probe(points[name]) for name in names}


def test_consistency_is_one_when_updates_agree_and_zero_when_they_cancel():
    agree = stepping("gift", beta=0.0)
    assert agree.observe(feedback(torch.tensor([[1.0, 2.0], [3.0, 0.5], [0.2, 0.1]])))["gift_C"] == pytest.approx(1.0)
    cancel = stepping("gift", beta=0.0)
    assert cancel.observe(feedback(torch.tensor([[1.0, -2.0], [-1.0, 2.0]])))["gift_C"] == pytest.approx(0.0)
    mixed = torch.tensor([[1.0, -2.0], [-1.0, 2.1]])
    assert 0 < stepping("gift", beta=0.0).observe(feedback(mixed))["gift_C"] < 0.05


def test_pooled_emas_after_three_hand_made_rounds():
    g = stepping("gift", beta=0.5)
    rounds = [torch.tensor([[1.0, -1.0], [2.0, 1.0]]), torch.tensor([[-2.0, 0.0]]), torch.tensor([[0.0, 4.0]])]
    for u in rounds:
        c = g.observe(feedback(u))["gift_C"]
    # P: r1 sum relu = (3, 1) -> (1.5, 0.5); r2 (0, 0) -> (0.75, 0.25); r3 (0, 4) -> (0.375, 2.125)
    # N: r1 (0, -1) -> (0, -0.5); r2 (-2, 0) -> (-1, -0.25); r3 (0, 0) -> (-0.5, -0.125)
    torch.testing.assert_close(g.state["positive"], torch.tensor([0.375, 2.125], dtype=torch.float64))
    torch.testing.assert_close(g.state["negative"], torch.tensor([-0.5, -0.125], dtype=torch.float64))
    assert c == pytest.approx(gradient_consistency(torch.tensor([0.375, 2.125]), torch.tensor([-0.5, -0.125])))
    assert c == pytest.approx(float(torch.tensor([-0.125, 2.0]).norm() / (torch.tensor([0.375, 2.125]).norm()
                                                                           + torch.tensor([-0.5, -0.125]).norm())))


def test_tau_halves_after_two_rounds_without_decrease_and_the_count_restarts():
    g = stepping("gift", tau0=100)
    taus = [g.advance(c) for c in (0.9, 0.8, 0.8, 0.85, 0.9, 0.7, 0.75, 0.8)]
    #                              first dec  =1   =2:halve =1  dec  =1   =2:halve
    assert taus == [100, 100, 100, 50, 50, 50, 50, 25]
    assert g.state["halvings"] == 2
    late = stepping("gift", tau0=100, warmup=3)  # the first 3 rounds' C_r only set the reference
    assert [late.advance(c) for c in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)] == [100, 100, 100, 100, 50, 50]
    tiny = stepping("gift", tau0=1)
    assert [tiny.advance(c) for c in (0.5, 0.5, 0.5)] == [1, 1, 1]  # never below 1


def test_relaxation_adds_steps_after_decreasing_rounds_only_until_the_first_halving():
    g = stepping("gift", tau0=10, relax=True, relax_after=3, relax_step=5)
    taus = [g.advance(c) for c in (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)]
    assert taus == [10, 10, 10, 15, 15, 15, 20]  # +5 after each 3 consecutive decreases
    taus = [g.advance(c) for c in (0.3, 0.3)]  # two without decrease: halve
    assert taus == [20, 10]
    taus = [g.advance(c) for c in (0.2, 0.1, 0.05, 0.01)]  # decreasing again, but relaxation has ended
    assert taus == [10, 10, 10, 10]
    plain = stepping("gift", tau0=10)
    assert [plain.advance(c) for c in (0.9, 0.8, 0.7, 0.6)] == [10] * 4


def test_fixed_schedule_is_epochs_times_samples_over_batch():
    fixed = stepping("fixed")
    assert fixed.local_steps(1000, 1.0, 64) == 15 and fixed.local_steps(10, 0.1, 64) == 1


def test_gift_runs_from_config_and_logs_its_tau_and_consistency(tmp_path, cfg_factory):
    run_experiment(cfg_factory("data=digits", "model=logreg", "fl.rounds=6", "fl.clients_per_round=4",
                               "algo/schedule=gift", "algo.schedule.tau0=8", "algo.schedule.patience=1"), tmp_path)
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert float(rows[0]["tau"]) == 8 and all(0 <= float(r["gift_C"]) <= 1 for r in rows)
    for prev, row in zip(rows, rows[1:]):
        assert float(row["tau"]) == float(prev["next_tau"])  # each round runs the tau the last one chose
    replay = stepping("gift", tau0=8, patience=1)  # the logged C_r sequence drives the logged taus
    assert [float(replay.advance(float(r["gift_C"]))) for r in rows] == [float(r["next_tau"]) for r in rows]


def test_earliest_reporters_keep_exactly_the_ceiling_of_the_fraction_reproducibly():
    from fedrun.engine.run.sampling import earliest_reporters, report_delays

    for n in (10, 25, 100, 7):
        delays = report_delays(n, seed=3, round_=5)
        kept = earliest_reporters(delays, 0.4)
        assert len(kept) == -(-4 * n // 10) and list(kept) == sorted(kept)
        assert delays[kept].max() <= np.delete(delays, kept).min()  # nobody left out reported earlier
        assert np.array_equal(kept, earliest_reporters(report_delays(n, seed=3, round_=5), 0.4))
    assert not np.array_equal(report_delays(100, 3, 5), report_delays(100, 3, 6))  # a fresh draw each round
    assert np.array_equal(earliest_reporters(np.array([2.0, 1.0, 1.0, 3.0]), 0.5), [1, 2])  # ties by id


def test_simulated_time_is_parallel_compute_plus_last_report_plus_transfer(tmp_path, cfg_factory):
    from fedrun.engine.run.simulation import Simulation

    cfg = cfg_factory("data=digits", "model=logreg", "fl.num_clients=10", "participation=earliest",
                      "participation.fraction=0.3", "timing=simulated", "timing.step_time_s=0.5",
                      "timing.bandwidth_mbps=8", "timing.server_bandwidth_mbps=16")
    sim = Simulation.from_config(cfg)
    out = sim.run_round(1)
    who = sim.participants(sim.state, 1)
    cohort, last = who.ids, who.last_report
    assert [p.id for p in out.plans] == list(cohort) and len(cohort) == 3
    # each way: 3 copies share the 16 Mbps server link (1.5 x a copy at 8 Mbps), slower than one client's link
    transfer = 2 * 3 * sim.model_bytes * 8 / 16e6
    assert out.diagnostics["sim_round_s"] == pytest.approx(max(p.tau for p in out.plans) * 0.5 + last + transfer)
    fast = Simulation.from_config(with_values(cfg, "timing.server_bandwidth_mbps=1e6"))  # the client's link decides
    step, sync, _ = fast.tools.simulated_times(out.plans, 1.0, who)
    assert (step, sync) == (0.5, pytest.approx(last + 2 * sim.model_bytes * 8 / 8e6))
    run_experiment(cfg_factory("data=digits", "model=logreg", "fl.rounds=3", "timing=simulated",
                               "timing.step_time_s=0.5"), tmp_path)
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert float(rows[-1]["sim_time_s"]) == pytest.approx(sum(float(r["sim_round_s"]) for r in rows))


def test_gift_presets_run_a_few_rounds_from_the_cli(tmp_path, cfg_factory):
    from conftest import run_cli

    run_cli("experiment=gift_lenet5_mnist", "fl.rounds=3", "algo.schedule.tau0=2", "progress=false",
            f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["num_clients"]) for r in rows] == [40, 40, 40]  # the earliest 40% of 100 clients
    assert float(rows[0]["tau"]) == 2 and all(float(r["sim_round_s"]) > 0 for r in rows)
    for preset in ("gift_lenet5_cifar10", "gift_vgg16_cifar10", "gift_lenet5_fashion_mnist"):
        cfg = cfg_factory(f"experiment={preset}")
        assert (cfg.algo.schedule.name, cfg.participation.name, cfg.partition.client_fraction) == ("gift", "earliest",
                                                                                                  0.01)
    for preset in ("gift_fig6_lenet5_mnist", "gift_fig7_lenet5_mnist"):
        cfg = cfg_factory(f"experiment={preset}")
        assert (cfg.fl.num_clients, cfg.fl.clients_per_round) == (50, 50)  # Figs. 6-7: all 50 clients every round
    fig6 = cfg_factory("experiment=gift_fig6_lenet5_cifar10")
    assert fig6.timing.budget_s == 7200 and fig6.participation.name == "uniform"
    assert cfg_factory("experiment=gift_fig7_lenet5_cifar10").algo.schedule.relax is True


@pytest.mark.slow  # two 50-client LeNet-5 runs; their settings are checked above
def test_the_gift_fig6_and_fig7_presets_run_two_rounds_from_the_cli(tmp_path):
    from conftest import run_cli

    for preset, extra in (("gift_fig6_lenet5_mnist", ["algo/schedule=afl"]),
                          ("gift_fig7_lenet5_mnist", ["algo.schedule.tau0=2"])):
        run_dir = tmp_path / preset
        run_cli(f"experiment={preset}", *extra, "fl.rounds=2", "progress=false", f"hydra.run.dir={run_dir}",
                cwd=tmp_path)
        with open(run_dir / "metrics.csv") as f:
            rows = list(csv.DictReader(f))
        assert [int(r["num_clients"]) for r in rows] == [50, 50]  # Figs. 6-7: all 50 clients every round


def direct_G(tau, beta, rho, delta, eta, phi, c, b, budget):
    """AFL's G(tau) written out once more, scalar by scalar, from reference-rules.md §9."""
    h = max(0.0, delta / beta * ((eta * beta + 1) ** tau - 1) - eta * delta * tau)
    t = (budget - c - b) * tau / (c * tau + b)
    return (1 + math.sqrt(1 + 4 * t * t * phi * rho * eta * h / tau)) / (2 * t * eta * phi) + rho * h


@pytest.mark.parametrize("est", [dict(beta=2.0, rho=5.0, delta=1.5), dict(beta=0.3, rho=20.0, delta=0.2),
                                 dict(beta=8.0, rho=0.5, delta=4.0)])
def test_afl_tau_is_the_direct_minimiser_of_G(est):
    afl = stepping("afl", phi=0.025, tau_init=7)
    args = dict(eta=0.01, c=0.013, b=0.13, budget=15.0)
    chosen = afl.choose_tau(7, est["beta"], est["rho"], est["delta"], args["eta"], args["c"], args["b"], args["budget"])
    values = {t: direct_G(t, est["beta"], est["rho"], est["delta"], args["eta"], 0.025, args["c"], args["b"],
                          args["budget"]) for t in range(1, 71)}  # search 1..10 x the previous tau
    assert chosen == min(values, key=values.get)
    assert afl_objective(np.array([chosen]), **est, eta=0.01, phi=0.025, c=0.013, b=0.13, budget=15.0)[0] \
        == pytest.approx(values[chosen])
    assert stepping("afl", phi=0.025, tau_init=7, tau_max=2).choose_tau(7, **est, **args) == min(chosen, 2)


def test_afl_estimates_beta_rho_delta_from_the_probe_by_hand():
    # two clients (n = 1, 3); last local iterates w_1 = (3, 4), w_2 = (0, 1); new global model w = (0, 0)
    local = torch.tensor([[3.0, 4.0], [0.0, 1.0]])
    grads = {"local": torch.tensor([[1.0, 0.0], [0.0, 2.0]]), "global": torch.tensor([[1.0, 3.0], [0.0, -2.0]])}
    losses = {"local": torch.tensor([1.0, 2.0]), "global": torch.tensor([6.0, 2.5])}

    def probe(points):
        which = "local" if points.dim() == 2 else "global"
        return losses[which], grads[which]

    fb = feedback(torch.zeros(2, 2), probe, local_params=local, sizes=torch.tensor([1.0, 3.0]))
    fb.probed = probed(("local", "new"), fb)
    e = stepping("afl").estimate(fb)
    # beta_i = ||g_loc - g_glob|| / ||w_i - w||: 3/5 and 4/1; rho_i = |f_loc - f_glob| / dist: 5/5 and 0.5/1
    assert e["beta"] == pytest.approx(0.25 * 0.6 + 0.75 * 4.0)
    assert e["rho"] == pytest.approx(0.25 * 1.0 + 0.75 * 0.5)
    # grad F(w) = 0.25 (1, 3) + 0.75 (0, -2) = (0.25, -0.75); delta = sum p_i ||g_i - grad F||
    g_mean = torch.tensor([0.25, -0.75])
    want = 0.25 * float((grads["global"][0] - g_mean).norm()) + 0.75 * float((grads["global"][1] - g_mean).norm())
    assert e["delta"] == pytest.approx(want)
    # a client that did not move gives beta = 0, floored at 1e-5
    still = feedback(torch.zeros(1, 2), lambda p: (torch.ones(1), torch.ones(1, 2)),
                     local_params=torch.zeros(1, 2))
    still.probed = probed(("local", "new"), still)
    assert stepping("afl").estimate(still)["beta"] == pytest.approx(1e-5)


def test_afl_shrinks_tau_to_what_the_budget_can_still_pay_for():
    probe_out = {2: (torch.tensor([1.0]), torch.tensor([[1.0, 0.0]])), 1: (torch.tensor([0.0]), torch.zeros(1, 2))}
    fb = dict(local_params=torch.tensor([[1.0, 0.0]]), probe=lambda p: probe_out[p.dim()],
              step_time_s=0.5, sync_time_s=1.0, budget_s=100.0, lr=0.01)
    free = stepping("afl", tau_init=10)
    tau = free.observe(feedback(torch.zeros(1, 2), elapsed_s=0.0, **{k: v for k, v in fb.items() if k != "probe"},
                                probe=fb["probe"]))["next_tau"]
    assert 1 <= tau <= 100
    tight = stepping("afl", tau_init=10)
    # 100 - 95 = 5 s left: at most int((5 - 2 * 1 - 0.5) / 0.5) = 5 steps, and never more than G's choice
    out = tight.observe(feedback(torch.zeros(1, 2), elapsed_s=95.0, **{k: v for k, v in fb.items() if k != "probe"},
                                 probe=fb["probe"]))
    assert out["next_tau"] == min(tau, 5)


def test_adacomm_tau_from_the_loss_ratio():
    a = stepping("adacomm", tau0=100)
    assert a.tau_for(loss=0.5, loss0=2.0, lr=0.1, lr0=0.1) == 50  # sqrt(1/4) * 100
    assert a.tau_for(loss=1.0, loss0=2.0, lr=0.05, lr0=0.1) == 100  # sqrt(0.1 * 1 / (0.05 * 2)) = 1
    assert a.tau_for(loss=0.3, loss0=2.0, lr=0.1, lr0=0.1) == math.ceil(math.sqrt(0.15) * 100)  # 39
    assert stepping("adacomm", tau0=100, form="paddle").tau_for(0.5, 2.0, 0.1, 0.1) == 5  # sqrt(0.25 * 100)
    assert stepping("adacomm", tau0=100, tau_max=16).tau_for(0.5, 2.0, 0.1, 0.1) == 16
    assert a.tau_for(1e-9, 2.0, 0.1, 0.1) == 1


def test_adacomm_reads_the_probe_halves_on_a_plateau_and_waits_for_its_interval():
    losses = iter([2.0, 0.5, 0.72, 0.8, 0.1])  # F_0 at the first round's start, then one per round

    def probe(points):
        return torch.tensor([next(losses)]), torch.zeros(1, 1)

    a = stepping("adacomm", tau0=100)
    taus = [a.observe(feedback(probe=probe))["next_tau"] for _ in range(4)]
    # F = 0.5 -> sqrt(0.25) 100 = 50; 0.72 >= 0.5: halve -> 25; 0.8 >= 0.72: halve -> 12;
    # 0.1 decreased again: the formula, ceil(sqrt(0.05) 100) = 23
    assert taus == [50, 25, 12, 23]
    assert stepping("adacomm", tau0=100, halve_on_plateau=False).tau_for(0.72, 2.0, 0.1, 0.1) == 60
    timed = stepping("adacomm", tau0=100, interval_s=10.0)
    steps = iter([2.0, 0.5, 0.5, 0.08])
    probe2 = lambda p: (torch.tensor([next(steps)]), torch.zeros(1, 1))  # noqa: E731
    assert timed.observe(feedback(probe=probe2, elapsed_s=4.0))["next_tau"] == 100  # before the first boundary
    assert timed.observe(feedback(probe=probe2, elapsed_s=12.0))["next_tau"] == 50  # 10 s reached: F = 0.5 -> 50
    assert timed.observe(feedback(probe=probe2, elapsed_s=31.0))["next_tau"] == 20  # 20 s passed: 0.08 -> 20


@pytest.mark.parametrize("schedule", ["afl", "adacomm"])
def test_afl_and_adacomm_run_from_config_within_a_time_budget(tmp_path, cfg_factory, schedule):
    cfg = cfg_factory("data=digits", "model=logreg", "fl.rounds=50", "fl.num_clients=5", "fl.clients_per_round=5",
                      f"algo/schedule={schedule}", "timing=simulated", "timing.step_time_s=0.01",
                      "timing.budget_s=1.0", "algo.schedule.tau0=5" if schedule == "adacomm" else "fl.lr=0.1")
    summary = run_experiment(cfg, tmp_path)
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert summary["stopped_by"] == "timing.budget_s" and summary["rounds_completed"] == len(rows) < 50
    assert float(rows[-1]["sim_time_s"]) >= 1.0 > float(rows[-2]["sim_time_s"])
    for prev, row in zip(rows, rows[1:]):
        assert float(row["tau"]) == float(prev["next_tau"])
    key = "afl_beta" if schedule == "afl" else "adacomm_loss"
    assert all(math.isfinite(float(r[key])) for r in rows)


def test_fixed_schedule_with_tau_gives_every_client_that_many_steps(cfg_factory):
    from fedrun.engine.run.simulation import Simulation

    assert stepping("fixed", tau=100).local_steps(600, 1.0, 32) == 100
    sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "fl.num_clients=4",
                                             "fl.clients_per_round=4",
                                             "algo.schedule.tau=3"))
    assert [p.tau for p in sim.run_round(1).plans] == [3, 3, 3, 3]


def test_the_kws_lstm_presets_run_on_a_speech_commands_fixture(tmp_path, cfg_factory):
    from conftest import run_cli

    from fedrun.data.fixtures import write_speech_commands

    write_speech_commands(tmp_path / "data", per_word=12)
    run_dir = tmp_path / "run"
    run_cli("experiment=gift_lstm_kws", f"data.root={tmp_path / 'data'}", "fl.rounds=2", "algo.schedule.tau0=2",
            "progress=false", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["num_clients"]) for r in rows] == [40, 40] and float(rows[0]["tau"]) == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["model"], summary["data"], summary["status"]) == ("lstm", "speech_commands", "finished")
    assert cfg_factory("experiment=gift_fig6_lstm_kws").timing.budget_s == 7200
    assert cfg_factory("experiment=gift_fig7_lstm_kws").algo.schedule.tau0 == 10


def test_fixed_schedule_switches_tau_from_its_round_on(cfg_factory):
    from fedrun.engine.run.simulation import Simulation

    sim = Simulation.from_config(cfg_factory("data=digits", "model=logreg", "fl.num_clients=2",
                                             "fl.clients_per_round=2", "algo.schedule.tau=5",
                                             "algo.schedule.switch_round=3", "algo.schedule.switch_tau=1"))
    taus = [sim.run_round(r).plans[0].tau for r in (1, 2, 3, 4)]
    assert taus == [5, 5, 1, 1]
    assert stepping("fixed", tau=5).observe(feedback()) == {}, "no switch: nothing to log"


def test_gift_logs_the_round_consistency_beside_the_smoothed_one():
    gift = stepping("gift", beta=0.9)
    first = gift.observe(feedback(torch.tensor([[1.0, -2.0], [-1.0, 2.1]])))
    assert first["gift_C"] == pytest.approx(first["gift_C_round"]), "one round: the EMA's ratio is the round's"
    second = gift.observe(feedback(torch.tensor([[1.0, 1.0], [2.0, 1.0]])))
    assert second["gift_C_round"] == pytest.approx(1.0) and second["gift_C"] < 1.0


def test_two_gaussian_points_are_balanced_and_placed_as_configured():
    from fedrun.data.synthetic import two_gaussians

    a = two_gaussians(num_train=50_000, num_test=10_000, dim=2, separation=3.0, center=4.0, spreads=(1.0, 2.0))
    assert a["x_train"].shape == (50_000, 2) and a["x_test"].shape == (10_000, 2)
    assert np.bincount(a["y_train"]).tolist() == [25_000, 25_000] and np.bincount(a["y_test"]).tolist() == [5000] * 2
    e = np.full(2, 1 / np.sqrt(2))
    for c, (offset, spread) in enumerate(((5.5, 1.0), (2.5, 2.0))):
        x = a["x_train"][a["y_train"] == c]
        np.testing.assert_allclose(x.mean(0), offset * e, atol=0.05)
        np.testing.assert_allclose(x.std(0), spread, rtol=0.02)
    # separable as described: the Bayes rule of the two Gaussians is quadratic; the best threshold along the
    # diagonal (what a linear SVM can do) leaves the overlap of N(5.5, 1) and N(2.5, 2): about 84% correct
    proj = a["x_test"] @ e
    accs = [np.mean((proj >= t) == (a["y_test"] == 0)) for t in np.linspace(2, 6, 401)]
    assert 0.82 < max(accs) < 0.87
    again = two_gaussians(num_train=50_000, num_test=10_000)
    assert np.array_equal(again["x_train"], a["x_train"]), "generated from its seed"


def test_track_params_logs_the_global_value_and_each_clients_update_there(tmp_path, cfg_factory):
    run_experiment(cfg_factory("experiment=gift_fig3a_svm", "data.num_train=2000", "data.num_test=400",
                               "fl.rounds=3", "algo.schedule.tau=20", "algo.schedule.switch_round=3",
                               "eval.every=1"), tmp_path / "run")
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["tau"]) for r in rows] == [20, 20, 1]
    for prev, row in zip([None, *rows], rows):
        for j in range(3):  # w_1, w_2, b of the 2-d SVM: every parameter tracked
            before = 0.0 if prev is None else float(prev[f"param_{j}"])
            mean_update = (float(row[f"update_c0_{j}"]) + float(row[f"update_c1_{j}"])) / 2  # equal-sized clients
            assert float(row[f"param_{j}"]) == pytest.approx(before + mean_update, abs=1e-6)
    assert float(rows[0]["update_c0_2"]) * float(rows[0]["update_c1_2"]) < 0, "one class each: intercepts pulled apart"


def test_gift_figure_presets_run_two_rounds_from_the_cli(tmp_path, cfg_factory):
    from conftest import run_cli

    for preset, extra in (("gift_fig3a_svm", ["algo.schedule.tau=5"]),
                          ("gift_fig3b_lenet5_mnist", ["algo.schedule.tau=2", "eval.test_subset=500"])):
        run_dir = tmp_path / preset
        run_cli(f"experiment={preset}", *extra, "fl.rounds=2", "eval.every=1", "progress=false",
                f"hydra.run.dir={run_dir}", cwd=tmp_path)
        with open(run_dir / "metrics.csv") as f:
            rows = list(csv.DictReader(f))
        assert [int(r["num_clients"]) for r in rows] == [2, 2]
        assert any(k.startswith("param_") for k in rows[0]) and any(k.startswith("update_c1_") for k in rows[0])
    fig3b = cfg_factory("experiment=gift_fig3b_lenet5_mnist")
    assert (fig3b.partition.classes_per_client, fig3b.fl.num_clients, fig3b.algo.schedule.tau) == (5, 2, 500)


def test_the_two_client_stagnation_preset_keeps_both_clients_under_the_time_model(tmp_path, cfg_factory):
    from conftest import run_cli

    cfg = cfg_factory("experiment=gift_stagnation_two_clients_mnist")
    setting = (cfg.fl.num_clients, cfg.fl.clients_per_round, cfg.partition.classes_per_client, cfg.participation.name,
               cfg.algo.schedule.name, cfg.algo.schedule.tau0, cfg.timing.step_time_s)
    assert setting == (2, 2, 5, "uniform", "gift", 100, 0.05)
    assert cfg.timing.budget_s > 0 and cfg.fl.rounds > 1000, "the budget, not the rounds, ends the run"
    run_dir = tmp_path / "two"
    run_cli("experiment=gift_stagnation_two_clients_mnist", "algo.schedule.tau0=2", "fl.rounds=2", "eval.every=1",
            "eval.test_subset=500", "progress=false", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["num_clients"]) for r in rows] == [2, 2], "no report-delay cut: both clients every round"
    assert float(rows[0]["sim_round_s"]) > 2 * 0.05, "two steps of 0.05 s plus the transfers"


def test_the_long_two_client_preset_is_the_stagnation_setting_for_longer_on_a_time_grid(tmp_path, cfg_factory):
    from conftest import run_cli

    long, short = cfg_factory("experiment=gift_long_two_clients_mnist"), cfg_factory(
        "experiment=gift_stagnation_two_clients_mnist")
    assert (long.timing.budget_s, long.eval.every_s) == (4 * short.timing.budget_s, 25)
    assert {**long.fl, "rounds": 0} == {**short.fl, "rounds": 0} and long.algo == short.algo
    run_dir = tmp_path / "long"
    run_cli("experiment=gift_long_two_clients_mnist", "algo.schedule.tau0=2", "fl.rounds=2", "eval.every_s=0.1",
            "eval.test_subset=500", "progress=false", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["round"]) for r in rows] == [1, 2], "each round of two 0.05 s steps crosses a 0.1 s mark"


def test_the_stagnation_preset_runs_two_rounds_from_the_cli_under_each_schedule(tmp_path, cfg_factory):
    from conftest import run_cli

    from fedrun.data.idx import write_idx

    d = tmp_path / "data" / "fashion_mnist"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 400), ("t10k", 40)):
        write_idx(d / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        write_idx(d / f"{split}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    cfg = cfg_factory("experiment=gift_stagnation_lenet5_fashion_mnist")
    setting = (cfg.partition.alpha, cfg.fl.batch_size, cfg.algo.schedule.name, cfg.participation.name)
    assert setting == (0.1, 10, "gift", "earliest")
    assert cfg.timing.budget_s > 0 and cfg.fl.rounds > 1000, "the budget, not the rounds, ends the run"
    run_cli("experiment=gift_stagnation_lenet5_fashion_mnist", "algo.schedule.tau0=2", "fl.rounds=2", "eval.every=1",
            f"data.root={d.parent}", "progress=false", f"hydra.run.dir={tmp_path / 'gift'}", cwd=tmp_path)
    assert json.loads((tmp_path / "gift" / "summary.json").read_text())["status"] == "finished"
    for schedule in (["algo/schedule=fixed", "algo.schedule.tau=2"], ["algo/schedule=adacomm", "algo.schedule.tau0=2"],
                     ["algo/schedule=afl", "algo.schedule.tau_max=2"]):
        summary = run_experiment(cfg_factory("experiment=gift_stagnation_lenet5_fashion_mnist", *schedule,
                                             "fl.rounds=2", "eval.every=1", f"data.root={d.parent}"),
                                 tmp_path / schedule[0].split("=")[1])
        assert summary["status"] == "finished" and summary["rounds_completed"] == 2, schedule


def test_evaluation_on_a_simulated_time_grid_picks_the_first_round_past_each_multiple(tmp_path, cfg_factory):
    """``eval.every_s``: the rows are those of an every-round run (evaluation does not perturb training) at the first
    round whose clock reaches each multiple of every_s, plus the last round."""
    base = ("data=digits", "model=logreg", "fl.rounds=40", "fl.num_clients=4", "fl.clients_per_round=4",
            "algo/schedule=adacomm", "algo.schedule.tau0=8", "timing=simulated", "timing.step_time_s=0.01",
            "timing.budget_s=3.0")
    run_experiment(cfg_factory(*base, "eval.every=1"), tmp_path / "all")
    run_experiment(cfg_factory(*base, "eval.every=7", "eval.every_s=0.25"), tmp_path / "grid")

    def rows(name):
        with open(tmp_path / name / "metrics.csv") as f:
            return {int(r["round"]): r for r in csv.DictReader(f)}

    every, grid = rows("all"), rows("grid")
    clock = {r: float(row["sim_time_s"]) for r, row in every.items()}
    expected = {r for r in clock if r > 1 and clock[r] // 0.25 > clock[r - 1] // 0.25} | {max(clock)}
    expected |= {1} if clock[1] >= 0.25 else set()
    assert set(grid) == expected and len(expected) < len(every) / 2
    for r in grid:
        assert grid[r]["test_acc"] == every[r]["test_acc"] and grid[r]["tau"] == every[r]["tau"]


def test_eval_every_s_needs_simulated_time(cfg_factory):
    with pytest.raises(ConfigError, match="eval.every_s"):
        validate(cfg_factory("data=digits", "model=logreg", "eval.every_s=10"))

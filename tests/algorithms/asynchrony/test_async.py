"""Asynchronous servers (FedBuff, FedAsync) on the simulated clock: their identities with synchronous and sequential
training, staleness by hand, and what they refuse."""

import pytest
import torch

from fedrun.algorithms.base import ClientContext
from fedrun.config.checks import validate
from fedrun.engine.run.sampling import sample_clients
from fedrun.engine.run.simulation import Simulation
from fedrun.errors import ConfigError

SMALL = ["data=digits", "model=logreg", "fl.num_clients=20", "fl.clients_per_round=5", "fl.batch_size=32",
         "hardware.executor=loop", "hardware.dtype=float64", "timing=simulated", "timing.step_time_s=0.5",
         "algo.schedule.tau=3"]


def trained(cfg, rounds):
    sim = Simulation.from_config(cfg)
    outs = [sim.run_round(r) for r in range(1, rounds + 1)]
    return sim, outs


def test_fedbuff_with_K_equal_to_M_equal_devices_and_no_staleness_weight_is_fedavg_bit_for_bit(cfg_factory):
    fedavg, _ = trained(cfg_factory(*SMALL, "algo.aggregator.weighting=uniform"), 3)
    fedbuff, outs = trained(cfg_factory(*SMALL, "algo/asynchrony=fedbuff", "algo.asynchrony.staleness=constant"), 3)
    assert torch.equal(fedavg.state.params, fedbuff.state.params)
    assert [out.diagnostics["staleness_max"] for out in outs] == [0.0, 0.0, 0.0]
    assert fedbuff.state.sim_time == pytest.approx(fedavg.state.sim_time, rel=1e-12)  # summed in another order
    weighted, _ = trained(cfg_factory(*SMALL, "algo/asynchrony=fedbuff", "algo.asynchrony.buffer=2"), 3)
    assert not torch.equal(fedavg.state.params, weighted.state.params)


def test_fedasync_with_alpha_one_and_one_client_at_a_time_is_sequential_training(cfg_factory):
    cfg = cfg_factory(*SMALL, "fl.clients_per_round=1", "algo/asynchrony=fedasync", "algo.asynchrony.mixing=1")
    sim, outs = trained(cfg, 4)
    by_hand = Simulation.from_config(cfg)
    w = by_hand.state.params
    for r in range(1, 5):  # client after client, each from the model the one before left
        (client,) = sample_clients(20, 1, 0, r)
        plans = by_hand.plans(by_hand.state, [client], r)
        ctx = ClientContext(r, w, by_hand.state.buffers, by_hand.lr(r))
        result = by_hand.train(by_hand.algo.local, ctx, plans, [None])
        w = w + result.updates[0]
        assert [p.id for p in outs[r - 1].plans] == [client]
    assert torch.equal(sim.state.params, w)


def test_each_applied_updates_staleness_is_the_server_steps_since_its_client_started(cfg_factory, tmp_path):
    """Two clients, one step each: client 0 takes 1 s, client 1 2.5 s (links too fast to count). K = 1: steps at
    1 s (client 0, from version 0), 2 s (client 0 again, from 1), 2.5 s (client 1, from version 0: staleness 2) and
    3 s (client 0, from 2: staleness 1)."""
    trace = tmp_path / "devices.csv"
    trace.write_text("client,step_s,mbps\n0,1.0,1e12\n1,2.5,1e12\n")
    cfg = cfg_factory(*SMALL, "fl.num_clients=2", "fl.clients_per_round=2", "algo.schedule.tau=1",
                      "timing.step_time_s=1", "timing.server_bandwidth_mbps=1e12", "devices=trace",
                      f"devices.trace={trace}", "algo/asynchrony=fedbuff", "algo.asynchrony.buffer=1")
    sim = Simulation.from_config(cfg)
    seen = []
    for r in range(1, 5):
        before = sim.state.asynchrony
        out = sim.run_round(r)
        (plan,) = out.plans
        started = before["pending"][plan.id]["version"] if plan.id in before["pending"] else r - 1
        assert out.diagnostics["staleness_max"] == (r - 1) - started
        seen.append((plan.id, out.diagnostics["staleness_max"], round(sim.state.sim_time, 6)))
    assert seen == [(0, 0.0, 1.0), (0, 0.0, 2.0), (1, 2.0, 2.5), (0, 1.0, 3.0)]
    assert sim.algo.asynchrony.weight(2) == 1 / 3 ** 0.5  # FedBuff's 1/sqrt(1 + tau)


def test_the_staleness_functions_are_xie_et_als():
    from fedrun.algorithms.schema import make

    poly = make("asynchrony", "fedasync", staleness="polynomial", staleness_a=0.5, seed=0)
    hinge = make("asynchrony", "fedasync", staleness="hinge", staleness_a=2.0, staleness_b=3, seed=0)
    assert poly.weight(3) == 4 ** -0.5 and hinge.weight(3) == 1.0 and hinge.weight(5) == 1 / (2 * 2 + 1)


def test_combinations_without_a_definition_under_asynchrony_are_refused(cfg_factory):
    for args, reason in ((["algo=scaffold"], "defined over a synchronous cohort"),
                         (["algo/harmonizer=fedgh"], "harmonises a synchronous cohort's updates"),
                         (["algo/server_opt=adam"], None),
                         (["participation.dropout=0.2"], "must be uniform, with no dropout"),
                         (["timing.step_time_s=null"], "the step time must be given")):
        cfg = cfg_factory(*SMALL, "algo/asynchrony=fedbuff", *args)
        if reason is None:
            validate(cfg)  # FedBuff takes any server optimiser
            continue
        with pytest.raises(ConfigError, match=reason):
            validate(cfg)
    with pytest.raises(ConfigError, match="FedAsync mixes each model in"):
        validate(cfg_factory(*SMALL, "algo/asynchrony=fedasync", "algo/server_opt=adam"))


def test_a_resumed_asynchronous_run_continues_as_the_uninterrupted_one(cfg_factory):
    import io

    from fedrun.engine.run.state import ServerState

    cfg = cfg_factory(*SMALL, "devices=lognormal", "algo/asynchrony=fedbuff", "algo.asynchrony.buffer=2")
    whole, _ = trained(cfg, 5)
    first, _ = trained(cfg, 2)
    saved = io.BytesIO()
    torch.save(first.state.to_plain(), saved)
    saved.seek(0)
    resumed = Simulation.from_config(cfg)
    resumed.state = ServerState.from_plain(torch.load(saved, weights_only=True), resumed.device, resumed.state)
    for r in (3, 4, 5):
        resumed.run_round(r)
    assert torch.equal(whole.state.params, resumed.state.params) and whole.state.sim_time == resumed.state.sim_time


def test_a_client_that_goes_offline_before_arriving_is_dropped_and_replaced(cfg_factory):
    sim = Simulation.from_config(cfg_factory(*SMALL, "algo/asynchrony=fedbuff", "algo.asynchrony.buffer=2",
                                             "availability=markov",
                                             "availability.mean_online_s=2", "availability.mean_offline_s=2"))
    dropped = 0
    for r in range(1, 15):
        before = sim.state.asynchrony["pending"]
        out = sim.run_round(r)
        for plan in out.plans:  # an applied update's client was online until it arrived
            assert plan.id not in before or not before[plan.id]["lost"]
        dropped += out.diagnostics["clients_dropped"]
        assert len(sim.state.asynchrony["pending"]) <= 5
    assert dropped > 0


def test_the_figure_reads_each_run_at_its_last_evaluation_before_each_grid_time(tmp_path):
    import numpy as np
    from conftest import load_script

    (tmp_path / "metrics.csv").write_text("round,test_acc,sim_time_s\n3,0.5,61.0\n9,0.7,125.5\n12,0.8,180.0\n")
    got = load_script("async_figure").on_grid(tmp_path, np.array([0.0, 60.0, 61.0, 120.0, 180.0, 240.0]))
    assert np.isnan(got[0]) and np.isnan(got[1]) and got[2:].tolist() == [0.5, 0.5, 0.8, 0.8]

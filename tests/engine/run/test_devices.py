"""Clients as devices on the simulated clock: unequal speeds and links, availability windows, dropouts and
over-selection, and the trace files they may come from."""

import math
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedrun.config.checks import validate
from fedrun.engine.run.accounting import simulated_times
from fedrun.engine.run.devices import Availability, Devices, arrivals, failures, read_device_trace
from fedrun.engine.run.sampling import sample_clients
from fedrun.engine.run.simulation import Simulation
from fedrun.errors import ConfigError

SMALL = ["data=digits", "model=logreg", "fl.num_clients=20", "fl.clients_per_round=5", "fl.batch_size=32",
         "hardware.executor=loop", "hardware.dtype=float64"]
TIMED = [*SMALL, "timing=simulated", "timing.step_time_s=0.5"]


def trained(cfg, rounds):
    sim = Simulation.from_config(cfg)
    outs = [sim.run_round(r) for r in range(1, rounds + 1)]
    return sim, outs


def test_over_selection_keeps_the_first_K_to_arrive_and_counts_the_lost_compute():
    """Five sampled clients; client 30 fails, client 40 goes offline after 3 s; of the three that arrive (at 2 x
    transfer + compute: 11, 7 and 9 s) the first two report; the third is cut when the second arrives, at 9 s."""
    sampled = np.array([10, 20, 30, 40, 50])
    compute = np.array([9.0, 5.0, 4.0, 6.0, 7.0])
    transfer = np.full(5, 1.0)
    offline_in = np.array([np.inf, np.inf, np.inf, 3.0, np.inf])
    failed = np.array([False, False, True, False, False])
    done = arrivals(sampled, compute, transfer, offline_in, failed, keep=2)
    assert done.kept.tolist() == [20, 50] and done.wait_s == 9.0
    # lost: 30's whole 4 s; 40's 2 s (online 3 s, the first 1 s spent receiving); 10's 8 s (cut at 9 s, its compute
    # from 1 s on)
    assert done.logged == {"clients_sampled": 5.0, "clients_reported": 2.0, "clients_dropped": 2.0,
                           "clients_cut": 1.0, "wasted_compute_s": 4.0 + 2.0 + 8.0}
    everyone = arrivals(sampled, compute, transfer, np.full(5, np.inf), np.zeros(5, bool), keep=None)
    assert everyone.kept.tolist() == sampled.tolist() and everyone.logged["wasted_compute_s"] == 0.0


def test_dropouts_fail_each_client_at_its_probability_and_zero_is_none(cfg_factory):
    draws = np.concatenate([failures(np.arange(50), 0.3, 1, r, 50) for r in range(1, 401)])
    assert abs(draws.mean() - 0.3) < 4 * math.sqrt(0.3 * 0.7 / draws.size)
    assert not failures(np.arange(50), 0.0, 1, 1, 50).any()
    plain, _ = trained(cfg_factory(*SMALL), 2)
    zero, outs = trained(cfg_factory(*SMALL, "participation.dropout=0.0", "participation.over_selection=0.0"), 2)
    assert torch.equal(plain.state.params, zero.state.params) and "clients_dropped" not in outs[0].diagnostics
    sim, outs = trained(cfg_factory(*SMALL, "participation.dropout=0.5"), 3)
    for r, out in enumerate(outs, start=1):
        sampled = sample_clients(20, 5, 0, r)
        lost = failures(sampled, 0.5, 0, r, 20)
        assert [p.id for p in out.plans] == sampled[~lost].tolist()
        assert out.diagnostics["clients_dropped"] == lost.sum()
        assert out.diagnostics["wasted_steps"] == sum(sim.local_steps(sim.state, sampled[lost]))


def test_an_offline_client_is_never_sampled_and_one_that_leaves_drops_out(cfg_factory):
    sim = Simulation.from_config(cfg_factory(*TIMED, "availability=markov", "availability.mean_online_s=2",
                                             "availability.mean_offline_s=3"))
    seen = dropped = 0
    for r in range(1, 60):
        state = sim.state
        state.sim_time = 0.37 * r
        online = set(sim.availability.online(state.sim_time).tolist())
        who = sim.participants(state, r)
        assert set(who.ids.tolist()) <= online
        bits = sim.model_bytes * 8
        transfer = max(who.sampled * bits / 10_000e6, bits / 25e6)
        for c in who.ids:  # every reporting client stays online until its update arrives
            arrive = 2 * transfer + 0.5 * sim.local_steps(state, [c])[0]
            assert sim.availability.window(int(c), state.sim_time)[1] - state.sim_time >= arrive
        seen += len(who.ids)
        dropped += who.logged["clients_dropped"]
        assert who.logged["clients_sampled"] == min(5, len(online))
    assert seen > 0 and dropped > 0


def test_markov_availability_is_online_its_stationary_share_of_the_time():
    avail = Availability("markov", 200, seed=3, mean_on=1.0, mean_off=3.0)
    share = np.mean([len(avail.online(t)) / 200 for t in np.linspace(0, 500, 400)])
    assert share == pytest.approx(0.25, abs=0.03)


def test_each_client_times_its_own_steps_and_the_same_devices_give_the_old_round(tmp_path):
    timing = SimpleNamespace(step_time_s=0.5, bandwidth_mbps=8.0, server_bandwidth_mbps=80.0)
    taus, model_bytes = [4, 10, 2], 1_000_000
    step, sync, round_s = simulated_times(taus, 0.0, 0.25, model_bytes, timing, np.array([3.0, 1.0, 2.0]),
                                          np.array([8.0, 16.0, 1.0]), 3)
    shared = 3 * 8e6 / 80e6  # three copies over the server's 80 Mbit/s: 0.3 s, more than 8 Mbit over 16 Mbit/s
    assert (step, sync) == (0.5, 0.25 + 2 * 1.0)  # the base device: 8 Mbit over its 8 Mbit/s
    assert round_s == pytest.approx(max(4 * 1.5 + 0.25 + 2 * 1.0, 10 * 0.5 + 0.25 + 2 * shared, 2 * 1.0 + 0.25 + 2 * 8))
    same = simulated_times(taus, 0.0, 0.25, model_bytes, timing, np.ones(3), np.full(3, 8.0), 3)
    assert same[2] == max(taus) * same[0] + same[1]  # GIFT's formula, bit for bit
    path = tmp_path / "devices.csv"
    path.write_text("client,step_s,mbps\n1,2.0,4\n0,0.25,100\n")
    devices = Devices.build(SimpleNamespace(name="trace", trace=str(path)), timing, 5, 32, 0)
    assert devices.step_factor.tolist() == [0.5, 4.0, 0.5, 4.0, 0.5] and devices.link_mbps.tolist()[:2] == [100, 4]


def test_fedscales_device_and_availability_traces_are_read_as_fedscale_reads_them(tmp_path):
    capacity = tmp_path / "client_device_capacity"
    capacity.write_bytes(pickle.dumps({7: {"computation": 50.0, "communication": 8000.0},
                                       3: {"computation": 10.0, "communication": 2000.0}}))
    step_s, mbps = read_device_trace(capacity, 20)
    assert step_s.tolist() == [3 * 20 * 10.0 / 1000, 3 * 20 * 50.0 / 1000] and mbps.tolist() == [2.0, 8.0]
    behave = tmp_path / "client_behave_trace"
    behave.write_bytes(pickle.dumps({5: {"active": [10, 50], "inactive": [20, 60], "finish_time": 100,
                                         "duration": 100, "model": "x"}}))
    avail = Availability.build(SimpleNamespace(name="trace", trace=str(behave)), 2, 0)
    assert avail.window(0, 15) == (True, 20) and avail.window(0, 115) == (True, 120)
    assert avail.window(0, 30) == (False, 50) and avail.window(0, 70) == (False, 110)
    assert avail.online(55).tolist() == [0] and avail.next_online(25) == 50  # client 1 has no trace: never online


def test_a_malformed_trace_line_is_refused_with_its_file_and_line(tmp_path):
    path = tmp_path / "availability.csv"
    path.write_text("client,start_s,end_s\n0,0,100\n1,abc,5\n")
    with pytest.raises(ConfigError, match=f"{path}:3: '1,abc,5' is not client,start_s,end_s"):
        Availability.build(SimpleNamespace(name="trace", trace=str(path)), 2, 0)
    path.write_text("client,step_s\n0,1\n")
    with pytest.raises(ConfigError, match=f"{path}:1: the header must be client,step_s,mbps"):
        read_device_trace(path, 32)


def test_with_no_client_online_the_server_waits_for_the_first(cfg_factory, tmp_path):
    path = tmp_path / "availability.csv"
    path.write_text("client,start_s,end_s\n" + "".join(f"{c},{10 + c},{1000}\n" for c in range(20)))
    sim = Simulation.from_config(cfg_factory(*TIMED, "availability=trace", f"availability.trace={path}"))
    out = sim.run_round(1)
    assert out.plans == [] and out.diagnostics["sim_round_s"] == 10.0 and sim.state.sim_time == 10.0
    out = sim.run_round(2)
    assert [p.id for p in out.plans] == [0]  # at 10 s only client 0 is online


def test_combinations_the_clock_cannot_run_are_refused(cfg_factory):
    for args, reason in ((["devices=lognormal"], "gives each client a speed on the simulated clock"),
                         (["availability=markov"], "the step time must be given"),
                         (["timing=simulated", "participation.over_selection=0.3"], "the step time must be given"),
                         (["participation=poisson", "participation.over_selection=0.3"], "Poisson sampling has no K"),
                         ([*TIMED[-2:], "devices=lognormal", "algo/schedule=afl", "timing.budget_s=100"],
                          "AFL's time model has one step time"),
                         (["algo=mafsvrg", "participation.dropout=0.1"], "needs a fixed cohort that all report"),
                         (["algo=dp_fedavg", *TIMED[-2:], "availability=markov"], "choose clients by their devices")):
        with pytest.raises(ConfigError, match=reason):
            validate(cfg_factory(*SMALL, *args))

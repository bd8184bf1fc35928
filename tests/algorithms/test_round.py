"""A round is a function of a state, owned by the algorithm: ``Simulation.round(state, r)`` (the algorithm's
``apply``) returns the new ServerState and leaves the one it is given as it was, for every algorithm family (the
bank's round included), and the same state gives the same round."""

from __future__ import annotations

import copy

import pytest
import torch

from fedrun.engine.run.simulation import Simulation
from executor_cases import EVERY_FAMILY, assert_close_tree


def snapshot(state):
    """A deep copy of a ServerState's values (tensors cloned), to compare with later."""
    return copy.deepcopy(state.to_plain())


@pytest.mark.parametrize("family", list(EVERY_FAMILY))
def test_a_round_leaves_the_state_it_is_given_as_it_was(cfg_factory, family):
    sim = Simulation.from_config(cfg_factory("data=digits", "model=mlp", *EVERY_FAMILY[family], "fl.num_clients=6",
                                             "fl.clients_per_round=4", "fl.batch_size=16", "fl.momentum=0.5",
                                             "hardware.dtype=float64"))
    sim.run_round(1)  # client states, part states and (after the threshold) the bank have content now
    before = snapshot(sim.state)
    torch.manual_seed(1)
    new, out = sim.round(sim.state, 2)
    assert_close_tree(snapshot(sim.state), before, exact=True)
    assert new is not sim.state and out.round == 2
    torch.manual_seed(1)
    again, _ = sim.round(sim.state, 2)  # from the same state, the same round
    assert_close_tree(snapshot(again), snapshot(new), exact=True)
    if family not in ("mafsvrg", "gafsvrg"):  # a bank round moves its models, not necessarily the first one's start
        assert not torch.equal(new.params, sim.state.params)


def test_the_run_advances_by_its_rounds(cfg_factory):
    """``run_round`` is ``round`` on the run's own state."""
    common = ("data=digits", "model=logreg", "fl.num_clients=6", "fl.clients_per_round=4", "algo=scaffold")
    stepped, pure = Simulation.from_config(cfg_factory(*common)), Simulation.from_config(cfg_factory(*common))
    state = pure.state
    for rnd in (1, 2):
        stepped.run_round(rnd)
        state, _ = pure.round(state, rnd)
    assert_close_tree(vars(state), vars(stepped.state), exact=True)


def test_a_new_kind_of_round_is_a_new_apply_with_no_engine_change(cfg_factory):
    """The algorithm owns its round (``Algorithm.apply``): FedAvg written from the engine's tools alone (clients,
    plans, training, the mean update) as a new ``apply`` runs through the unchanged Simulation and gives the composed
    round's states, in float64 to rounding."""
    from dataclasses import replace

    from fedrun.algorithms.base import ClientContext
    from fedrun.algorithms.round import RoundOutput, with_client_states

    def plain_fedavg(algo, state, tools, rnd):
        cohort = tools.participants(state, rnd).ids
        plans = tools.plans(state, cohort, rnd)
        ctx = ClientContext(rnd, state.params, state.buffers, tools.lr(rnd), tools.momentum, tools.weight_decay)
        result, _ = tools.train(algo.local, ctx, plans, [None] * len(plans))
        sizes = torch.tensor([float(p.num_samples) for p in plans], dtype=state.params.dtype)
        weights = sizes / sizes.sum()
        new = replace(state, params=state.params + weights @ result.updates,
                      clients=with_client_states(state.clients, plans, result))
        return new, RoundOutput(rnd, plans, weights, result, 0, 0, {})

    common = ("data=digits", "model=logreg", "fl.num_clients=6", "fl.clients_per_round=4", "hardware.dtype=float64")
    composed, written = Simulation.from_config(cfg_factory(*common)), Simulation.from_config(cfg_factory(*common))

    class Written(type(written.algo)):
        def apply(self, state, tools, rnd):
            return plain_fedavg(self, state, tools, rnd)

    written.algo = Written(**vars(written.algo))
    for rnd in (1, 2, 3):
        composed.run_round(rnd)
        out = written.run_round(rnd)
    assert out.round == 3 and len(out.plans) == 4
    torch.testing.assert_close(written.state.params, composed.state.params, rtol=1e-12, atol=1e-12)

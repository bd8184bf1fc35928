"""The graph executor: static shapes, finished clients masked, minibatch indices picked on the device. Its capture
as a CUDA graph runs on a GPU only (tests/test_gpu.py); its bookkeeping runs here, eagerly."""

from __future__ import annotations

import pytest

from fedrun.engine.graph_executor import GraphExecutor
from fedrun.engine.simulation import Simulation
from tests.test_executor import EVERY_FAMILY, assert_close_tree

RAGGED = ["data=digits", "fl.clients_per_round=4", "fl.batch_size=16", "hardware.dtype=float64", "fl.momentum=0.5",
          "partition=dirichlet", "partition.alpha=0.3", "hardware=cpu"]


@pytest.mark.parametrize("family", ["scaffold", "bherd", "perfedavg"])
@pytest.mark.parametrize("stack", ["native", "vmap"])
def test_a_ragged_cohort_gives_the_loops_rounds(cfg_factory, family, stack):
    """Clients of several step counts: a finished client's row keeps stepping and its results are discarded, so its
    state (SCAFFOLD's control variate), recorded steps (BHerd's herding) and mean loss are the loop's; so are a rule
    drawing several batches a step (Per-FedAvg), and the stack stepped natively or under vmap."""
    common = [*RAGGED, "model=mlp", *EVERY_FAMILY.get(family, [f"algo={family}"])]
    if stack == "vmap":
        common.append("hardware.gradient=autograd")  # no stacked step by hand: torch.func's vmap
    states, losses = {}, {}
    for executor in ("loop", "graph"):
        sim = Simulation(cfg_factory(*common, f"hardware.executor={executor}"))
        outs = [sim.run_round(rnd) for rnd in (1, 2)]
        states[executor], losses[executor] = vars(sim.state), [o.train_loss for o in outs]
    assert isinstance(sim.executor, GraphExecutor)
    assert len({p.tau for p in outs[0].plans}) > 2, "the case must have clients of several lengths"
    assert_close_tree(states["graph"], states["loop"])
    assert losses["graph"] == pytest.approx(losses["loop"], rel=1e-10)


def test_a_cpu_run_never_captures(cfg_factory):
    """CUDA graphs are a GPU's: on a CPU the masked steps run eagerly, whatever was asked."""
    sim = Simulation(cfg_factory(*RAGGED, "model=mlp", "hardware.executor=graph"))
    assert not sim.executor.captures(sim.model, sim.train_inputs)
    sim.executor.capture = True
    assert not sim.executor.captures(sim.model, sim.train_inputs)

"""scripts/step_costs.py: its arithmetic floor is the step's arithmetic, all of it and nothing else."""

import torch
from conftest import load_script
from torch.utils.flop_counter import FlopCounterMode

from fedrun.engine.executor import flops_per_step


def test_the_matrix_products_alone_are_the_flops_fedrun_counts_for_the_2nn_step():
    costs = load_script("step_costs")
    model = costs.two_nn()
    _, x, y, params = costs.stacked(model, 1)
    with FlopCounterMode(display=False) as counter:
        grads = costs.products(params, x, torch.randn(1, costs.B, costs.TWO_NN[-1]))
    assert counter.get_total_flops() == flops_per_step(model, x[0], y[0])
    assert [g.shape[1:] for g in reversed(grads)] == [s for s in model.shapes if len(s) == 2]  # every weight's

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


def test_lenet5s_layers_are_timed_each_on_the_activation_the_layer_before_gives_it(monkeypatch):
    costs = load_script("step_costs")
    calls = []
    monkeypatch.setattr(costs, "best_us", lambda work, n: calls.append(work()) or 1.0)
    from fedrun.compose import option
    from fedrun.models import build_model

    module, _ = build_model(option("model", "lenet5"), "image", (1, 28, 28), 10, "mnist")
    out = costs.layer_costs(module, torch.randn(4, 1, 28, 28))
    names = [k.removesuffix(": forward (us)") for k in out if k.endswith(": forward (us)")]
    shapes, h = [], torch.randn(4, 1, 28, 28)
    for layer in module:
        shapes.append(tuple(h.shape[1:]))
        h = layer(h)
    assert names == [f"LeNet-5 layer {i} {type(m).__name__} {s}" + (", channels-last" if len(s) == 3 else "")
                     for i, (m, s) in enumerate(zip(module, shapes))]
    assert len(out) == len(calls) == 2 * len(module)
    grads = [c for c in calls if isinstance(c, tuple)]  # the backward calls' gradients: parameters', then input's
    assert len(grads) == len(module) and grads[0][0].shape == module[0].weight.shape and len(grads[1]) == 1

"""scripts/bench/step_costs.py: its arithmetic floor is the step's arithmetic, all of it and nothing else."""

import torch
from conftest import load_script
from torch.utils.flop_counter import FlopCounterMode

from fedrun.engine.execution.executor import flops_per_step


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
    from fedrun.config.compose import option
    from fedrun.model.zoo import build_model

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


def test_a_cohorts_grouped_convolution_is_each_clients_own_and_the_layout_makes_it_channels_last():
    costs = load_script("step_costs")
    x = torch.randn(4, 3, 6, 9, 9, dtype=torch.float64)
    weights = torch.randn(4, 5, 6, 5, 5, dtype=torch.float64)
    laid_out = costs.grouped_channels_last(x)
    assert torch.equal(laid_out, x) and laid_out.permute(1, 3, 4, 0, 2).is_contiguous()
    merged = laid_out.transpose(0, 1).reshape(3, -1, 9, 9)
    assert merged.is_contiguous(memory_format=torch.channels_last) and merged.data_ptr() == laid_out.data_ptr()
    own = torch.stack([torch.nn.functional.conv2d(xi, wi) for xi, wi in zip(x, weights)])
    for images in (x, laid_out):
        torch.testing.assert_close(costs.grouped(images, weights), own, rtol=1e-12, atol=1e-12)


def test_the_table_names_the_commit_of_the_checkout_its_workers_run():
    costs = load_script("step_costs")
    text = costs.markdown({"system": [{"a (us)": 2.0}], "keep": [{"a (us)": 1.0}]}, "cmd", 1)
    assert f"at commit {load_script('startup_bench').git_commit(costs.REPO)} on" in text
    assert "| a (us) | 2.0 | 1.0 | 2.00x |" in text

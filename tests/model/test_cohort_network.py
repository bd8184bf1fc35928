"""A Sequential CNN's cohort as one network (fedrun/model/cohort_network.py): each client's loss and gradient as its own
step gives them, and which models qualify."""

import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from fedrun.model.cohort_network import cohort_layers, side_by_side, stacked_linear
from fedrun.model.functional import FunctionalModel
from fedrun.model.zoo import CROSS_ENTROPY, IGNORE, Flatten, build_model
from conftest import REPO



def _model(name, shape):
    module, objective = build_model(OmegaConf.load(f"conf/model/{name}.yaml"), "image", shape, 10, "test")
    return module.double(), objective


def assert_equal_to_own_steps(module, objective, flat, x, y, loss, grad):
    """Each client's stacked loss and gradient equal its own autograd step through the module, to float64 rounding."""
    own = FunctionalModel(module, objective, by_hand=False)
    for i in range(len(flat)):
        own_loss, own_grad = own.loss_and_grad(flat[i], {}, x[i], y[i])
        torch.testing.assert_close(loss[i], own_loss, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(grad[i], own_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,shape", [("lenet5", (1, 28, 28)), ("lenet5", (3, 32, 32)), ("cnn3", (3, 12, 12)),
                                        ("cnn_fedgh", (3, 32, 32))])
def test_each_clients_loss_and_gradient_equal_its_own_step(name, shape):
    """Three clients with their own parameters and minibatches (one with an unscored target): the stacked losses
    and (K, d) gradient equal each client's autograd step to float64 rounding, where the network's grouped
    convolutions, moved ReLUs and batched products would mix clients or layouts if they were wrong."""
    torch.manual_seed(0)
    module, objective = _model(name, shape)
    model = FunctionalModel(module, objective, cohort_network=True)
    assert model.cohort is not None and model.stacks
    k, b = 3, 5
    flat = model.init_params() + 0.1 * torch.randn(k, model.dim, dtype=torch.float64)
    x = torch.randn(k, b, *shape, dtype=torch.float64)
    y = torch.randint(0, 10, (k, b))
    y[1, 2] = IGNORE
    loss, grad = model.loss_and_grad(flat, {}, x, y)
    assert loss.shape == (k,) and grad.shape == (k, model.dim)
    assert_equal_to_own_steps(module, objective, flat, x, y, loss, grad)


def test_a_relu_before_a_max_pooling_runs_after_it_and_unsupported_models_are_left_to_vmap():
    module, objective = _model("lenet5", (1, 28, 28))
    layers = cohort_layers(module, objective)
    kinds = [type(m).__name__ for m in layers]
    assert kinds[:6] == ["Conv2d", "MaxPool2d", "ReLU", "Conv2d", "MaxPool2d", "ReLU"]
    assert sorted(kinds) == sorted(type(m).__name__ for m in module)  # the same layers, reordered
    conv = [nn.Conv2d(1, 4, 3), nn.ReLU(), Flatten(), nn.Linear(4 * 36, 10)]
    assert cohort_layers(nn.Sequential(*conv), CROSS_ENTROPY) is not None
    for other in ([nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), *conv[1:]],  # buffers
                  [nn.Conv2d(1, 4, 3), nn.Dropout(0.5), *conv[1:]],  # random
                  [nn.Conv2d(1, 4, 3, groups=1, padding=1, padding_mode="reflect"), nn.ReLU(), Flatten(),
                   nn.Linear(4 * 64, 10)],
                  [Flatten(), nn.Linear(64, 10)],  # no convolution: a dense chain's
                  conv[:-1]):  # not ending in a Linear
        assert cohort_layers(nn.Sequential(*other), CROSS_ENTROPY) is None
    assert FunctionalModel(module, objective).cohort is None  # off unless asked (a run: hardware.cohort_network)


@pytest.mark.parametrize("channels", [1, 3])
def test_the_clients_images_lie_side_by_side_in_channels_last_memory(channels):
    """Client k's image channels become channels k * C ... of one image batch, in channels-last memory (NCHW strides
    would send every convolution and pooling to oneDNN's NCHW kernels)."""
    x = torch.randn(4, 2, channels, 5, 6)
    h = side_by_side(x)
    assert h.shape == (2, 4 * channels, 5, 6)
    assert h.is_contiguous(memory_format=torch.channels_last) and not h.is_contiguous()
    for k in range(4):
        assert torch.equal(h[:, k * channels : (k + 1) * channels], x[k])


def test_a_convolutions_bias_before_a_max_pooling_is_added_after_it(monkeypatch):
    """LeNet-5's two convolutions run without their bias, which joins after the pooling (its gradient then sums a
    quarter of the elements); on mostly blank images, whose windows tie at the bias, each client's loss and gradient
    still equal its own step's."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    module, objective = _model("lenet5", (1, 28, 28))
    model = FunctionalModel(module, objective, cohort_network=True)
    biases, conv2d = [], F.conv2d
    monkeypatch.setattr(F, "conv2d", lambda x, w, b=None, *a, **k: biases.append(b) or conv2d(x, w, b, *a, **k))
    k = 3
    flat = model.init_params() + 0.1 * torch.randn(k, model.dim, dtype=torch.float64)
    x = torch.randn(k, 4, 1, 28, 28, dtype=torch.float64) * (torch.rand(k, 4, 1, 28, 28) > 0.9)
    y = torch.randint(0, 10, (k, 4))
    loss, grad = model.loss_and_grad(flat, {}, x, y)
    assert biases == [None, None]
    assert_equal_to_own_steps(module, objective, flat, x, y, loss, grad)


def test_the_cohorts_backward_does_not_import_torchs_symbolic_shapes():
    """Autograd checks a given output gradient's shape with torch.fx's symbolic shapes, whose first import costs
    a part of a run's first round; the cohort's backward starts from a scalar instead."""
    code = ("import sys, torch; from omegaconf import OmegaConf; from fedrun.model.zoo import build_model; "
            "from fedrun.model.functional import FunctionalModel; "
            "m, o = build_model(OmegaConf.create({'name': 'lenet5'}), 'image', (1, 28, 28), 10); "
            "fm = FunctionalModel(m, o, cohort_network=True); w = fm.init_params().repeat(2, 1); "
            "loss, g = fm.loss_and_grad(w, {}, torch.rand(2, 4, 1, 28, 28), torch.randint(0, 10, (2, 4))); "
            "assert g.shape == w.shape and bool(g.abs().sum() > 0); "
            "assert 'torch.fx.experimental.symbolic_shapes' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@pytest.mark.parametrize("outputs", [1, 3])
@pytest.mark.parametrize("bias", [True, False])
def test_a_stacked_linear_layer_gives_each_clients_own_product(outputs, bias):
    """``stacked_linear``: row b of client k is x_kb W_k^T + b_k, to float64 rounding, for a one-output layer
    (computed as the row W_k x_k^T) as for a wider one; shaped (K, B, out)."""
    torch.manual_seed(0)
    h = torch.randn(4, 7, 5, dtype=torch.float64)
    weight = torch.randn(4, outputs, 5, dtype=torch.float64)
    b = torch.randn(4, outputs, dtype=torch.float64) if bias else None
    want = torch.stack([h[k] @ weight[k].T + (b[k] if bias else 0) for k in range(4)])
    got = stacked_linear(h, weight, b)
    assert got.shape == (4, 7, outputs)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("outputs", [1, 3])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_stacked_linear_layers_written_out_backward_equals_autograds(outputs, bias, dtype):
    """The cohort network's Linear layer (``_StackedLinear``): its values and the rows', weights' and biases' gradients
    equal autograd's through each client's own product (float64: to its rounding; float32, where the weights'
    gradient is written into its part of a flat gradient by the compiled row sums: to float32's); that part written in
    place, the clients d apart; without it, the weights' gradient contiguous."""
    from fedrun.model.cohort_network import _StackedLinear

    torch.manual_seed(1)
    h = torch.randn(4, 7, 5, dtype=dtype, requires_grad=True)
    weight = torch.randn(4, outputs, 5, dtype=dtype, requires_grad=True)
    b = torch.randn(4, outputs, dtype=dtype, requires_grad=True) if bias else None
    inputs = [h, weight] + ([b] if bias else [])
    g = torch.randn(4, 7, outputs, dtype=dtype)
    want_out = torch.stack([h[k] @ weight[k].T + (b[k] if bias else 0) for k in range(4)])
    want = torch.autograd.grad((want_out * g).sum(), inputs)
    flat = torch.full((4, 3 + outputs * 5 + 2), float("nan"), dtype=dtype)  # a flat gradient, d = 5 * outputs + 5
    into = flat[:, 3 : 3 + outputs * 5].view(4, outputs, 5)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
    for part in (None, into):
        out = _StackedLinear.apply(h, weight, b, part)
        got = torch.autograd.grad((out * g).sum(), inputs)
        torch.testing.assert_close(out, want_out, **tol)
        for mine, theirs in zip(got, want):
            torch.testing.assert_close(mine, theirs, **tol)
        in_place = part is not None and dtype == torch.float32
        assert (got[1].data_ptr() == into.data_ptr()) == in_place
        assert in_place or got[1].is_contiguous()
    assert flat[:, :3].isnan().all() and flat[:, -2:].isnan().all()  # nothing written outside the part


@pytest.mark.parametrize("outputs", [1, 3])
def test_a_stacked_linear_layers_backward_under_autocast_is_autograds_through_the_casts(outputs):
    """Under bfloat16 autocast (hardware.precision=bfloat16) the forward's product runs in bfloat16 and the written-
    out backward, which autocast does not reach, must still take the bfloat16 output gradient against float32 saved
    inputs: its gradients equal autograd's through the same casts, each in its input's type."""
    from fedrun.model.cohort_network import _StackedLinear, stacked_linear

    torch.manual_seed(2)
    h = torch.randn(4, 7, 5, requires_grad=True)
    weight = torch.randn(4, outputs, 5, requires_grad=True)
    b = torch.randn(4, outputs, requires_grad=True)
    g = torch.randn(4, 7, outputs)
    results = []
    for layer in (lambda *a: _StackedLinear.apply(*a, None), stacked_linear):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = layer(h, weight, b)
        assert out.dtype == torch.bfloat16
        results.append((out, torch.autograd.grad((out.float() * g).sum(), [h, weight, b])))
    (mine, mine_grads), (theirs, their_grads) = results
    torch.testing.assert_close(mine, theirs)
    for got, want, given in zip(mine_grads, their_grads, (h, weight, b)):
        assert got.dtype == given.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)

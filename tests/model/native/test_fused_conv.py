"""The compiled first-layer kernel (fedrun/model/native/fused_conv.py): the same values and gradients as the
convolution, max pooling and ReLU one by one, in a cohort's step and a lone client's, where it applies, and a fallback
without it."""

import logging

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torch import nn

from fedrun.model.native import fused_conv
from fedrun.model.cohort_network import cohort_layers
from fedrun.model.functional import FunctionalModel
from fedrun.model.native.indexed_rows import IndexedRows
from fedrun.model.zoo import IGNORE, build_model

pytestmark = pytest.mark.skipif(not fused_conv.enabled(), reason="the kernel cannot be built here (no g++ or ninja)")


def layers_one_by_one(x, weight, bias, padding):
    """The reference: each client's own convolution, 2x2 max pooling, bias and ReLU, in torch, as (K, B, O, P, Q)."""
    out = [F.relu(F.max_pool2d(F.conv2d(x[k], weight[k], None if bias is None else bias[k], padding=padding), 2))
           for k in range(len(x))]
    return torch.stack(out)


@pytest.mark.parametrize("clients,channels,height,width,size,padding,outputs,bias", [
    (3, 1, 28, 28, 5, 2, 6, True),    # LeNet-5 on MNIST
    (2, 3, 32, 32, 5, 0, 6, True),    # LeNet-5 on CIFAR-10
    (1, 2, 13, 11, 3, 1, 4, True),    # odd sizes (the last row and column are not pooled), fewer than 6 outputs
    (2, 1, 20, 34, 3, 0, 8, False),   # 16 pooled columns, more than 6 outputs, no bias
])
def test_the_kernel_equals_the_layers_one_by_one(clients, channels, height, width, size, padding, outputs, bias):
    """Values and the weights' and biases' gradients as torch's layers give them (the pooling's winner taken as the
    first of its window, the ReLU's gradient zero where it is off), for each client from its own weights, in each
    layout that the layer after it takes (``fused_conv.LAYOUTS``); the same bits in each, and on a rerun."""
    torch.manual_seed(0)
    x = torch.randn(clients, 5, channels, height, width)
    w = (0.3 * torch.randn(clients, outputs, channels, size, size)).requires_grad_(True)
    b = (0.1 * torch.randn(clients, outputs)).requires_grad_(True) if bias else None
    params = [w] + ([b] if bias else [])
    ref = layers_one_by_one(x, w, b, padding)
    assert (ref == 0).any() and (ref > 0).any()  # the ReLU is on and off
    grad = torch.randn_like(ref)
    wanted = torch.autograd.grad((ref * grad).sum(), params)
    outs, grads = [], []
    for layout in fused_conv.LAYOUTS:
        out = fused_conv.conv_pool_relu(x, w, b, padding, layout)
        assert out.shape == ref.shape and in_layout(out, layout)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        outs.append(out)
        grads.append(torch.autograd.grad((out * grad).sum(), params))
        for g, want in zip(grads[-1], wanted):
            torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-4)
    again = torch.autograd.grad((fused_conv.conv_pool_relu(x, w, b, padding) * grad).sum(), params)
    assert all(torch.equal(out, outs[0]) for out in outs)
    assert all(torch.equal(g, g0) for got in [*grads, again] for g, g0 in zip(got, grads[0]))


@pytest.mark.parametrize("images", [37, 10])
def test_a_clients_gradient_has_the_same_bits_alone_in_a_cohort_and_on_any_number_of_threads(images):
    """The first kernel sums a client's minibatch in chunks of 16 images in a fixed order (37 images: three chunks,
    the last one partial; 10: one chunk, whose taps a lone client shares among the threads), so a lone client's
    gradients equal its row of a cohort's bit for bit, whatever the number of threads; and they equal torch's layers'
    in float64."""
    torch.manual_seed(2)
    x = torch.randn(3, images, 3, 32, 32)
    w = (0.3 * torch.randn(3, 6, 3, 5, 5)).requires_grad_(True)
    b = (0.1 * torch.randn(3, 6)).requires_grad_(True)
    ref = layers_one_by_one(x.double(), w.double(), b.double(), 0)
    grad = torch.randn_like(ref)
    wanted = torch.autograd.grad((ref * grad).sum(), [w, b])
    threads = torch.get_num_threads()
    try:
        results = []
        for n in sorted({1, 2, threads}):
            torch.set_num_threads(n)
            results.append(torch.autograd.grad((fused_conv.conv_pool_relu(x, w, b, 0) * grad.float()).sum(), [w, b]))
        w_alone, b_alone = w.detach()[2:].requires_grad_(True), b.detach()[2:].requires_grad_(True)
        mine = torch.autograd.grad((fused_conv.conv_pool_relu(x[2:], w_alone, b_alone, 0) * grad[2:].float()).sum(),
                                   [w_alone, b_alone])
    finally:
        torch.set_num_threads(threads)
    for g, want in zip(results[0], wanted):
        torch.testing.assert_close(g.double(), want.to(g.dtype).double(), rtol=1e-4, atol=1e-4)
    assert all(torch.equal(g, g0) for got in results for g, g0 in zip(got, results[0]))
    assert all(torch.equal(m, g[2:]) for m, g in zip(mine, results[0]))


def test_the_first_kernel_reads_a_cohorts_images_in_place_as_it_reads_them_gathered():
    """Given as an index into the training images (``indexed_rows.IndexedRows``: out of order, repeated, shared
    among clients), the first kernel's output and gradients have the gathered minibatch's bits; an index outside
    the images is refused with its value."""
    torch.manual_seed(4)
    images = torch.randn(40, 3, 32, 32)
    index = torch.tensor([[7, 3, 3, 39, 0], [12, 7, 25, 1, 30]])
    rows = IndexedRows(images, index)
    assert rows.shape == (2, 5, 3, 32, 32) and torch.equal(rows.gathered(), images[index])
    w = (0.3 * torch.randn(2, 6, 3, 5, 5)).requires_grad_(True)
    b = (0.1 * torch.randn(2, 6)).requires_grad_(True)
    results = []
    for x in (images[index], rows):
        assert fused_conv.fits(nn.Conv2d(3, 6, 5), nn.MaxPool2d(2), nn.ReLU(), x)
        out = fused_conv.conv_pool_relu(x, w, b, 0, "clients")
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(5))
        results.append((out, *torch.autograd.grad((out * grad).sum(), [w, b])))
    assert all(torch.equal(got, want) for got, want in zip(results[1], results[0]))
    with pytest.raises(RuntimeError, match="image 40 of 40"):
        fused_conv.conv_pool_relu(IndexedRows(images, index + 1), w, b, 0)


@pytest.mark.parametrize("later", [False, True])
def test_the_kernels_read_weights_and_write_their_gradient_in_a_cohorts_flat_vectors(later):
    """Given weights that are a view of the cohort's flat parameters (each client's block contiguous, the clients d
    apart) and ``into``, the same view of the flat gradient, a kernel reads the weights in place and writes their
    gradient there (returned as that view), nothing else in the flat gradient; the same bits as with contiguous
    weights and a new gradient."""
    torch.manual_seed(6)
    k, outputs, channels = 3, (16 if later else 6), (6 if later else 3)
    x = torch.randn(k, 4, channels, 14 if later else 32, 14 if later else 32)
    d = 5 + outputs * channels * 25 + 3
    flat = torch.randn(k, d)
    weight = flat[:, 5 : d - 3].view(k, outputs, channels, 5, 5)
    b = torch.randn(k, outputs)
    run = fused_conv.conv_pool_relu_images if later else fused_conv.conv_pool_relu
    grads, gradient = [], torch.full_like(flat, float("nan"))
    for w, into in [(weight.contiguous(), None), (weight, gradient[:, 5 : d - 3])]:
        w = w.requires_grad_(True) if into is None else w.detach().requires_grad_(True)
        part = None if into is None else into.view(k, outputs, channels, 5, 5)
        out = run(x, w, b, 0, "rows", part)
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
        (dw,) = torch.autograd.grad((out * grad).sum(), [w])
        assert part is None or dw.data_ptr() == part.data_ptr()
        grads.append((out, dw))
    assert all(torch.equal(got, want) for got, want in zip(grads[1], grads[0]))
    assert gradient[:, :5].isnan().all() and gradient[:, d - 3 :].isnan().all()


def test_a_cohorts_images_reach_the_first_kernel_in_place_only_as_one_plain_float32_tensor():
    """``fused_conv.reads_images``: the training images as one contiguous float32 tensor that the first layers fit;
    not in float64, not strided, not images the kernel does not fit (a model without the kernel's layers)."""
    layers = cohort_layers(*lenet5((3, 32, 32)))
    images = torch.randn(8, 3, 32, 32)
    assert fused_conv.reads_images(layers, images)
    assert not fused_conv.reads_images(layers, images.double())
    assert not fused_conv.reads_images(layers, images.transpose(2, 3))
    assert not fused_conv.reads_images(layers, torch.randn(8, 1, 28, 28))  # one channel: not LeNet-5 on CIFAR's


def in_layout(out, layout):
    """Whether a kernel's (K, B, O, P, Q) output lies in ``layout``'s memory order (fused_conv.LAYOUTS)."""
    order = {"cohort": (1, 3, 4, 0, 2), "clients": (0, 1, 3, 4, 2), "rows": (0, 1, 2, 3, 4)}[layout]
    return out.permute(*order).is_contiguous()


def later_layers_one_by_one(h, weight, bias, padding):
    """The reference for a later convolution: each client's convolution, 2x2 max pooling, bias and ReLU on its own
    images ``h`` (K, B, C, H, W), as (K, B, O, P, Q)."""
    return torch.stack([F.relu(F.max_pool2d(F.conv2d(h[i], weight[i], None if bias is None else bias[i],
                                                     padding=padding), 2))
                        for i in range(len(weight))])


@pytest.mark.parametrize("clients,channels,height,width,size,padding,outputs,bias,whole", [
    (3, 6, 14, 14, 5, 0, 16, True, False),    # LeNet-5's second convolution (MNIST and CIFAR-10 alike)
    (2, 4, 9, 13, 3, 1, 20, True, False),     # odd sizes, two groups of output channels, padding
    (1, 12, 11, 11, 5, 2, 7, False, False),   # four vectors a window row (12 x 5 inputs), no bias
    (2, 16, 8, 9, 3, 0, 16, True, False),     # 16 input channels, 3 x 3
    (2, 6, 14, 14, 5, 0, 16, True, True),     # whole numbers: ties in the pooling windows
])
def test_the_later_kernel_equals_the_layers_one_by_one(clients, channels, height, width, size, padding, outputs, bias,
                                                       whole):
    """A later convolution's kernel, on images side by side (a view of the cohort's channels-last images, as oneDNN's
    grouped convolution takes them) and on each client's own: values and the images', weights' and biases'
    gradients as torch's layers give them in float64 (ties to the first of a window, as torch's max pooling), in
    each output layout; the images' gradient in the images' strides; the same bits in every layout, on a rerun, and
    for a lone client as for its row of the cohort."""
    torch.manual_seed(4)
    draw = (lambda *s: torch.randint(-3, 4, s).float()) if whole else torch.randn
    cohort = draw(20, height, width, clients, channels).permute(3, 0, 4, 1, 2)  # (K, B, C, H, W) of (B, H, W, K, C)
    own = cohort.permute(0, 1, 3, 4, 2).contiguous().permute(0, 1, 4, 2, 3)  # of (K, B, H, W, C)
    w = (draw(clients, outputs, channels, size, size) * (1 if whole else 0.3)).requires_grad_(True)
    b = (draw(clients, outputs) * (1 if whole else 0.1)).requires_grad_(True) if bias else None
    ref_h = cohort.double().requires_grad_(True)
    ref = later_layers_one_by_one(ref_h, w.double(), None if b is None else b.double(), padding)
    assert (ref == 0).any() and (ref > 0).any()
    grad = torch.randn_like(ref)
    wanted = torch.autograd.grad((ref * grad).sum(), [ref_h, w] + ([b] if bias else []))
    results = []
    for images in (cohort, own):
        for layout in fused_conv.LAYOUTS:
            h = images.clone().requires_grad_(True)  # clone keeps the strides
            inputs = [h, w] + ([b] if bias else [])
            out = fused_conv.conv_pool_relu_images(h, w, b, padding, layout)
            assert out.shape == ref.shape and in_layout(out, layout)
            torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
            got = torch.autograd.grad((out * grad.float()).sum(), inputs)
            assert got[0].stride() == images.stride()
            for g, want in zip(got, wanted):
                torch.testing.assert_close(g.double(), want.to(g.dtype).double(), rtol=1e-4, atol=1e-4)
            results.append((out, got))
    out0, got0 = results[0]
    assert all(torch.equal(out, out0) and all(torch.equal(g, g0) for g, g0 in zip(got, got0)) for out, got in results)
    last = clients - 1  # the last client alone
    h = cohort[last:].clone().requires_grad_(True)
    params = [w.detach()[last:].requires_grad_(True)] + ([b.detach()[last:].requires_grad_(True)] if bias else [])
    alone = fused_conv.conv_pool_relu_images(h, params[0], params[1] if bias else None, padding)
    assert torch.equal(alone, out0[last:])
    mine = torch.autograd.grad((alone * grad[last:].float()).sum(), [h, *params])
    assert all(torch.equal(m, g[last:]) for m, g in zip(mine, got0))


def test_a_later_convolution_fits_float32_images_of_few_channels():
    conv, pool, relu = nn.Conv2d(6, 16, 5), nn.MaxPool2d(2), nn.ReLU()
    h = torch.randn(3, 4, 6, 14, 14)
    assert fused_conv.fits_images(conv, pool, relu, h)
    assert fused_conv.fits_images(conv, pool, relu, h.transpose(3, 4))  # any strides
    assert not fused_conv.fits_images(conv, pool, relu, torch.randn(3, 4, 9, 14, 14))  # 9 channels, not 6
    assert not fused_conv.fits_images(conv, pool, relu, h.double())
    assert not fused_conv.fits_images(conv, pool, relu, h[0])  # (B, C, H, W): not a cohort's
    assert not fused_conv.fits_images(conv, pool, None, h)  # no ReLU after the pooling
    wide = torch.randn(3, 4, 13, 14, 14)
    assert not fused_conv.fits_images(nn.Conv2d(13, 16, 5), pool, relu, wide)  # 65 values a window row


def test_a_kernels_output_takes_the_layout_of_the_layer_after_it():
    """LeNet-5 (conv, pool, ReLU, conv, pool, ReLU, a whole-window conv, ...): the first kernel writes the images
    that the second reads, the second the rows of the whole-window convolution; before a flattening layer, rows;
    before anything else (a convolution that no kernel fits), the images side by side."""
    module, _ = lenet5()
    layers = cohort_layers(module, lenet5()[1])
    assert fused_conv.layout_for(layers, 3, (14, 14)) == "clients"
    assert fused_conv.layout_for(layers, 6, (5, 5)) == "rows"
    assert fused_conv.layout_for([nn.Flatten()], 0, (5, 5)) == "rows"
    assert fused_conv.layout_for([nn.Conv2d(6, 16, 3), nn.ReLU()], 0, (14, 14)) == "cohort"
    cnn3 = cohort_layers(*build_model(OmegaConf.load("conf/model/cnn3.yaml"), "image", (3, 32, 32), 10, "t"))
    assert fused_conv.layout_for(cnn3, 3, (16, 16)) == "cohort"  # 32 channels x 3: more than the later kernel takes
    assert fused_conv.layout_for([], 0, (14, 14)) == "cohort"


def lenet5(shape=(1, 28, 28)):
    return build_model(OmegaConf.load("conf/model/lenet5.yaml"), "image", shape, 10, "test")


@pytest.mark.parametrize("name,shape", [("lenet5", (1, 28, 28)), ("lenet5", (3, 32, 32)), ("cnn3", (3, 16, 16))])
def test_a_cohorts_and_a_lone_clients_step_equal_theirs_without_the_kernel(name, shape):
    """LeNet-5's (K, d) stacked step and a single client's step with the kernels give the losses and gradients of
    the same steps without them (oneDNN's convolutions, torch's pooling), to float32 rounding; so does cnn3's, whose
    second convolution (32 input channels, 3x3) no kernel takes: oneDNN's, on the first kernel's images side by
    side. Minibatches given as an index into the training images give the gathered ones' bits, with the kernels
    (read in place, under hardware.native) and without (gathered first)."""
    torch.manual_seed(1)
    module, objective = build_model(OmegaConf.load(f"conf/model/{name}.yaml"), "image", shape, 10, "test")
    fused = FunctionalModel(module, objective, cohort_network=True, fused_conv=True, indexed_rows=True)
    plain = FunctionalModel(module, objective, cohort_network=True, indexed_rows=True)
    assert fused.fused_conv and not plain.fused_conv
    k, b = 3, 16
    flat = fused.init_params() + 0.05 * torch.randn(k, fused.dim)
    x, y = torch.randn(k, b, *shape), torch.randint(0, 10, (k, b))
    y[1, 2] = IGNORE
    for args in [(flat, {}, x, y), (flat[0], {}, x[0], y[0])]:
        loss, grad = fused.loss_and_grad(*args)
        want_loss, want_grad = plain.loss_and_grad(*args)
        assert loss.shape == want_loss.shape and grad.shape == want_grad.shape
        torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(grad, want_grad, rtol=1e-4, atol=1e-5)
    # the minibatches read in place from the training images (as the executors hand them over): the same bits
    source, index = torch.randn(60, *shape), torch.randperm(60)[: k * b].view(k, b)
    assert fused.reads_rows(source) and not plain.reads_rows(source)
    assert not FunctionalModel(module, objective, cohort_network=True, fused_conv=True).reads_rows(source)
    for rows, gathered in [((flat, {}, IndexedRows(source, index), y), (flat, {}, source[index], y)),
                           ((flat[1], {}, IndexedRows(source, index[1]), y[1]), (flat[1], {}, source[index[1]], y[1]))]:
        assert all(torch.equal(got, want) for got, want in zip(fused.loss_and_grad(*rows),
                                                               fused.loss_and_grad(*gathered)))
        assert all(torch.equal(got, want) for got, want in zip(plain.loss_and_grad(*rows),
                                                               plain.loss_and_grad(*gathered)))


def test_it_fits_a_plain_convolution_pooling_and_relu_in_float32_only():
    x = torch.randn(2, 4, 1, 28, 28)
    conv, pool, relu = nn.Conv2d(1, 6, 5, padding=2), nn.MaxPool2d(2), nn.ReLU()
    assert fused_conv.fits(conv, pool, relu, x)
    assert not fused_conv.fits(conv, pool, relu, x.double())  # float32 only
    assert not fused_conv.fits(conv, pool, nn.Flatten(), x)  # no ReLU after the pooling
    assert not fused_conv.fits(conv, nn.MaxPool2d(3), relu, x)  # a 3x3 pooling
    assert not fused_conv.fits(conv, nn.MaxPool2d(2, padding=1), relu, x)
    assert not fused_conv.fits(nn.Conv2d(1, 6, 5, stride=2), pool, relu, x)
    assert not fused_conv.fits(nn.Conv2d(1, 6, 7), pool, relu, x)  # kernels of 3 and 5 only
    assert not fused_conv.fits(nn.Conv2d(1, 6, 5, padding=2), pool, relu, torch.randn(2, 4, 1, 28, 40))  # 20 columns
    assert not fused_conv.fits(nn.Conv2d(1, 6, 5, padding=2, padding_mode="reflect"), pool, relu, x)


def test_without_a_compiler_the_layers_run_one_by_one_after_a_warning(without_a_compiler, caplog):
    """Where the kernel cannot be built, fedrun says so once and steps with oneDNN's convolution, the same values."""
    torch.manual_seed(2)
    module, objective = lenet5()
    model = FunctionalModel(module, objective, cohort_network=True, fused_conv=True)
    flat = model.init_params() + 0.05 * torch.randn(2, model.dim)
    x, y = torch.randn(2, 8, 1, 28, 28), torch.randint(0, 10, (2, 8))
    with_kernel = model.loss_and_grad(flat, {}, x, y)
    with without_a_compiler(), caplog.at_level(logging.WARNING, logger="fedrun"):
        assert not fused_conv.enabled()
        loss, grad = model.loss_and_grad(flat, {}, x, y)
        model.loss_and_grad(flat[0], {}, x[0], y[0])
    warnings = [r for r in caplog.records if "could not be built" in r.getMessage()]
    assert len(warnings) == 1 and "g++: command not found" in warnings[0].getMessage()
    torch.testing.assert_close(loss, with_kernel[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, with_kernel[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_an_evaluation_with_the_kernel_equals_one_without_it(shape):
    """A model's evaluation (no graph: the forward by hand) runs its first layer as the kernel: the same hits and,
    to float32 rounding, the same loss as layer by layer; under a graph the forward keeps torch's layers."""
    torch.manual_seed(3)
    module, objective = lenet5(shape)
    fused = FunctionalModel(module, objective, channels_last=True, cohort_network=True, fused_conv=True)
    plain = FunctionalModel(module, objective, channels_last=True, cohort_network=True)
    flat = fused.init_params()
    x, y = torch.randn(300, *shape), torch.randint(0, 10, (300,))
    hits, units, loss = fused.evaluate_hits(flat, {}, x, y)
    want_hits, want_units, want_loss = plain.evaluate_hits(flat, {}, x, y)
    assert torch.equal(hits, want_hits) and torch.equal(units, want_units)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    w = flat.clone().requires_grad_(True)
    assert torch.equal(fused.forward(w, {}, x[:8]), plain.forward(w, {}, x[:8]))  # torch's layers, bit for bit

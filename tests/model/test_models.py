import copy

import pytest
import torch

from fedrun.config.compose import option
from fedrun.data import DATASETS
from fedrun.errors import ConfigError
from fedrun.model.functional import FunctionalModel
from fedrun.model.zoo import MODELS, SQUARED_HINGE_PARITY, WindowConv2d, build_model

IMAGE_SHAPES = {"digits": (1, 8, 8), "mnist": (1, 28, 28), "cifar10": (3, 32, 32), "cifar100": (3, 32, 32)}


def mcfg(name, **values):
    return option("model", name, **values)


def cases():
    for data, shape in IMAGE_SHAPES.items():
        classes = DATASETS[data].meta(None)[2]
        for name, spec in MODELS.items():
            if "image" in spec.kinds and min(shape[1:]) >= spec.min_hw:
                yield name, "image", shape, classes
    for name in ("svm", "logreg", "mlp"):
        yield name, "vector", (60,), 5
    for name in ("gru", "lstm"):
        yield name, "tokens", (40,), 2
        yield name, "sequence", (25, 13), 12


@pytest.mark.parametrize("name,kind,shape,classes", list(cases()))
def test_output_shape_on_each_dataset_it_fits(name, kind, shape, classes):
    module, objective = build_model(mcfg(name, **({"vocab_size": 1000} if kind == "tokens" else {})), kind, shape,
                                    classes)
    module.eval()
    x = torch.randint(0, 1000, (3, *shape)) if kind == "tokens" else torch.randn(3, *shape)
    out = module(x)
    assert out.shape == ((3, 1) if name == "svm" else (3, classes))


def test_paper_layer_sizes():
    bherd, _ = build_model(mcfg("cnn_bherd"), "image", (1, 28, 28), 10)
    fcs = [m for m in bherd.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in fcs] == [(1568, 256), (256, 10)]
    fedgh, _ = build_model(mcfg("cnn_fedgh"), "image", (3, 32, 32), 10)
    assert [m for m in fedgh.modules() if isinstance(m, torch.nn.Linear)][0].in_features == 1600
    lenet, _ = build_model(mcfg("lenet5"), "image", (3, 32, 32), 10)
    assert sum(p.numel() for p in lenet.parameters()) == 62006  # GraB's LeNet-5
    gru, _ = build_model(mcfg("gru", vocab_size=1000), "tokens", (100,), 2)
    assert [(m.in_features, m.out_features) for m in gru.head if isinstance(m, torch.nn.Linear)] == [(200, 50), (50, 2)]
    # LEAF's models: FEMNIST conv 5x5 32 and 64 (same), FC 3136 -> 2048 -> 62; CelebA four conv 3x3 32 + BN blocks
    # on 84x84 (84 -> 42 -> 21 -> 11 -> 6 with 'same' pooling), FC 1152 -> 2; Reddit's LSTM language model
    femnist, _ = build_model(mcfg("cnn_leaf_femnist"), "image", (1, 28, 28), 62)
    assert sum(p.numel() for p in femnist.parameters()) == 832 + 51264 + (3136 * 2048 + 2048) + (2048 * 62 + 62)
    celeba, _ = build_model(mcfg("cnn_leaf_celeba"), "image", (3, 84, 84), 2)
    assert [m.in_features for m in celeba.modules() if isinstance(m, torch.nn.Linear)] == [32 * 6 * 6]
    assert celeba(torch.zeros(2, 3, 84, 84)).shape == (2, 2)
    lm, objective = build_model(mcfg("lstm_lm", vocab_size=50, hidden=16, layers=2),
                                "tokens", (10,), 50)
    assert lm(torch.zeros(3, 10, dtype=torch.long)).shape == (3, 50, 10) and objective.name == "sequence_cross_entropy"


@pytest.mark.parametrize("name,shape", [("vgg16", (1, 8, 8)), ("lenet5", (1, 8, 8)), ("gru", (1, 28, 28))])
def test_model_that_does_not_fit_is_refused_with_alternatives(name, shape):
    with pytest.raises(ConfigError, match="models that fit"):
        build_model(mcfg(name), "image", shape, 10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(32, 10), (4, 16, 10), (2048, 10), (8, 3)])
def test_cross_entropys_gradient_without_padding_is_the_general_cases_bit_for_bit(shape, dtype):
    """A minibatch whose every target is scored takes the short path: the general case's loss and gradient bit for
    bit, in the same memory layout (2048 rows of 10 classes: log-softmax over a transposed copy), so the products that
    follow round the same; a padding target, logits in an autograd graph, a torch.func transform or targets off the
    CPU (the check would wait for the device) take the general case, whose values stay autograd's."""
    from torch.func import vmap

    from fedrun.model.zoo import CROSS_ENTROPY, _every_target_scored, _some_targets_unscored

    torch.manual_seed(0)
    out, y = torch.randn(*shape, dtype=dtype), torch.randint(0, shape[-1], shape[:-1])
    calls = []
    short = lambda o, t: calls.append(1) or _every_target_scored(o, t)  # noqa: E731
    general_loss, general_grad = _some_targets_unscored(out, y)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("fedrun.model.zoo._every_target_scored", short)
        loss, grad = CROSS_ENTROPY.loss_and_grad_out(out, y)
        assert len(calls) == 1
        assert torch.equal(loss, general_loss) and torch.equal(grad, general_grad)
        assert grad.stride() == general_grad.stride()
        padded = y.clone()
        padded.view(-1)[1] = -100
        CROSS_ENTROPY.loss_and_grad_out(out, padded)
        CROSS_ENTROPY.loss_and_grad_out(out.clone().requires_grad_(True), y)
        vmap(CROSS_ENTROPY.loss_and_grad_out)(out[None], y[None])
        CROSS_ENTROPY.loss_and_grad_out(out.to("meta"), y.to("meta"))  # a device whose values the host cannot read
        assert len(calls) == 1
    auto = out.clone().requires_grad_(True)
    want = torch.nn.functional.cross_entropy(auto.reshape(-1, shape[-1]), y.reshape(-1), reduction="none")
    want = want.reshape(shape[:-1]).mean(-1)
    (want_grad,) = torch.autograd.grad(want.sum(), auto)
    tol = {"rtol": 1e-12, "atol": 1e-14} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-7}
    torch.testing.assert_close(loss, want.detach(), **tol)
    torch.testing.assert_close(grad, want_grad, **tol)


def test_squared_hinge_parity_matches_hand_computation():
    out = torch.tensor([[0.5], [-2.0], [0.2], [1.5]])
    y = torch.tensor([4, 3, 7, 0])  # targets +1, -1, -1, +1
    # margins 1 - t*f: 0.5, -1 -> 0, 1.2, -0.5 -> 0; squared: 0.25, 0, 1.44, 0; halved as the smooth SVM
    assert SQUARED_HINGE_PARITY.loss(out, y).item() == pytest.approx(0.5 * (0.25 + 1.44) / 4)
    assert SQUARED_HINGE_PARITY.correct(out, y).item() == 3  # 0.2 predicts even for odd 7


def test_functional_gradient_equals_autograd_on_the_module():
    module, objective = build_model(mcfg("cnn3"), "image", (1, 8, 8), 10)
    fm = FunctionalModel(module, objective)
    x, y = torch.randn(5, 1, 8, 8), torch.randint(0, 10, (5,))
    loss, grad = fm.loss_and_grad(fm.init_params(), fm.init_buffers(), x, y)
    module.zero_grad()
    ref = objective.loss(module(x), y)
    ref.backward()
    torch.testing.assert_close(loss, ref.detach())
    torch.testing.assert_close(grad, torch.cat([p.grad.reshape(-1) for p in module.parameters()]))


def test_svm_can_start_from_zero_without_intercept_as_the_prototype_system():
    net, _ = build_model(mcfg("svm", bias=False, init="zeros"), "image", (1, 4, 4), 10)
    (layer,) = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert layer.bias is None and layer.weight.shape == (1, 16) and not layer.weight.any()


def test_a_single_sample_client_is_refused_only_where_batchnorm_cannot_train_on_it():
    import numpy as np

    from fedrun.data.partition import refuse_single_sample_batches
    from fedrun.model.zoo import CROSS_ENTROPY
    from fedrun.data.partition import Partition

    one, two = Partition([np.arange(1), np.arange(1, 4)], "test"), Partition([np.arange(2), np.arange(2, 4)], "test")
    flat_bn = FunctionalModel(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)), CROSS_ENTROPY)
    map_bn = FunctionalModel(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.BatchNorm2d(2),
                                                 torch.nn.Flatten()), CROSS_ENTROPY)
    vectors, images = torch.randn(4, 3), torch.randn(4, 1, 4, 4)
    with pytest.raises(ConfigError, match=r"client\(s\) \[0\] hold a single sample.*partition.min_size=2"):
        refuse_single_sample_batches(flat_bn, flat_bn.init_params(), flat_bn.init_buffers(), vectors, one, "m")
    refuse_single_sample_batches(flat_bn, flat_bn.init_params(), flat_bn.init_buffers(), vectors, two, "m")
    refuse_single_sample_batches(map_bn, map_bn.init_params(), map_bn.init_buffers(), images, one, "m")  # 16 values


@pytest.mark.parametrize("name,kind,shape", [("logreg", "image", (1, 8, 8)), ("mlp", "vector", (60,)),
                                             ("svm", "image", (1, 8, 8))])
def test_a_dense_chains_gradient_by_hand_equals_autograds(name, kind, shape):
    """Linear/ReLU chains under cross-entropy or the smooth SVM compute loss and gradient by hand (backprop written
    out): equal to autograd's in float64, one client and a vmapped cohort, with an unscored (padding) target."""
    from torch.func import vmap

    torch.manual_seed(0)
    module, objective = build_model(option("model", name), kind, shape, 10, name)
    module = module.double()
    hand, auto = FunctionalModel(module, objective), FunctionalModel(module, objective, by_hand=False)
    assert hand.chain is not None and auto.chain is None
    w = torch.stack([hand.init_params() + 0.1 * torch.randn(hand.dim, dtype=torch.float64) for _ in range(3)])
    x, y = torch.randn(3, 16, *shape, dtype=torch.float64), torch.randint(0, 10, (3, 16))
    y[0, 3] = -100 if name != "svm" else y[0, 3]
    cohort = [vmap(lambda a, b, c, m=m: m.loss_and_grad(a, {}, b, c))(w, x, y) for m in (hand, auto)]
    for got, want in zip(*cohort):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    loss, grad = hand.loss_and_grad(w[0], {}, x[0], y[0])
    torch.testing.assert_close(grad, cohort[1][1][0], rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(loss, cohort[1][0][0], rtol=1e-12, atol=1e-14)


def test_only_dense_chains_take_the_gradient_by_hand():
    """Convolutions, BatchNorm or a feature penalty (FedDecorr) keep autograd."""
    cnn = FunctionalModel(*build_model(option("model", "cnn3"), "image", (1, 8, 8), 10, "cnn3"))
    mlp = FunctionalModel(*build_model(option("model", "mlp"), "vector", (6,), 3, "mlp"))
    assert cnn.chain is None and mlp.chain is not None
    from fedrun.model.functional import dense_chain

    flat_all = torch.nn.Sequential(torch.nn.Flatten(0), torch.nn.Linear(4, 2))  # would fold the batch in
    assert dense_chain(flat_all, mlp.objective) is None
    w, x, y = mlp.init_params(), torch.randn(4, 6), torch.tensor([0, 1, 2, 0])
    penalty = lambda z: z.pow(2).mean()  # noqa: E731
    with_penalty = mlp.loss_and_grad(w, {}, x, y, penalty)[0]
    assert with_penalty > mlp.loss_and_grad(w, {}, x, y)[0]  # the penalty went in: autograd's path


@pytest.mark.parametrize("channels_last", [False, True])
def test_a_whole_window_convolution_equals_nn_conv2d_with_its_gradients_one_image_a_batch_and_a_vmapped_cohort(
        channels_last):
    """LeNet-5's third convolution runs as a matrix product where its window covers the input; the result and the
    gradients (weights, bias, input) are nn.Conv2d's, in float64, also under vmap over clients' weights."""
    torch.manual_seed(0)
    window = WindowConv2d(16, 120, 5).double()
    conv = torch.nn.Conv2d(16, 120, 5).double()
    conv.load_state_dict(window.state_dict())
    x = torch.randn(7, 16, 5, 5, dtype=torch.float64)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = window(xa)
    ref = conv(xb)
    assert out.shape == ref.shape == (7, 120, 1, 1)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    out.square().sum().backward()
    ref.square().sum().backward()
    for a, b in [(window.weight.grad, conv.weight.grad), (window.bias.grad, conv.bias.grad), (xa.grad, xb.grad)]:
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(window(x[0]), conv(x[0]), rtol=1e-12, atol=1e-12)  # one image, no batch axis
    weights = torch.randn(3, *conv.weight.shape, dtype=torch.float64)
    biases = torch.randn(3, 120, dtype=torch.float64)

    def cohort(module):
        return torch.vmap(lambda w, b, xs: torch.func.functional_call(module, {"weight": w, "bias": b}, (xs,)))(
            weights, biases, x.expand(3, *x.shape))

    torch.testing.assert_close(cohort(window), cohort(conv), rtol=1e-12, atol=1e-12)


def test_a_window_smaller_than_the_input_is_an_ordinary_convolution():
    window = WindowConv2d(4, 8, 3, padding=1)
    conv = torch.nn.Conv2d(4, 8, 3, padding=1)
    conv.load_state_dict(window.state_dict())
    for x in (torch.randn(2, 4, 3, 3), torch.randn(2, 4, 6, 6)):  # padded 3x3 input, and a larger one
        assert torch.equal(window(x), conv(x))
    lenet, _ = build_model(mcfg("lenet5"), "image", (1, 28, 28), 10)
    assert [type(m) for m in lenet if isinstance(m, torch.nn.Conv2d)][-1] is WindowConv2d


def onednn_spy(monkeypatch):
    """Count the products that go through oneDNN's linear kernel (skips where this torch has none)."""
    from fedrun.model import functional

    if functional._onednn_linear is None:
        pytest.skip("this torch has no oneDNN linear kernel")
    calls, kernel = [], functional._onednn_linear
    monkeypatch.setattr(functional, "_onednn_linear", lambda *a: calls.append(a[0].shape) or kernel(*a))
    return calls


def test_a_dense_chains_large_products_without_a_graph_go_through_onednn(monkeypatch):
    """hardware.onednn: products of >= 2M multiply-adds (here the 2NN's first two layers at 1024 samples, not its
    200 -> 10 head) in evaluation; the same outputs as torch's to float32 rounding. Not in a training step (its
    numbers stay the same in every executor), for small batches, float64, a forward that autograd differentiates
    (a feature penalty's), or with the switch off."""
    from fedrun.model.functional import ONEDNN_MIN_MACS

    calls = onednn_spy(monkeypatch)
    torch.manual_seed(0)
    module, objective = build_model(option("model", "mlp"), "vector", (60,), 10, "mlp")
    fast, plain = FunctionalModel(module, objective, onednn=True), FunctionalModel(module, objective)
    w, x, y = fast.init_params(), torch.randn(1024, 60), torch.randint(0, 10, (1024,))
    assert 1024 * 200 * 10 < ONEDNN_MIN_MACS <= 1024 * 60 * 200
    with torch.no_grad():
        torch.testing.assert_close(fast.forward(w, {}, x), module(x), rtol=1e-5, atol=1e-5)
    assert calls == [(1024, 60), (1024, 200)]
    hits, units, loss = fast.evaluate_hits(w, {}, x, y)
    assert len(calls) == 4
    torch.testing.assert_close(loss, plain.evaluate_hits(w, {}, x, y)[2], rtol=1e-5, atol=0)
    calls.clear()
    for got, want in zip(fast.loss_and_grad(w, {}, x, y), plain.loss_and_grad(w, {}, x, y)):
        assert torch.equal(got, want)
    want = FunctionalModel(module, objective, by_hand=False).loss_and_grad(w, {}, x, y)
    plain.forward(w, {}, x), fast.forward(w, {}, x[:32]), fast.forward(w.double(), {}, x.double())
    differentiated = w.clone().requires_grad_(True)  # autograd's forward (a feature penalty's): torch's products
    (g,) = torch.autograd.grad(objective.loss(fast.forward(differentiated, {}, x), y), differentiated)
    assert calls == []
    torch.testing.assert_close(g, want[1], rtol=1e-4, atol=1e-6)


def test_a_runs_model_takes_hardware_onednn(cfg_factory):
    from fedrun.engine.run.simulation import Simulation

    assert Simulation.from_config(cfg_factory("model=mlp", "fl.rounds=1")).model.onednn  # the default
    assert not Simulation.from_config(cfg_factory("model=mlp", "fl.rounds=1", "hardware.onednn=false")).model.onednn


def test_a_log_softmax_over_few_classes_is_torchs_bit_for_bit_and_a_graph_keeps_torchs_kernel():
    from fedrun.model.zoo import log_softmax_classes

    torch.manual_seed(0)
    x = 5 * torch.randn(3, 100, 10)
    for out in (x, x[0], x[0, :8]):
        assert torch.equal(log_softmax_classes(out), out.log_softmax(-1))
    from fedrun.model.zoo import _transposed_is_exact

    # over the transposed copy where this CPU's kernels give the same bits that way (AVX-512), else as torch's
    assert log_softmax_classes(x[0]).stride() == ((1, 100) if _transposed_is_exact(10, x.dtype) else (10, 1))
    assert log_softmax_classes(x[0, :8]).stride() == (10, 1)  # too few rows to pay for the copy
    w = x.clone().requires_grad_(True)
    assert type(log_softmax_classes(w).grad_fn).__name__ == "LogSoftmaxBackward0"  # autograd's training: as ever


@pytest.mark.parametrize("kernel,size", [(2, 28), (2, 9), (3, 10), (1, 4)])
def test_a_non_overlapping_max_pooling_is_the_maximum_of_its_views_bit_for_bit(kernel, size):
    """Evaluation's max pooling (fedrun/model/functional.py: max_pool_views): odd sizes rounded down as torch's, ties
    (a blank image's windows), NaN in a window, and channels-last images."""
    from fedrun.model.functional import max_pool_views

    torch.manual_seed(0)
    pool = torch.nn.MaxPool2d(kernel)
    x = torch.randn(5, 6, size, size).round(decimals=1)  # many ties within windows
    x[0, 0, 0, 0] = float("nan")
    x[1] = 0.0
    for images in (x, x.contiguous(memory_format=torch.channels_last)):
        got, want = max_pool_views(images, pool), pool(images)
        assert got.shape == want.shape and torch.equal(got.nan_to_num(7.0), want.nan_to_num(7.0))
        assert bool(got[0, 0, 0, 0].isnan())


def test_an_overlapping_or_padded_pooling_is_torchs(monkeypatch):
    from fedrun.model import functional

    x = torch.randn(2, 3, 9, 9)
    for pool in (torch.nn.MaxPool2d(3, 2), torch.nn.MaxPool2d(2, padding=1), torch.nn.MaxPool2d(2, ceil_mode=True)):
        monkeypatch.setattr(torch, "maximum", lambda *a: pytest.fail("views"))
        assert torch.equal(functional.max_pool_views(x, pool), pool(x))


@pytest.mark.parametrize("name,shape", [("lenet5", (1, 28, 28)), ("lenet5", (3, 32, 32)), ("cnn_fedgh", (3, 32, 32))])
def test_a_sequential_cnns_forward_runs_by_hand_with_the_modules_outputs_and_gradients(name, shape, monkeypatch):
    """One model's forward outside torch.func runs a Sequential CNN's layers by hand, a ReLU before a pooling after
    it: without a graph (evaluation, the poolings as views' maxima) the module's outputs bit for bit with torch's
    products, with oneDNN's (hardware.onednn) to float rounding; a client's step (a graph: torch's poolings) has the
    module's loss and gradient bit for bit, in float32 and float64, with blank images' tied windows."""
    from torch.func import functional_call

    from fedrun.model.functional import channels_last

    torch.manual_seed(0)
    module, objective = build_model(mcfg(name), "image", shape, 10)
    plain = FunctionalModel(module, objective, channels_last=True)
    fast = FunctionalModel(module, objective, channels_last=True, onednn=True)
    assert plain.image_layers is not None and plain.replica().image_layers is not None
    assert FunctionalModel(module, objective, by_hand=False).image_layers is None  # hardware.gradient=autograd
    w, x, y = plain.init_params(), torch.randn(300, *shape), torch.randint(0, 10, (300,))
    x[:20] = x[0, 0, 0, 0]  # blank images: every window of the first convolution's output tied
    with torch.no_grad():
        want = functional_call(module, plain.unflatten(w), (channels_last(x),))
        assert torch.equal(plain.forward(w, {}, x), want)
        torch.testing.assert_close(fast.forward(w, {}, x), want, rtol=1e-5, atol=1e-5)
    for dtype in (torch.float32, torch.float64):
        typed = copy.deepcopy(module).to(dtype)
        by_hand = FunctionalModel(typed, objective, channels_last=True, onednn=True)
        reference = FunctionalModel(typed, objective, channels_last=True, by_hand=False)
        wd, xd, yd = w.to(dtype), x[:64].to(dtype), y[:64]
        monkeypatch.setattr(torch, "maximum", lambda *a: pytest.fail("views' maxima under a graph"))
        for got, expected in zip(by_hand.loss_and_grad(wd, {}, xd, yd), reference.loss_and_grad(wd, {}, xd, yd)):
            assert torch.equal(got, expected)
        monkeypatch.undo()


def test_a_cnn_with_batch_norm_evaluates_through_the_module():
    module, objective = build_model(mcfg("vgg16", batch_norm=True), "image", (3, 32, 32), 10)
    assert FunctionalModel(module, objective).image_layers is None


def test_evaluation_sums_its_loss_on_the_device_and_reads_it_once(cfg_factory, monkeypatch):
    """The mean test loss over many batches equals the host's batch-by-batch sum in float64 bit for bit, and the
    model's tensors are read on the host twice in all (the loss, the count), not once or twice per batch."""
    from fedrun.engine.run.simulation import Simulation

    sim = Simulation.from_config(cfg_factory("data=digits", "model=mlp"))
    model, state, x, y = sim.model, sim.state, sim.data.x_test, sim.data.y_test
    host = 0.0
    for s in range(0, len(y), 16):
        out = model.forward(state.params, state.buffers, x[s:s + 16])
        host += float(model.objective.loss(out, y[s:s + 16])) * float(model.objective.units(y[s:s + 16]).sum())
    reads = []
    to_float = torch.Tensor.__float__
    monkeypatch.setattr(torch.Tensor, "__float__", lambda t: reads.append(1) or to_float(t))
    hits, units, loss = model.evaluate_hits(state.params, state.buffers, x, y, 16)
    assert len(y) > 20 * 16 and len(reads) == 2
    assert loss == host / float(units.sum())

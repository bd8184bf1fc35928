"""A one-layer model's step on its minibatch's rows in place (fedrun/model/native/indexed_rows.py): the losses and
gradients of the gathered minibatch's step by hand, in a cohort's step and a lone client's, the executors' rounds with
it, where it applies, and a fallback without it."""

import logging

import pytest
import torch
from torch import nn

from fedrun.model.native import indexed_rows
from fedrun.engine.run.simulation import Simulation
from fedrun.model.functional import FunctionalModel
from fedrun.model.zoo import CROSS_ENTROPY, SQUARED_HINGE_PARITY, SEQUENCE_CROSS_ENTROPY

pytestmark = pytest.mark.skipif(not indexed_rows.enabled(), reason="the kernel cannot be built here (no g++ or ninja)")

LOSSES = {"svm": SQUARED_HINGE_PARITY, "ce": CROSS_ENTROPY}


def one_layer(inputs: int, outputs: int, bias: bool, loss: str):
    module = nn.Sequential(nn.Flatten(), nn.Linear(inputs, outputs, bias=bias))
    return module, LOSSES[loss]


@pytest.mark.parametrize("loss,inputs,outputs,bias,clients,batch", [
    ("svm", 784, 1, True, 5, 100),   # BHerd's SVM cohort
    ("svm", 784, 1, False, 1, 100),  # its w.x from w_0 = 0 (model.bias=false), a lone client
    ("ce", 60, 10, True, 3, 7),      # LEAF Synthetic's features: a row's last 12 columns past its last full vector
    ("ce", 17, 3, False, 2, 4),      # outputs in a block of two and one, columns past one vector
    ("ce", 100, 16, True, 1, 9),     # the most outputs it takes
    ("ce", 576, 5, True, 4, 1),      # a minibatch of one
])
def test_the_kernels_step_equals_the_gathered_minibatchs(loss, inputs, outputs, bias, clients, batch):
    """Each client's mean loss and flat gradient (weights row by row, then biases) from the rows its index picks,
    as the step by hand on the gathered minibatch computes them in float64, to float32 rounding."""
    torch.manual_seed(0)
    module, objective = one_layer(inputs, outputs, bias, loss)
    model = FunctionalModel(module, objective, indexed_rows=True)
    x = torch.randn(300, inputs)
    y = torch.randint(0, 10 if loss == "svm" else outputs, (300,))
    index = torch.randint(0, 300, (clients, batch))
    flat = model.init_params() + 0.1 * torch.randn(clients, model.dim)
    assert model.reads_rows(x)
    got_loss, got_grad = model.loss_and_grad(flat, {}, indexed_rows.of(x, index), y[index])
    reference = FunctionalModel(module.double(), objective)
    want_loss, want_grad = reference.loss_and_grad(flat.double(), {}, x.double()[index], y[index])
    torch.testing.assert_close(got_loss.double(), want_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_grad.double(), want_grad, rtol=1e-4, atol=1e-6)
    # a lone client's step (flat (P,), index (B,)) is its row of the cohort's, bit for bit
    lone_loss, lone_grad = model.loss_and_grad(flat[-1], {}, indexed_rows.of(x, index[-1]), y[index[-1]])
    assert torch.equal(lone_loss, got_loss[-1]) and torch.equal(lone_grad, got_grad[-1])


def test_it_fits_a_one_layer_model_under_its_two_losses_in_float32_on_plain_rows_only():
    x = torch.randn(40, 1, 8, 8)
    svm, ce = one_layer(64, 1, True, "svm"), one_layer(64, 10, True, "ce")
    fits = lambda module, objective, inputs=x: indexed_rows.fits(list(module.children()), objective, inputs)  # noqa: E731
    assert fits(*svm) and fits(*ce) and fits(*one_layer(64, 16, False, "ce"))
    assert not fits(*one_layer(64, 17, True, "ce"))  # wider layers: matrix products that torch runs faster
    assert not fits(svm[0], SEQUENCE_CROSS_ENTROPY)  # a loss the kernel does not compute
    assert not fits(nn.Sequential(nn.Flatten(), nn.Linear(64, 2)), SQUARED_HINGE_PARITY)  # the SVM has one output
    two_layers = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 10))
    assert not fits(two_layers, CROSS_ENTROPY)
    assert not fits(*ce, x.double())  # float32 only
    assert not fits(*ce, x.transpose(2, 3))  # rows in place: contiguous only
    assert not fits(*ce, torch.randn(40, 65))  # not the layer's inputs
    model = FunctionalModel(*ce, indexed_rows=True)
    assert model.reads_rows(x) and not FunctionalModel(*ce).reads_rows(x)
    assert not FunctionalModel(two_layers, CROSS_ENTROPY, indexed_rows=True).reads_rows(x)


def test_a_bad_index_or_target_is_refused_with_what_is_wrong():
    module, objective = one_layer(64, 10, True, "ce")
    model = FunctionalModel(module, objective, indexed_rows=True)
    x, flat = torch.randn(40, 64), model.init_params()
    with pytest.raises(RuntimeError, match="row 40 of 40 samples"):
        model.loss_and_grad(flat, {}, indexed_rows.of(x, torch.tensor([0, 40])), torch.tensor([1, 2]))
    with pytest.raises(RuntimeError, match=r"target 10 outside 0\.\.9"):
        model.loss_and_grad(flat, {}, indexed_rows.of(x, torch.tensor([0, 39])), torch.tensor([1, 10]))


def rounds(cfg_factory, *overrides: str, count: int = 2) -> dict:
    sim = Simulation.from_config(cfg_factory("data=digits", "fl.clients_per_round=5", "fl.batch_size=16",
                                             "partition=dirichlet",
                                             "partition.alpha=0.3", "hardware.device=cpu", *overrides))
    for rnd in range(1, count + 1):
        sim.run_round(rnd)
    return {"state": vars(sim.state), "model": sim.model}


@pytest.mark.parametrize("model,more", [("svm", ["algo=bherd"]),
                                        ("logreg", ["fl.momentum=0.9", "fl.weight_decay=0.01", "algo=fedprox"])])
def test_rounds_with_the_kernel_equal_the_gathered_ones_and_the_loops_bit_for_bit(cfg_factory, monkeypatch, model,
                                                                                   more):
    """Local SGD's rounds (BHerd's herded steps; FedProx with momentum and weight decay), with clients of several
    lengths (the stack's lone last client takes its plain step): the vmap executor's with the kernel equal the
    loop's with it bit for bit (every sum in the same order), and those with ``hardware.native=false`` to float32
    rounding; the kernel takes every step."""
    from executor_cases import assert_close_tree

    calls = []
    step = indexed_rows.loss_and_grad
    monkeypatch.setattr(indexed_rows, "loss_and_grad", lambda *a: calls.append(a[1].dim()) or step(*a))
    common = [f"model={model}", *more]
    vmap = rounds(cfg_factory, *common, "hardware.executor=vmap")
    assert vmap["model"].indexed_rows and {1, 2} <= set(calls)  # cohorts' steps, and lone clients' plain steps
    loop = rounds(cfg_factory, *common, "hardware.executor=loop")
    assert_close_tree(loop["state"], vmap["state"], exact=True)
    calls.clear()
    gathered = rounds(cfg_factory, *common, "hardware.executor=vmap", "hardware.native=false")
    assert not calls
    torch.testing.assert_close(gathered["state"]["params"], vmap["state"]["params"], rtol=1e-4, atol=1e-6)


def test_scaffold_and_the_autograd_gradient_gather_their_minibatches(cfg_factory, monkeypatch):
    """A rule that reads its minibatch other than through the model's loss and gradient (SCAFFOLD's correction is
    its own, and it is not declared batchable) and ``hardware.gradient=autograd`` keep the gathered minibatch."""
    calls = []
    monkeypatch.setattr(indexed_rows, "loss_and_grad", lambda *a: calls.append(1))
    rounds(cfg_factory, "model=svm", "algo=scaffold", count=1)
    rounds(cfg_factory, "model=svm", "hardware.gradient=autograd", count=1)
    assert not calls


def test_without_a_compiler_the_minibatch_is_gathered_after_a_warning(cfg_factory, without_a_compiler, caplog):
    """Where the kernel cannot be built, fedrun says so once (naming the switch) and gathers the minibatch: the
    same rounds to float32 rounding."""
    with_kernel = rounds(cfg_factory, "model=svm", count=1)
    with without_a_compiler(), caplog.at_level(logging.WARNING, logger="fedrun"):
        without = rounds(cfg_factory, "model=svm", count=1)
        assert not indexed_rows.enabled()
    warnings = [r.getMessage() for r in caplog.records if "could not be built" in r.getMessage()]
    assert len(warnings) == 1 and "g++: command not found" in warnings[0]
    assert "hardware.native=false" in warnings[0]
    torch.testing.assert_close(without["state"]["params"], with_kernel["state"]["params"], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("loss,inputs,outputs,bias,clients,width,steps,momentum", [
    ("ce", 576, 10, True, 5, 1, 16, False),  # MA/GA-FSVRG's softmax on HOG features, single samples
    ("ce", 60, 5, False, 3, 2, 7, True),     # LEAF Synthetic's features, three weight stacks, tiles past the rows
    ("svm", 17, 1, True, 2, 3, 5, False),    # one output; columns past one vector
])
def test_a_blocks_products_and_steps_in_place_equal_torchs_on_the_gathered_rows(loss, inputs, outputs, bias, clients,
                                                                                width, steps, momentum):
    """A block of steps (engine/blocked.py) with its rows in place: the outputs under each start vector and the Gram
    matrix, the steps at the outputs (clients stopping inside the block) and the gradient terms added to the
    weights equal torch's on the gathered rows in float64, to float32 rounding; a lone client's are its row of a
    cohort's, bit for bit."""
    from fedrun.engine.execution import blocked

    torch.manual_seed(0)
    module, objective = one_layer(inputs, outputs, bias, loss)
    x = torch.randn(200, inputs)
    y = torch.randint(0, 10 if loss == "svm" else outputs, (200,))
    index = torch.randint(0, 200, (clients, steps * width))
    dim = outputs * inputs + (outputs if bias else 0)
    starts = [torch.randn(clients, dim), torch.randn(dim), torch.randn(clients, dim) if momentum else None]
    shape = (outputs, inputs, bias)
    in_place = blocked._InPlace(indexed_rows.of(x, index))
    gathered = blocked._Gathered(x.double()[index])
    wide = [None if s is None else s.double() for s in starts]
    (outs, gram), (want_outs, want_gram) = in_place.products(starts, shape), gathered.products(wide, shape)
    assert [o is None for o in outs] == [o is None for o in want_outs]
    for got, want in zip([*outs, gram], [*want_outs, want_gram]):
        if want is not None:
            torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    base = outs[0] * 0.5 + outs[1] * 0.1
    coef = -0.05 * torch.rand(steps, steps).tril(-1)
    done = torch.randint(0, steps + 1, (clients,))
    done[0] = steps
    yb = y[index]
    grads, losses = in_place.steps(objective, base, gram, coef, yb, done, width)
    want_grads, want_losses = gathered.steps(objective, base.double(), gram.double(), coef.double(), yb, done, width)
    torch.testing.assert_close(grads.double(), want_grads, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(losses.double(), want_losses, rtol=1e-4, atol=1e-5)
    assert not grads[done == 0].any()
    weights, want = starts[0].clone(), starts[0].double()
    in_place.add_to(blocked._split(weights, shape)[0], grads)
    gathered.add_to(blocked._split(want, shape)[0], grads.double())
    torch.testing.assert_close(weights.double(), want, rtol=1e-4, atol=1e-4)
    lone = blocked._InPlace(indexed_rows.of(x, index[-1:]))
    last = [None if s is None else s[-1:] if s.dim() == 2 else s for s in starts]
    lone_outs, lone_gram = lone.products(last, shape)
    assert torch.equal(lone_gram, gram[-1:]) and torch.equal(lone_outs[0], outs[0][-1:])
    lone_grads, lone_losses = lone.steps(objective, base[-1:], gram[-1:], coef, yb[-1:], done[-1:], width)
    assert torch.equal(lone_grads, grads[-1:]) and torch.equal(lone_losses, losses[-1:])


@pytest.mark.parametrize("model,batch,more", [
    ("logreg", 1, ["algo=fedavg"]), ("logreg", 3, ["algo=fedprox", "fl.momentum=0.5", "fl.weight_decay=0.01"]),
    ("svm", 1, ["algo=fednova", "algo.local.mu=0.1"])])
def test_rounds_in_blocks_with_rows_in_place_equal_the_gathered_blocks(cfg_factory, monkeypatch, model, batch, more):
    """Single samples (and minibatches of three) on a one-layer model step in blocks, here with the block's products
    and steps in the kernel: the rounds equal the blocks gathered by torch (``hardware.native=false``) to float32
    rounding, clients of unequal lengths finishing inside blocks."""
    from fedrun.engine.execution import blocked

    calls = []
    steps = blocked._InPlace.steps
    monkeypatch.setattr(blocked._InPlace, "steps", lambda *a: calls.append(1) or steps(*a))
    common = [f"model={model}", f"fl.batch_size={batch}", "fl.lr=0.01", "hardware.executor=vmap", *more]
    kernel = rounds(cfg_factory, *common)
    assert calls
    calls.clear()
    gathered = rounds(cfg_factory, *common, "hardware.native=false")
    assert not calls
    torch.testing.assert_close(kernel["state"]["params"], gathered["state"]["params"], rtol=1e-4, atol=1e-5)

"""fedrun's patch of torch's private ``_autograd_grad`` (fedrun/model/plain_backward.py), against the pinned torch:
it is in place, it computes what torch's own function computes, and a vmapped gradient then imports no torch._dynamo."""

import subprocess
import sys

import pytest
import torch
from torch._functorch import eager_transforms
from torch.func import functional_call, grad, vjp, vmap

from fedrun.model import plain_backward
from conftest import REPO


def pinned_torch() -> str:
    line = next(line for line in (REPO / "requirements.lock").read_text().splitlines() if line.startswith("torch=="))
    return line.split("==")[1]


def test_the_patch_is_in_place_on_the_pinned_torch():
    if torch.__version__.split("+")[0] != pinned_torch():
        pytest.skip(f"torch {torch.__version__} is not the pinned {pinned_torch()}")
    assert plain_backward.install()
    assert eager_transforms._autograd_grad.original is not None
    assert plain_backward.install()  # a second call wraps nothing again
    assert eager_transforms._autograd_grad.original.__name__ == "_autograd_grad"


def _gradients():
    """torch.func's gradients of a model with an unused parameter, a constant output and a vmapped batch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    params = {k: v.detach() for k, v in model.named_parameters()} | {"unused": torch.randn(2)}
    x, y = torch.randn(6, 5), torch.randint(0, 3, (6,))

    def loss(p, xb, yb):
        out = functional_call(model, {k: v for k, v in p.items() if k != "unused"}, (xb,))
        return torch.nn.functional.cross_entropy(out, yb)

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(params, x[:, None], y[:, None])
    _, pullback = vjp(lambda p: (loss(p, x, y), torch.ones(())), params)
    pulled = pullback((torch.tensor(1.0), torch.tensor(1.0)))[0]
    second = grad(lambda p: grad(loss)(p, x, y)["0.weight"].sum())(params)  # create_graph through the first
    return per_sample, pulled, second


def test_the_patched_backward_equals_torchs_own():
    patched = _gradients()
    wrapper = eager_transforms._autograd_grad
    eager_transforms._autograd_grad = wrapper.original
    try:
        own = _gradients()
    finally:
        eager_transforms._autograd_grad = wrapper
    for a, b in zip(patched, own):
        for key in a:
            assert torch.equal(a[key], b[key]), key
    assert torch.equal(patched[1]["unused"], torch.zeros(2))  # unused inputs get zeros, as torch's own gives


def test_a_vmapped_gradient_imports_no_dynamo():
    """The point of the patch: a fresh process's vmapped gradient through fedrun's functional model leaves
    torch._dynamo unimported (torch's own function would import it and inductor, seconds of a first round)."""
    code = ("import sys, torch; import fedrun.model.functional; from torch.func import grad, vmap; "
            "vmap(grad(lambda w, x: (w * x).sum()), in_dims=(None, 0))(torch.ones(3), torch.ones(4, 3)); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"

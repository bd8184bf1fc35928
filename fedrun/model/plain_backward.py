"""The one patch of a private torch function fedrun makes, kept here and tested against the pinned torch
(tests/model/test_plain_backward.py).

torch.func's gradients (``grad``, ``vjp``, ``vmap`` of them) end in ``torch._functorch.eager_transforms.
_autograd_grad``, which runs ``torch.autograd.grad`` inside ``torch._dynamo.compiled_autograd._disable()``; reading
that attribute imports torch._dynamo and inductor, 2-3 s of a run's first round. Compiled autograd can only be on
once torch._dynamo has been imported (``hardware.compile`` imports it), so until then the same ``torch.autograd.grad``
call without the guard is the same computation; from then on torch's own function runs. Where torch has no such
function (another version), nothing is patched and torch's own runs.
"""

from __future__ import annotations

import sys

import torch


def install() -> bool:
    """Wrap ``_autograd_grad`` (once); whether the wrapper is in place."""
    from torch._functorch import eager_transforms

    original = getattr(eager_transforms, "_autograd_grad", None)
    if original is None:
        return False
    if getattr(original, "original", None) is not None:  # already wrapped
        return True

    def autograd_grad(outputs, inputs, grad_outputs=None, retain_graph=False, create_graph=True):
        if "torch._dynamo" in sys.modules:
            return original(outputs, inputs, grad_outputs, retain_graph, create_graph)
        pairs = [(o, g) for o, g in zip(outputs, grad_outputs or [None] * len(outputs)) if o.requires_grad]
        if not pairs:
            return tuple(torch.zeros_like(i) for i in inputs)
        grads = torch.autograd.grad([o for o, _ in pairs], inputs, None if grad_outputs is None else
                                    [g for _, g in pairs], retain_graph=retain_graph, create_graph=create_graph,
                                    allow_unused=True)
        return tuple(torch.zeros_like(i) if g is None else g for g, i in zip(grads, inputs))

    autograd_grad.original = original
    eager_transforms._autograd_grad = autograd_grad
    return True

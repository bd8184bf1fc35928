"""Each client's loss and gradient over its whole local dataset, at several models at once: FSVRG's and Mime's
anchors, MA-/GA-FSVRG's preferences (eq. 18) and the bank's anchor gradients."""

from __future__ import annotations

import torch

from fedrun.model.functional import FunctionalModel


def full_losses_and_gradients(model: FunctionalModel, buffers: dict, x: torch.Tensor, y: torch.Tensor,
                              indices: list[torch.Tensor], points: torch.Tensor, budget: int, own: bool = False
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each client's mean loss over its samples ``indices[k]`` and its gradient at each of ``points`` (P, d): (K, P)
    and (K, P, d). ``own``: client k only at ``points[k]`` (GA-FSVRG's gradients at the trained models), (K, 1) and
    (K, 1, d).

    The points step together under vmap, and so do the clients: their data, padded to one length with the
    objective's unscored target, go through in calls of at most ``budget`` samples (per point). A client runs alone,
    in chunks of that size, when it holds more, when the objective has no unscored target, or when the model has
    buffers (padding would change BatchNorm's batch statistics). A recurrent model (no vmap rule for its fused CPU
    kernel) takes its clients and points one at a time."""
    pad = model.objective.pad_target
    buffers = {k: v.clone() for k, v in buffers.items()}
    at_point = lambda w, xs, ys: model.loss_and_grad(w, buffers, xs, ys)  # noqa: E731
    recurrent = model.recurrent
    if recurrent:
        over_points = lambda ws, xs, ys: tuple(map(torch.stack, zip(*(at_point(w, xs, ys) for w in ws))))  # noqa: E731
    else:
        over_points = torch.func.vmap(at_point, in_dims=(0, None, None))
    over_clients = torch.func.vmap(over_points, in_dims=(0 if own else None, 0, 0))
    shape = (len(indices), 1 if own else len(points))
    losses, grads = points.new_zeros(shape), points.new_zeros(*shape, points.shape[1])
    packable = pad is not None and not buffers and not recurrent
    order = sorted(range(len(indices)), key=lambda k: len(indices[k]))
    packed = [k for k in order if packable and len(indices[k]) <= budget]
    s = 0
    while s < len(packed):  # sorted by size: each call's padded length is its last client's
        e = s + 1
        while e < len(packed) and (e + 1 - s) * len(indices[packed[e]]) <= budget:
            e += 1
        members = packed[s:e]
        ix = torch.nn.utils.rnn.pad_sequence([indices[k] for k in members], batch_first=True, padding_value=-1)
        real, ix = ix >= 0, ix.clamp_min(0)  # padding repeats sample 0 with its target unscored
        targets = y[ix]
        targets = torch.where(real.view(*ix.shape, *[1] * (targets.dim() - 2)), targets, pad)
        losses[members], grads[members] = over_clients(points[members, None] if own else points, x[ix], targets)
        s = e
    for k in sorted(set(order) - set(packed)):
        at, idx = (points[k : k + 1] if own else points), indices[k]
        units = 0.0
        for s in range(0, len(idx), budget):
            part = idx[s : s + budget]
            batch_loss, g = over_points(at, x[part], y[part])
            count = float(model.objective.units(y[part]).sum())  # the loss is a mean over these
            losses[k] += batch_loss.detach() * count
            grads[k] += g * count
            units += count
        losses[k] /= units
        grads[k] /= units
    return losses, grads

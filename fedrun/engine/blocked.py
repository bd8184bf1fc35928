"""Local steps of an affine rule on a one-layer (affine) model, a block of steps at a time: the same steps, without
reading and writing every client's weights at every step.

A rule whose step is an affine map of the client's weights W, its momentum M, the round's global model W_g and the
minibatch gradient G_t (``LocalRule.affine_step``: local SGD with weight decay, momentum and the proximal term) keeps
W and M, over a block of T steps, in the span of W_start, W_g, M_start and G_0 .. G_{T-1}. The coefficients are the
rule's own step run on coefficient vectors (``direction`` and ``descend`` over that basis), so they follow the rule
as written. For a one-layer model the gradient of a minibatch is G_t = d_t^T X_t (d_t the loss's gradient at the
outputs, already averaged over the minibatch), and a block sample's outputs are the same combination of its outputs
under each basis element: X W_start^T, X W_g^T and X M_start^T (batched products at the block's start) and
G_s x_j = d_s^T K[b_s, j], from the block's Gram matrix K = X X^T (+1 with a bias). So a step touches a few (T, C)
matrices per client instead of the (C, q) weights, and the weights are written once per block in one batched
product. The result is the step-by-step result up to float rounding (tested against the loop in float64).

It pays where the steps are small (minibatches of a few samples: the FedAvg-family baselines' single-sample passes
over Zhao et al.'s HOG features), which are memory-bound step by step on a CPU; the executor uses it there
(:func:`block_length`; on a GPU, where such steps are bound by kernel launches, it steps one by one). FSVRG's own
step scales each coordinate (Lambda_i) and is not of this form. The state's ``direction`` (the last step's, which
only a recording executor reads, and a recording executor steps one by one) is not kept.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from ..algorithms.base import ClientContext, LocalRule, State
from ..data.augment import minibatch, rows
from ..functional import FunctionalModel
from .cohort import ClientPlan

BLOCK_SAMPLES = 16  # samples per block (T = BLOCK_SAMPLES // minibatch width steps): the Gram matrix grows as T^2
WIDEST = 4  # wider minibatches are matrix products already: no block


def block_length(rule: LocalRule, model: FunctionalModel, width: int) -> int:
    """Steps per block for this rule, model and minibatch width, or 0 where blocks do not apply: the rule does not
    declare an affine step (read from its own class, never inherited), the model is not one affine layer, or the
    minibatches are wider than ``WIDEST``."""
    affine = type(rule).__dict__.get("affine_step", False)
    one_layer = model.chain is not None and sum(isinstance(m, nn.Linear) for m in model.chain) == 1
    return max(2, BLOCK_SAMPLES // width) if affine and one_layer and width <= WIDEST else 0


BASIS = ("w_start", "w_global", "m_start")  # then one minibatch gradient per step of the block
VECTORS = ("w", "momentum", "direction")  # a state's (K, d) entries; its other entries are per-client numbers


def run(rule: LocalRule, model: FunctionalModel, ctx: ClientContext, plans: list[ClientPlan], x, y, stacked: State,
        block: int) -> torch.Tensor:
    """The clients' local steps (``plans``' tau non-increasing, one minibatch width) in blocks of ``block`` steps,
    from their ``stacked`` initial states, which end as the states after the clients' last steps (in place); returns
    the sums of each client's minibatch losses."""
    k_all = len(plans)
    taus = torch.tensor([p.tau for p in plans], device=ctx.params.device)
    batches = torch.nn.utils.rnn.pad_sequence([p.batches for p in plans], batch_first=True)  # (K, tau_1, b)
    width = batches.shape[2]
    layer = next(m for m in model.chain if isinstance(m, nn.Linear))
    shape = (*layer.weight.shape, layer.bias is not None)  # classes, inputs, bias
    loss_sum = torch.zeros(k_all, device=ctx.params.device, dtype=ctx.params.dtype)
    for t0 in range(0, plans[0].tau, block):
        steps = min(block, plans[0].tau - t0)
        xb = _inputs(x, batches, t0, steps)  # (K, S, q): the block's samples, its steps' minibatches in turn
        yb = rows(y, batches[:, t0 : t0 + steps]).flatten(1)
        starts = [stacked["w"], ctx.params, stacked.get("momentum")]  # the basis's weights, as flat vectors
        outputs = [_outputs(xb, v, shape) for v in starts]  # (K, S, C) under each, None for no momentum
        gram = xb @ xb.transpose(1, 2) + (1.0 if shape[2] else 0.0)
        grads = torch.zeros(k_all, steps * width, shape[0], device=xb.device, dtype=xb.dtype)  # d_s in its rows
        size = len(BASIS) + steps
        symbolic = _symbolic(stacked, size)  # the rule's state over the basis: its coefficients step by step
        sym_ctx = replace(ctx, params=_unit(1, size))
        table = [{k: v.clone() for k, v in symbolic.items() if k != "buffers"}]
        for s in range(steps):
            coef = symbolic["w"].to(xb.device, xb.dtype)
            here = slice(s * width, (s + 1) * width)
            out = sum(coef[i] * o[:, here] for i, o in enumerate(outputs) if o is not None)
            out = out + gram[:, here, : s * width] @ (coef[len(BASIS):][:s].repeat_interleave(width)[:, None]
                                                      * grads[:, : s * width])
            loss, d = model.objective.loss_and_grad_out(out, yb[:, here])
            active = (taus > t0 + s).to(xb.dtype)
            grads[:, here] = d * active[:, None, None]
            loss_sum += loss.detach() * active
            rule.descend(sym_ctx, symbolic, rule.direction(sym_ctx, symbolic, _unit(len(BASIS) + s, size)))
            table.append({k: v.clone() for k, v in symbolic.items() if k != "buffers"})
        done = (taus - t0).clamp(0, steps)  # each client's steps in this block: its state is the one after them
        mine = {k: torch.stack([row[k] for row in table])[done.cpu()].to(xb.device) for k in table[0]}
        if "momentum" in stacked:  # first: the weights' own combination below overwrites W_start
            momentum = _combine(mine["momentum"], starts, 2, stacked["momentum"].clone(), xb, grads, width, shape)
        _combine(mine["w"], starts, 0, stacked["w"], xb, grads, width, shape)  # in place: its other terms are read
        if "momentum" in stacked:
            stacked["momentum"] = momentum
        stacked.update({k: torch.where(done > 0, v.to(stacked[k].dtype), stacked[k])  # finished before: theirs
                        for k, v in mine.items() if k not in VECTORS})
    return loss_sum


def _unit(i: int, size: int) -> torch.Tensor:
    e = torch.zeros(size, dtype=torch.float64)
    e[i] = 1.0
    return e


def _symbolic(stacked: State, size: int) -> State:
    """The rule's state at the block's start over the basis, on the CPU (a few numbers per step): the weights are
    W_start, the momentum M_start, and the per-client numbers (FedNova's a_i, the momentum counter) those of the
    clients still stepping (the first)."""
    state = {"w": _unit(0, size), "direction": torch.zeros(size, dtype=torch.float64), "buffers": {}}
    if "momentum" in stacked:
        state["momentum"] = _unit(2, size)
    return state | {k: v[0].cpu() for k, v in stacked.items() if k not in (*VECTORS, "buffers")}  # on the CPU too


def _split(flat: torch.Tensor, shape) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A flat parameter vector (or a (K, d) stack) as the layer's weight (..., C, q) and bias (..., C) or None."""
    classes, inputs, bias = shape
    weight = flat[..., : classes * inputs].view(*flat.shape[:-1], classes, inputs)  # a view: written in place
    return weight, flat[..., classes * inputs :] if bias else None


def _outputs(xb: torch.Tensor, flat: torch.Tensor | None, shape) -> torch.Tensor | None:
    """The layer's outputs (K, S, C) on the block's inputs under the weights ``flat`` (one vector or a stack)."""
    if flat is None:
        return None
    weight, bias = _split(flat, shape)
    out = xb @ weight.transpose(-1, -2)
    return out if bias is None else out + bias.unsqueeze(-2)


def _combine(coef: torch.Tensor, starts: list, own: int, out: torch.Tensor, xb: torch.Tensor, grads: torch.Tensor,
             width: int, shape) -> torch.Tensor:
    """Each client's vector (K, d) from its coefficients (K, basis + steps) over the basis, written into ``out``,
    which holds ``starts[own]``'s values (that vector itself, or a copy): the start vectors, then the step gradients
    G_s = d_s^T X_s summed as (coefficient-weighted d)^T X in one batched product. Terms whose coefficients are all
    zero are left out."""
    coef = coef.to(xb.dtype)
    if not bool((coef[:, own] == 1).all()):
        out.mul_(coef[:, own : own + 1])
    for i, v in enumerate(starts):
        if i != own and v is not None and bool(coef[:, i].any()):
            out.addcmul_(coef[:, i : i + 1], v)
    weighted = coef[:, len(BASIS):].repeat_interleave(width, dim=1)[:, :, None] * grads  # (K, S, C)
    weight, bias = _split(out, shape)
    weight.add_(weighted.transpose(1, 2) @ xb)  # not baddbmm_ into the strided view: torch loops over its rows
    if bias is not None:
        bias.add_(weighted.sum(1))
    return out


def _inputs(x, batches: torch.Tensor, t0: int, steps: int) -> torch.Tensor:
    """The inputs of steps t0 .. t0 + steps - 1 of every client, flattened: (K, steps x width, q). Through
    ``minibatch`` step by step where a step's draw depends on it (augmentation), else in one gather."""
    if isinstance(x, torch.Tensor):
        return rows(x, batches[:, t0 : t0 + steps]).flatten(1, 2).flatten(2)
    return torch.cat([minibatch(x, batches[:, t], t).flatten(2) for t in range(t0, t0 + steps)], dim=1)

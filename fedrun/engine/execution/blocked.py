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

Where the model reads its training rows in place (``FunctionalModel.reads_rows``: float32 on a CPU, a loss the
kernel computes; ``fedrun/model/native/indexed_rows.py``), a block runs in three calls of the compiled kernel
(``_InPlace``): its products read the rows where they lie, and its steps at the outputs, a few hundred numbers per
client each, run as one loop per client; else in torch's operators on the gathered rows (``_Gathered``). The same values
to float rounding.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from fedrun.algorithms.base import ClientContext, LocalRule, State
from fedrun.data.augment import minibatch, rows
from fedrun.model.functional import FunctionalModel
from fedrun.model.zoo import Objective
from fedrun.model.native import indexed_rows as in_place
from fedrun.engine.run.sampling import ClientPlan

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
        inputs = _inputs(model, x, batches, t0, steps)  # the block's samples, its steps' minibatches in turn
        yb = rows(y, batches[:, t0 : t0 + steps]).flatten(1)
        starts = [stacked["w"], ctx.params, stacked.get("momentum")]  # the basis's weights, as flat vectors
        outputs, gram = inputs.products(starts, shape)  # (K, S, C) under each (None for no momentum); (K, S, S)
        table = _coefficients(rule, ctx, stacked, steps)  # the rule's state over the basis, before each step and after
        coef = table["w"][:-1].to(gram.device, gram.dtype)  # (steps, basis + steps): the weights before each step
        base = sum(coef[:, i].repeat_interleave(width)[:, None] * o for i, o in enumerate(outputs) if o is not None)
        done = (taus - t0).clamp(0, steps)  # each client's steps in this block: its state is the one after them
        grads, losses = inputs.steps(model.objective, base, gram, coef[:, len(BASIS):], yb, done, width)
        loss_sum += losses
        mine = {k: v[done.cpu()].to(grads.device) for k, v in table.items()}
        if "momentum" in stacked:  # first: the weights' own combination below overwrites W_start
            momentum = _combine(mine["momentum"], starts, 2, stacked["momentum"].clone(), inputs, grads, width,
                                shape)
        _combine(mine["w"], starts, 0, stacked["w"], inputs, grads, width, shape)  # in place: its other terms are read
        if "momentum" in stacked:
            stacked["momentum"] = momentum
        stacked.update({k: torch.where(done > 0, v.to(stacked[k].dtype), stacked[k])  # finished before: theirs
                        for k, v in mine.items() if k not in VECTORS})
    return loss_sum


def _coefficients(rule: LocalRule, ctx: ClientContext, stacked: State, steps: int) -> dict[str, torch.Tensor]:
    """The rule's state over the basis (W_start, W_g, M_start, G_0 .. G_{steps-1}) before each of the block's steps
    and after its last, each entry stacked (steps + 1, ...): the rule's own step on coefficient vectors, its gradient
    at step s the basis's G_s. The same for every client: an affine step's coefficients do not depend on the data."""
    size = len(BASIS) + steps
    symbolic = _symbolic(stacked, size)
    sym_ctx = replace(ctx, params=_unit(1, size))
    table = [{k: v.clone() for k, v in symbolic.items() if k != "buffers"}]
    for s in range(steps):
        rule.descend(sym_ctx, symbolic, rule.direction(sym_ctx, symbolic, _unit(len(BASIS) + s, size)))
        table.append({k: v.clone() for k, v in symbolic.items() if k != "buffers"})
    return {k: torch.stack([row[k] for row in table]) for k in table[0]}


def _steps(objective: Objective, base: torch.Tensor, gram: torch.Tensor, coef: torch.Tensor, y: torch.Tensor,
           done: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The block's steps at the outputs, by torch's operators: step s's outputs (K, width, C) are ``base``'s (the
    start vectors' terms) plus the earlier steps' gradient terms, sum_t coef[s, t] G_t x = sum_t coef[s, t] d_t^T K
    (``gram`` K); its loss's gradient there, d_s, fills ``grads`` (K, S, C), zero after each client's ``done`` steps.
    Returns grads and each client's sum of its steps' losses."""
    k_all, samples, classes = base.shape
    grads = torch.zeros(k_all, samples, classes, device=base.device, dtype=base.dtype)
    loss_sum = torch.zeros(k_all, device=base.device, dtype=base.dtype)
    for s in range(samples // width):
        here = slice(s * width, (s + 1) * width)
        out = base[:, here] + gram[:, here, : s * width] @ (coef[s, :s].repeat_interleave(width)[:, None]
                                                            * grads[:, : s * width])
        loss, d = objective.loss_and_grad_out(out, y[:, here])
        active = (done > s).to(base.dtype)
        grads[:, here] = d * active[:, None, None]
        loss_sum += loss.detach() * active
    return grads, loss_sum


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


class _Gathered:
    """A block's inputs gathered, (K, S, q): its products, steps and gradient terms in torch's operators."""

    def __init__(self, inputs: torch.Tensor):
        self.inputs = inputs

    def products(self, starts: list, shape) -> tuple[list, torch.Tensor]:
        """The layer's outputs (K, S, C) under each of the weights ``starts`` (flat; one vector or a stack; None
        gives None) and the Gram matrix (K, S, S), +1 with a bias."""
        outputs = []
        for flat in starts:
            if flat is None:
                outputs.append(None)
                continue
            weight, bias = _split(flat, shape)
            out = self.inputs @ weight.transpose(-1, -2)
            outputs.append(out if bias is None else out + bias.unsqueeze(-2))
        return outputs, self.inputs @ self.inputs.transpose(1, 2) + (1.0 if shape[2] else 0.0)

    def add_to(self, weight: torch.Tensor, weighted: torch.Tensor) -> None:
        """weight (K, C, q) += weighted (K, S, C)^T X."""
        weight.add_(weighted.transpose(1, 2) @ self.inputs)  # not baddbmm_ into the strided view: torch loops over rows

    steps = staticmethod(_steps)


class _InPlace:
    """A block's inputs as their index into the training inputs (``indexed_rows.IndexedRows``): ``_Gathered``'s
    products, steps and gradient terms by the compiled kernel (``fedrun/model/native/kernels/indexed_linear.cpp``),
    which reads each row where it lies."""

    def __init__(self, rows: in_place.IndexedRows):
        self.rows = rows

    def products(self, starts: list, shape) -> tuple[list, torch.Tensor]:
        present = [_split(flat, shape) for flat in starts if flat is not None]
        dots = in_place.kernel().block_products(self.rows.source_rows, self.rows.index,
                                                [w if w.dim() == 3 else w[None] for w, _ in present])
        classes, bias = shape[0], shape[2]
        found = iter(dots[..., i * classes : (i + 1) * classes] + (b.unsqueeze(-2) if bias else 0.0)
                     for i, (_, b) in enumerate(present))
        outputs = [None if flat is None else next(found) for flat in starts]
        return outputs, dots[..., len(present) * classes :] + (1.0 if bias else 0.0)

    def steps(self, objective: Objective, base: torch.Tensor, gram: torch.Tensor, coef: torch.Tensor, y: torch.Tensor,
              done: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``_steps``' values in one call: a step here is a few hundred numbers per client, which torch's operators
        would spend most of their time dispatching."""
        return in_place.kernel().block_steps(base.contiguous(), gram, coef.contiguous(), y.contiguous(), done,
                                             width, in_place.LOSSES[objective.name])

    def add_to(self, weight: torch.Tensor, weighted: torch.Tensor) -> None:
        in_place.kernel().row_sums_into(self.rows.source_rows, self.rows.index, weighted.contiguous(), weight, True)


def _combine(coef: torch.Tensor, starts: list, own: int, out: torch.Tensor, inputs, grads: torch.Tensor,
             width: int, shape) -> torch.Tensor:
    """Each client's vector (K, d) from its coefficients (K, basis + steps) over the basis, written into ``out``,
    which holds ``starts[own]``'s values (that vector itself, or a copy): the start vectors, then the step gradients
    G_s = d_s^T X_s summed as (coefficient-weighted d)^T X in one batched product. Terms whose coefficients are all
    zero are left out."""
    coef = coef.to(grads.dtype)
    if not bool((coef[:, own] == 1).all()):
        out.mul_(coef[:, own : own + 1])
    for i, v in enumerate(starts):
        if i != own and v is not None and bool(coef[:, i].any()):
            out.addcmul_(coef[:, i : i + 1], v)
    weighted = coef[:, len(BASIS):].repeat_interleave(width, dim=1)[:, :, None] * grads  # (K, S, C)
    weight, bias = _split(out, shape)
    inputs.add_to(weight, weighted)
    if bias is not None:
        bias.add_(weighted.sum(1))
    return out


def _inputs(model: FunctionalModel, x, batches: torch.Tensor, t0: int, steps: int):
    """The inputs of steps t0 .. t0 + steps - 1 of every client, their minibatches in turn (S = steps x width of
    them): read in place where the model reads rows of ``x`` (``FunctionalModel.reads_rows``), else gathered (K, S,
    q), through ``minibatch`` step by step where a step's draw depends on it (augmentation), else in one gather."""
    index = batches[:, t0 : t0 + steps].flatten(1)
    if model.reads_rows(x):
        return _InPlace(in_place.of(x, index))
    if isinstance(x, torch.Tensor):
        return _Gathered(rows(x, index).flatten(2))
    return _Gathered(torch.cat([minibatch(x, batches[:, t], t).flatten(2) for t in range(t0, t0 + steps)], dim=1))

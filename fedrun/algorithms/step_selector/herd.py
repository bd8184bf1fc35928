"""BHerd's client-side update selection, which GraB-FedAvg (grab.py) and the random-subset control (random_subset.py)
build on: which local steps a client's update is made of.

A selector that ``records_steps`` receives each client's per-step directions z_1..z_tau (the gradient its local rule
applied at each step: SGD's gradient, SCAFFOLD's corrected one, FedDyn's regularised one) and returns the update
the client sends. The selection is the client's own work (``Herd.select``, run where the client trained: on its
rank, over several); the server reads only what it made (``Herd.finish``). Orders are computed from the Gram
matrix of the steps (one (tau x d) @ (d x tau) product), so the greedy loops are O(tau^2) scalar work, never
O(tau^2 d).

When the steps do not fit on the accelerator (``hardware.step_store=host``) they stay in host memory and the Gram
matrix is accumulated over blocks of ``block`` coordinates moved to the compute device one at a time, so the device
holds tau x block numbers, never tau x d.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

from omegaconf import II

from fedrun.algorithms.base import Selection, State, StatefulPart
from fedrun.algorithms.part_config import PartConfig, is_number, register
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import torch

# Greedy scores within this fraction of the largest squared deviation of the minimum count as tied: exact ties (a
# client with two steps has two opposite centred gradients) are then settled by the lowest index, as Algorithm 2's
# "iterate through sigma_i" does, not by rounding.
TIE_RTOL = 1e-9


def centred_gram(z: torch.Tensor, centre: torch.Tensor, block: int | None = None,
                 device: torch.device | None = None) -> torch.Tensor:
    """Gram matrix of the rows of z (tau x d) minus ``centre`` (d,), centred and multiplied in float64 (so that the
    deviations of nearly equal gradients keep their digits), on ``device``, over column blocks of ``block``
    coordinates (by default as many as keep a block near 2^24 numbers)."""
    device = device or z.device
    width = block or max(1, (1 << 24) // max(1, len(z)))
    gram = torch.zeros(len(z), len(z), dtype=torch.float64, device=device)
    for start in range(0, z.shape[1], width):
        c = (z[:, start : start + width].to(device, torch.float64)
             - centre[start : start + width].to(device, torch.float64))
        gram += c @ c.T
    return gram


def first_minimum(score: torch.Tensor, scale: float, taken: torch.Tensor) -> int:
    """The lowest index whose score is within TIE_RTOL * ``scale`` of the minimum; when no score is finite (the
    steps' gradients are not: the run is diverging and will stop as such), the lowest index not taken yet."""
    finite = torch.isfinite(score)
    if not bool(finite.any()):
        return int(torch.nonzero(~taken)[0])
    return int(torch.nonzero(finite & (score <= score[finite].min() + TIE_RTOL * scale))[0])


def herd_order(z: torch.Tensor, k: int, block: int | None = None, device: torch.device | None = None) -> list[int]:
    """BHerd Algorithm 2: centre z (tau x d) by its mean, then k times pick argmin_{j not chosen} ||s + z_j|| and add
    it to s. With G the Gram matrix of the centred z, ||s + z_j||^2 = ||s||^2 + 2 (s . z_j) + G_jj, and s . z_j is
    the running sum of G's chosen rows. Ties (within TIE_RTOL of the largest G_jj) go to the lowest index."""
    gram = centred_gram(z, z.double().mean(dim=0), block, device)
    diag = torch.diagonal(gram)
    scale = float(diag.nan_to_num(0.0, posinf=0.0).max()) if len(diag) else 0.0
    s_dot = torch.zeros_like(diag)
    taken = torch.zeros(len(diag), dtype=torch.bool, device=gram.device)
    order = []
    for _ in range(k):
        j = first_minimum((2 * s_dot + diag).masked_fill(taken, math.inf), scale, taken)
        order.append(j)
        taken[j] = True
        s_dot += gram[j]
    return order


def num_selected(alpha: float, tau: int) -> int:
    """alpha * tau_i, rounded half up, at least 1 (NOTES.md, BHerd)."""
    return max(1, min(tau, math.floor(alpha * tau + 0.5)))


def herd_diagnostics(selection: Selection, plans, weights: torch.Tensor) -> dict[str, float]:
    """BHerd's Figs. 5b and 6: mean and variance of the entries of the aggregated selected gradient sum_i p_i g_i,
    each client's ||g_i / (alpha tau_i) - mu_i|| (mean, max, and per client id when there are few clients),
    ``herd_residual``, the p_i-weighted distance of the clients' steps from FedAvg's relative to FedAvg's, and
    ``steps_mb``, the memory the round's stored step gradients took."""
    g, distance, residual = selection.sums, selection.distances, selection.residuals
    aggregated = weights.to(g.dtype) @ g
    out = {"agg_grad_mean": float(aggregated.mean()), "agg_grad_var": float(aggregated.var()),
           "herd_dist_mean": float(distance.mean()), "herd_dist_max": float(distance.max()),
           "herd_residual": float(weights.to(residual.dtype) @ residual)}
    if len(plans) <= 20:
        out |= {f"herd_dist_c{p.id}": float(d) for p, d in zip(plans, distance)}
    out["steps_mb"] = float(selection.steps_mb.sum())
    return out


class Herd(StatefulPart):
    """BHerd (Luo et al., Algorithms 2-3, eqs. 4-6): the client herds its tau_i step gradients, sends
    g_i = the sum of the first alpha*tau_i of the herded order (eq. 5, raw gradients), and the server steps
    w <- w - eta (E / alpha) sum_i p_i g_i (eq. 6). The factor -eta E / alpha is applied here, to each client's g_i,
    so the aggregator and server optimiser stay those of the base algorithm. When every step is selected the sum of
    the steps is the local update itself, which is sent unchanged (alpha = 1, E = 1 is FedAvg bit for bit).
    BHerd-FedNova (Sec. V-B2; NOTES.md): FedNova normalises the selected sum by the number of selected steps, so
    the ``a`` upload becomes alpha*tau_i.
    """

    name = "herd"
    records_steps = True
    keeps_step_means = False  # whether the next round's order reads each client's mean step (GraB's stale mean)

    def __init__(self, alpha: float, local_epochs: float):
        self.alpha, self.epochs = float(alpha), float(local_epochs)

    def order(self, state: State, z: torch.Tensor, client: int, rnd: int, k: int, device: torch.device,
              block: int | None = None) -> list[int]:
        return herd_order(z, k, block, device)

    def after(self, state: State, plans, selection: Selection) -> State:
        """The state the next round starts from, once the round's selection is known (herding keeps none)."""
        return state

    def select(self, state, updates, steps, plans, ctx, block: int | None = None) -> Selection:
        """The clients' own work (eq. 5): each orders its steps, sums the first alpha*tau_i of them into g_i and
        makes the update it sends, -eta (E / alpha) g_i (its whole update times E / alpha when every step is
        selected); with ||g_i / k_i - mu_i|| (Fig. 6) and ||g_i / alpha - sum_l z_l|| / ||sum_l z_l||, how far the
        step it asks for is from FedAvg's, 0 when every step is selected. The steps may live in host memory (see the
        module doc); what is sent is on the updates' device."""
        scale, lr = self.epochs / self.alpha, ctx.lr
        out, sums, distances, residuals, counts, means = [], [], [], [], [], []
        for update, z, plan in zip(updates, steps, plans):
            k = num_selected(self.alpha, plan.tau)
            g = z[self.order(state, z, plan.id, ctx.round, k, update.device, block)[:k]].sum(dim=0).to(update.device)
            total = z.sum(dim=0).to(update.device)
            sums.append(g)
            distances.append(torch.linalg.vector_norm(g / k - total / len(z)))
            residuals.append(torch.linalg.vector_norm(g / self.alpha - total) / torch.linalg.vector_norm(total))
            counts.append(k)
            means.append(z.mean(dim=0).to(update.device) if self.keeps_step_means else update[:0])
            out.append(update * scale if k == plan.tau else -lr * scale * g)
        return Selection(torch.stack(out), torch.stack(sums), torch.tensor(counts), torch.stack(distances),
                         torch.stack(residuals), torch.stack(means),
                         torch.tensor([z.numel() * z.element_size() / 2**20 for z in steps], dtype=torch.float64))

    def finish(self, state, updates, selection: Selection, plans, uploads, weights):
        """(new state, the updates sent, uploads, diagnostics: :func:`herd_diagnostics`); FedNova's normaliser
        becomes the number of selected steps."""
        if "a" in uploads:
            uploads = {**uploads, "a": selection.counts.to(uploads["a"].device, uploads["a"].dtype)}
        return (self.after(state, plans, selection), selection.sent, uploads,
                herd_diagnostics(selection, plans, weights))


@register
@dataclass
class HerdConfig(PartConfig):
    part, target, options = "step_selector", "fedrun.algorithms.step_selector.herd.Herd", ("herd",)
    name: str = "herd"
    alpha: float = 0.5  # BHerd's alpha, the fraction of steps sent (the Dirichlet alpha is partition.alpha)
    local_epochs: float = II("fl.local_epochs")  # E of eq. 6
    reshuffle: bool = False  # default of fl.reshuffle: BHerd Sec. III-A, a fixed order (Fig. 7: fl.reshuffle=true)

    def rules(self) -> Iterator[Rule]:
        yield (is_number(self.alpha) and 0 < self.alpha <= 1, "alpha",
               "must be in (0, 1] (the fraction of each client's steps that is sent; 1: every step, FedAvg)", DEFAULT)
        yield (is_number(self.local_epochs) and self.local_epochs > 0, "local_epochs", "must be > 0",
               DEFAULT)

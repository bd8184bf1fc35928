"""Server-side harmonisers: they act on the round's stacked client updates (K, d) before aggregation and return
(harmonised updates, diagnostics for metrics.csv).

Both work on the Gram matrix G = U U^T of the round's updates (one K x d by d x K product) and express each
harmonised update as a combination of the original ones, so the d-dimensional work is two matrix products however
many pairs interact: harmonised = A @ U with a K x K coefficient matrix A.
"""

from __future__ import annotations

import numpy as np
import torch

from fedrun.algorithms.base import State, StatefulPart


def fedgh_coefficients(gram: torch.Tensor, orders) -> torch.Tensor:
    """FedGH Algorithm 1 (Zhang et al.; NOTES.md) on the Gram matrix of the original updates g~:
    for each k, for j != k in ``orders[k]``: if g_k . g~_j < 0 then g_k -= (g_k . g~_j / ||g~_j||^2) g~_j, where g_k
    is the progressively projected update and g~_j the unmodified copy. Writing g_k = sum_m A[k, m] g~_m,
    g_k . g~_j = A[k] . G[:, j], so the sequential projections are exact and cost O(K) each. Each k's sequence
    reads only the unmodified copies, so the K sequences advance together: step t projects every g_k on its own
    t-th partner at once (K - 1 vectorised steps rather than K (K - 1) scalar ones). D = A G holds every
    g_k . g~_j; a projection of g_k changes only row k of D, by a multiple of row j of G. ``orders``: (K, K - 1)
    row positions, row k the others in client k's order (an array, or lists)."""
    k_all = len(gram)
    coef = torch.eye(k_all, dtype=gram.dtype, device=gram.device)
    if k_all < 2:
        return coef
    partners = torch.as_tensor(orders, dtype=torch.long, device=gram.device).T.contiguous()  # row t: each k's t-th
    norm_sq = torch.diagonal(gram).contiguous()
    dots_all = gram.clone(memory_format=torch.contiguous_format)  # D = A G with A = I
    row_starts = torch.arange(k_all, device=gram.device) * k_all
    for t in range(k_all - 1):
        j = partners[t]
        dots = dots_all.view(-1).take(row_starts + j)  # g_k . g~_{j_k} for every k
        k = ((dots < 0) & (norm_sq[j] > 0)).nonzero().squeeze(1)
        if not len(k):
            continue
        jk = j.index_select(0, k)
        step = dots.index_select(0, k).div_(norm_sq.index_select(0, jk)).neg_()
        coef.index_put_((k, jk), step)  # (k, j_k) is met once, at step t
        dots_all.index_add_(0, k, gram.index_select(0, jk).mul_(step[:, None]))
    return coef


NORM_ONLY = "norm_only"  # the step-length control of either harmoniser (see harmonised)


def harmonised(updates: torch.Tensor, gram: torch.Tensor, coef: torch.Tensor, weights: torch.Tensor, mode: str,
               name: str) -> tuple[torch.Tensor, dict[str, float]]:
    """The updates a harmoniser sends, A @ U, and ``<name>_norm_ratio``: ||sum_k p_k g_k'|| / ||sum_k p_k g_k||, the
    length of the harmonised aggregate over the plain one, from the Gram matrix (that aggregate is (p A) U).

    Removing or rotating components also changes the aggregate's length, so a gain may come from a longer server
    step rather than from the new directions. ``mode=norm_only`` is the control that tells the two apart: the same
    coefficients are computed (and any state they update), but the clients' own updates are sent, each scaled by
    that round's ratio: the base algorithm's direction with the harmoniser's step length."""
    p = weights.to(gram.dtype)
    mixed = p @ coef
    plain_sq, harmonised_sq = p @ gram @ p, mixed @ gram @ mixed
    ratio = float((harmonised_sq / plain_sq).clamp_min(0).sqrt()) if plain_sq > 0 else 1.0
    info = {f"{name}_norm_ratio": ratio}
    if mode == NORM_ONLY:
        return updates * ratio, info
    return coef.to(updates.dtype) @ updates, info


class FedGH(StatefulPart):
    """FedGH: pairwise projection of conflicting client updates (Algorithm 1), the order of the other clients
    seeded per (seed, round, client). No hyperparameter; ``mode=norm_only`` is its step-length control
    (:func:`harmonised`), and ``fedgh_norm_ratio`` is logged every round."""

    name = "fedgh"
    reads_each_update = True  # pairwise projections

    def __init__(self, seed: int, mode: str):
        self.seed, self.mode = seed, mode

    def __call__(self, state: State, updates: torch.Tensor, weights: torch.Tensor, clients: list[int], rnd: int
                 ) -> tuple[State, torch.Tensor, dict[str, float]]:
        gram = (updates @ updates.T).double()
        coef = fedgh_coefficients(gram, partner_orders(self.seed, rnd, clients))
        sent, info = harmonised(updates, gram, coef, weights, self.mode, self.name)
        return state, sent, info


def partner_orders(seed: int, rnd: int, clients: list[int]) -> np.ndarray:
    """(K, K - 1): row k, the other rows in the order client k meets them, a permutation seeded per (seed, round,
    client). Permutation entry i names the i-th of the others (0..k-1, k+1..K-1): i + (i >= k), as arrays (a
    thousand clients' orders as Python lists cost as much as their projections)."""
    orders = np.empty((len(clients), max(len(clients) - 1, 0)), dtype=np.int64)
    for k, client in enumerate(clients):
        perm = np.random.default_rng([seed, 0xF6, rnd, client]).permutation(len(clients) - 1)
        orders[k] = perm + (perm >= k)
    return orders


def dgt_coefficients(gram: torch.Tensor, baselines: torch.Tensor, momentum: float
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DGT Algorithm 2, eqs. 4-8 (Li et al.; NOTES.md), all from the original updates:
    POP_k = sum_{j != k} g_j; Phi_k = cos(g_k, POP_k); if Phi_k < PhiT_k (the client's baseline, clamped to
    [-1 + 1e-6, 1 - 1e-6]) then g_k' = g_k + a2 POP_k with
    a2 = ||g_k|| (PhiT sqrt(1 - Phi^2) - Phi sqrt(1 - PhiT^2)) / (||POP_k|| sqrt(1 - PhiT^2)), which makes
    cos(g_k', POP_k) = PhiT (eq. 7 with PhiT where the paper prints POP); then PhiT_k <- a PhiT_k + (1 - a) Phi_k
    (eq. 8) whether or not it calibrated. Returns (coefficients A with g' = A @ U, Phi, new baselines)."""
    k_all = len(gram)
    row = gram.sum(dim=1)
    pop_dot = row - torch.diagonal(gram)  # g_k . POP_k
    pop_sq = (gram.sum() - 2 * row + torch.diagonal(gram)).clamp_min(0)  # ||POP_k||^2
    g_norm = torch.diagonal(gram).clamp_min(0).sqrt()
    pop_norm = pop_sq.sqrt()
    phi = (pop_dot / (g_norm * pop_norm).clamp_min(1e-12)).clamp(-1, 1)
    target = baselines.clamp(-1 + 1e-6, 1 - 1e-6)
    a2 = g_norm * (target * (1 - phi**2).sqrt() - phi * (1 - target**2).sqrt()) / (
        pop_norm.clamp_min(1e-12) * (1 - target**2).sqrt())
    calibrate = (phi < target) & (pop_norm > 0) & (g_norm > 0)
    a2 = torch.where(calibrate, a2, torch.zeros_like(a2))
    ones = torch.ones(k_all, k_all, dtype=gram.dtype, device=gram.device)
    eye = torch.eye(k_all, dtype=gram.dtype, device=gram.device)
    coef = eye + a2[:, None] * (ones - eye)
    return coef, phi, momentum * baselines + (1 - momentum) * phi


class DGT(StatefulPart):
    """DGT: rotates each update toward the pre-aggregated update of the others when its similarity fell below the
    client's running baseline; baselines persist across the rounds a client sits out (start at 0).

    Calibrating adds a component along POP_k, which also changes the length of the aggregate: ``dgt_norm_ratio`` is
    logged every round, and ``mode=norm_only`` is the step-length control (:func:`harmonised`; the baselines are
    updated as DGT's own)."""

    name = "dgt"
    reads_each_update = True  # each update against its client's baseline

    def __init__(self, momentum: float, mode: str):
        self.momentum, self.mode = float(momentum), mode

    def init(self, params=None, num_clients: int = 0) -> State:
        return {"baselines": {}}  # client id -> PhiT_k, the baseline of eq. 8 (0 until the client takes part)

    def __call__(self, state: State, updates: torch.Tensor, weights: torch.Tensor, clients: list[int], rnd: int
                 ) -> tuple[State, torch.Tensor, dict[str, float]]:
        gram = (updates @ updates.T).double()
        baselines = state["baselines"]
        base = torch.tensor([baselines.get(c, 0.0) for c in clients], dtype=gram.dtype, device=gram.device)
        coef, phi, new = dgt_coefficients(gram, base, self.momentum)
        state = {"baselines": baselines | {c: float(v) for c, v in zip(clients, new)}}
        sent, info = harmonised(updates, gram, coef, weights, self.mode, self.name)
        return state, sent, info | {"dgt_calibrated": float((coef.diagonal() != coef.sum(1)).double().mean())}


def conflict_statistics(updates: torch.Tensor) -> dict[str, float]:
    """Gradient-conflict diagnostics (FedGH Fig. 2, DGT Figs. 3-4) from the cosine matrix of the round's updates:
    share of client pairs with negative cosine, minimum and mean pairwise cosine, and the mean cosine of each update
    to the sum of the others (DGT's POP)."""
    gram = (updates @ updates.T).double()
    norms = torch.diagonal(gram).clamp_min(0).sqrt()
    cos = gram / (norms[:, None] * norms[None, :]).clamp_min(1e-12)
    k_all = len(gram)
    if k_all < 2:
        return {"conflict_ratio": 0.0, "cos_min": 1.0, "cos_mean": 1.0, "cos_to_others": 1.0}
    pairs = cos[torch.triu(torch.ones(k_all, k_all, dtype=torch.bool), diagonal=1)]
    row = gram.sum(dim=1)
    pop_norm = (gram.sum() - 2 * row + torch.diagonal(gram)).clamp_min(0).sqrt()
    to_others = (row - torch.diagonal(gram)) / (norms * pop_norm).clamp_min(1e-12)
    return {"conflict_ratio": float((pairs < 0).double().mean()), "cos_min": float(pairs.min()),
            "cos_mean": float(pairs.mean()), "cos_to_others": float(to_others.mean())}


def cosine_matrix(updates: torch.Tensor) -> np.ndarray:
    gram = (updates @ updates.T).double()
    norms = torch.diagonal(gram).clamp_min(0).sqrt()
    return (gram / (norms[:, None] * norms[None, :]).clamp_min(1e-12)).cpu().numpy()


__all__ = ["DGT", "FedGH", "conflict_statistics", "cosine_matrix", "dgt_coefficients",
           "fedgh_coefficients"]

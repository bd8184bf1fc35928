"""What both server-side harmonisers (FedGH, DGT) share: they act on the round's stacked client updates (K, d)
before aggregation and return (harmonised updates, diagnostics for metrics.csv), both on the Gram matrix G = U U^T
of the round's updates (one K x d by d x K product), each harmonised update a combination of the original ones, so
the d-dimensional work is two matrix products however many pairs interact: harmonised = A @ U with a K x K
coefficient matrix A. Here: that product with its step-length control, and the conflict diagnostics the papers'
figures read (any algorithm may log them: ``diagnostics.conflicts``).
"""

from __future__ import annotations

from fedrun.process.lazy import numpy as np
from fedrun.process.lazy import torch

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

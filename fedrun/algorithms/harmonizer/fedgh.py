"""FedGH (Zhang et al., Algorithm 1): each client's update projected off the others' it conflicts with, in a
seeded order of the others per client, on the Gram matrix of the round's updates (``gram.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from omegaconf import II

from fedrun.algorithms.base import State, StatefulPart
from fedrun.algorithms.harmonizer.gram import harmonised
from fedrun.algorithms.part_config import PartConfig, is_int, register
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import numpy as np
from fedrun.process.lazy import torch

# the harmoniser's own rule | norm_only: the control, the clients' own updates scaled so that the aggregate is as
# long as the harmoniser's (a longer server step without its directions)
FEDGH_MODES = ("project", "norm_only")


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


@register
@dataclass
class FedGHConfig(PartConfig):
    part, target, options = "harmonizer", "fedrun.algorithms.harmonizer.fedgh.FedGH", ("fedgh", "fedgh_norm_only")
    name: str = "fedgh"
    seed: int = II("seed")  # the random order in which conflicting pairs are projected
    mode: str = "project"  # project (FedGH) | norm_only (FEDGH_MODES)

    def rules(self) -> Iterator[Rule]:
        yield is_int(self.seed), "seed", "must be an integer", DEFAULT
        yield self.mode in FEDGH_MODES, "mode", f"must be one of {FEDGH_MODES}", DEFAULT

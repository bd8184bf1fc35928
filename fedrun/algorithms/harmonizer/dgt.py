"""DGT (Li et al., Algorithm 2): each client's update calibrated towards its baseline, GradVac's form, on the Gram
matrix of the round's updates (``gram.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from fedrun.algorithms.base import State, StatefulPart
from fedrun.algorithms.harmonizer.gram import harmonised
from fedrun.algorithms.part_config import PartConfig, is_unit, register
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import torch

DGT_MODES = ("calibrate", "norm_only")


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


@register
@dataclass
class DGTConfig(PartConfig):
    part, target, options = "harmonizer", "fedrun.algorithms.harmonizer.dgt.DGT", ("dgt", "dgt_norm_only")
    name: str = "dgt"
    momentum: float = 0.5  # of each client's baseline
    mode: str = "calibrate"  # calibrate (DGT) | norm_only (DGT_MODES)

    def rules(self) -> Iterator[Rule]:
        yield is_unit(self.momentum), "momentum", "must be in [0, 1)", DEFAULT
        yield self.mode in DGT_MODES, "mode", f"must be one of {DGT_MODES}", DEFAULT

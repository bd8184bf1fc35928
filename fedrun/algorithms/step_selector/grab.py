"""GraB-FedAvg (BHerd Sec. V-A1): BHerd with herding's order replaced by GraB's online balancing (Lu et al. 2022)."""

from __future__ import annotations

from dataclasses import dataclass

from fedrun.algorithms.base import State
from fedrun.algorithms.part_config import register
from fedrun.algorithms.step_selector.herd import Herd, HerdConfig, centred_gram
from fedrun.process.lazy import torch


def grab_order(z: torch.Tensor, stale_mean: torch.Tensor, block: int | None = None,
               device: torch.device | None = None) -> list[int]:
    """GraB's online balancing (Lu et al. 2022; reference-rules.md §1, ``StaleGradDiscrepencyMinimizationSort``):
    in arrival order, c_t = z_t - m_stale; if ||s + c_t|| <= ||s - c_t|| (i.e. s . c_t <= 0) the step goes to the
    front and s += c_t, else to the back and s -= c_t. The order is the front steps in arrival order, then the back
    steps in reverse arrival order."""
    gram = centred_gram(z, stale_mean, block, device)
    signs = torch.zeros(len(z), dtype=torch.float64, device=gram.device)
    front, back = [], []
    for t in range(len(z)):
        s_dot_c = float(signs[:t] @ gram[:t, t])
        if s_dot_c <= 0:
            signs[t] = 1.0
            front.append(t)
        else:
            signs[t] = -1.0
            back.append(t)
    return front + back[::-1]


class GraB(Herd):
    """GraB-FedAvg (BHerd Sec. V-A1; NOTES.md): BHerd with Algorithm 2 replaced by GraB's online balancing, the stale
    mean being the mean of the same client's step gradients in its previous round (zero at first); the first
    alpha*tau_i of GraB's order are sent."""

    name = "grab"
    keeps_step_means = True

    def init(self, params=None, num_clients: int = 0) -> State:
        return {"stale_means": {}}  # client id -> the mean of its step gradients in the last round it took part

    def order(self, state, z, client, rnd, k, device, block=None):
        return grab_order(z, state["stale_means"].get(client, torch.zeros_like(z[0])), block, device)

    def after(self, state, plans, selection):
        return {"stale_means": state["stale_means"] | {p.id: m for p, m in zip(plans, selection.means)}}


@register
@dataclass
class GraBConfig(HerdConfig):
    part, target, options = "step_selector", "fedrun.algorithms.step_selector.grab.GraB", ("grab",)
    name: str = "grab"

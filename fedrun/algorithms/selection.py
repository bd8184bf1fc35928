"""Client-side update selection: which local steps a client's update is made of (BHerd, GraB-FedAvg).

A selector that ``records_steps`` receives each client's per-step directions z_1..z_tau (the gradient its local rule
applied at each step: SGD's gradient, SCAFFOLD's corrected one, FedDyn's regularised one) and returns the update
the client sends. Orders are computed from the Gram matrix of the steps (one (tau x d) @ (d x tau) product), so the
greedy loops are O(tau^2) scalar work, never O(tau^2 d).

When the steps do not fit on the accelerator (``hardware.step_store=host``) they stay in host memory and the Gram
matrix is accumulated over blocks of ``block`` coordinates moved to the compute device one at a time, so the device
holds tau x block numbers, never tau x d.
"""

from __future__ import annotations

import math

import torch


def centred_gram(z: torch.Tensor, centre: torch.Tensor, block: int | None = None,
                 device: torch.device | None = None) -> torch.Tensor:
    """Gram matrix (float64) of the rows of z (tau x d) minus ``centre`` (d,), computed on ``device`` over column
    blocks of ``block`` coordinates (all at once when None)."""
    device = device or z.device
    width = block or z.shape[1]
    gram = torch.zeros(len(z), len(z), dtype=torch.float64, device=device)
    for start in range(0, z.shape[1], width):
        c = z[:, start : start + width].to(device) - centre[start : start + width].to(device)
        gram += (c @ c.T).double()
    return gram


def herd_order(z: torch.Tensor, k: int, block: int | None = None, device: torch.device | None = None) -> list[int]:
    """BHerd Algorithm 2: centre z (tau x d) by its mean, then k times pick argmin_{j not chosen} ||s + z_j|| and add
    it to s. With G the Gram matrix of the centred z, ||s + z_j||^2 = ||s||^2 + 2 (s . z_j) + G_jj, and s . z_j is
    the running sum of G's chosen rows. Ties go to the lowest index."""
    gram = centred_gram(z, z.mean(dim=0), block, device)
    diag = torch.diagonal(gram)
    s_dot = torch.zeros_like(diag)
    taken = torch.zeros(len(diag), dtype=torch.bool, device=gram.device)
    order = []
    for _ in range(k):
        score = (2 * s_dot + diag).masked_fill(taken, math.inf)
        j = int(torch.argmin(score))
        order.append(j)
        taken[j] = True
        s_dot += gram[j]
    return order


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


def num_selected(alpha: float, tau: int) -> int:
    """alpha * tau_i, rounded half up, at least 1 (NOTES.md, BHerd)."""
    return max(1, min(tau, math.floor(alpha * tau + 0.5)))


class Herd:
    """BHerd (000_4b8cd08d479a2377.txt, Algorithms 2-3, eqs. 4-6): the client herds its tau_i step gradients, sends
    g_i = the sum of the first alpha*tau_i of the herded order (eq. 5, raw gradients), and the server steps
    w <- w - eta (E / alpha) sum_i p_i g_i (eq. 6). The factor -eta E / alpha is applied here, to each client's g_i,
    so the aggregator and server optimiser stay those of the base algorithm. When every step is selected the sum of
    the steps is the local update itself, which is sent unchanged (alpha = 1, E = 1 is FedAvg bit for bit).
    BHerd-FedNova (Sec. V-B2; NOTES.md): FedNova normalises the selected sum by the number of selected steps, so
    the ``a`` upload becomes alpha*tau_i.
    """

    name = "herd"
    records_steps = True

    def __init__(self, alpha: float, local_epochs: float, block: int | None = None):
        self.alpha, self.epochs, self.block = float(alpha), float(local_epochs), block

    def order(self, z: torch.Tensor, client: int, k: int, device: torch.device) -> list[int]:
        return herd_order(z, k, self.block, device)

    def __call__(self, updates, steps, plans, uploads, lr):
        """(updates to send, uploads, diagnostics): ``g`` (K, d) the selected sums g_i of eq. 5 and ``distance``
        (K,) = ||g_i / (alpha tau_i) - mu_i|| (Fig. 6). The steps may live in host memory (see the module doc);
        what is sent is on the updates' device."""
        scale = self.epochs / self.alpha
        out, sums, distances, counts = [], [], [], []
        for update, z, plan in zip(updates, steps, plans):
            k = num_selected(self.alpha, plan.tau)
            g = z[self.order(z, plan.id, k, update.device)[:k]].sum(dim=0).to(update.device)
            sums.append(g)
            distances.append(torch.linalg.vector_norm(g / k - z.mean(dim=0).to(update.device)))
            counts.append(k)
            out.append(update * scale if k == plan.tau else -lr * scale * g)
        if "a" in uploads:
            uploads = {**uploads, "a": torch.tensor(counts, dtype=uploads["a"].dtype, device=uploads["a"].device)}
        return torch.stack(out), uploads, {"g": torch.stack(sums), "distance": torch.stack(distances)}


class GraB(Herd):
    """GraB-FedAvg (BHerd Sec. V-A1; NOTES.md): BHerd with Algorithm 2 replaced by GraB's online balancing, the stale
    mean being the mean of the same client's step gradients in its previous round (zero at first); the first
    alpha*tau_i of GraB's order are sent."""

    name = "grab"

    def __init__(self, alpha: float, local_epochs: float, block: int | None = None):
        super().__init__(alpha, local_epochs, block)
        self.stale_means: dict[int, torch.Tensor] = {}

    def order(self, z, client, k, device):
        order = grab_order(z, self.stale_means.get(client, torch.zeros_like(z[0])), self.block, device)
        self.stale_means[client] = z.mean(dim=0)
        return order

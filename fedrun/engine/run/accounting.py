"""What a round reports beside the model: simulated time (GIFT's time model) and the tracked coordinates of GIFT's
figures."""

from __future__ import annotations

import numpy as np
import torch

from fedrun.engine.run.sampling import ClientPlan


def simulated_times(taus: list[int], train_s: float, last_report: float, model_bytes: int, timing,
                    factors: np.ndarray, links_mbps: np.ndarray, sampled: int) -> tuple[float, float, float]:
    """GIFT's time model (Sec. 6.1), each client on its own device: (the base device's seconds per local step, its
    seconds of the round outside local steps, the round's seconds). A base step takes ``timing.step_time_s``, or this
    machine's measured time per client step (``train_s`` over the round's steps); client i's takes ``factors[i]``
    times that. Outside the steps, the last kept report arrives and the model goes down and up once: each way, the
    ``sampled`` copies share the server's link while each client's copy crosses its own link (``links_mbps[i]``), so
    a transfer takes max(k bytes / server bandwidth, bytes / client bandwidth). The round lasts until its slowest
    client is done: max_i tau_i step_i + the rest (max tau_i step + the rest when every device is the base one)."""
    step = timing.step_time_s
    step = train_s / max(1, sum(taus)) if step is None else float(step)
    bits = model_bytes * 8
    shared = sampled * bits / (float(timing.server_bandwidth_mbps) * 1e6)
    sync = last_report + 2 * max(shared, bits / (float(timing.bandwidth_mbps) * 1e6))
    each = [tau * (step * float(f)) + (last_report + 2 * max(shared, bits / (float(link) * 1e6)))
            for tau, f, link in zip(taus, factors, links_mbps)]
    return step, sync, max(each)


def tracked_values(coords: np.ndarray, params: torch.Tensor, updates: torch.Tensor, plans: list[ClientPlan]
                   ) -> dict[str, float]:
    """GIFT Figs. 3-4: the global model's value at each tracked coordinate j after the round (``param_j``) and, for
    up to 20 clients, the update each sent there (``update_c<id>_j``: w_i - w_t, GIFT's accumulated "gradient")."""
    out = {f"param_{j}": float(params[j]) for j in coords}
    if len(plans) <= 20:
        out |= {f"update_c{p.id}_{j}": float(u[j]) for p, u in zip(plans, updates) for j in coords}
    return out

"""What a round reports beside the model: simulated time (GIFT's time model) and the tracked coordinates of GIFT's
figures."""

from __future__ import annotations

import numpy as np
import torch

from fedrun.engine.run.sampling import ClientPlan


def simulated_times(taus: list[int], train_s: float, last_report: float, model_bytes: int, timing
                    ) -> tuple[float, float]:
    """GIFT's time model (Sec. 6.1) as (seconds per local step, seconds of the round outside local steps); the round
    takes max tau_i steps plus the latter. A step takes ``timing.step_time_s``, or this machine's measured time per
    client step (``train_s`` over the round's steps). Outside the steps, the last kept report arrives and the model
    goes down and up once: each way, the K copies share the server's link while each client's copy crosses its own
    link, so a transfer takes max(K bytes / server bandwidth, bytes / client bandwidth)."""
    step = timing.step_time_s
    step = train_s / max(1, sum(taus)) if step is None else float(step)
    bits = model_bytes * 8
    one_way = max(len(taus) * bits / (float(timing.server_bandwidth_mbps) * 1e6),
                  bits / (float(timing.bandwidth_mbps) * 1e6))
    return step, last_report + 2 * one_way


def tracked_values(coords: np.ndarray, params: torch.Tensor, updates: torch.Tensor, plans: list[ClientPlan]
                   ) -> dict[str, float]:
    """GIFT Figs. 3-4: the global model's value at each tracked coordinate j after the round (``param_j``) and, for
    up to 20 clients, the update each sent there (``update_c<id>_j``: w_i - w_t, GIFT's accumulated "gradient")."""
    out = {f"param_{j}": float(params[j]) for j in coords}
    if len(plans) <= 20:
        out |= {f"update_c{p.id}_{j}": float(u[j]) for p, u in zip(plans, updates) for j in coords}
    return out

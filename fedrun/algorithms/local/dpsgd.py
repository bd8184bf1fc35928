"""Sample-level differential privacy inside each client: DP-SGD."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from omegaconf import II

from fedrun.algorithms.base import ClientContext, State, TrainingSet
from fedrun.algorithms.local.sgd import LocalSGD, SGDConfig
from fedrun.algorithms.privacy.accounting import Sampling
from fedrun.algorithms.part_config import is_number, register
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import torch


class DPSGD(LocalSGD):
    """DP-SGD (Abadi et al., CCS 2016, Algorithm 1) as a client's local rule: each sample's gradient g_j of the
    minibatch (per-sample gradients by ``torch.func.vmap`` over the minibatch, inside the cohort's vmap when the
    executor vectorises the clients) is clipped to norm C, g_j min(1, C / ||g_j||); the clipped gradients are summed,
    N(0, sigma^2 C^2 I) is added and the sum is divided by the minibatch size B; then LocalSGD's step (momentum,
    weight decay and FedProx's term act on the noised gradient: post-processing).

    Accounting (sample level, per client): each client counts its DP steps in its persistent state; a step is
    accounted as a Poisson-sampled Gaussian at q_i = B / n_i, the accounting DP-SGD code reports for shuffled
    minibatches (fedrun's batches are shuffled epochs, which is not Poisson sampling and can leak more: the figure is
    the usual one, not a proof). ``spent`` bounds every client's epsilon by the largest q_i and step count."""

    name = "dpsgd"
    per_sample = True

    def __init__(self, mu: float, clip: float, noise_multiplier: float, delta: float, batch_size: int):
        super().__init__(mu)
        self.clip, self.z, self.delta, self.batch = float(clip), float(noise_multiplier), float(delta), int(batch_size)

    def setup(self, server_state: State, data: TrainingSet) -> tuple[State, dict[int, State]]:
        """Each client starts with no DP steps and its sampling rate q_i = min(1, B / n_i)."""
        return server_state, {c: {"dp_steps": torch.zeros((), dtype=torch.float64),
                                  "dp_rate": torch.tensor(min(1.0, self.batch / max(1, len(idx))),
                                                          dtype=torch.float64)}
                              for c, idx in enumerate(data.client_indices)}

    def client_init(self, ctx: ClientContext, client_state: State | None) -> State:
        state = super().client_init(ctx, client_state)
        zero = torch.zeros((), dtype=torch.float64, device=ctx.params.device)
        known = client_state or {"dp_steps": zero, "dp_rate": zero}  # None: a probe of the state's size
        state["dp_steps"], state["dp_rate"] = (known["dp_steps"].to(ctx.params.device),
                                               known["dp_rate"].to(ctx.params.device))
        return state

    def per_sample_gradients(self, model, state: State, x, y) -> tuple[torch.Tensor, torch.Tensor]:
        """Each sample's loss (B,) and gradient (B, d) at the client's model."""
        if hasattr(x, "gathered"):
            x = x.gathered()

        def one(xj, yj):
            g, loss = model.grad_and_loss(state["w"], state["buffers"], xj[None], yj[None])
            return loss, g

        return torch.func.vmap(one, randomness="different")(x, y)

    def private_gradient(self, grads: torch.Tensor) -> torch.Tensor:
        """(sum_j clip_C(g_j) + N(0, sigma^2 C^2 I)) / B from the per-sample gradients (B, d)."""
        norms = torch.linalg.vector_norm(grads, dim=1)
        clipped = (grads * (self.clip / norms).clamp(max=1.0)[:, None]).sum(dim=0)
        if self.z > 0:
            clipped = clipped + torch.randn_like(clipped) * (self.z * self.clip)
        return clipped / len(grads)

    def gradient(self, model, state: State, x, y):
        losses, grads = self.per_sample_gradients(model, state, x, y)
        state["dp_steps"] = state["dp_steps"] + 1
        return losses.mean(), self.private_gradient(grads)

    def client_final(self, ctx: ClientContext, state: State, client_state: State | None):
        update, _, uploads = super().client_final(ctx, state, client_state)
        return update, {"dp_steps": state["dp_steps"], "dp_rate": state["dp_rate"]}, uploads

    def spent(self, clients: dict[int, State]) -> dict[str, float]:
        """``sample_epsilon``: a bound on every client's sample-level epsilon at ``delta`` (dp-accounting's RDP at the
        largest q_i and step count of any client)."""
        from fedrun.algorithms.privacy.accounting import epsilon

        steps = int(max(float(s["dp_steps"]) for s in clients.values()))
        rate = max(float(s["dp_rate"]) for s in clients.values())
        return {"sample_epsilon": epsilon("rdp", Sampling("poisson", rate, 0), 0, self.z, steps, self.delta)}


@register
@dataclass
class DPSGDConfig(SGDConfig):
    """DP-SGD inside each client (Abadi et al. 2016): per-sample gradients clipped to ``clip``, noised with
    ``noise_multiplier`` x clip, averaged over the minibatch."""

    part, target, options = "local", "fedrun.algorithms.local.dpsgd.DPSGD", ("dpsgd",)
    name: str = "dpsgd"
    clip: float = 1.0
    noise_multiplier: float = 1.0
    delta: float = 1e-5
    batch_size: int = II("fl.batch_size")

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield is_number(self.clip) and self.clip > 0, "clip", "must be > 0", DEFAULT
        yield is_number(self.noise_multiplier) and self.noise_multiplier >= 0, "noise_multiplier", "must be >= 0", \
            DEFAULT
        yield is_number(self.delta) and 0 < self.delta < 1, "delta", "must be in (0, 1)", DEFAULT
        yield isinstance(self.batch_size, int) and self.batch_size >= 1, "batch_size", \
            "must be an integer >= 1 (fl.batch_size)", "64"

"""FSVRG (Konečný et al. 2016, "Federated Optimization: Distributed Machine Learning for On-Device Intelligence",
Alg. 4; reference-rules.md §6) in the form Zhao et al. (TNNLS 2024) train it with, eqs. 16 and 19-24, 59-60.

Per round, the sampled clients S^r send their full local gradients at the model they start from and the server
forms the anchor gradient g = sum_{i in S^r} (n_i / n^r) grad f_i(w) (eq. 16; eq. 17 per model of the bank). Client
i takes tau_i steps from its start w0 on minibatches z (one pass of single samples is Konečný's setting:
``fl.batch_size=1``, ``fl.local_epochs=1``):

    d = Lambda_i [grad f_i(w; z) - grad f_i(w0; z)] + g          (eqs. 20, 22)
    w <- w - (alpha_l / n_i) d                                      (eq. 23; alpha_l = ``fl.lr``)

with Lambda_i = diag(n^j n_i / (n n_i^j)) (eq. 21): n^j (n_i^j) counts the samples with a non-zero feature j over
all clients (on client i), 1 where n_i^j = 0 (reference-rules.md). The server moves the model by
A_r sum_{i in S^r} (n_i / n^r)(w_i - w) with A_r = diag(|S^r| / omega^j) (eq. 59), omega^j the number of clients
holding feature j (eq. 60 for one model). f_i includes the L2 term (``fl.weight_decay`` / 2) ||w||^2.

``scaling=features`` maps parameters to input features for a model that declares the map (``model=logreg``: its
weight W[c, j] to feature j, its bias to a constant feature that every sample has;
:func:`fedrun.model.zoo.affine_parameter_features`); ``scaling=none`` sets Lambda_i = I and counts every feature on
every client (any model), so A_r = |S^r| / N.

``omega``: eq. 59 counts omega^j over all N machines (``all``, as printed), which scales every update by the
participation share for a feature all machines hold; ``round`` counts it over the round's clients (Konečný's
A = diag(K / omega^j) with the round's clients as its K nodes, 1 for a feature none of them holds), each client sending
which features it holds. A reading to test the printed one against, not Zhao et al.'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from fedrun.algorithms.base import ClientContext, LocalRule, State, TrainingSet
from fedrun.algorithms.part_config import PartConfig, register
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import torch

SCALINGS = ("features", "none")  # fsvrg: S_i from the features' frequencies, or none
OMEGAS = ("all", "round")  # fsvrg: A from all clients' data, or this round's


def feature_counts(x: torch.Tensor, client_indices: list) -> torch.Tensor:
    """(clients, q): how many of each client's samples have a non-zero feature j (n_i^j of eq. 21)."""
    nonzero = (x.flatten(1) != 0).to(torch.float64)
    return torch.stack([nonzero[torch.as_tensor(ix, device=x.device)].sum(dim=0) for ix in client_indices])


def feature_scalings(counts: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """Lambda_i's diagonal for every client (eq. 21): (n^j / n) / (n_i^j / n_i), 1 where n_i^j = 0.

    ``counts`` (clients, q) are the n_i^j, ``sizes`` (clients,) the n_i."""
    n_hat, n = counts.sum(dim=0), sizes.sum()
    lam = (n_hat / n) * sizes[:, None] / counts.clamp_min(1)
    return torch.where(counts > 0, lam, torch.ones_like(lam))


class FSVRG(LocalRule):
    """Konečný et al.'s FSVRG local steps (Zhao et al. eqs. 20-23) and the server's A_r scaling (eqs. 59-60)."""

    name = "fsvrg"
    releases_more = "each client's full local gradient (and feature counts) go to the server"
    trains_a_bank = True
    pooling_removes_its_correction = True
    needs_full_gradients = True

    def __init__(self, scaling: str, omega: str):
        self.scaling, self.omega = scaling, omega

    def setup(self, server_state: State, data: TrainingSet) -> tuple[State, dict[int, State]]:
        """Zhao et al. eqs. 21 and 59 from the clients' non-zero feature counts: the server's per-parameter omega^j
        (A_r's) and each client's constant state (Lambda_i over the parameters, n_i, and with ``omega=round`` which
        parameters' features it holds)."""
        x, dim = data.x, data.dim
        sizes = torch.tensor([len(ix) for ix in data.client_indices], dtype=torch.float64, device=x.device)
        statics, omega = self.client_statics(feature_counts(x, data.client_indices), sizes,
                                             None if data.parameter_features is None
                                             else data.parameter_features.to(x.device), dim)
        return {**server_state, "omega": omega}, statics

    def client_statics(self, counts: torch.Tensor, sizes: torch.Tensor, parameter_map: torch.Tensor | None,
                       dim: int) -> tuple[dict[int, State], torch.Tensor]:
        """Each client's constant state and the per-parameter omega^j, from the (N, features) non-zero feature counts
        and the sample counts (``setup``'s arithmetic)."""
        if self.scaling == "none" or parameter_map is None:  # one shared vector: d may be a large model's
            ones = torch.ones(dim, dtype=torch.float32, device=counts.device)
            lam = present = ones.expand(len(sizes), dim)
        else:
            lam = feature_scalings(counts, sizes)
            bias = torch.ones(len(sizes), 1, dtype=lam.dtype, device=lam.device)  # the bias's constant feature
            lam = torch.cat([lam, bias], dim=1)[:, parameter_map].float()
            present = torch.cat([(counts > 0).to(lam.dtype), bias.to(lam.dtype)], dim=1)[:, parameter_map]
        statics = {c: {"lam": lam[c], "n": sizes[c].float(), **({"present": present[c]} if self.omega == "round"
                                                                 else {})} for c in range(len(sizes))}
        return statics, present.sum(dim=0)

    def round_extras(self, server_state: State, full_grads: torch.Tensor, sizes: torch.Tensor):
        """The anchor gradient of eq. 16 from the round's full local gradients of the loss."""
        anchor = (sizes / sizes.sum()).to(full_grads.dtype) @ full_grads
        return {"anchor": anchor}, server_state

    def client_init(self, ctx: ClientContext, client_state: State | None) -> State:
        cs = client_state or {}  # None only when an executor sizes its chunks
        start = cs.get("start", ctx.params)
        anchor = cs.get("anchor", ctx.extras.get("anchor", torch.zeros_like(start)))  # f_i's L2 term added here
        return {"w": start.clone(), "w0": start, "buffers": {k: v.clone() for k, v in ctx.buffers.items()},
                "direction": torch.zeros_like(start), "lam": cs.get("lam", torch.ones_like(start)),
                "anchor": anchor + ctx.weight_decay * start,
                "step": ctx.lr / cs.get("n", torch.ones((), dtype=start.dtype, device=start.device))}

    def client_step(self, model, ctx: ClientContext, state: State, x, y):
        loss, g = model.loss_and_grad(state["w"], state["buffers"], x, y)
        _, g0 = model.loss_and_grad(state["w0"], {k: v.clone() for k, v in state["buffers"].items()}, x, y)
        if ctx.weight_decay:
            g, g0 = g + ctx.weight_decay * state["w"], g0 + ctx.weight_decay * state["w0"]
        d = state["lam"] * (g - g0) + state["anchor"]
        state["direction"] = d
        state["w"] = state["w"] - state["step"] * d
        return state, loss

    def client_final(self, ctx, state, client_state):
        statics = {k: v for k, v in client_state.items() if k in ("lam", "n", "present")}
        uploads = {"present": statics["present"]} if "present" in statics else {}
        return state["w"] - state["w0"], statics, uploads

    def a_r(self, server_state: State, uploads: dict, participants: int) -> torch.Tensor:
        """A_r of eq. 59 per parameter: |S^r| / omega^j, omega^j over all machines or over the round's (``omega``)."""
        if self.omega == "all":
            return participants / server_state["omega"]
        held = uploads["present"].sum(dim=0)
        return torch.where(held > 0, participants / held.clamp_min(1), torch.ones_like(held))

    def server_update(self, server_state, aggregated, updates, uploads, weights, num_clients):
        """A_r (eq. 59) on the aggregated update (eq. 60 for one model)."""
        return self.a_r(server_state, uploads, len(updates)) * aggregated, server_state


@register
@dataclass
class FSVRGConfig(PartConfig):
    part, target, options = "local", "fedrun.algorithms.local.fsvrg.FSVRG", ("fsvrg",)
    name: str = "fsvrg"
    # features: Lambda_i and A_r from the clients' non-zero feature counts (model=logreg) | none: identity
    scaling: str = "features"
    omega: str = "all"  # A_r of eq. 59 counts omega^j over all machines (as printed) | round: the round's clients

    def rules(self) -> Iterator[Rule]:
        yield self.scaling in SCALINGS, "scaling", f"must be one of {SCALINGS}", DEFAULT
        yield self.omega in OMEGAS, "omega", f"must be one of {OMEGAS}", DEFAULT

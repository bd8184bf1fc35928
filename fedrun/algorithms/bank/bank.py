"""A bank of C diversified global models (Zhao, Cai, Lu, "Tailored Federated Learning With Adaptive Central
Acceleration on Diversified Global Models", TNNLS 2024): MA-FSVRG and GA-FSVRG.

After the threshold round T (``algo.bank.threshold``) the server keeps C models. Each round, every sampled client
evaluates its full local objective at every model and starts from the one it prefers (eq. 18); the server forms one
anchor gradient per model from the round's clients (eq. 17); clients run FSVRG steps
(:mod:`fedrun.algorithms.local.fsvrg`, Procedure 1). The server then groups the round's clients (Procedure 2 or 3)
and accelerates each group's model (Procedure 4):

- MA (model-based, eqs. 25-43): the trained local models are mean-centred (eq. 26), projected on the top C-1
  eigenvectors of their Gram matrix (eqs. 29, 37-38), grouped by k-means seeded with the projected previous models
  (eqs. 39-42), and each group's centre mapped back (eq. 43).
- GA (gradient-based, eqs. 44-58): the same on the clients' full local gradients at their trained models, seeded with
  the projected anchors (eqs. 52-53); the group's gradient moves its model (eqs. 57-58, see ``ga_step``).
- Acceleration (eqs. 59-64): w_c = w_c + A_r (w_c* - w_c) (eq. 60), anchor gradients g_c at w_c (eq. 61), Adam-like
  moments (eqs. 62-63) and the step of eq. 64.

Points Zhao et al. leave open, decided here and configurable:
- k-means stops when the eq. 42/56 sum of distances is <= ``kmeans_eps`` (1e-4), which needs every group to collapse
  onto its centre; otherwise it stops at a fixed point of the assignment (or after ``kmeans_max_iter``). An empty group
  keeps its previous centre.
- Eqs. 39 and 53 project the previous models (anchors) without mean-centring (``center_seeds=false``, literal);
  ``center_seeds=true`` subtracts the round's mean first, as for the clients' points.
- The C models first coincide (the single model of round T), so their projections cannot seed k-means; the first
  grouping seeds it with farthest-point picks (the point farthest from the mean, then from those chosen).
- Eq. 58 adds the group's gradient to its model with no step size; fedrun moves the model against it, by
  ``ga_step`` (default: the clients' mean local step alpha_l / n_i times their mean number of local steps).
- ``grouping=kmeans`` (Zhao et al.) forms the groups by k-means; ``grouping=preference`` takes each client's group to be
  the model it preferred and trained from (eq. 18), each group's centre the mean of its projected points (a group nobody
  preferred keeps its seed): a departure from Zhao et al., offered to test whether the k-means groups' disagreement with
  the preferences (logged as ``group_is_preferred``) is what costs the bank its accuracy.
- Eq. 64: ``form=adam`` (the default) reads Zhao et al.'s "Adam-like moments" as Adam's bias-corrected step on the
  moments of eqs. 62-63 (alpha_g per coordinate). ``form=paper`` is eq. 64 as printed: w - alpha_g (1 - beta1)
  sqrt((1 - beta2^r) / (1 - beta2)) m / sqrt(v + eps), r counting the accelerated rounds, whose first step is
  alpha_g (1 - beta1)^2 / sqrt(1 - beta2), 0.63 per coordinate for beta1 = 0, along the anchor's sign (a gradient
  step of alpha_g / sqrt(eps) where the anchor's coordinate is below sqrt(eps / (1 - beta2)) ~ 3e-3). As printed it
  does not train stably on Zhao et al.'s MNIST setting (GA's test loss 1.8 -> 113 within six rounds; at 10%
  participation the bank's models average 77-84% after 40 rounds against 90-93% with Adam's step:
  results/fsvrg/exploration.md), so it is the option, not the default.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, replace
from typing import Any, Iterator, Optional

from fedrun.algorithms.base import ClientContext, State, StatefulPart
from fedrun.algorithms.part_config import PartConfig, is_int, is_number, is_unit, register
from fedrun.algorithms.round import RoundOutput, composed_round, with_client_states
from fedrun.config.schema import DEFAULT, Rule
from fedrun.process.lazy import numpy as np
from fedrun.process.lazy import torch

FORMS = ("paper", "adam")  # the bank's central acceleration, eq. 64 as printed or Adam's
GROUPINGS = ("kmeans", "preference")

def preferences(losses: torch.Tensor, models: torch.Tensor, weight_decay: float) -> torch.Tensor:
    """Eq. 18: each client's model of least full local objective, its mean loss over its data plus
    (weight_decay / 2) ||w||^2; ``losses`` (K clients, C models), ``models`` (C, d)."""
    return (losses + 0.5 * weight_decay * (models**2).sum(dim=1)).argmin(dim=1)


def mean_centre(points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows minus their mean (eqs. 26, 45), and the mean."""
    mean = points.mean(dim=0)
    return points - mean, mean


def principal_subspace(centred: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The top-k eigenpairs of the Gram matrix W^T W of the centred points (rows; eqs. 29, 37): U (d, k) with
    W = U Lambda^1/2 V^T restricted to them, the projections U^T w_i (k per point, eq. 38) and the eigenvalues.

    The Gram matrix is K x K (K clients), so the eigendecomposition never touches a d x d matrix."""
    if k == 0:
        return centred.new_zeros(centred.shape[1], 0), centred.new_zeros(len(centred), 0), centred.new_zeros(0)
    gram = (centred @ centred.T).double()
    values, vectors = top_eigenpairs(gram, k)
    scale = torch.where(values > 1e-12 * values.max().clamp_min(1e-300), values.rsqrt(), torch.zeros_like(values))
    vectors = vectors.to(centred.dtype)
    basis = (centred.T @ vectors) * scale.to(centred.dtype)  # U = W V Lambda^-1/2 (points as columns of W)
    projected = vectors * values.sqrt().to(centred.dtype)  # U^T W = Lambda^1/2 V^T (eq. 38), one row per point
    return basis, projected, values.to(centred.dtype)


@functools.cache
def _blas_threads():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def top_eigenpairs(matrix: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest eigenvalues (descending, clamped at 0) and their eigenvectors of a symmetric matrix; on the CPU
    LAPACK computes only those k (scipy's ``subset_by_index``) rather than the whole decomposition.

    scipy's OpenBLAS runs on one thread here: a K x K matrix (K clients) is too small to gain from more, and its
    threads, left spinning after the call, take the cores from torch's threads for a scheduler tick
    (``fedrun-table fsvrg_table1`` times the server's part of a round)."""
    n = len(matrix)
    if matrix.device.type == "cpu":
        import scipy.linalg

        with _blas_threads().limit(limits=1, user_api="blas"):
            values, vectors = scipy.linalg.eigh(matrix.numpy(), subset_by_index=[n - k, n - 1])
        values, vectors = torch.from_numpy(values), torch.from_numpy(vectors)
    else:
        values, vectors = torch.linalg.eigh(matrix)
        values, vectors = values[n - k :], vectors[:, n - k :]
    return values.flip(0).clamp_min(0), vectors.flip(1)


def farthest_point_seeds(points: torch.Tensor, count: int) -> torch.Tensor:
    """``count`` seeds: the point farthest from the mean, then repeatedly the point farthest from those chosen."""
    chosen = [int((points - points.mean(dim=0)).norm(dim=1).argmax())]
    while len(chosen) < min(count, len(points)):
        distance = torch.cdist(points, points[chosen]).min(dim=1).values
        chosen.append(int(distance.argmax()))
    seeds = points[chosen]
    if len(seeds) < count:
        seeds = torch.cat([seeds, seeds[:1].expand(count - len(seeds), -1)])
    return seeds


def group_means(points: torch.Tensor, assign: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    """Each group's mean point (eq. 41); a group with no point keeps its entry of ``centres``."""
    counts = torch.bincount(assign, minlength=len(centres)).to(points.dtype)
    sums = torch.zeros_like(centres).index_add_(0, assign, points)
    held = counts > 0
    means = centres.clone()
    means[held] = sums[held] / counts[held, None]
    return means


def spread(points: torch.Tensor, centres: torch.Tensor, assign: torch.Tensor) -> float:
    """Eq. 42/56's sum: each point's distance to its group's centre."""
    return float((points - centres[assign]).norm(dim=1).sum())


def kmeans(points: torch.Tensor, seeds: torch.Tensor, eps: float = 1e-4, max_iter: int = 100
           ) -> tuple[torch.Tensor, torch.Tensor, int, float]:
    """Lloyd's iterations of eqs. 40-41 from ``seeds``: (centres, assignment, iterations, eq. 42 sum).

    Stops when sum_c sum_{i in c} ||p_i - centre_c|| <= eps (eq. 42/56), at a fixed point of the assignment, or
    after ``max_iter`` iterations. A group left empty keeps its centre."""
    centres = seeds
    assign = None
    total = float("inf")
    for it in range(1, max_iter + 1):
        new_assign = torch.cdist(points, centres).argmin(dim=1)  # eq. 40 (ties: the lowest c)
        centres = group_means(points, new_assign, centres)  # eq. 41
        total = spread(points, centres, new_assign)  # eq. 42
        if total <= eps or (assign is not None and torch.equal(new_assign, assign)):
            return centres, new_assign, it, total
        assign = new_assign
    return centres, assign, max_iter, total


def accelerate(models: torch.Tensor, anchors: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step: int,
               alpha: float, beta1: float, beta2: float, eps: float, form: str = "adam"
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eqs. 62-64 for every model (rows): new moments and the accelerated models; ``step`` is r >= 1.

    ``paper``: eq. 64 as printed, w - alpha (1 - beta1) sqrt((1 - beta2^r) / (1 - beta2)) m / sqrt(v + eps);
    ``adam``: Adam's bias-corrected step w - alpha m_hat / (sqrt(v_hat) + eps) on the same moments."""
    m = beta1 * m + (1 - beta1) * anchors
    v = beta2 * v + (1 - beta2) * anchors**2
    if form == "paper":
        factor = alpha * (1 - beta1) * ((1 - beta2**step) / (1 - beta2)) ** 0.5
        return models - factor * m / torch.sqrt(v + eps), m, v
    if form == "adam":
        m_hat, v_hat = m / (1 - beta1**step), v / (1 - beta2**step)
        return models - alpha * m_hat / (torch.sqrt(v_hat) + eps), m, v
    raise ValueError(f"algo.bank.form={form!r}: must be one of {FORMS}")


class ModelBank(StatefulPart):
    """The server's C diversified global models, their moments and which model each client last preferred
    (``algo/bank``; Zhao et al.). Its ``apply`` owns the algorithm's round once the bank has started (after
    ``threshold`` one-model rounds), ``init`` gives its state before round 1 and ``start`` the C copies of the
    global model it begins with. ``kind``: ``none`` (one model: plain FSVRG or any other algorithm), ``ma`` or
    ``ga``. Each client prefers the model of least local objective, its loss plus (weight_decay / 2) ||w||^2
    (eq. 18):

    >>> import torch
    >>> from fedrun.algorithms.schema import make
    >>> bank = make("bank", "ma", models=2, threshold=1)
    >>> models = bank.start(torch.zeros(2), num_clients=3)["models"] + torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    >>> losses = torch.tensor([[0.5, 0.2], [0.3, 0.9], [0.4, 0.4]])  # 3 clients' losses at the 2 models
    >>> bank.preferences(losses, models, weight_decay=0.1)
    tensor([1, 0, 0])
    """

    name = "none"
    preferences = staticmethod(preferences)  # eq. 18, which the evaluation of a bank's models reads too

    def __init__(self, kind: str, models: int, threshold: int, alpha_g: float,
                 beta1: float, beta2: float, eps: float, kmeans_eps: float,
                 kmeans_max_iter: int, center_seeds: bool, ga_step: float | None,
                 form: str, grouping: str):
        self.grouping = grouping
        self.name, self.count, self.threshold = kind, int(models), int(threshold)
        self.alpha_g, self.beta1, self.beta2, self.eps = float(alpha_g), float(beta1), float(beta2), float(eps)
        self.kmeans_eps, self.kmeans_max_iter, self.center_seeds = float(kmeans_eps), int(kmeans_max_iter), center_seeds
        self.ga_step, self.form = ga_step, form

    @property
    def reads_each_update(self) -> bool:
        """Its rounds place each client's update on the client's preferred model."""
        return self.name != "none"

    def init(self, params=None, num_clients: int = 0) -> State:
        """No models until the threshold has passed (``models``, ``m``, ``v``: (C, d) then), r of eq. 64
        (``accelerated``) and each client's preferred model (``preferences``, -1 until it has taken part)."""
        return {"models": None, "m": None, "v": None, "accelerated": 0, "preferences": []}

    def apply(self, algo, server, tools, rnd: int) -> tuple:
        """The algorithm's round ``rnd`` (``fedrun.algorithms.round``): up to the threshold, the composed one-model
        round of FSVRG; after it, a round of MA-/GA-FSVRG (Procedures 1-4) from the run's ``server`` state (a
        :class:`~fedrun.engine.run.state.ServerState`, read only) with the local rule ``algo.local`` (FSVRG's steps and
        A_r), the round's clients, plans, training and full-batch passes from ``tools``. Returns the new server state
        (the bank's first model is its global model) and the round's output."""
        if rnd <= self.threshold:
            return composed_round(algo, server, tools, rnd)
        bank, plans, weights, result, down, up, diagnostics = self.bank_round(algo.local, server, tools, rnd)
        new = replace(server, bank=bank, params=bank["models"][0],
                      clients=with_client_states(server.clients, plans, result))
        return new, RoundOutput(rnd, plans, weights, result, down, up, diagnostics)

    def bank_round(self, local, server, tools, rnd: int) -> tuple:
        """Procedures 1-4: (new bank state, plans, weights, cohort result, bytes down, bytes up, diagnostics)."""
        state = server.bank
        if state["models"] is None:
            state = self.start(server.params, tools.num_clients)
        models = state["models"]
        cohort = tools.participants(server, rnd).ids
        plans = tools.plans(server, cohort, rnd)
        wd = tools.weight_decay
        sizes = torch.tensor([float(p.num_samples) for p in plans], device=models.device, dtype=models.dtype)
        weights = sizes / sizes.sum()
        server_s = 0.0
        losses, grads = tools.full_losses_and_gradients(server, models, cohort)  # the clients' passes at each model
        prefer = preferences(losses, models, wd)  # eq. 18
        started = time.perf_counter()
        anchors = torch.einsum("k,kcd->cd", weights, grads)  # eq. 17 (the loss's; FSVRG adds the L2 term)
        server_s += time.perf_counter() - started
        states = [{**server.clients[int(c)], "start": models[j], "anchor": anchors[j]}
                  for c, j in zip(cohort, prefer.tolist())]
        ctx = ClientContext(rnd, models[0], server.buffers, tools.lr(rnd), tools.momentum, wd)
        result, _ = tools.train(local, ctx, plans, states)
        chosen = list(state["preferences"])
        for c, j in zip(cohort, prefer.tolist()):
            chosen[int(c)] = j
        trained = models[prefer] + result.updates
        a_r = local.a_r(server.local, result.uploads, len(plans))  # eq. 59
        started = time.perf_counter()
        if self.name == "ga":
            _, at_trained = tools.full_losses_and_gradients(server, trained, cohort, own=True)
            started = time.perf_counter()
            step = self.ga_step if self.ga_step is not None else float(
                np.mean([tools.lr(rnd) / p.num_samples for p in plans]) * np.mean([p.tau for p in plans]))
            moved, assign, info = self.regroup(models, at_trained[:, 0] + wd * trained, anchors + wd * models, a_r,
                                               step, prefer)
        else:
            moved, assign, info = self.regroup(models, trained, models, a_r, prefer=prefer)  # eqs. 26-43, 60
        server_s += time.perf_counter() - started
        _, at_moved = tools.full_losses_and_gradients(server, moved, cohort)  # eq. 61: their passes at the new models
        started = time.perf_counter()
        state = self.accelerate_to({**state, "preferences": chosen}, moved,
                                   torch.einsum("k,kcd->cd", weights, at_moved) + wd * moved)  # eqs. 61-64
        server_s += time.perf_counter() - started
        diagnostics = {"server_s": server_s, **info,
                       "group_is_preferred": float((assign == prefer).double().mean()),  # grouping agrees with eq. 18
                       **{f"group{c}_size": n for c, n in enumerate(self.group_sizes(assign))},
                       **{f"prefer{c}": n for c, n in enumerate(self.group_sizes(prefer))}}
        k, model_bytes = len(plans), tools.model_bytes
        down = k * model_bytes * self.count * 2 + k * model_bytes  # the models, the new models (eq. 61), an anchor
        up = k * model_bytes * self.count * 2 + k * model_bytes * (2 if self.name == "ga" else 1)
        return state, plans, weights, result, down, up, diagnostics

    def start(self, params: torch.Tensor, num_clients: int) -> State:
        """Round T + 1: C copies of the single model (they diverge at the first grouping)."""
        models = params[None].repeat(self.count, 1)
        return {"models": models, "m": torch.zeros_like(models), "v": torch.zeros_like(models), "accelerated": 0,
                "preferences": [-1] * num_clients}

    def group(self, points: torch.Tensor, seeds: torch.Tensor, prefer: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """Procedure 2/3 steps 3-14 on the round's points (trained models or gradients, rows) with the previous
        models' (anchors') ``seeds``: (centres mapped back to the full space, assignment, U, diagnostics).
        ``prefer`` (each point's preferred model) is the assignment under ``grouping=preference``.

        Points whose squared norms are not finite (the clients' training diverged: NaN, or too large for the Gram
        matrix) give centres that are not finite either, so the round ends with models the run records as diverged
        rather than with an error in the eigensolver."""
        centred, mean = mean_centre(points)
        if not bool(torch.isfinite(centred.square().sum(dim=1)).all()):
            nan = torch.full((self.count, points.shape[1]), float("nan"), dtype=points.dtype, device=points.device)
            return (nan, torch.zeros(len(points), dtype=torch.long, device=points.device), nan.T[:, :0],
                    {"kmeans_iterations": 0, "kmeans_sum": float("nan")})
        basis, projected, values = principal_subspace(centred, self.count - 1)
        seed_points = (seeds - mean if self.center_seeds else seeds) @ basis  # eqs. 39, 53
        if torch.allclose(seed_points, seed_points[:1].expand_as(seed_points)):
            seed_points = farthest_point_seeds(projected, self.count)  # first grouping: coinciding models
        if self.grouping == "preference":
            assign, iterations = prefer, 0
            centres = group_means(projected, assign, seed_points)
            total = spread(projected, centres, assign)
        else:
            centres, assign, iterations, total = kmeans(projected, seed_points, self.kmeans_eps, self.kmeans_max_iter)
        back = centres @ basis.T + mean  # eqs. 43, 57 (inside A_r)
        return back, assign, basis, {"kmeans_iterations": iterations, "kmeans_sum": total}

    def regroup(self, models: torch.Tensor, points: torch.Tensor, seeds: torch.Tensor, a_r: torch.Tensor,
                ga_step: float = 0.0, prefer: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """The grouping and eq. 60: each of the C ``models`` moved by A_r toward its group's target, (moved models,
        assignment, diagnostics). MA: the target is the group's centre (eq. 43); GA: the model moved against its
        group's gradient by ``ga_step`` (eqs. 57-58)."""
        centres, assign, _, info = self.group(points, seeds, prefer)
        targets = models - ga_step * a_r * centres if self.name == "ga" else centres
        return models + a_r * (targets - models), assign, info

    def accelerate_to(self, state: State, moved: torch.Tensor, anchors: torch.Tensor) -> State:
        """Procedure 4's step (eqs. 62-64) from the moved models with their anchor gradients (eq. 61): the state
        with the accelerated models and their moments."""
        step = state["accelerated"] + 1
        models, m, v = accelerate(moved, anchors, state["m"], state["v"], step, self.alpha_g, self.beta1, self.beta2,
                                  self.eps, self.form)
        return {**state, "models": models, "m": m, "v": v, "accelerated": step}

    def group_sizes(self, assign: torch.Tensor) -> list[int]:
        return np.bincount(assign.cpu().numpy(), minlength=self.count).tolist()


@register
@dataclass
class NoBankConfig(PartConfig):
    """One global model."""

    part, target, options = "bank", "fedrun.algorithms.bank.bank.ModelBank", ("none",)
    name: str = "none"

    def arguments(self) -> dict[str, Any]:  # a bank of one model: the bank's settings are never read
        return {"kind": "none", "ga_step": None} | {f.name: f.default for f in dataclasses.fields(BankConfig)
                                                     if f.name != "name"}


@register
@dataclass
class BankConfig(PartConfig):
    """MA-/GA-FSVRG's C diversified global models (Zhao et al.)."""

    part, target, options = "bank", "fedrun.algorithms.bank.bank.ModelBank", ("ma",)
    name: str = "ma"
    models: int = 4  # C, the number of diversified global models
    threshold: int = 4  # T: rounds 1..T train one model (plain FSVRG), the bank starts at round T + 1
    alpha_g: float = 0.02  # alpha_g^0 of eq. 64
    beta1: float = 0.0  # first-moment decay (eq. 62); the MNIST figures use 0.0, CIFAR-10 0.9
    beta2: float = 0.999  # second-moment decay (eq. 63)
    eps: float = 1.0e-8  # epsilon of eq. 64
    form: str = "adam"  # adam: Adam's bias-corrected step on eqs. 62-63's moments | paper: eq. 64 as printed
    kmeans_eps: float = 1.0e-4  # the eq. 42 stopping sum
    kmeans_max_iter: int = 100
    center_seeds: bool = False  # eqs. 39/53 as printed (anchors projected uncentred); true: centred like the clients
    grouping: str = "kmeans"  # kmeans (Zhao et al.) | preference: each client grouped with the model it preferred

    def arguments(self) -> dict[str, Any]:
        return {"kind": self.name, "ga_step": None, **super().arguments()}  # MA has no GA step

    def rules(self) -> Iterator[Rule]:
        yield (is_int(self.models) and self.models >= 1, "models",
               "must be an integer >= 1 (C; 4 in Zhao et al.'s MNIST runs)", DEFAULT)
        yield is_int(self.threshold) and self.threshold >= 0, "threshold", "must be an integer >= 0", DEFAULT
        yield (is_number(self.alpha_g) and self.alpha_g >= 0, "alpha_g", "must be >= 0 (0: no central acceleration)",
               DEFAULT)
        yield is_unit(self.beta1), "beta1", "must be in [0, 1)", DEFAULT
        yield is_unit(self.beta2), "beta2", "must be in [0, 1)", DEFAULT
        yield is_number(self.eps) and self.eps > 0, "eps", "must be > 0", "1e-8"
        yield self.form in FORMS, "form", f"must be one of {FORMS}", DEFAULT
        yield is_number(self.kmeans_eps) and self.kmeans_eps > 0, "kmeans_eps", "must be > 0", "1e-4"
        yield (is_int(self.kmeans_max_iter) and self.kmeans_max_iter >= 1, "kmeans_max_iter",
               "must be an integer >= 1", DEFAULT)
        yield self.grouping in GROUPINGS, "grouping", f"must be one of {GROUPINGS}", DEFAULT


@register
@dataclass
class GABankConfig(BankConfig):
    part, target, options = "bank", "fedrun.algorithms.bank.bank.ModelBank", ("ga",)
    name: str = "ga"
    ga_step: Optional[float] = None  # eq. 58's step; null: the clients' mean alpha_l / n_i x mean local steps

    def rules(self) -> Iterator[Rule]:
        yield from super().rules()
        yield (self.ga_step is None or (is_number(self.ga_step) and self.ga_step > 0), "ga_step",
               "must be null (from the clients' steps) or > 0", DEFAULT)

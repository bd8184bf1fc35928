"""How the training set is split over clients. Every scheme returns one index array per client.

All randomness comes from the ``rng`` passed in (seeded from the run's seed), so a partition is reproducible.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedrun.config.schema import PARTITIONS
from fedrun.errors import ConfigError

if TYPE_CHECKING:
    from fedrun.model.functional import FunctionalModel


@dataclass
class Partition:
    """Client ``i`` holds training samples ``indices[i]``; ``layout`` records how it was made."""

    indices: list[np.ndarray]
    layout: str

    @property
    def sizes(self) -> np.ndarray:
        return np.array([len(ix) for ix in self.indices], dtype=np.int64)

    def label_histograms(self, labels: np.ndarray, num_classes: int) -> np.ndarray:
        return np.stack([np.bincount(labels[ix], minlength=num_classes) for ix in self.indices])

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for ix in self.indices:
            h.update(np.int64(len(ix)).tobytes())
            h.update(np.ascontiguousarray(ix, dtype=np.int64).tobytes())
        return h.hexdigest()[:16]

    def summary(self, labels: np.ndarray, num_classes: int) -> str:
        s = self.sizes
        classes = (self.label_histograms(labels, num_classes) > 0).sum(axis=1)
        return (f"partition {self.layout}: {len(s)} clients, {int(s.sum())} samples, size min/median/max "
                f"{int(s.min())}/{int(np.median(s))}/{int(s.max())}, classes per client "
                f"min/mean/max {int(classes.min())}/{classes.mean():.1f}/{int(classes.max())}")

    def to_json(self, labels: np.ndarray, num_classes: int) -> dict:
        hist = self.label_histograms(labels, num_classes)
        return {
            "layout": self.layout,
            "num_clients": len(self.indices),
            "num_samples": int(self.sizes.sum()),
            "fingerprint": self.fingerprint(),
            "clients": [{"id": i, "num_samples": int(n), "label_counts": h.tolist()}
                        for i, (n, h) in enumerate(zip(self.sizes, hist))],
        }


def iid(labels: np.ndarray, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [np.sort(ix) for ix in np.array_split(rng.permutation(len(labels)), n)]


def dirichlet(labels: np.ndarray, n: int, rng: np.random.Generator, alpha: float, min_size: int = 1):
    """Label skew without replacement: each class is split over clients in proportions ~ Dir(alpha * 1_n).

    One draw per class, O(samples) work: no retry loop, so 1000 clients and alpha = 0.01 cannot hang. Clients left
    with fewer than ``min_size`` samples get them from the largest clients (random samples of theirs), a bounded
    repair that keeps every sample on exactly one client.
    """
    owner = np.empty(len(labels), dtype=np.int64)
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        props = rng.dirichlet(np.full(n, alpha))
        cuts = np.floor(np.cumsum(props)[:-1] * len(idx)).astype(np.int64)
        owner[idx] = np.repeat(np.arange(n), np.diff(np.concatenate([[0], cuts, [len(idx)]])))
    if min_size * n > len(labels):
        raise ConfigError([f"partition.min_size={min_size} x fl.num_clients={n} exceeds the {len(labels)} samples"])
    sizes = np.bincount(owner, minlength=n)
    for client in np.flatnonzero(sizes < min_size):
        need = min_size - sizes[client]
        while need > 0:
            donor = int(np.argmax(sizes))
            take = min(need, sizes[donor] - min_size)
            moved = rng.choice(np.flatnonzero(owner == donor), size=take, replace=False)
            owner[moved] = client
            sizes[donor] -= take
            sizes[client] += take
            need -= take
    order = np.argsort(owner, kind="stable")
    return np.split(order, np.cumsum(np.bincount(owner, minlength=n))[:-1])


def dirichlet_resample(labels: np.ndarray, n: int, rng: np.random.Generator, alpha: float, client_fraction: float):
    """GIFT Sec. 2.2: each client draws ``client_fraction`` of the dataset *with replacement*, class mix
    ~ Dir(alpha)."""
    classes = np.unique(labels)
    by_class = [np.flatnonzero(labels == c) for c in classes]
    size = max(1, int(round(client_fraction * len(labels))))
    out = []
    for _ in range(n):
        counts = rng.multinomial(size, rng.dirichlet(np.full(len(classes), alpha)))
        out.append(np.sort(np.concatenate([rng.choice(ix, k, replace=True) for ix, k in zip(by_class, counts)])))
    return out


def classes_per_client(labels: np.ndarray, n: int, rng: np.random.Generator, k) -> list[np.ndarray]:
    """Each client holds ``k`` classes (an int, or [lo, hi] for a per-client draw). Classes are handed to each client
    least-used first (random among ties), so all are covered when n*k >= classes; a class's samples are split evenly
    over the clients that hold it."""
    classes = np.unique(labels)
    lo, hi = (int(k), int(k)) if np.isscalar(k) else (int(k[0]), int(k[1]))
    usage = np.zeros(len(classes), dtype=np.int64)
    held = []
    for _ in range(n):
        ki = int(rng.integers(lo, hi + 1))
        pick = np.lexsort((rng.random(len(classes)), usage))[:ki]
        usage[pick] += 1
        held.append(pick)
    holders = [[i for i, h in enumerate(held) if c in h] for c in range(len(classes))]
    parts: list[list[np.ndarray]] = [[] for _ in range(n)]
    for c, owners in enumerate(holders):
        if not owners:
            continue
        idx = rng.permutation(np.flatnonzero(labels == classes[c]))
        for owner, chunk in zip(owners, np.array_split(idx, len(owners))):
            parts[owner].append(chunk)
    return [np.sort(np.concatenate(p)) if p else np.empty(0, np.int64) for p in parts]


def bherd_case2(labels: np.ndarray, n: int, rng: np.random.Generator, label_deal: str = "blocks",
                split: str = "samples", task_labels: np.ndarray | None = None):
    """BHerd Sec. V-A3 Case 2 (NOTES.md): the first half of the data IID over the first ceil(n/2) clients, the
    second half by label over the others, so that each of them holds its own labels.

    ``split`` says what "the first half of data samples" is: ``samples``, half of the shuffled samples (every label
    in both halves), or ``labels``, the samples whose label lies in the lower half of the label range (Wang et al.'s
    Case 4, JSAC 2019, the prototype BHerd builds on: digits 0-4 IID over clients 1-3, digits 5-9 by label).
    ``label_deal`` says how the second half's labels are dealt: ``blocks`` (contiguous label ranges),
    ``round_robin``, or ``task``: by the label the model predicts (``task_labels``, e.g. even/odd for the SVM), so
    with two such clients one holds every even digit and the other every odd one. With more task labels than
    clients they are dealt round robin; with more clients than task labels, the clients take the task labels in
    turn and share a label's samples evenly."""
    n_iid = math.ceil(n / 2)
    if n == n_iid:
        return iid(labels, n, rng)
    order = rng.permutation(len(labels))
    classes = np.unique(labels)
    if split == "samples":
        first, second = order[: len(order) // 2], order[len(order) // 2 :]
    elif split == "labels":
        low = labels[order] < (classes.min() + classes.max()) / 2
        first, second = order[low], order[~low]
    else:
        raise ConfigError([f"partition.split={split!r}: use samples or labels"])
    out = [np.sort(ix) for ix in np.array_split(first, n_iid)]
    m = n - n_iid
    if label_deal == "task":
        task = labels if task_labels is None else task_labels
        kinds = np.unique(task[second])
        owners = [[j for j in range(m) if j % len(kinds) == t] if len(kinds) < m else [t % m]
                  for t in range(len(kinds))]
        parts: list[list[np.ndarray]] = [[] for _ in range(m)]
        for t, kind in enumerate(kinds):
            for j, chunk in zip(owners[t], np.array_split(second[task[second] == kind], len(owners[t]))):
                parts[j].append(chunk)
        return out + [np.sort(np.concatenate(p)) if p else np.empty(0, np.int64) for p in parts]
    held = np.unique(labels[second])
    if label_deal == "blocks":
        groups = np.array_split(held, m)
    elif label_deal == "round_robin":
        groups = [held[j::m] for j in range(m)]
    else:
        raise ConfigError([f"partition.label_deal={label_deal!r}: use blocks, round_robin or task"])
    return out + [np.sort(second[np.isin(labels[second], g)]) for g in groups]


def natural(users: np.ndarray | None, n: int) -> list[np.ndarray]:
    """Datasets that come with users (LEAF, FedProx synthetic): user j is client j; the first n users are used."""
    if users is None:
        raise ConfigError(["partition=natural needs a dataset with users (e.g. data=leaf_synthetic); "
                           "this dataset has none: use partition=dirichlet or iid"])
    ids = np.unique(users)
    if n > len(ids):
        raise ConfigError([f"fl.num_clients={n} exceeds the {len(ids)} users of this dataset under "
                           f"partition=natural: set fl.num_clients<={len(ids)}"])
    return [np.flatnonzero(users == u) for u in ids[:n]]


def make_partition(cfg, labels: np.ndarray, users: np.ndarray | None, num_clients: int, seed: int,
                   task_labels: np.ndarray | None = None) -> Partition:
    """Build the partition named by ``cfg.name`` with its parameters; the seed makes it reproducible.
    ``task_labels``: each sample's class as the model predicts it, when that is not its label (the even/odd SVM)."""
    rng = np.random.default_rng([seed, 0x9A27])
    name = cfg.name
    if name in ("iid", "case1"):
        return Partition(iid(labels, num_clients, rng), name)
    if name == "dirichlet":
        return Partition(dirichlet(labels, num_clients, rng, cfg.alpha, cfg.min_size),
                         f"dirichlet(alpha={cfg.alpha})")
    if name == "dirichlet_resample":
        return Partition(dirichlet_resample(labels, num_clients, rng, cfg.alpha, cfg.client_fraction),
                         f"dirichlet_resample(alpha={cfg.alpha}, client_fraction={cfg.client_fraction})")
    if name == "classes":
        return Partition(classes_per_client(labels, num_clients, rng, cfg.classes_per_client),
                         f"classes(k={cfg.classes_per_client})")
    if name in ("case2", "case3"):
        deal, split = cfg.label_deal, cfg.split
        layout = f"case2(split={split}, label_deal={deal})" + (" [case3 is an alias of case2]" if name == "case3"
                                                               else "")
        return Partition(bherd_case2(labels, num_clients, rng, deal, split, task_labels), layout)
    if name == "natural":
        return Partition(natural(users, num_clients), "natural")
    raise ConfigError([f"partition={name!r} is unknown; use one of {PARTITIONS}"])



def held_out(partition: Partition, fraction: float, seed: int) -> tuple[Partition, list[np.ndarray] | None]:
    """``eval.holdout``: each client keeps floor(fraction n_i) of its samples (drawn from the seed) out of training
    as its own test samples, so that a test sample has an owner (Zhao et al.'s bank scored by its owners' preferences).
    Returns the partition of the training samples left and the held-out samples per client (None when 0)."""
    if fraction <= 0:
        return partition, None
    rng = np.random.default_rng([seed, 0x401D])
    kept, held = [], []
    for ix in partition.indices:
        order = rng.permutation(len(ix))
        cut = int(fraction * len(ix))
        held.append(np.sort(ix[order[:cut]]))
        kept.append(np.sort(ix[order[cut:]]))
    return Partition(kept, f"{partition.layout}, {fraction:g} of each client held out"), held


def refuse_single_sample_batches(model: FunctionalModel, params: torch.Tensor, buffers: dict, x: torch.Tensor,
                                 partition: Partition, model_name: str) -> None:
    """A client holding one sample trains on batches of one, which a BatchNorm layer cannot normalise in training mode
    when it sees a single value per channel (1x1 maps; torch raises mid-round): refuse that before any work."""
    single = [c for c, ix in enumerate(partition.indices) if len(ix) < 2]
    if not single or not model.buffer_names:
        return
    model.set_training(True)
    try:
        with torch.no_grad():
            model.forward(params, {k: v.clone() for k, v in buffers.items()}, x[:1])
    except ValueError as e:
        raise ConfigError([f"model={model_name} cannot train on a batch of one sample ({e}), but client(s) "
                           f"{single[:10]} hold a single sample under {partition.layout}. Fix: "
                           f"partition.min_size=2 (or more), or fewer clients"]) from None

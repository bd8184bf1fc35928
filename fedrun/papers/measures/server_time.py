"""Zhao et al. Table I: the central server's computation per round for MA-FSVRG and GA-FSVRG with 2-8 models and
10-40% of 1,000 machines (the CIFAR-10 setting: softmax regression on 729 HOG features, d = 7,300 parameters),
timed with fedrun's own server code (fedrun-table fsvrg_table1).

The server's part of a round after the threshold (``ModelBank``: mean-centring, the Gram eigendecomposition,
projection, k-means and the map back; eq. 59-60's scaling; eq. 17/61's anchor averages; GA's step against the group
gradients; the acceleration of eqs. 62-64) runs on inputs of the setting's shapes: the round's clients' trained models
(MA) or full gradients (GA) drawn around C well-separated centres, so that k-means has groups to find. The clients'
own work is not the server's and is not counted, as in the paper. Table I's seconds are a run's total; fedrun's is
the round time x ``rounds`` (50, the preset's length).
"""

from __future__ import annotations

import time

import torch

ALGOS = {"mafsvrg": "ma", "gafsvrg": "ga"}


def server_round(bank, state: dict, points: torch.Tensor, weights: torch.Tensor, grads: torch.Tensor,
                 new_grads: torch.Tensor, a_r: torch.Tensor) -> dict:
    """The server's computation of one bank round (ModelBank.run_round without the clients' work): the new state."""
    anchors = torch.einsum("k,kcd->cd", weights, grads)  # eq. 17
    models = state["models"]
    moved, _, _ = bank.regroup(models, points, anchors if bank.name == "ga" else models, a_r, 0.01)  # eqs. 26-60
    return bank.accelerate_to(state, moved, torch.einsum("k,kcd->cd", weights, new_grads))  # eqs. 61-64


def round_seconds(kind: str, models: int, clients: int, repeats: int, machines: int, dim: int,
                  seed: int = 0) -> list[float]:
    """Seconds of the server's part of each of ``repeats`` rounds (after one untimed round)."""
    from fedrun.algorithms.schema import make

    g = torch.Generator().manual_seed(seed)
    bank = make("bank", kind, models=models)
    centres = 3 * torch.randn(models, dim, generator=g)
    state = bank.start(torch.zeros(dim), machines) | {"models": centres + torch.randn(models, dim, generator=g)}
    points = centres[torch.arange(clients) % models] + torch.randn(clients, dim, generator=g)
    grads, new_grads = torch.randn(clients, models, dim, generator=g), torch.randn(clients, models, dim, generator=g)
    weights = torch.full((clients,), 1.0 / clients)
    a_r = clients / torch.randint(machines // 2, machines + 1, (dim,), generator=g).float()
    state = server_round(bank, state, points, weights, grads, new_grads, a_r)  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        state = server_round(bank, state, points, weights, grads, new_grads, a_r)
        times.append(time.perf_counter() - started)
    return times


def measure(rounds: int = 50, repeats: int = 5, machines: int = 1000, features: int = 729, classes: int = 10,
            models: tuple[int, ...] = (2, 4, 6, 8), shares: tuple[int, ...] = (10, 20, 30, 40)) -> list[dict]:
    """One row per (algorithm, models, clients per round, repeat): the server's seconds for that round and for a run
    of ``rounds`` such rounds."""
    dim = features * classes + classes
    rows = []
    for algo, kind in ALGOS.items():
        for c in models:
            for share in shares:
                clients = machines * share // 100
                for repeat, s in enumerate(round_seconds(kind, c, clients, repeats, machines, dim)):
                    rows.append({"algo": algo, "algo.bank.models": c, "fl.clients_per_round": clients,
                                 "seed": repeat, "round_s": s, "total_s": s * rounds})
    return rows

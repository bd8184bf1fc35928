"""Who trains in a round, for how many steps, on which minibatches.

Every random choice here is a pure function of (seed, round, client), independent of the algorithm, so runs of
different algorithms with the same seed sample the same clients and, where they order their batches alike
(``fl.reshuffle``), see the same minibatches (paired comparisons).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from fedrun.config.schema import DELAYS

_SAMPLE, _BATCHES, _DELAYS = 0x5A3D, 0xB47C, 0xD31A


@dataclass
class ClientPlan:
    """Client ``id`` takes ``tau`` steps; step k uses training samples ``batches[k]`` (global indices)."""

    id: int
    num_samples: int
    tau: int
    batches: torch.Tensor  # (tau, b) int64


@dataclass
class Participants:
    """A round's reporting clients ``ids`` (sorted); when the last of GIFT's earliest reporters reported
    (``last_report``, 0 otherwise); how many were sampled (``sampled``: their model copies share the server's link;
    None: as many as report); how long the server waited in a round none reported (``wait_s``); and what
    metrics.csv logs of the round's devices (nothing unless availability, dropouts or over-selection are on)."""

    ids: np.ndarray
    last_report: float = 0.0
    sampled: int | None = None
    wait_s: float = 0.0
    logged: dict[str, float] = field(default_factory=dict)


def sample_clients(num_clients: int, per_round: int, seed: int, round_: int, among: np.ndarray | None = None
                   ) -> np.ndarray:
    """C of the N clients (or of the sorted ids ``among``, the online ones) without replacement, sorted; all of
    them when C reaches their number."""
    pool = np.arange(num_clients) if among is None else among
    if per_round >= len(pool):
        return pool.copy()
    rng = np.random.default_rng([seed, _SAMPLE, round_])
    return np.sort(pool[rng.choice(len(pool), size=per_round, replace=False)])


def poisson_clients(num_clients: int, rate: float, seed: int, round_: int) -> np.ndarray:
    """Each client independently with probability ``rate`` (Poisson sampling; possibly none), sorted."""
    rng = np.random.default_rng([seed, _SAMPLE, round_])
    return np.flatnonzero(rng.random(num_clients) < rate)


def report_delays(num_clients: int, seed: int, round_: int, dist: str = "exponential", scale: float = 1.0
                  ) -> np.ndarray:
    """Each client's report delay (seconds) this round: exponential with mean ``scale``, uniform on [0, 2 scale], or
    lognormal with median ``scale`` (sigma 1)."""
    rng = np.random.default_rng([seed, _DELAYS, round_])
    if dist == "exponential":
        return rng.exponential(scale, num_clients)
    if dist == "uniform":
        return rng.uniform(0, 2 * scale, num_clients)
    if dist == "lognormal":
        return scale * rng.lognormal(0.0, 1.0, num_clients)
    raise ValueError(f"participation.delay={dist!r}: must be one of {DELAYS}")


def earliest_reporters(delays: np.ndarray, fraction: float) -> np.ndarray:
    """GIFT Sec. 6.1: the server keeps the ceil(fraction N) clients that report first (ties by id), sorted by id."""
    keep = math.ceil(fraction * len(delays) - 1e-9)
    return np.sort(np.argsort(delays, kind="stable")[:keep])


def plan_client(client: int, indices: np.ndarray, tau: int, batch_size: int, seed: int, round_: int,
                reshuffle: bool, device) -> ClientPlan:
    """``tau`` consecutive minibatches of size min(B, n_i) from a permutation of the client's data, continued into
    the next epoch's permutation when tau * B exceeds n_i. With ``reshuffle`` each (round, epoch) has a fresh
    permutation; without it the client keeps one fixed order, the same every round (BHerd's non-RR protocol)."""
    batches = client_batches(client, indices, tau, batch_size, seed, round_, reshuffle)
    return ClientPlan(client, len(indices), tau, torch.from_numpy(batches).to(device))


def plan_cohort(clients, indices: list[np.ndarray], taus, batch_size: int, seed: int, round_: int, reshuffle: bool,
                device) -> list[ClientPlan]:
    """:func:`plan_client` for each of ``clients`` (with its sample ``indices`` and ``taus``), the same plans, their
    minibatches moved to ``device`` in one copy: a copy from host memory waits for the device's queued work, so one
    per client would make a GPU round's start wait as many times."""
    tables = [client_batches(c, indices[c], tau, batch_size, seed, round_, reshuffle) for c, tau in zip(clients, taus)]
    if not tables:
        return []
    moved = torch.from_numpy(np.concatenate([t.reshape(-1) for t in tables])).to(device)
    views = moved.split([t.size for t in tables])
    return [ClientPlan(c, len(indices[c]), tau, v.view(t.shape))
            for c, tau, t, v in zip(clients, taus, tables, views)]


def client_batches(client: int, indices: np.ndarray, tau: int, batch_size: int, seed: int, round_: int,
                   reshuffle: bool) -> np.ndarray:
    """The (tau, b) global sample indices of :func:`plan_client`'s minibatches."""
    n = len(indices)
    b = min(batch_size, n)
    epochs_needed = math.ceil(tau * b / n)
    rng = np.random.default_rng([seed, _BATCHES, round_, client] if reshuffle else [seed, _BATCHES, client])
    if reshuffle:
        order = np.concatenate([rng.permutation(n) for _ in range(epochs_needed)])
    else:
        order = np.tile(rng.permutation(n), epochs_needed)
    return indices[order[: tau * b]].reshape(tau, b)

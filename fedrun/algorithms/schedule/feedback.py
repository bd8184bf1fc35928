"""Synchronisation schedules: how many local steps each client takes in a round, decided from what the server saw.

A schedule's settings are its attributes and what rounds change is its state (``init`` -> state, a dict of plain
values that a checkpoint saves). It answers ``local_steps(state, n_i, E, B)`` when a round is planned and
``observe(state, feedback) -> (new state, what it logs)`` after the round's aggregation; neither changes the state it
is given. What each reads from :class:`RoundFeedback` is what its paper needs:
``fixed`` nothing (tau_i = floor(E n_i / B)); GIFT only the updates the clients sent (no losses, no data
statistics); AdaComm the training loss at the new global model; AFL the clients' gradients and losses at their last
local iterate and at the new global model, and the time model's per-step and per-synchronisation times.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fedrun.algorithms.base import State
from fedrun.process.lazy import torch


@dataclass
class RoundFeedback:
    """What the server can learn after a round. ``probed`` holds, for each point a schedule asked for (its
    ``probes``: ``old`` w_t, ``new`` w_{t+1}, ``local`` each client's last local iterate), the training objective
    (loss plus (weight_decay / 2) ||w||^2) and its gradient there on each of the round's clients' last minibatch:
    losses (K,) and gradients (K, d). A point costs two passes per client, so only the schedules that read them (AFL,
    AdaComm) ask."""

    updates: torch.Tensor  # (K, d) the updates the server received (after client-side selection), w_i - w_t
    old_params: torch.Tensor  # w_t, the model the round started from
    new_params: torch.Tensor  # w_{t+1}, the aggregated model
    sizes: torch.Tensor  # (K,) n_i of the round's clients
    lr: float  # the next round's learning rate
    lr0: float  # the first round's learning rate
    step_time_s: float | None = None  # time model: seconds per local step (None without timing=simulated)
    sync_time_s: float | None = None  # time model: the round's time outside local steps (reports, transfers)
    elapsed_s: float | None = None  # simulated time so far, this round included
    budget_s: float | None = None  # timing.budget_s
    local_params: torch.Tensor | None = None  # (K, d) each client's last local iterate, when ``local`` is probed
    probed: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


PROBE_POINTS = ("old", "new", "local")


class Probing:
    """A schedule reads no client objective by default (``probes``: none)."""

    def probes(self, state: State) -> tuple[str, ...]:
        """The points (of PROBE_POINTS) whose objectives on the clients' last minibatches this round's ``observe``
        reads."""
        return ()

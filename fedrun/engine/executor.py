"""Executors run a round's cohort through a local rule. Algorithms never know which executor runs them."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from ..algorithms.base import ClientContext, LocalRule, State
from ..errors import ConfigError
from ..functional import FunctionalModel
from .cohort import ClientPlan

log = logging.getLogger("fedrun")


@dataclass
class CohortResult:
    """Per-client outputs of a round, in cohort order."""

    updates: torch.Tensor  # (K, d)
    buffers: list[dict[str, torch.Tensor]]
    mean_loss: torch.Tensor  # (K,) mean minibatch loss of each client
    client_states: list[State | None]


class LoopExecutor:
    """Clients one after another, each step a ``torch.func`` gradient of the flat parameters."""

    name = "loop"

    def run(self, rule: LocalRule, model: FunctionalModel, ctx: ClientContext, plans: list[ClientPlan],
            x: torch.Tensor, y: torch.Tensor, client_states: list[State | None]) -> CohortResult:
        updates, buffers, losses, new_states = [], [], [], []
        for plan, cstate in zip(plans, client_states):
            state = rule.client_init(ctx, cstate)
            loss_sum = torch.zeros((), device=x.device)
            for batch in plan.batches:
                state, loss = rule.client_step(model, ctx, state, x[batch], y[batch])
                loss_sum = loss_sum + loss.detach()
            update, new_state = rule.client_final(ctx, state, cstate)
            updates.append(update)
            buffers.append(state["buffers"])
            losses.append(loss_sum / plan.tau)
            new_states.append(new_state)
        return CohortResult(torch.stack(updates), buffers, torch.stack(losses), new_states)


EXECUTORS = {"loop": LoopExecutor}


def make_executor(name: str):
    """``auto`` picks the executor for the workload; today that is ``loop`` (the only one), and it is logged."""
    if name == "auto":
        log.info("hardware.executor=auto resolved to loop")
        name = "loop"
    if name not in EXECUTORS:
        raise ConfigError([f"hardware.executor={name!r} is unknown; choose one of {['auto', *EXECUTORS]}"])
    return EXECUTORS[name]()

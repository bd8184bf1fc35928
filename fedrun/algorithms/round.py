"""A round, owned by the algorithm: ``apply(algo, state, tools, rnd) -> (new state, RoundOutput)``.

The composed round calls the plug points in the order below, top to bottom: who takes part and their plans, what the
server broadcasts, the clients' training (and their step selection, where they trained), the aggregation weights, the
step selector's finish, the harmoniser, the aggregator (inside the privacy mechanism's release: DP-FedAvg clips each
update first and noises the sum), the local rule's server update, the server optimiser, the
simulated clock and the schedule. The engine's part is :class:`RoundTools`: the run's clients, plans, training
through its executor, full-batch passes and clock, given as functions of a state, so that an algorithm that owns
another kind of round (the MA-/GA-FSVRG bank after its threshold: ``ModelBank.apply``) uses the same tools and the
engine calls whichever ``apply`` the algorithm has.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from fedrun.algorithms.aggregator.weighted import aggregate_buffers
from fedrun.algorithms.base import ClientContext, CohortResult
from fedrun.algorithms.harmonizer.gram import conflict_statistics, cosine_matrix
from fedrun.algorithms.schedule.feedback import RoundFeedback
from fedrun.process.lazy import numpy as np
from fedrun.process.lazy import torch

if TYPE_CHECKING:
    from fedrun.engine.run.sampling import ClientPlan, Participants
    from fedrun.engine.run.state import ServerState


@dataclass
class RoundOutput:
    round: int
    plans: list[ClientPlan]
    weights: torch.Tensor  # p_i over the round's clients
    result: CohortResult
    bytes_down: int  # what the server sent this round: model and extras (SCAFFOLD's c, ...) to each client
    bytes_up: int  # what the clients sent: updates, buffers and uploads (SCAFFOLD's dc_i, Mime's full gradients)
    diagnostics: dict[str, float]  # extra metrics.csv columns of the round
    similarity: dict | None = None  # the round's cosine matrices, before and after harmonising, when saved
    start: torch.Tensor | None = None  # the model the round's clients started from (one global model)

    @property
    def train_loss(self) -> float:
        """The clients' mean minibatch loss, weighted as aggregated (nan in a round no client joined)."""
        if not self.plans:
            return float("nan")
        return float(self.weights.to(self.result.mean_loss.dtype) @ self.result.mean_loss)


class RoundTools(Protocol):
    """What a round may use of the engine (``fedrun.engine.run.simulation.EngineTools``). Settings: ``num_clients``,
    ``model_bytes`` (a model's parameters and buffers), ``momentum``, ``weight_decay``, ``device``, ``gram_block``
    (the step selector's Gram matrix in column blocks, or None), ``conflicts`` and ``similarity_every`` (the
    diagnostics asked for), ``simulated`` (whether the simulated clock runs) and ``budget_s`` (its budget), ``tracked``
    (coordinates whose values are logged, or None), ``clients_per_round`` (K, or an asynchronous server's
    concurrency)."""

    num_clients: int
    model_bytes: int
    momentum: float
    weight_decay: float
    device: torch.device
    gram_block: int | None
    conflicts: bool
    similarity_every: int | None
    simulated: bool
    budget_s: float | None
    tracked: np.ndarray | None
    clients_per_round: int

    def participants(self, state: ServerState, rnd: int) -> Participants:
        """The round's reporting clients (sorted ids), when the last of them reported and what the devices did
        (``fedrun.engine.run.sampling.Participants``)."""

    def plans(self, state: ServerState, cohort, rnd: int) -> list[ClientPlan]:
        """Each of ``cohort``'s local steps and minibatches this round, under the schedule as it is in ``state``."""

    def lr(self, rnd: int) -> float:
        """The clients' learning rate in round ``rnd``."""

    def train(self, rule, ctx: ClientContext, plans: list[ClientPlan], client_states: list, select=None
              ) -> tuple[CohortResult, float]:
        """The cohort trained by ``rule`` from ``ctx`` through the run's executor, and the seconds it took;
        ``select(updates, steps, plans)``: the clients' step selection, run where they trained."""

    def full_losses_and_gradients(self, state: ServerState, points: torch.Tensor, clients, own: bool = False
                                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each of ``clients``' mean loss over its whole local dataset and its gradient at each of ``points``."""

    def online(self, t: float) -> np.ndarray:
        """The clients online at simulated time ``t`` (sorted ids)."""

    def until_offline(self, ids, t: float) -> np.ndarray:
        """Seconds from ``t`` until each of the (online) clients ``ids`` goes offline (inf: never)."""

    def next_online(self, t: float) -> float:
        """When the first client offline at ``t`` comes online."""

    def sample(self, count: int, round_: int, among: np.ndarray) -> np.ndarray:
        """``count`` of the clients ``among`` drawn without replacement (sorted), a function of (seed, ``round_``)."""

    def durations(self, plans: list[ClientPlan], concurrent: int) -> np.ndarray:
        """Each client's seconds on the simulated clock for its plan: the model down, its steps on its device, the
        update up (``concurrent`` copies sharing the server's link)."""

    def probe_last_batches(self, state: ServerState, plans: list[ClientPlan], points: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each client's training objective and its gradient on its last minibatch of the round, at ``points``."""

    def simulated_times(self, plans: list[ClientPlan], train_s: float, who: Participants
                        ) -> tuple[float, float, float]:
        """The time model's (the base device's seconds per local step, its seconds of the round outside the local
        steps, the round's seconds: until its slowest client is done)."""

    def tracked_values(self, params: torch.Tensor, updates: torch.Tensor, plans: list[ClientPlan]
                       ) -> dict[str, float]:
        """The tracked coordinates' values (GIFT Figs. 3-4)."""


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def with_client_states(clients: dict, plans: list[ClientPlan], result: CohortResult) -> dict:
    """The clients' persistent states after a round: a new dict with the round's clients' new states (a rule without
    any returns None for them)."""
    return clients | {plan.id: cs for plan, cs in zip(plans, result.client_states) if cs is not None}


def composed_round(algo, state: ServerState, tools: RoundTools, rnd: int) -> tuple[ServerState, RoundOutput]:
    """Round ``rnd`` from ``state`` with the parts of ``algo`` (a ``fedrun.algorithms.Algorithm``): the new state and
    what the round did. ``state`` is left as it was (every part returns its new state; the clients' states are a new
    dict)."""
    new = replace(state)
    who = tools.participants(state, rnd)
    cohort = who.ids
    if not len(cohort):
        return empty_round(algo, state, tools, rnd, who)
    plans = tools.plans(state, cohort, rnd)
    extras = algo.local.broadcast(state.local)
    up = 0
    if algo.local.needs_full_gradients:  # MimeSVRG, LoSAC: the clients' full gradients at the global model first
        counts = torch.tensor([float(p.num_samples) for p in plans], device=tools.device, dtype=state.params.dtype)
        full = tools.full_losses_and_gradients(state, state.params[None], cohort)[1][:, 0]
        up += nbytes(full)
        more, new.local = algo.local.round_extras(state.local, full, counts)
        extras = {**extras, **more}
    ctx = ClientContext(rnd, state.params, state.buffers, tools.lr(rnd), tools.momentum, tools.weight_decay,
                        extras=extras)
    select = None
    if algo.step_selector.records_steps:  # BHerd, GraB: each client selects its steps where it trained
        def select(updates, steps, plans):
            return algo.step_selector.select(state.step_selector, updates, steps, plans, ctx, tools.gram_block)
    result, train_s = tools.train(algo.local, ctx, plans, [state.clients.get(int(c)) for c in cohort], select)
    new.clients = with_client_states(state.clients, plans, result)
    weights = algo.aggregator.weights(torch.tensor([p.num_samples for p in plans], dtype=torch.float64)).to(
        device=tools.device, dtype=state.params.dtype)
    new.step_selector, updates, uploads, selection = algo.step_selector.finish(
        state.step_selector, result.updates, result.selection, plans, result.uploads, weights)
    clients = [p.id for p in plans]
    sent = updates  # what the schedule sees (GIFT uses nothing else)
    diagnostics = {}
    if tools.conflicts:
        diagnostics |= {f"pre_{k}": v for k, v in conflict_statistics(updates).items()}
    new.harmonizer, harmonized, info = algo.harmonizer(state.harmonizer, updates, weights, clients, rnd)
    diagnostics |= info
    if tools.conflicts and algo.harmonizer.name != "none":
        diagnostics |= {f"post_{k}": v for k, v in conflict_statistics(harmonized).items()}
    similarity = None
    if tools.similarity_every and rnd % tools.similarity_every == 0:
        similarity = {"clients": clients, "before": cosine_matrix(updates), "after": cosine_matrix(harmonized)}
    new.privacy, update, info = algo.privacy.release(state.privacy, harmonized, weights, uploads, algo.aggregator, rnd)
    diagnostics |= info
    update, new.local = algo.local.server_update(new.local, update, harmonized, uploads, weights, tools.num_clients)
    old_params = state.params
    new.params, new.server_opt = algo.server_opt.apply(state.params, update, state.server_opt)
    new.buffers = aggregate_buffers(result.buffers, weights)
    step_s = sync_s = None
    if tools.simulated:
        step_s, sync_s, diagnostics["sim_round_s"] = tools.simulated_times(plans, train_s, who)
        new.sim_time = state.sim_time + diagnostics["sim_round_s"]
    wanted = algo.schedule.probes(state.schedule)  # the points whose client objectives it reads (AFL, AdaComm)
    points = {"old": old_params, "new": new.params,
              "local": old_params + result.updates if "local" in wanted else None}
    new.schedule, logged = algo.schedule.observe(state.schedule, RoundFeedback(
        updates=sent, old_params=old_params, new_params=new.params,
        sizes=torch.tensor([float(p.num_samples) for p in plans], device=tools.device), lr=tools.lr(rnd + 1),
        lr0=tools.lr(1), step_time_s=step_s, sync_time_s=sync_s,
        elapsed_s=new.sim_time if step_s is not None else None, budget_s=tools.budget_s,
        local_params=points["local"],
        probed={name: tools.probe_last_batches(state, plans, points[name]) for name in wanted}))
    diagnostics |= logged
    k = len(plans)
    down = k * (tools.model_bytes + sum(nbytes(v) for v in extras.values()))
    up += k * tools.model_bytes + sum(nbytes(v) for v in result.uploads.values())
    diagnostics |= selection | who.logged
    if tools.tracked is not None:
        diagnostics |= tools.tracked_values(new.params, sent, plans)
    return new, RoundOutput(rnd, plans, weights, result, down, up, diagnostics, similarity, old_params)


def empty_round(algo, state: ServerState, tools: RoundTools, rnd: int, who: Participants
                ) -> tuple[ServerState, RoundOutput]:
    """A round in which no client reported (Poisson sampling drew none, none was online, or all dropped out): a
    privacy mechanism that releases every round (DP-FedAvg: its noise alone) has its release applied by the server
    optimiser; otherwise the model stays. The schedule observes nothing; the simulated clock moves on by the time the
    server waited."""
    new = replace(state)
    none = state.params.new_zeros((0, state.params.numel()))
    weights = state.params.new_zeros(0)
    diagnostics = {}
    if algo.privacy.releases_without_clients:
        new.privacy, update, diagnostics = algo.privacy.release(state.privacy, none, weights, {}, algo.aggregator,
                                                                rnd)
        new.params, new.server_opt = algo.server_opt.apply(state.params, update, state.server_opt)
    if tools.simulated:
        diagnostics["sim_round_s"] = who.wait_s
        new.sim_time = state.sim_time + who.wait_s
    diagnostics |= who.logged
    result = CohortResult(none, [], state.params.new_zeros(0), [], {}, None)
    return new, RoundOutput(rnd, [], weights, result, 0, 0, diagnostics, None, state.params)

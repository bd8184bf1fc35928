"""One federated round, in one process: sample a cohort, train it through the executor, select, harmonise,
aggregate and step the server.

:class:`Simulation` holds what a run fixes (data, partition, model, algorithm, executor) and the run's current
:class:`ServerState`; a round is a function of a state, ``round(state, r) -> (new state, output)``, which leaves the
state it is given as it was. :mod:`~fedrun.engine.run.evaluation` scores a state and
:func:`fedrun.engine.run.experiment.run_experiment` drives the rounds and writes the run directory.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import torch

from fedrun.algorithms import build_algorithm
from fedrun.algorithms.stateful import STATEFUL_PARTS
from fedrun.algorithms.base import ClientContext, CohortResult, TrainingSet
from fedrun.algorithms.round import RoundOutput
from fedrun.config.checks import validate
from fedrun.config.settings import RunSettings
from fedrun.data import FedDataset, get_spec, load_dataset
from fedrun.data.augment import AugmentedImages, training_inputs
from fedrun.model.functional import FunctionalModel, prefers_channels_last
from fedrun.model.zoo import MODELS, build_model
from fedrun.model.native.build import FUSED_CONV, INDEXED_ROWS, has_avx512, kernels_on
from fedrun.data.partition import Partition, held_out, make_partition, refuse_single_sample_batches
from fedrun.engine.run.accounting import simulated_times, tracked_values
from fedrun.engine.run.devices import Availability, Devices, arrivals, failures
from fedrun.engine.run.sampling import (ClientPlan, Participants, earliest_reporters, plan_cohort, poisson_clients,
                                       report_delays, sample_clients)
from fedrun.engine.execution.cuda_math import configure_cuda, free_bytes, share_memory, synchronize
from fedrun.engine.run.evaluation import Evaluation
from fedrun.engine.execution.executor_choice import make_executor
from fedrun.engine.execution.full_batch import full_losses_and_gradients
from fedrun.engine.execution.host_memory import keep_freed_memory
from fedrun.engine.execution.precision import InPrecision, check_device
from fedrun.engine.execution.ranks import Ranked, Ranks
from fedrun.engine.run.state import ServerState
from fedrun.errors import ConfigError

log = logging.getLogger("fedrun")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class Simulation:
    """The state of a run and one step of it: ``run_round(r)``, built from a run's checked, typed settings
    (:func:`fedrun.config.checks.validate`; :meth:`from_config` checks a composed config first)."""

    @classmethod
    def from_config(cls, cfg, data: FedDataset | None = None, ranks: Ranks | None = None) -> Simulation:
        """The simulation of a composed config, checked (every problem at once, before anything is loaded)."""
        return cls(validate(cfg), data, ranks)

    def __init__(self, settings: RunSettings, data: FedDataset | None = None, ranks: Ranks | None = None):
        run = self.settings = settings
        self.ranks = ranks or Ranks()
        if run.hardware.num_threads:
            torch.set_num_threads(int(run.hardware.num_threads))
        torch.set_flush_denormal(run.hardware.denormals == "flush")  # this thread's, and the threads it starts
        if run.hardware.host_memory == "keep":
            keep_freed_memory()
        self.device = resolve_device(run.hardware.device)
        check_device(run.hardware.precision, self.device)
        if self.device.type == "cuda":
            configure_cuda(run.hardware.deterministic, run.hardware.cudnn_benchmark)
            share_memory(run.hardware.memory_share, self.device)
        self.dtype = getattr(torch, run.hardware.dtype)
        self.data = (data or load_dataset(run.data, self.device)).to(self.device, self.dtype)
        if run.eval.test_subset is not None:
            self.data = self.data.test_subset(int(run.eval.test_subset), run.seed)
        self.labels, self.label_classes = self.data.class_labels()
        self.train_inputs = training_inputs(self.data, run.data, run.seed)
        self.algo = build_algorithm(run.algo)  # its parts checked and parsed in validate

        torch.manual_seed(run.seed)
        kind = get_spec(run.data.name).meta(run.data)[0]
        module, objective = build_model(run.model, kind, self.data.input_shape, self.data.num_classes, run.data.name)
        layout = run.hardware.layout
        kernels = kernels_on(run.hardware.native, run.hardware.precision, self.device)
        self.model = FunctionalModel(module.to(self.device, self.dtype), objective,
                                     by_hand=run.hardware.gradient == "auto",
                                     channels_last=layout == "channels_last" or layout == "auto"
                                     and prefers_channels_last(module, self.device),
                                     cohort_network=run.hardware.cohort_network is True or (
                                         run.hardware.cohort_network is None and self.device.type == "cpu"),
                                     onednn=run.hardware.onednn, fused_conv=kernels[FUSED_CONV],
                                     indexed_rows=kernels[INDEXED_ROWS])
        if run.hardware.native is None and self.model.cohort is not None and self.device.type == "cpu":
            log.info("hardware.native=null: the fused convolution kernels are %s (this CPU %s AVX-512)",
                     "on" if self.model.fused_conv else "off", "has" if has_avx512() else "has no")
        params, buffers = self.model.init_params(), self.model.init_buffers()

        task = objective.task_class(self.labels) if objective.task_class is not None else None
        partition = make_partition(run.partition, self.labels, self.data.train_users, run.fl.num_clients, run.seed,
                                   task)
        if self.algo.pooled:  # centralized SGD: one client holding every training sample
            partition = Partition([np.arange(len(self.labels))], f"pooled (centralized; {partition.layout} ignored)")
        # a client's held-out samples (eval.holdout) leave its training data: everything below sees the rest
        partition, self.holdout = held_out(partition, float(run.eval.holdout), run.seed)
        self.partition = partition
        self.num_clients = len(partition.indices)
        self.devices = Devices.build(run.devices, run.timing, self.num_clients, run.fl.batch_size, run.seed)
        self.availability = Availability.build(run.availability, self.num_clients, run.seed)
        refuse_single_sample_batches(self.model, params, buffers, self.data.x_train, partition, run.model.name)
        if self.algo.local.per_sample and self.model.buffer_names:
            raise ConfigError([f"algo/local={self.algo.local.name} with model={run.model.name}: per-sample gradients "
                               "need a model without BatchNorm statistics (in training a sample's gradient depends "
                               "on the rest of its batch). Fix: a model without BatchNorm (model.batch_norm=false "
                               "where the model has the option)"])
        features = MODELS[run.model.name].parameter_features
        local, clients = self.algo.local.setup(self.algo.local.server_init(params, self.num_clients), TrainingSet(
            self.data.x_train, partition.indices, self.model.dim,
            features(self.data.input_shape, self.data.num_classes) if features else None))
        self.state = ServerState(params, buffers, self.algo.server_opt.init(params), local,
                                 **{part: getattr(self.algo, part).init(params, self.num_clients)
                                    for part in STATEFUL_PARTS}, clients=clients)
        b = min(run.fl.batch_size, len(self.labels))
        self.executor = make_executor(run.hardware, self.model, self.device, self.data.x_train[:b],
                                      self.data.y_train[:b], self.typical_cohort(),
                                      self.algo.local)
        self.model_bytes = self.model.param_bytes + self.model.buffer_bytes(self.state.buffers)
        self.gram_block = None  # the step selector's Gram matrix in column blocks of this many coordinates (host steps)
        self.step_store = self._step_store() if self.algo.step_selector.records_steps else None
        track = run.diagnostics.track_params
        self.tracked = np.sort(np.random.default_rng([run.seed, 0x7AC4ED]).choice(
            self.model.dim, min(track, self.model.dim), replace=False)) if track else None
        self.summed = self._summed()
        self.tools = EngineTools(self)
        self.evaluation = Evaluation(self.model, self.data, partition.indices, self.holdout, self.algo, run)

    def _step_store(self) -> torch.device:
        """Where a step selector (BHerd, GraB) keeps the round's step gradients (``hardware.step_store``): on the
        compute device, or in host memory with the Gram matrix accumulated over column blocks of ``hardware.gram_block``
        (``auto``: host only when the largest cohort's steps exceed memory_fraction of the accelerator's free
        memory)."""
        hw = self.settings.hardware
        taus = sorted(self.local_steps(self.state, range(self.num_clients)), reverse=True)
        params = self.state.params
        need = sum(taus[: self.settings.fl.clients_per_round]) * len(params) * params.element_size()
        choice = hw.step_store
        if choice == "auto":
            free = free_bytes(self.device) if self.device.type == "cuda" else None
            choice = "host" if free is not None and need > hw.memory_fraction * free else "device"
        store = torch.device("cpu") if choice == "host" else self.device
        if choice == "host":
            self.gram_block = hw.gram_block
        log.info("%s keeps up to %.1f MB of step gradients per round on %s%s", self.algo.step_selector.name,
                 need / 2**20, store, f" (Gram matrix in blocks of {self.gram_block})" if choice == "host" else "")
        return store

    def _summed(self) -> bool:
        """Whether the ranks all-reduce the updates' weighted sums rather than exchange the updates
        (``hardware.exchange=sums``, over several ranks): only where nothing of the round reads one client's update,
        neither a part (``reads_each_update``) nor a diagnostic (conflicts, similarity matrices, tracked
        coordinates, the clients' local models on their own test splits under a natural partition)."""
        run, algo = self.settings, self.algo
        reads = [algo.local, *(getattr(algo, part) for part in STATEFUL_PARTS)]
        diagnostics = (run.diagnostics.conflicts or run.diagnostics.similarity_every or run.diagnostics.track_params
                       or run.partition.name == "natural")
        return (self.ranks.size > 1 and run.hardware.exchange == "sums" and not diagnostics
                and not any(part.reads_each_update for part in reads))

    def state_dict(self) -> dict:
        """What a checkpoint saves: the :class:`ServerState` and the RNG states (client sampling and batch orders are
        functions of (seed, round, client), so they need none)."""
        return {"state": self.state.to_plain(), "torch_rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}

    def load_state_dict(self, saved: dict) -> None:
        """Continue from :meth:`state_dict` (or a checkpoint of the format before ServerState, see
        :meth:`ServerState.from_plain`)."""
        self.state = ServerState.from_plain(saved.get("state", saved), self.device, self.state)
        torch.set_rng_state(saved["torch_rng"])
        if saved["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(saved["cuda_rng"])

    def plans(self, state: ServerState, cohort, rnd: int) -> list[ClientPlan]:
        """Each cohort client's steps and minibatches this round; a rule that draws k batches per step (Per-FedAvg)
        gets minibatches of k*B samples and tau_i = floor(E n_i / (k B)). The config is read once per round: its
        attribute lookups would cost more than the plans of a 400-machine round."""
        width, seed, reshuffle = self.batch_width, self.settings.seed, self.settings.fl.reshuffle
        return plan_cohort(list(map(int, cohort)), self.partition.indices, self.local_steps(state, cohort), width,
                           seed, rnd, reshuffle, self.device)

    @property
    def batch_width(self) -> int:
        return self.settings.fl.batch_size * self.algo.local.batches_per_step

    def local_steps(self, state: ServerState, clients) -> list[int]:
        """tau_i of each of ``clients`` under the schedule as it stands in ``state`` (the config read once for all of
        them)."""
        epochs, width, steps = self.settings.fl.local_epochs, self.batch_width, self.algo.schedule.local_steps
        schedule = state.schedule
        return [steps(schedule, len(self.partition.indices[int(c)]), epochs, width) for c in clients]

    def lr(self, rnd: int) -> float:
        """``fl.lr``, times ``fl.lr_gamma`` for every milestone in ``fl.lr_milestones`` reached (BHerd Fig. 4:
        milestones [50], gamma 0.5 halves eta from round 50 on)."""
        fl = self.settings.fl
        return fl.lr * fl.lr_gamma ** sum(rnd >= m for m in fl.lr_milestones)

    def full_losses_and_gradients(self, state: ServerState, points: torch.Tensor, clients, own: bool = False
                                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each of ``clients``' mean loss over its whole local dataset and its gradient at each of ``points``
        (:func:`~fedrun.engine.execution.full_batch.full_losses_and_gradients`, in calls of ``eval.batch_size``
        samples)."""
        indices = [torch.as_tensor(self.partition.indices[int(c)], device=self.device) for c in clients]
        return full_losses_and_gradients(self.model, state.buffers, self.data.x_train, self.data.y_train,
                                         indices, points, int(self.settings.eval.batch_size), own)

    def train(self, rule, ctx: ClientContext, plans: list[ClientPlan], client_states: list, select=None
              ) -> CohortResult:
        """The cohort's local training through the run's executor (steps recorded where the step selector keeps
        them), in the run's ``hardware.precision``, over its ranks (each trains its share). ``select(updates, steps,
        plans)``: the clients' step selection, done where they trained, whose result replaces the steps."""
        if isinstance(self.train_inputs, AugmentedImages):
            self.train_inputs.begin_round(ctx.round)
        executor = self.executor if self.ranks.size == 1 else Ranked(self.executor, self.ranks, self.device,
                                                                      self.summed)
        return InPrecision(executor, self.settings.hardware.precision, self.device).train(
            rule, self.model, ctx, plans, self.train_inputs, self.data.y_train, client_states, self.step_store, select)

    def run_round(self, rnd: int) -> RoundOutput:
        """Round ``rnd`` of the run: its state becomes the round's new one."""
        self.state, out = self.round(self.state, rnd)
        return out

    def round(self, state: ServerState, rnd: int) -> tuple[ServerState, RoundOutput]:
        """Round ``rnd`` from ``state``, as the algorithm runs it (``Algorithm.apply``) with the engine's tools: the
        new :class:`ServerState` and what the round did; ``state`` is left as it was."""
        return self.algo.apply(state, self.tools, rnd)

    def typical_cohort(self) -> int:
        """The clients a round trains (fl.clients_per_round), or their expected number under Poisson sampling: what
        the executor is chosen for."""
        part = self.settings.participation
        if part.name == "poisson":
            return max(1, round(part.rate * self.num_clients))
        return min(self.settings.fl.clients_per_round, self.num_clients)

    def participants(self, state: ServerState, rnd: int) -> Participants:
        """The round's reporting clients: ``participation=uniform`` draws fl.clients_per_round (ceil((1 + beta) K)
        with over-selection) of the clients online when the round starts, ``poisson`` takes each online client with
        probability ``rate`` (possibly none), ``earliest`` keeps the first reporters of all (GIFT 6.1). With
        availability, dropouts or over-selection the sampled clients then run on the simulated clock
        (:func:`~fedrun.engine.run.devices.arrivals`): those that fail or go offline before their update arrives drop
        out, and over-selection keeps the first K to arrive."""
        part, seed, n = self.settings.participation, self.settings.seed, self.num_clients
        if part.name == "earliest":
            delays = report_delays(n, seed, rnd, part.delay, part.delay_scale)
            cohort = earliest_reporters(delays, part.fraction)
            return Participants(cohort, float(delays[cohort].max()))
        start = state.sim_time
        online = self.availability.online(start)
        if part.name == "poisson":
            sampled = np.intersect1d(poisson_clients(n, part.rate, seed, rnd), online)
        else:
            per_round = min(self.settings.fl.clients_per_round, n)
            sampled = sample_clients(n, math.ceil((1 + part.over_selection) * per_round - 1e-9), seed, rnd, online)
        if self.availability.kind == "always" and not part.dropout and not part.over_selection:
            return Participants(sampled)
        taus = np.array(self.local_steps(state, sampled), dtype=np.float64)
        timed = self.settings.timing.name == "simulated" and self.settings.timing.step_time_s is not None
        failed = failures(sampled, float(part.dropout), seed, rnd, n)
        if timed:  # each client's compute and transfer on its device; when it goes offline
            compute = taus * float(self.settings.timing.step_time_s) * self.devices.step_factor[sampled]
            bits = self.model_bytes * 8
            transfer = np.maximum(len(sampled) * bits / (float(self.settings.timing.server_bandwidth_mbps) * 1e6),
                                  bits / (self.devices.link_mbps[sampled] * 1e6))
            offline_in = np.array([self.availability.window(int(c), start)[1] - start for c in sampled])
        else:  # dropouts alone: the lost compute in local steps
            compute, transfer, offline_in = taus, np.zeros(len(sampled)), np.full(len(sampled), np.inf)
        keep = min(self.settings.fl.clients_per_round, n) if part.over_selection else None
        done = arrivals(sampled, compute, transfer, offline_in, failed, keep)
        if not timed:
            done.logged["wasted_steps"] = done.logged.pop("wasted_compute_s")
        wait = done.wait_s if len(sampled) else self.availability.next_online(start) - start  # no one online: wait
        return Participants(done.kept, sampled=len(sampled), wait_s=wait if math.isfinite(wait) else 0.0,
                            logged=done.logged)

    def probe_last_batches(self, state: ServerState, plans: list[ClientPlan], points: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each client's training objective (minibatch loss + (weight_decay / 2) ||w||^2) and its gradient on its last
        minibatch of the round, at ``points`` (d,) or (K, d); what AFL and AdaComm read (RoundFeedback.probed)."""
        wd = float(self.settings.fl.weight_decay)
        losses, grads = [], []
        for i, plan in enumerate(plans):
            w = points[i] if points.dim() == 2 else points
            batch = plan.batches[-1]
            loss, g = self.model.loss_and_grad(w, {k: v.clone() for k, v in state.buffers.items()},
                                               self.data.x_train[batch], self.data.y_train[batch])
            losses.append(loss.detach() + 0.5 * wd * w.dot(w))
            grads.append(g + wd * w)
        return torch.stack(losses), torch.stack(grads)


class EngineTools:
    """The engine's side of a round (:class:`fedrun.algorithms.round.RoundTools`): the run's clients, plans,
    learning rate, training through its executor, full-batch passes and clock, each a function of the state it is
    given, and the settings a round reads, typed once from the config."""

    def __init__(self, sim: Simulation):
        run = sim.settings
        self._sim = sim
        self.num_clients, self.model_bytes, self.device = sim.num_clients, sim.model_bytes, sim.device
        self.momentum, self.weight_decay = float(run.fl.momentum), float(run.fl.weight_decay)
        self.conflicts, self.similarity_every = bool(run.diagnostics.conflicts), run.diagnostics.similarity_every
        self._timing = run.timing
        self.simulated, self.budget_s = run.timing.name == "simulated", run.timing.budget_s
        # the simulated clock reads the round's measured training time (timing.step_time_s null)
        self.measures_step_time = self.simulated and run.timing.step_time_s is None
        self.tracked = sim.tracked
        self.clients_per_round = min(int(run.fl.clients_per_round), sim.num_clients)

    @property
    def gram_block(self) -> int | None:
        return self._sim.gram_block

    def participants(self, state: ServerState, rnd: int) -> Participants:
        return self._sim.participants(state, rnd)

    def plans(self, state: ServerState, cohort, rnd: int) -> list[ClientPlan]:
        return self._sim.plans(state, cohort, rnd)

    def lr(self, rnd: int) -> float:
        return self._sim.lr(rnd)

    def train(self, rule, ctx: ClientContext, plans: list[ClientPlan], client_states: list, select=None
              ) -> tuple[CohortResult, float]:
        started = time.perf_counter()
        result = self._sim.train(rule, ctx, plans, client_states, select)
        if self.measures_step_time:  # the steps' time on a GPU, not their launches'
            synchronize(self.device)
        return result, time.perf_counter() - started

    def full_losses_and_gradients(self, state: ServerState, points: torch.Tensor, clients, own: bool = False
                                  ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._sim.full_losses_and_gradients(state, points, clients, own)

    def online(self, t: float) -> np.ndarray:
        return self._sim.availability.online(t)

    def until_offline(self, ids, t: float) -> np.ndarray:
        return np.array([self._sim.availability.window(int(c), t)[1] - t for c in ids])

    def next_online(self, t: float) -> float:
        return self._sim.availability.next_online(t)

    def sample(self, count: int, round_: int, among: np.ndarray) -> np.ndarray:
        return sample_clients(self.num_clients, count, self._sim.settings.seed, round_, among)

    def durations(self, plans: list[ClientPlan], concurrent: int) -> np.ndarray:
        ids = [p.id for p in plans]
        devices, timing = self._sim.devices, self._timing
        bits = self.model_bytes * 8
        transfer = np.maximum(concurrent * bits / (float(timing.server_bandwidth_mbps) * 1e6),
                              bits / (devices.link_mbps[ids] * 1e6))
        compute = np.array([p.tau for p in plans]) * float(timing.step_time_s) * devices.step_factor[ids]
        return transfer + compute + transfer

    def probe_last_batches(self, state: ServerState, plans: list[ClientPlan], points: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._sim.probe_last_batches(state, plans, points)

    def simulated_times(self, plans: list[ClientPlan], train_s: float, who: Participants
                        ) -> tuple[float, float, float]:
        ids = [p.id for p in plans]
        devices = self._sim.devices
        return simulated_times([p.tau for p in plans], train_s, who.last_report, self.model_bytes, self._timing,
                               devices.step_factor[ids], devices.link_mbps[ids],
                               len(plans) if who.sampled is None else who.sampled)

    def tracked_values(self, params: torch.Tensor, updates: torch.Tensor, plans: list[ClientPlan]
                       ) -> dict[str, float]:
        return tracked_values(self.tracked, params, updates, plans)

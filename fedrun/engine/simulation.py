"""One federated run, in one process: sample a cohort, train it through the executor, aggregate, evaluate, record.

:class:`Simulation` holds the whole state of a run (global model, server and client states) and advances it one
round at a time; :func:`run_experiment` drives it and writes the run directory.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..algorithms import PARTS, ClientContext, aggregate_buffers, build_algorithm
from ..algorithms.bank import preferences
from ..algorithms.fsvrg import feature_counts, logreg_parameter_map
from ..algorithms.harmonize import conflict_statistics, cosine_matrix
from ..algorithms.schedule import RoundFeedback
from ..checkpoint import (
    check_resumable,
    config_fingerprint,
    earlier_work,
    load_latest,
    part_state,
    restore_part_state,
    save_checkpoint,
    to_device,
)
from ..config import validate
from ..data import FedDataset, get_spec, load_dataset
from ..data.augment import AugmentedImages, training_inputs
from ..errors import ConfigError
from ..functional import FunctionalModel
from ..loggers import ProgressBar, WandbLogger
from ..metrics import classification_metrics
from ..models import build_model
from ..partition import Partition, make_partition
from ..results import RunDirectory, base_summary
from .cohort import ClientPlan, earliest_reporters, plan_client, report_delays, sample_clients
from .executor import CohortResult, is_recurrent, make_executor

log = logging.getLogger("fedrun")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


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
        return float(self.weights.to(self.result.mean_loss.dtype) @ self.result.mean_loss)


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


class Simulation:
    """The state of a run and one step of it: ``run_round(r)``. Config is validated before anything is loaded."""

    def __init__(self, cfg, data: FedDataset | None = None):
        validate(cfg)
        self.cfg = cfg
        if cfg.hardware.num_threads:
            torch.set_num_threads(int(cfg.hardware.num_threads))
        self.device = resolve_device(cfg.hardware.device)
        self.dtype = getattr(torch, cfg.hardware.get("dtype", "float32"))
        self.data = (data or load_dataset(cfg.data, self.device)).to(self.device, self.dtype)
        if cfg.eval.get("test_subset") is not None:
            self.data = self.data.test_subset(int(cfg.eval.test_subset), cfg.seed)
        self.labels, self.label_classes = self.data.class_labels()
        self.train_inputs = training_inputs(self.data, cfg.data, cfg.seed)
        self.algo = build_algorithm(cfg.algo)

        torch.manual_seed(cfg.seed)
        kind = get_spec(cfg.data.name).meta(cfg.data)[0]
        module, objective = build_model(cfg.model, kind, self.data.input_shape, self.data.num_classes, cfg.data.name)
        self.model = FunctionalModel(module.to(self.device, self.dtype), objective)
        self.params, self.buffers = self.model.init_params(), self.model.init_buffers()

        task = objective.task_class(self.labels) if objective.task_class is not None else None
        partition = make_partition(cfg.partition, self.labels, self.data.train_users, cfg.fl.num_clients, cfg.seed,
                                   task)
        if self.algo.pooled:  # centralized SGD: one client holding every training sample
            partition = Partition([np.arange(len(self.labels))], f"pooled (centralized; {partition.layout} ignored)")
        # a client's held-out samples (eval.holdout) leave its training data: everything below sees the rest
        partition, self.holdout = held_out(partition, float(cfg.eval.get("holdout") or 0.0), cfg.seed)
        self.partition = partition
        self.num_clients = len(partition.indices)
        refuse_single_sample_batches(self.model, self.params, self.buffers, self.data.x_train, partition,
                                     cfg.model.name)
        self.server_state = self.algo.server_opt.init(self.params)
        self.rule_state = self.algo.local.server_init(self.params, self.num_clients)
        self.client_states: dict[int, object] = {}
        if self.algo.local.needs_feature_counts:  # FSVRG: Lambda_i and A_r (004 eqs. 21, 59)
            self.client_states, self.rule_state["omega"] = self.algo.local.client_statics(
                feature_counts(self.data.x_train, partition.indices),
                torch.tensor([len(ix) for ix in partition.indices], dtype=torch.float64, device=self.device),
                logreg_parameter_map(self.model.dim // self.data.num_classes - 1, self.data.num_classes).to(
                    self.device) if cfg.model.name == "logreg" else None, self.model.dim)
        b = min(cfg.fl.batch_size, len(self.labels))
        self.executor = make_executor(cfg.hardware, self.model, self.device, self.data.x_train[:b],
                                      self.data.y_train[:b], min(cfg.fl.clients_per_round, self.num_clients))
        self.model_bytes = self.model.param_bytes + self.model.buffer_bytes(self.buffers)
        self.step_store = self._step_store() if self.algo.selector.records_steps else None
        self.sim_time = 0.0  # simulated seconds so far (timing=simulated)
        track = int((cfg.get("diagnostics") or {}).get("track_params", 0))
        self.tracked = np.sort(np.random.default_rng([cfg.seed, 0x7AC4ED]).choice(
            self.model.dim, min(track, self.model.dim), replace=False)) if track else None

    def _step_store(self) -> torch.device:
        """Where a selector (BHerd, GraB) keeps the round's step gradients (``hardware.step_store``): on the compute
        device, or in host memory with the Gram matrix accumulated over column blocks of ``hardware.gram_block``
        (``auto``: host only when the largest cohort's steps exceed memory_fraction of the accelerator's free
        memory)."""
        hw = self.cfg.hardware
        taus = sorted(self.local_steps(range(self.num_clients)), reverse=True)
        need = sum(taus[: self.cfg.fl.clients_per_round]) * len(self.params) * self.params.element_size()
        choice = hw.get("step_store", "auto")
        if choice == "auto":
            free = torch.cuda.mem_get_info(self.device)[0] if self.device.type == "cuda" else None
            choice = "host" if free is not None and need > float(hw.get("memory_fraction", 0.5)) * free else "device"
        store = torch.device("cpu") if choice == "host" else self.device
        if choice == "host":
            self.algo.selector.block = int(hw.get("gram_block", 65536))
        log.info("%s keeps up to %.1f MB of step gradients per round on %s%s", self.algo.selector.name, need / 2**20,
                 store, f" (Gram matrix in blocks of {self.algo.selector.block})" if choice == "host" else "")
        return store

    def state_dict(self) -> dict:
        """Everything a round changes: the global model, server and rule state, the clients' persistent state, each
        algorithm part's state, the simulated clock and the RNG states (client sampling and batch orders are
        functions of (seed, round, client), so they need none)."""
        return {"params": self.params, "buffers": self.buffers, "server_state": self.server_state,
                "rule_state": self.rule_state, "client_states": self.client_states, "sim_time": self.sim_time,
                "parts": {part: part_state(getattr(self.algo, part)) for part in PARTS},
                "torch_rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}

    def load_state_dict(self, state: dict) -> None:
        on = lambda tree: to_device(tree, self.device)  # noqa: E731
        self.params, self.buffers = on(state["params"]), on(state["buffers"])
        self.server_state, self.rule_state = on(state["server_state"]), on(state["rule_state"])
        self.client_states = {int(c): on(s) for c, s in state["client_states"].items()}
        self.sim_time = float(state["sim_time"])
        for part, attrs in state["parts"].items():
            restore_part_state(getattr(self.algo, part), on(attrs))
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])

    def plans(self, cohort, rnd: int) -> list[ClientPlan]:
        """Each cohort client's steps and minibatches this round; a rule that draws k batches per step (Per-FedAvg)
        gets minibatches of k*B samples and tau_i = floor(E n_i / (k B)). The config is read once per round: its
        attribute lookups would cost more than the plans of a 400-machine round."""
        width, seed, reshuffle = self.batch_width, self.cfg.seed, self.cfg.fl.reshuffle
        return [plan_client(c, self.partition.indices[c], tau, width, seed, rnd, reshuffle, self.device)
                for c, tau in zip(map(int, cohort), self.local_steps(cohort))]

    @property
    def batch_width(self) -> int:
        return self.cfg.fl.batch_size * self.algo.local.batches_per_step

    def local_steps(self, clients) -> list[int]:
        """tau_i of each of ``clients`` under the schedule as it stands (the config read once for all of them)."""
        epochs, width, steps = self.cfg.fl.local_epochs, self.batch_width, self.algo.schedule.local_steps
        return [steps(len(self.partition.indices[int(c)]), epochs, width) for c in clients]

    def lr(self, rnd: int) -> float:
        """``fl.lr``, times ``fl.lr_gamma`` for every milestone in ``fl.lr_milestones`` reached (BHerd Fig. 4:
        milestones [50], gamma 0.5 halves eta from round 50 on)."""
        fl = self.cfg.fl
        return fl.lr * fl.get("lr_gamma", 0.5) ** sum(rnd >= m for m in fl.get("lr_milestones") or [])

    def full_gradients(self, cohort) -> torch.Tensor:
        """Each client's full-batch gradient of the loss at the global model, (K, d) (Mime's and FSVRG's anchor)."""
        return self.full_losses_and_gradients(self.params[None], cohort)[1][:, 0]

    def full_losses_and_gradients(self, points: torch.Tensor, clients, own: bool = False
                                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each client's mean loss over its whole local dataset and its gradient at each of ``points`` (P, d):
        (K, P) and (K, P, d) (FSVRG's anchors, 004's preferences). ``own``: client k only at ``points[k]``
        (GA-FSVRG's gradients at the trained models), (K, 1) and (K, 1, d).

        The points step together under vmap, and so do the clients: their data, padded to one length with the
        objective's unscored target, go through in calls of at most ``eval.batch_size`` samples (per point). A
        client runs alone, in chunks of that size, when it holds more, when the objective has no unscored target,
        or when the model has buffers (padding would change BatchNorm's batch statistics). A recurrent model (no vmap
        rule for its fused CPU kernel) takes its clients and points one at a time."""
        budget, pad = int(self.cfg.eval.batch_size), self.model.objective.pad_target
        buffers = {k: v.clone() for k, v in self.buffers.items()}
        at_point = lambda w, x, y: self.model.loss_and_grad(w, buffers, x, y)  # noqa: E731
        recurrent = is_recurrent(self.model)
        if recurrent:
            over_points = lambda ws, x, y: tuple(map(torch.stack, zip(*(at_point(w, x, y) for w in ws))))  # noqa: E731
        else:
            over_points = torch.func.vmap(at_point, in_dims=(0, None, None))
        over_clients = torch.func.vmap(over_points, in_dims=(0 if own else None, 0, 0))
        indices = [torch.as_tensor(self.partition.indices[int(c)], device=self.device) for c in clients]
        shape = (len(indices), 1 if own else len(points))
        losses, grads = points.new_zeros(shape), points.new_zeros(*shape, points.shape[1])
        packable = pad is not None and not self.buffers and not recurrent
        order = sorted(range(len(indices)), key=lambda k: len(indices[k]))
        packed = [k for k in order if packable and len(indices[k]) <= budget]
        s = 0
        while s < len(packed):  # sorted by size: each call's padded length is its last client's
            e = s + 1
            while e < len(packed) and (e + 1 - s) * len(indices[packed[e]]) <= budget:
                e += 1
            members = packed[s:e]
            ix = torch.nn.utils.rnn.pad_sequence([indices[k] for k in members], batch_first=True, padding_value=-1)
            real, ix = ix >= 0, ix.clamp_min(0)  # padding repeats sample 0 with its target unscored
            y = self.data.y_train[ix]
            y = torch.where(real.view(*ix.shape, *[1] * (y.dim() - 2)), y, pad)
            losses[members], grads[members] = over_clients(points[members, None] if own else points,
                                                           self.data.x_train[ix], y)
            s = e
        for k in sorted(set(order) - set(packed)):
            at, idx = (points[k : k + 1] if own else points), indices[k]
            units = 0.0
            for s in range(0, len(idx), budget):
                part = idx[s : s + budget]
                y = self.data.y_train[part]
                batch_loss, g = over_points(at, self.data.x_train[part], y)
                count = float(self.model.objective.units(y).sum())  # the loss is a mean over these
                losses[k] += batch_loss.detach() * count
                grads[k] += g * count
                units += count
            losses[k] /= units
            grads[k] /= units
        return losses, grads

    def run_round(self, rnd: int) -> RoundOutput:
        if self.algo.bank.active(rnd):
            return self.run_bank_round(rnd)
        fl = self.cfg.fl
        cohort, last_report = self.participants(rnd)
        plans = self.plans(cohort, rnd)
        algo = self.algo
        extras = algo.local.broadcast(self.rule_state)
        up = 0
        if algo.local.needs_full_gradients:
            counts = torch.tensor([float(p.num_samples) for p in plans], device=self.device, dtype=self.params.dtype)
            full = self.full_gradients(cohort)
            up += nbytes(full)
            more, self.rule_state = algo.local.round_extras(self.rule_state, full, counts)
            extras = {**extras, **more}
        ctx = ClientContext(rnd, self.params, self.buffers, self.lr(rnd), fl.momentum, fl.weight_decay, extras=extras)
        started = time.perf_counter()
        if isinstance(self.train_inputs, AugmentedImages):
            self.train_inputs.begin_round(rnd)
        result = self.executor.run(algo.local, self.model, ctx, plans, self.train_inputs, self.data.y_train,
                                   [self.client_states.get(int(c)) for c in cohort], self.step_store)
        train_s = time.perf_counter() - started
        for c, state in zip(cohort, result.client_states):
            if state is not None:
                self.client_states[int(c)] = state
        if algo.aggregator.weighting == "uniform":
            sizes = torch.ones(len(plans), dtype=torch.float64)
        else:
            sizes = torch.tensor([p.num_samples for p in plans], dtype=torch.float64)
        weights = (sizes / sizes.sum()).to(device=self.device, dtype=self.params.dtype)
        updates, uploads, selection = algo.selector(result.updates, result.steps, plans, result.uploads, ctx)
        clients = [p.id for p in plans]
        sent = updates  # what the schedule sees (GIFT uses nothing else)
        diagnostics = {}
        conflicts = bool(self.cfg.get("diagnostics", {}).get("conflicts", False))
        if conflicts:
            diagnostics |= {f"pre_{k}": v for k, v in conflict_statistics(updates).items()}
        harmonized, info = algo.harmonizer(updates, weights, clients, rnd)
        diagnostics |= info
        if conflicts and algo.harmonizer.name != "none":
            diagnostics |= {f"post_{k}": v for k, v in conflict_statistics(harmonized).items()}
        similarity = None
        every = self.cfg.get("diagnostics", {}).get("similarity_every", 0)
        if every and rnd % every == 0:
            similarity = {"clients": clients, "before": cosine_matrix(updates), "after": cosine_matrix(harmonized)}
        updates = harmonized
        update = algo.aggregator(updates, weights, uploads)
        update, self.rule_state = algo.local.server_update(self.rule_state, update, updates, uploads, weights,
                                                           self.num_clients)
        old_params = self.params
        self.params, self.server_state = algo.server_opt.apply(self.params, update, self.server_state)
        self.buffers = aggregate_buffers(result.buffers, weights)
        step_s = sync_s = None
        if self.cfg.get("timing", {}).get("name", "none") == "simulated":
            step_s, sync_s = self.simulated_times(plans, train_s, last_report)
            diagnostics["sim_round_s"] = max(p.tau for p in plans) * step_s + sync_s
            self.sim_time += diagnostics["sim_round_s"]
        diagnostics |= algo.schedule.observe(RoundFeedback(
            updates=sent, local_params=lambda: old_params + result.updates, old_params=old_params,
            new_params=self.params, sizes=torch.tensor([float(p.num_samples) for p in plans], device=self.device),
            probe=lambda points: self.probe_last_batches(plans, points), lr=self.lr(rnd + 1), lr0=self.lr(1),
            step_time_s=step_s, sync_time_s=sync_s, elapsed_s=self.sim_time if step_s is not None else None,
            budget_s=self.cfg.get("timing", {}).get("budget_s")))
        k = len(plans)
        down = k * (self.model_bytes + sum(nbytes(v) for v in extras.values()))
        up += k * self.model_bytes + sum(nbytes(v) for v in result.uploads.values())
        if result.steps is not None:
            selection["steps_bytes"] = sum(nbytes(z) for z in result.steps)
        diagnostics |= selection_diagnostics(selection, plans, weights)
        if self.tracked is not None:
            diagnostics |= tracked_values(self.tracked, self.params, sent, plans)
        return RoundOutput(rnd, plans, weights, result, down, up, diagnostics, similarity, old_params)

    def run_bank_round(self, rnd: int) -> RoundOutput:
        """A round of MA-/GA-FSVRG after the threshold (004 Procedures 1-4; see :mod:`fedrun.algorithms.bank`)."""
        fl, bank, local = self.cfg.fl, self.algo.bank, self.algo.local
        if bank.models is None:
            bank.start(self.params, self.num_clients)
        cohort, _ = self.participants(rnd)
        plans = self.plans(cohort, rnd)
        wd = float(fl.weight_decay)
        sizes = torch.tensor([float(p.num_samples) for p in plans], device=self.device, dtype=self.params.dtype)
        weights = sizes / sizes.sum()
        server_s = 0.0
        losses, grads = self.full_losses_and_gradients(bank.models, cohort)  # the clients' passes at every model
        prefer = preferences(losses, bank.models, wd)  # eq. 18
        started = time.perf_counter()
        anchors = torch.einsum("k,kcd->cd", weights, grads)  # eq. 17 (the loss's; FSVRG adds the L2 term)
        server_s += time.perf_counter() - started
        states = [{**self.client_states[int(c)], "start": bank.models[j], "anchor": anchors[j]}
                  for c, j in zip(cohort, prefer.tolist())]
        ctx = ClientContext(rnd, bank.models[0], self.buffers, self.lr(rnd), fl.momentum, wd)
        result = self.executor.run(local, self.model, ctx, plans, self.train_inputs, self.data.y_train, states,
                                   self.step_store)
        for c, j, state in zip(cohort, prefer.tolist(), result.client_states):
            bank.preferences[int(c)] = j
            self.client_states[int(c)] = state
        trained = bank.models[prefer] + result.updates
        a_r = local.a_r(self.rule_state, result.uploads, len(plans))  # eq. 59
        started = time.perf_counter()
        if bank.name == "ga":
            _, at_trained = self.full_losses_and_gradients(trained, cohort, own=True)
            started = time.perf_counter()
            step = bank.ga_step if bank.ga_step is not None else float(
                np.mean([self.lr(rnd) / p.num_samples for p in plans]) * np.mean([p.tau for p in plans]))
            moved, assign, info = bank.regroup(at_trained[:, 0] + wd * trained, anchors + wd * bank.models, a_r, step,
                                               prefer)
        else:
            moved, assign, info = bank.regroup(trained, bank.models, a_r, prefer=prefer)  # eqs. 26-43, 60
        server_s += time.perf_counter() - started
        _, at_moved = self.full_losses_and_gradients(moved, cohort)  # eq. 61: the clients' passes at the new models
        started = time.perf_counter()
        bank.accelerate_to(moved, torch.einsum("k,kcd->cd", weights, at_moved) + wd * moved)  # eqs. 61-64
        server_s += time.perf_counter() - started
        self.params = bank.models[0]
        diagnostics = {"server_s": server_s, **info,
                       "group_is_preferred": float((assign == prefer).double().mean()),  # grouping agrees with eq. 18
                       **{f"group{c}_size": n for c, n in enumerate(bank.group_sizes(assign))},
                       **{f"prefer{c}": n for c, n in enumerate(bank.group_sizes(prefer))}}
        k, model_bytes = len(plans), self.model_bytes
        down = k * model_bytes * bank.count * 2 + k * model_bytes  # the models, the new models (eq. 61), an anchor
        up = k * model_bytes * bank.count * 2 + k * model_bytes * (2 if bank.name == "ga" else 1)
        return RoundOutput(rnd, plans, weights, result, down, up, diagnostics)

    def participants(self, rnd: int) -> tuple[np.ndarray, float]:
        """The round's clients (sorted ids) and when the last of them reported (seconds; 0 without delays):
        ``participation=uniform`` draws fl.clients_per_round, ``earliest`` keeps the first reporters (GIFT 6.1)."""
        part = self.cfg.get("participation", {"name": "uniform"})
        if part["name"] == "earliest":
            delays = report_delays(self.num_clients, self.cfg.seed, rnd, part.get("delay", "exponential"),
                                   float(part.get("delay_scale", 1.0)))
            cohort = earliest_reporters(delays, float(part.get("fraction", 0.4)))
            return cohort, float(delays[cohort].max())
        per_round = min(self.cfg.fl.clients_per_round, self.num_clients)
        return sample_clients(self.num_clients, per_round, self.cfg.seed, rnd), 0.0

    def simulated_times(self, plans: list[ClientPlan], train_s: float, last_report: float) -> tuple[float, float]:
        return simulated_times([p.tau for p in plans], train_s, last_report, self.model_bytes,
                               self.cfg.get("timing", {}))

    def probe_last_batches(self, plans: list[ClientPlan], points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each client's training objective (minibatch loss + (weight_decay / 2) ||w||^2) and its gradient on its last
        minibatch of the round, at ``points`` (d,) or (K, d); what AFL and AdaComm read (RoundFeedback.probe)."""
        wd = float(self.cfg.fl.weight_decay)
        losses, grads = [], []
        for i, plan in enumerate(plans):
            w = points[i] if points.dim() == 2 else points
            batch = plan.batches[-1]
            loss, g = self.model.loss_and_grad(w, {k: v.clone() for k, v in self.buffers.items()},
                                               self.data.x_train[batch], self.data.y_train[batch])
            losses.append(loss.detach() + 0.5 * wd * w.dot(w))
            grads.append(g + wd * w)
        return torch.stack(losses), torch.stack(grads)

    def evaluate(self, step: RoundOutput | None = None) -> dict[str, float]:
        """``test_acc`` and ``test_loss`` of the global model on the pooled test set. With a bank of models
        (MA-/GA-FSVRG) every model is tested: ``bank{c}_acc``, their mean ``bank_mean_acc``, and
        ``test_acc``/``test_loss`` are the best model's. ``eval.class_metrics`` adds macro and micro precision,
        recall and F1 (of the best model). With natural (user) clients, the readings of :meth:`user_accuracies`."""
        models = self.algo.bank.models if self.algo.bank.models is not None else self.params[None]
        scores = [self.model.evaluate_hits(w, self.buffers, self.data.x_test, self.data.y_test,
                                           self.cfg.eval.batch_size) for w in models]
        accs = [float(h.sum()) / max(1.0, float(u.sum())) for h, u, _ in scores]
        best = int(np.argmax(accs))
        hits, units, loss = scores[best]
        out = {"test_acc": accs[best], "test_loss": loss}
        if len(models) > 1:
            out |= {f"bank{c}_acc": a for c, a in enumerate(accs)} | {"bank_mean_acc": float(np.mean(accs)),
                                                                       "bank_best": best}
        if self.cfg.eval.get("class_metrics", False):
            pred = self.predict(models[best], self.data.x_test)
            out |= {k: v for k, v in classification_metrics(pred, self.data.y_test, self.data.num_classes).items()
                    if k != "accuracy"}
        if len(models) > 1:  # an upper bound, not a model: a sample counts when any model of the bank gets it right
            out["oracle_acc"] = float(torch.stack([h for h, _, _ in scores]).amax(0).sum() / units.sum())
        if self.holdout is not None:
            out["owner_acc"] = self.owner_accuracy()
        if self.cfg.partition.name == "natural" and self.data.test_users is not None:
            out |= self.user_accuracies(hits, units, step)
        return out

    def owner_accuracy(self) -> float:
        """Accuracy over every client's held-out samples (``eval.holdout``), each scored by its owner's model: the
        global model, or with a bank the model the owner prefers (eq. 18 on its training data)."""
        bank = self.algo.bank.models
        preferred = self.preferred_models() if bank is not None else None
        hits = units = 0.0
        for c, ix in enumerate(self.holdout):
            if len(ix) == 0:
                continue
            w = self.params if preferred is None else bank[int(preferred[c])]
            ix = torch.as_tensor(ix, device=self.device)
            h, u, _ = self.model.evaluate_hits(w, self.buffers, self.data.x_train[ix], self.data.y_train[ix],
                                               self.cfg.eval.batch_size)
            hits, units = hits + float(h.sum()), units + float(u.sum())
        return hits / max(1.0, units)

    def user_accuracies(self, hits: torch.Tensor, units: torch.Tensor, step: RoundOutput | None) -> dict[str, float]:
        """FedGH's Acc_l ("the mean accuracy of local clients", after LEAF), read every way its wording allows, each
        beside ``test_acc`` (Acc_g; the sample-weighted mean over all users of the global model equals it):
        ``local_acc``: the global model on each user's own test split, the mean over all users; ``local_acc_round``
        and ``local_acc_round_samples``: the same over the round's clients only, the mean over them and weighted by
        their test samples; ``local_model_acc`` and ``local_model_acc_samples``: each of the round's clients'
        model after its local training (before the server's aggregation) on its own test split, the two means."""
        values, index = np.unique(self.data.test_users, return_inverse=True)
        users = torch.as_tensor(index, device=hits.device)
        per_user = torch.zeros(2, len(values), dtype=torch.float64, device=hits.device)
        per_user.index_add_(1, users, torch.stack([hits, units]).double())
        scored = per_user[1] > 0
        out = {"local_acc": float((per_user[0, scored] / per_user[1, scored]).mean())}
        if step is None:
            return out
        train_ids = np.unique(self.data.train_users)
        position = {v: i for i, v in enumerate(values)}
        rows = [(k, position[train_ids[p.id]]) for k, p in enumerate(step.plans) if train_ids[p.id] in position]
        rows = [(k, u) for k, u in rows if per_user[1, u] > 0]
        if not rows:
            return out
        mine = torch.tensor([u for _, u in rows], device=hits.device)
        counts = per_user[1, mine]
        out["local_acc_round"] = float((per_user[0, mine] / counts).mean())
        out["local_acc_round_samples"] = float(per_user[0, mine].sum() / counts.sum())
        if step.start is not None:
            own = []
            for k, u in rows:
                ix = torch.as_tensor(np.flatnonzero(index == u), device=self.data.x_test.device)
                h, n, _ = self.model.evaluate_hits(step.start + step.result.updates[k], self.buffers,
                                                   self.data.x_test[ix], self.data.y_test[ix],
                                                   self.cfg.eval.batch_size)
                own.append((float(h.sum()), float(n.sum())))
            own = np.array(own)
            out["local_model_acc"] = float((own[:, 0] / own[:, 1]).mean())
            out["local_model_acc_samples"] = float(own[:, 0].sum() / own[:, 1].sum())
        return out

    @torch.no_grad()
    def predict(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        self.model.set_training(False)
        b = self.cfg.eval.batch_size
        return torch.cat([self.model.forward(w, self.buffers, x[s : s + b]).argmax(dim=-1)
                          for s in range(0, len(x), b)])

    @torch.no_grad()
    def preferred_models(self) -> torch.Tensor:
        """Each client's preferred model of the bank now: eq. 18 on its whole local training data, the same
        computation (losses and :func:`preferences`) as a bank round's, for every client and any loss. Computed
        once per state of the bank (the evaluations of a round share it)."""
        models = self.algo.bank.models
        held = getattr(self, "_preferred", None)  # (the models tensor itself, its version, the preferences)
        if held is None or held[0] is not models or held[1] != models._version:
            losses, _ = self.full_losses_and_gradients(models, range(self.num_clients))
            held = self._preferred = (models, models._version, preferences(losses, models,
                                                                           float(self.cfg.fl.weight_decay)))
        return held[2]

    @property
    def personalized(self) -> bool:
        return bool(self.cfg.eval.get("personalized", False)) or self.algo.local.personalizes

    def evaluate_personalized(self, rnd: int) -> float:
        """Mean over clients of each client's model on the test samples of the classes it holds (004's protocol):
        the global model, its preferred model of a bank (MA-/GA-FSVRG), or for a rule with ``personalize``
        (Per-FedAvg) the global model adapted on one batch of the client's data."""
        test_labels = self.data.y_test
        ctx = ClientContext(rnd, self.params, self.buffers, self.lr(rnd))
        accs = []
        preferred = self.preferred_models() if self.algo.bank.models is not None else None
        for c in range(self.num_clients):
            held = torch.unique(self.data.y_train[torch.as_tensor(self.partition.indices[c], device=self.device)])
            mask = torch.isin(test_labels, held)
            if not bool(mask.any()):
                continue
            w = self.params if preferred is None else self.algo.bank.models[int(preferred[c])]
            if self.algo.local.personalizes:
                batch = plan_client(c, self.partition.indices[c], 1, self.cfg.fl.batch_size, self.cfg.seed, rnd, True,
                                    self.device).batches[0]
                w = self.algo.local.personalize(self.model, ctx, self.data.x_train[batch], self.data.y_train[batch])
            acc, _ = self.model.evaluate(w, self.buffers, self.data.x_test[mask], test_labels[mask],
                                         self.cfg.eval.batch_size)
            accs.append(acc)
        return float(np.mean(accs))


def held_out(partition: Partition, fraction: float, seed: int) -> tuple[Partition, list[np.ndarray] | None]:
    """``eval.holdout``: each client keeps floor(fraction n_i) of its samples (drawn from the seed) out of training
    as its own test samples, so that a test sample has an owner (004's bank scored by its owners' preferences).
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


def simulated_times(taus: list[int], train_s: float, last_report: float, model_bytes: int, timing
                    ) -> tuple[float, float]:
    """GIFT's time model (Sec. 6.1) as (seconds per local step, seconds of the round outside local steps); the round
    takes max tau_i steps plus the latter. A step takes ``timing.step_time_s``, or this machine's measured time per
    client step (``train_s`` over the round's steps). Outside the steps, the last kept report arrives and the model
    goes down and up once: each way, the K copies share the server's link while each client's copy crosses its own
    link, so a transfer takes max(K bytes / server bandwidth, bytes / client bandwidth)."""
    step = timing.get("step_time_s")
    step = train_s / max(1, sum(taus)) if step is None else float(step)
    bits = model_bytes * 8
    one_way = max(len(taus) * bits / (float(timing.get("server_bandwidth_mbps", 10000)) * 1e6),
                  bits / (float(timing.get("bandwidth_mbps", 25)) * 1e6))
    return step, last_report + 2 * one_way


def selection_diagnostics(selection: dict, plans: list[ClientPlan], weights: torch.Tensor) -> dict[str, float]:
    """BHerd's Figs. 5b and 6: mean and variance of the entries of the aggregated selected gradient sum_i p_i g_i,
    each client's ||g_i / (alpha tau_i) - mu_i|| (mean, max, and per client id when there are few clients), and
    ``herd_residual``, the p_i-weighted distance of the clients' steps from FedAvg's relative to FedAvg's."""
    if not selection:
        return {}
    g = weights.to(selection["g"].dtype) @ selection["g"]
    dist = selection["distance"]
    out = {"agg_grad_mean": float(g.mean()), "agg_grad_var": float(g.var()),
           "herd_dist_mean": float(dist.mean()), "herd_dist_max": float(dist.max()),
           "herd_residual": float(weights.to(selection["residual"].dtype) @ selection["residual"])}
    if len(plans) <= 20:
        out |= {f"herd_dist_c{p.id}": float(d) for p, d in zip(plans, dist)}
    out["steps_mb"] = selection["steps_bytes"] / 2**20  # memory of the stored step gradients
    return out


def tracked_values(coords: np.ndarray, params: torch.Tensor, updates: torch.Tensor, plans: list[ClientPlan]
                   ) -> dict[str, float]:
    """GIFT Figs. 3-4: the global model's value at each tracked coordinate j after the round (``param_j``) and, for
    up to 20 clients, the update each sent there (``update_c<id>_j``: w_i - w_t, GIFT's accumulated "gradient")."""
    out = {f"param_{j}": float(params[j]) for j in coords}
    if len(plans) <= 20:
        out |= {f"update_c{p.id}_{j}": float(u[j]) for p, u in zip(plans, updates) for j in coords}
    return out


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class EvaluationGrid:
    """When to evaluate: every ``every`` rounds, or with ``every_s`` at the first round whose simulated clock reaches
    each multiple of ``every_s`` seconds (a schedule with tau = 1 then is not evaluated 100 times as often per
    simulated second as one with tau = 100, which would favour it in a best-ever accuracy and cost most of its run)."""

    def __init__(self, every: int, every_s: float | None):
        self.every, self.every_s = every, every_s

    def due(self, rnd: int, clock_before: float, clock_after: float) -> bool:
        """Whether round ``rnd``, which moved the simulated clock from ``clock_before`` to ``clock_after``, is
        evaluated (a resumed run needs no state of its own: the clock is in the checkpoint)."""
        if self.every_s is None:
            return rnd % self.every == 0
        return clock_after // self.every_s > clock_before // self.every_s

    def kept(self, rnd: int, rounds: int) -> bool:
        """Whether a row of a checkpoint's history belongs to this grid (a row written only because a shorter run
        ended at ``rnd`` does not)."""
        return self.every_s is not None or rnd % self.every == 0 or rnd >= rounds


def run_experiment(cfg, run_dir: str | Path, sweep_group: str | None = None) -> dict:
    """Run the experiment of ``cfg`` and write its files to ``run_dir``; returns the summary. With ``resume=true``
    the run continues from the newest readable checkpoint in ``run_dir`` (written every ``checkpoint.every`` rounds
    and at the last) and ends with the metrics.csv an uninterrupted run writes; with more ``fl.rounds`` than the run
    was started with, this extends a finished run. SIGTERM or Ctrl-C lets the current round finish,
    writes a checkpoint and ends the run with status ``interrupted``; a second Ctrl-C stops at once."""
    validate(cfg)  # before any work (and before the run directory gets files): a bad value costs nothing
    run_dir = Path(run_dir)
    fingerprint = config_fingerprint(cfg)
    saved = load_latest(run_dir) if cfg.get("resume", False) else None
    started_with = check_resumable(saved, cfg, run_dir) if saved is not None else cfg.fl.rounds
    # the commits that computed the checkpoint's rounds and their wall time, read before summary.json is rewritten
    made_by, earlier_s = earlier_work(saved, run_dir) if saved is not None else ([], 0.0)
    out = RunDirectory(run_dir, write_metrics=cfg.logger.name != "none")
    summary = base_summary(cfg) | {"status": "running"}
    commits = list(dict.fromkeys(made_by + ([summary["git_commit"]] if summary["git_commit"] else [])))
    if saved is not None:
        summary["git_commits"] = commits
    out.save_summary(summary)  # first: a run killed from here on (config.yaml rewritten) never passes for finished
    out.save_config(cfg)
    started = time.perf_counter()
    wandb = None
    stop = _StopRequests()
    try:
        sim = Simulation(cfg)
        out.save_partition(sim.partition.to_json(sim.labels, sim.label_classes))
        log.info(sim.partition.summary(sim.labels, sim.label_classes))
        log.info("%s on %s: %s (%d parameters), %s executor, device %s", sim.algo.name, sim.data.name,
                 cfg.model.name, sim.model.dim, sim.executor.name, sim.device)
        summary |= {"dataset_fingerprint": sim.data.fingerprint(), "partition_fingerprint": sim.partition.fingerprint(),
                    "num_parameters": sim.model.dim, "device": str(sim.device), "executor": sim.executor.name}
        if cfg.logger.name == "wandb":
            wandb = WandbLogger(cfg, out.path, sweep_group)
        rounds = cfg.fl.rounds
        grid = EvaluationGrid(cfg.eval.every, cfg.eval.get("every_s"))
        history: list[dict] = []
        bytes_up = bytes_down = first = 0
        if saved is not None:
            sim.load_state_dict(saved["simulation"])
            bytes_up, bytes_down, first = saved["bytes_up"], saved["bytes_down"], saved["round"]
            # metrics.csv again up to the checkpoint (rows the lost run wrote later are dropped), less a row written
            # only because a shorter run ended there
            history = [row for row in saved["history"] if grid.kept(row["round"], rounds)]
            for row in history:
                out.append_metrics(row)
            summary["resumed_from_round"] = first
            if started_with < rounds:
                summary["extended_from_rounds"] = started_with
            log.info("resumed from the checkpoint of round %d in %s", first, run_dir)
        ckpt = cfg.get("checkpoint") or {}
        every, keep = int(ckpt.get("every", 0)), int(ckpt.get("keep", 2))
        bar = ProgressBar(rounds, bool(cfg.progress), f"{sim.algo.name}/{sim.data.name}", initial=first)
        status = {"status": "finished", "rounds_completed": rounds}
        for rnd in range(first + 1, rounds + 1):
            clock = sim.sim_time
            step = sim.run_round(rnd)
            diverged = not (math.isfinite(step.train_loss) and bool(torch.isfinite(sim.params).all()))
            if step.similarity is not None:  # FedGH Fig. 2, DGT Figs. 3-4
                (out.path / "similarity").mkdir(exist_ok=True)
                np.savez(out.path / "similarity" / f"round_{rnd:05d}.npz", **step.similarity)
            k = len(step.plans)
            bytes_down += step.bytes_down
            bytes_up += step.bytes_up
            budget = cfg.get("timing", {}).get("budget_s")
            spent = budget is not None and "sim_round_s" in step.diagnostics and sim.sim_time >= budget
            row = None
            if grid.due(rnd, clock, sim.sim_time) or rnd == rounds or diverged or spent:
                row = {"round": rnd, **sim.evaluate(step), "train_loss": step.train_loss,
                       "tau": float(np.mean([p.tau for p in step.plans])), "num_clients": k,
                       "elapsed_s": round(time.perf_counter() - started, 3), "bytes_up": bytes_up,
                       "bytes_down": bytes_down}
                row |= step.diagnostics | ({"sim_time_s": sim.sim_time} if "sim_round_s" in step.diagnostics else {})
                if sim.personalized:
                    row["personal_acc"] = sim.evaluate_personalized(rnd)
                history.append(row)
                out.append_metrics(row)
                if wandb:
                    wandb.log(row)
            bar.update(row)
            ended = diverged or spent
            if (every and not ended and (rnd % every == 0 or rnd == rounds)) or stop.requested:  # last: to extend
                save_checkpoint(run_dir, rnd, {"round": rnd, "rounds": rounds, "config_fingerprint": fingerprint,
                                               "history": history, "bytes_up": bytes_up, "bytes_down": bytes_down,
                                               "commits": commits, "wall_time_s": None if earlier_s is None else
                                               earlier_s + time.perf_counter() - started,
                                               "simulation": sim.state_dict()}, keep)
            if diverged:  # a run that fails to converge is a result (BHerd Fig. 5a, alpha = 0.1): stop, keep it
                log.warning("round %d: the training loss (%s) or the model is not finite; the run stops as diverged",
                            rnd, step.train_loss)
                status = {"status": "diverged", "rounds_completed": rnd, "diverged_round": rnd}
                break
            if spent:  # GIFT Fig. 6: a time budget ends the run like its last round would
                log.info("round %d: the simulated time budget (%.0f s) is spent; the run ends", rnd, budget)
                status = {"status": "finished", "rounds_completed": rnd, "stopped_by": "timing.budget_s"}
                break
            if stop.requested:
                log.warning("round %d: stopped by signal %d; checkpoint written, continue with resume=true", rnd,
                            stop.requested)
                status = {"status": "interrupted", "rounds_completed": rnd, "signal": stop.requested}
                break
        bar.close()
        if history:
            summary |= finish_summary(history, cfg.eval.target_acc)
        summary |= status
    except BaseException as e:
        summary |= {"status": "failed", "error": f"{type(e).__name__}: {e}"}
        raise
    finally:
        stop.restore()
        summary["wall_time_s"] = round(time.perf_counter() - started, 3)
        if saved is not None and earlier_s is not None:  # this process's time and the rounds' before it
            summary["total_wall_time_s"] = round(earlier_s + summary["wall_time_s"], 3)
        out.close()
        out.save_summary(summary)
        if wandb:
            wandb.finish(summary)
    log.info("%s: final test accuracy %.4f (best %.4f) after %d rounds, %.1f s; files in %s", summary["status"],
             summary.get("final_test_acc", float("nan")), summary.get("best_test_acc", float("nan")),
             summary["rounds_completed"], summary["wall_time_s"], out.path)
    return summary


class _StopRequests:
    """SIGTERM (a scheduler's time limit) and Ctrl-C ask the run to stop after the current round, with a checkpoint;
    a second Ctrl-C interrupts at once. Handlers are installed only in the main thread and restored afterwards."""

    def __init__(self):
        self.requested = 0
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = signum
        log.warning("signal %d: the run stops after this round and writes a checkpoint (Ctrl-C again: stop now)",
                    signum)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def finish_summary(history: list[dict], target_acc: float | None) -> dict:
    final, best = history[-1], max(history, key=lambda r: r["test_acc"] if math.isfinite(r["test_acc"]) else -1)
    local = {"final_local_acc": final["local_acc"]} if "local_acc" in final else {}
    reached = [r["round"] for r in history if target_acc is not None and r["test_acc"] >= target_acc]
    return {"final_test_acc": final["test_acc"], "final_test_loss": final["test_loss"],
            "best_test_acc": best["test_acc"], "best_round": best["round"],
            "best_test_loss": min(r["test_loss"] for r in history),
            "target_acc": target_acc, "rounds_to_target": reached[0] if reached else None,
            "total_bytes_up": final["bytes_up"], "total_bytes_down": final["bytes_down"], **local}

"""Asynchronous servers on the simulated clock: FedBuff and FedAsync, each owning its rounds (one server step each)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterator, Optional

from omegaconf import II

from fedrun.algorithms.aggregator.weighted import aggregate_buffers
from fedrun.algorithms.base import ClientContext, CohortResult, State, StatefulPart
from fedrun.algorithms.part_config import PartConfig, is_int, is_number, register
from fedrun.algorithms.round import RoundOutput, with_client_states
from fedrun.config.schema import DEFAULT, Rule
from fedrun.errors import FedrunError
from fedrun.process.lazy import numpy as np
from fedrun.process.lazy import torch

STALENESS = ("constant", "sqrt", "polynomial", "hinge")

_STARTS = 1_000_003  # keeps the draws of a version's later starts apart from its first (the synchronous round's)


class AsyncServer(StatefulPart):
    """M = fl.clients_per_round clients train at once, each from the model version current when it started, and
    arrive after its own time on the simulated clock (down, tau_i steps on its device, up). A round of fedrun is one
    server step:

    - FedBuff (Nguyen et al., AISTATS 2022, Algorithm 1): each arrived update Delta_i is weighted by s(tau_i), tau_i
      its staleness (the server steps since its client started); after K arrivals the server optimiser takes
      (1/K) sum s(tau_i) Delta_i.
    - FedAsync (Xie et al. 2019, Algorithm 1): each arrival is mixed in at once,
      w <- (1 - alpha_s) w + alpha_s w_i, alpha_s = alpha s(tau_i), w_i its client's local model.

    s is constant (1), sqrt (1 / sqrt(1 + tau), FedBuff's), polynomial ((1 + tau)^-a) or hinge (1 for tau <= b, else
    1 / (a (tau - b) + 1)), FedAsync's three. A client starts whenever one arrives (or goes offline before it would:
    its update is lost), chosen uniformly among the online clients not already training; arrivals at the same
    instant are all taken in (up to the step's K) before anyone starts, so that with K = M and equal devices a
    FedBuff step is a synchronous round. The clients that started from the same version and are not trained yet
    train as one cohort, when the first of their updates is needed.

    State: ``version`` (server steps so far), ``models`` (the versions some client trains from: params, buffers),
    ``pending`` (each training client: its version, start and arrival times, tau, and once trained its update,
    buffers and loss), ``starts`` (start draws per version)."""

    reads_each_update = True

    def __init__(self, buffer: int | None, mixing: float, staleness: str, staleness_a: float, staleness_b: int,
                 seed: int, kind: str = "fedbuff"):
        self.buffer, self.mixing, self.staleness = buffer, float(mixing), staleness
        self.a, self.b, self.seed, self.kind, self.name = float(staleness_a), int(staleness_b), int(seed), kind, kind

    def init(self, params: torch.Tensor | None = None, num_clients: int = 0) -> State:
        return {"version": 0, "models": {}, "pending": {}, "starts": {}}

    def weight(self, tau: int) -> float:
        """s(tau)."""
        if self.staleness == "sqrt":
            return 1 / (1 + tau) ** 0.5
        if self.staleness == "polynomial":
            return (1 + tau) ** -self.a
        if self.staleness == "hinge":
            return 1.0 if tau <= self.b else 1 / (self.a * (tau - self.b) + 1)
        return 1.0

    def apply(self, algo, state, tools, rnd: int):
        """One server step from ``state``: (new state, what the step did)."""
        st = {**state.asynchrony, "models": dict(state.asynchrony["models"]),
              "pending": {c: dict(j) for c, j in state.asynchrony["pending"].items()},
              "starts": dict(state.asynchrony["starts"])}
        new = replace(state)
        concurrency = tools.clients_per_round
        k = 1 if self.kind == "fedasync" else (self.buffer or concurrency)
        if not st["pending"]:
            self._start(st, state.params, state.buffers, concurrency, state.sim_time, new, tools)
        applied, stale, dropped, now = [], [], 0, state.sim_time
        while len(applied) < k:
            if not st["pending"]:  # no one online and idle: the server waits for the first to come online
                now = tools.next_online(now)
                if not math.isfinite(now):
                    raise FedrunError(f"round {rnd}: no client is online or ever comes online again "
                                      "(availability); the asynchronous server has no one to wait for")
                self._start(st, new.params, new.buffers, concurrency, now, new, tools)
                continue
            now = min(j["arrive"] for j in st["pending"].values())
            due = sorted(c for c, j in st["pending"].items() if j["arrive"] == now)
            lost = [c for c in due if st["pending"][c]["lost"]]  # went offline before its update arrived
            for c in lost:
                st["pending"].pop(c)
            dropped += len(lost)
            due = [c for c in due if c not in lost][: k - len(applied)]
            for c in due:
                if st["pending"][c]["update"] is None:
                    new.clients = self._train(algo, st, st["pending"][c]["version"], new, tools)
                applied.append((c, st["pending"].pop(c)))
            if len(applied) == k:
                stale = self._step(algo, st, applied, new)
            self._start(st, new.params, new.buffers, len(due) + len(lost), now, new, tools)
        live = {j["version"] for j in st["pending"].values()}
        st["models"] = {v: m for v, m in st["models"].items() if v in live}
        new.asynchrony = st
        taus = [tau for tau, _ in stale]
        diagnostics = {"updates_applied": float(len(applied)), "clients_dropped": float(dropped),
                       "staleness_mean": float(np.mean(taus)),
                       "staleness_max": float(max(taus)),
                       **{f"staleness_{s}": float(sum(t == s for t in taus)) for s in range(5)},
                       "staleness_5+": float(sum(t >= 5 for t in taus))}
        if tools.simulated:
            diagnostics["sim_round_s"] = now - state.sim_time
            new.sim_time = now
        plans = tools.plans(state, [c for c, _ in applied], rnd)
        updates = torch.stack([j["update"] for _, j in applied])
        result = CohortResult(updates, [j["buffers"] for _, j in applied],
                              torch.stack([j["loss"] for _, j in applied]), [], {}, None)
        weights = updates.new_tensor([w for _, w in stale])
        down = len(applied) * tools.model_bytes  # the applied clients' model copies, each way
        return new, RoundOutput(rnd, plans, weights / weights.sum(), result, down, down, diagnostics)

    def _step(self, algo, st: dict, applied: list, new) -> list[tuple[int, float]]:
        """The server step on the applied updates; ``new`` takes the model, its buffers and the optimiser's state.
        Each applied update's (staleness, weight s(staleness))."""
        stale = [(st["version"] - j["version"], self.weight(st["version"] - j["version"])) for _, j in applied]
        weights = new.params.new_tensor([w for _, w in stale])
        if self.kind == "fedasync":
            (_, job), alpha = applied[0], self.mixing * stale[0][1]
            local = st["models"][job["version"]]["params"] + job["update"]
            new.params = (1 - alpha) * new.params + alpha * local
            new.buffers = aggregate_buffers([new.buffers, job["buffers"]], new.params.new_tensor([1 - alpha, alpha]))
        else:
            updates = torch.stack([j["update"] for _, j in applied])
            mean = algo.aggregator(updates, weights / len(applied), {})
            new.params, new.server_opt = algo.server_opt.apply(new.params, mean, new.server_opt)
            new.buffers = aggregate_buffers([j["buffers"] for _, j in applied],
                                            new.params.new_full((len(applied),), 1 / len(applied)))
        st["version"] += 1
        return stale

    def _start(self, st: dict, params, buffers, count: int, now: float, new, tools) -> None:
        """``count`` clients start at ``now`` from the current version: drawn among the online clients not training
        (the version's first draw is the synchronous round's: ``sample_clients`` at round version + 1)."""
        version = st["version"]
        idle = np.setdiff1d(tools.online(now), np.array(sorted(st["pending"]), dtype=np.int64))
        draws = st["starts"].get(version, 0)
        st["starts"][version] = draws + 1
        chosen = tools.sample(min(count, len(idle)), version + 1 + draws * _STARTS, idle)
        if not len(chosen):
            return
        st["models"].setdefault(version, {"params": params, "buffers": buffers})
        plans = tools.plans(new, chosen, version + 1)
        for plan, seconds, online in zip(plans, tools.durations(plans, len(chosen)), tools.until_offline(chosen, now)):
            lost = bool(online < seconds)  # it goes offline first: its slot frees then, its update never arrives
            st["pending"][plan.id] = {"version": version, "start": now, "arrive": now + float(min(seconds, online)),
                                      "lost": lost, "tau": plan.tau, "update": None, "buffers": None, "loss": None}

    def _train(self, algo, st: dict, version: int, new, tools) -> dict:
        """Every client that started from ``version`` and is not trained yet, as one cohort; the clients' states
        after it."""
        ids = sorted(c for c, j in st["pending"].items()
                     if j["version"] == version and j["update"] is None and not j["lost"])
        model = st["models"][version]
        plans = tools.plans(new, ids, version + 1)
        ctx = ClientContext(version + 1, model["params"], model["buffers"], tools.lr(version + 1), tools.momentum,
                            tools.weight_decay, extras=algo.local.broadcast(new.local))
        result, _ = tools.train(algo.local, ctx, plans, [new.clients.get(c) for c in ids])
        for i, c in enumerate(ids):
            st["pending"][c] |= {"update": result.updates[i], "buffers": result.buffers[i],
                                 "loss": result.mean_loss[i]}
        return with_client_states(new.clients, plans, result)


@register
@dataclass
class AsyncServerConfig(PartConfig):
    """FedBuff (Nguyen et al., AISTATS 2022) or FedAsync (Xie et al. 2019): fl.clients_per_round clients train at
    once (the concurrency M); each server step is one of fl.rounds."""

    part, target, options = "asynchrony", "fedrun.algorithms.asynchrony.server.AsyncServer", ("fedbuff", "fedasync")
    name: str = "fedbuff"
    buffer: Optional[int] = None  # FedBuff's K: updates per server step; null: the concurrency M
    mixing: float = 0.6  # FedAsync's alpha: w <- (1 - alpha_s) w + alpha_s w_i
    staleness: str = "sqrt"  # s(tau): constant 1 | sqrt 1/sqrt(1+tau) | polynomial (1+tau)^-a | hinge (Xie et al.)
    staleness_a: float = 0.5  # polynomial's exponent a; hinge's slope a
    staleness_b: int = 4  # hinge's b: no discount up to this staleness
    seed: int = II("seed")  # which idle clients start

    def arguments(self) -> dict[str, Any]:
        return super().arguments() | {"kind": self.name}

    def rules(self) -> Iterator[Rule]:
        yield self.buffer is None or is_int(self.buffer) and self.buffer >= 1, "buffer", \
            "must be null (the concurrency) or an integer >= 1", "null"
        yield is_number(self.mixing) and 0 < self.mixing <= 1, "mixing", "must be in (0, 1]", DEFAULT
        yield self.staleness in STALENESS, "staleness", f"must be one of {STALENESS}", DEFAULT
        yield is_number(self.staleness_a) and self.staleness_a >= 0, "staleness_a", "must be >= 0", DEFAULT
        yield is_int(self.staleness_b) and self.staleness_b >= 0, "staleness_b", "must be an integer >= 0", DEFAULT
        yield is_int(self.seed), "seed", "must be an integer", DEFAULT

"""One run over several processes: ``torchrun --nproc-per-node N -m fedrun ...`` trains each round's cohort in N
shares, one per rank, and every rank then holds the whole round.

Each rank trains the clients placed on it with the run's executor (and a step selector's selection of their steps:
the steps stay where they were recorded); the ranks then exchange what their clients sent (buffers, losses, client
states, uploads, what their step selection made), so that every rank holds the cohort's results in cohort
order and computes the same server step, evaluation and part states as one process would. The updates themselves are
exchanged in one of two ways (``hardware.exchange``): where nothing of the round reads a single client's update (FedAvg,
FedProx, FedNova, SCAFFOLD, FedDyn: the server needs weighted sums of them; BHerd's server reads only what the
selection made), each rank keeps its clients' updates and every weighted sum is one all-reduce of d numbers
(:class:`SummedRows`); otherwise (FedGH's and DGT's projections, GIFT's sign pools) every rank receives every update.
Clients are placed
by their step counts (longest first, each to the rank with the fewest steps so far; ties to the lowest rank), so a
ragged cohort does not leave ranks idle, and the placement is a function of the plans alone. Rank 0 alone writes the
run directory, checkpoints and W&B; a resumed run may have any number of ranks, since every rank's state is the
whole run's.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from datetime import timedelta

import torch

from fedrun.algorithms.base import CohortResult, Selection
from fedrun.engine.run.state import to_device
from fedrun.errors import ConfigError, FedrunError

@dataclass
class Ranks:
    """This process's place among the run's processes (one rank of one when not launched by torchrun), and what the
    exchange of the cohorts' results has cost it: seconds waited and megabytes of tensors received."""

    rank: int = 0
    size: int = 1
    device: torch.device = torch.device("cpu")  # where the collectives' own tensors live (NCCL takes GPU tensors only)
    exchange_s: float = 0.0
    exchange_mb: float = 0.0

    @property
    def writer(self) -> bool:
        """Whether this process writes the run's files (rank 0)."""
        return self.rank == 0

    def shares(self, steps: list[int]) -> list[list[int]]:
        """Cohort positions per rank, balanced by step counts: longest first, each to the least-loaded rank."""
        load, out = [0] * self.size, [[] for _ in range(self.size)]
        for i in sorted(range(len(steps)), key=lambda i: (-steps[i], i)):
            r = min(range(self.size), key=lambda r: (load[r], r))
            out[r].append(i)
            load[r] += steps[i]
        return [sorted(s) for s in out]

    def gather(self, mine):
        """Every rank's ``mine`` (any picklable value), in rank order, on every rank."""
        import torch.distributed as dist

        out = [None] * self.size
        dist.all_gather_object(out, mine)
        return out

    def from_writer(self, value):
        """Rank 0's ``value``, on every rank (a decision only the writer can make, such as its run directory)."""
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def on_writer(self, action) -> None:
        """``action()`` on rank 0 alone (a check of the run directory); a FedrunError it raises is raised on every
        rank, so that all of them stop before any work."""
        said = None
        if self.writer:
            try:
                action()
            except FedrunError as e:
                said = str(e)
        if self.size > 1:
            said = self.from_writer(said)
        if said is not None:
            raise FedrunError(said)

    def most(self, value: int) -> int:
        """The largest of the ranks' ``value`` (a stop request one rank saw: every rank stops after the round)."""
        if self.size == 1:
            return value
        import torch.distributed as dist

        t = torch.tensor([int(value)], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())


class SummedRows:
    """A cohort's (K, d) updates of which this rank holds its own clients' rows: what a round that reads the updates
    only as weighted sums is given over several ranks. ``c @ rows`` (an aggregator's weighted mean) and
    ``rows.sum(dim=0)`` (FedDyn's h) are this rank's share of the sum, all-reduced over the ranks: d numbers through
    the interconnect instead of every client's row to every rank. The ranks' partial sums are added in the
    collective's order, so the result equals one process's to float rounding (``hardware.exchange=rows`` keeps one
    process's arithmetic). A part that reads a single row says so (``reads_each_update``), and the run exchanges rows
    instead; anything else asked of these rows is an error that says that."""

    def __init__(self, rows: torch.Tensor, positions: list[int], count: int, ranks: Ranks):
        self.rows, self.positions, self.count, self.ranks = rows, positions, count, ranks

    @property
    def dtype(self) -> torch.dtype:
        return self.rows.dtype

    @property
    def device(self) -> torch.device:
        return self.rows.device

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.count, self.rows.shape[1]))

    def __len__(self) -> int:
        return self.count

    def __rmatmul__(self, coefficients: torch.Tensor) -> torch.Tensor:
        """sum_i c_i row_i over the whole cohort: this rank's terms, then an all-reduce."""
        import torch.distributed as dist

        mine = torch.as_tensor(self.positions, device=coefficients.device)
        total = coefficients.to(self.rows.dtype)[mine].to(self.rows.device) @ self.rows
        started = time.perf_counter()
        dist.all_reduce(total)
        self.ranks.exchange_s += time.perf_counter() - started
        # a ring all-reduce moves 2 (R - 1) / R of the vector through each rank
        self.ranks.exchange_mb += 2 * (self.ranks.size - 1) / self.ranks.size * _megabytes(total)
        return total

    def sum(self, dim: int) -> torch.Tensor:
        if dim != 0:
            raise self._unsupported(f"sum(dim={dim})")
        return torch.ones(self.count, dtype=self.rows.dtype, device=self.rows.device) @ self

    def __getitem__(self, index):
        raise self._unsupported("a single client's row")

    def __iter__(self):
        raise self._unsupported("each client's row")

    @staticmethod
    def _unsupported(what: str) -> FedrunError:
        return FedrunError(f"the round read {what} of updates summed over the ranks (hardware.exchange=sums). Fix: "
                           "hardware.exchange=rows, and declare reads_each_update = True on the part that reads it")


class Ranked:
    """An executor whose cohort is trained over the run's ranks: each rank trains its share of the clients (and makes
    their step selection) with the executor it wraps, and every rank then holds the cohort's results
    (:func:`trained_in_shares`)."""

    def __init__(self, executor, ranks: Ranks, device: torch.device, summed: bool):
        self.executor, self.ranks, self.device, self.summed = executor, ranks, device, summed
        self.name = executor.name

    def train(self, rule, model, ctx, plans: list, x, y, client_states: list, record=None, select=None
              ) -> CohortResult:
        def share(plans, client_states):
            return self.executor.train(rule, model, ctx, plans, x, y, client_states, record, select)
        return trained_in_shares(self.ranks, share, plans, client_states, self.device, self.summed)

    def report(self) -> dict:
        return self.executor.report()


def trained_in_shares(ranks: Ranks, train, plans: list, client_states: list, device: torch.device,
                      summed: bool = False) -> CohortResult:
    """The cohort's training over the ranks: ``train(plans, client_states)`` on this rank's share of the clients,
    then every share's results, in cohort order, on every rank (on ``device``), but the recorded steps, which stay on
    their rank (a step selection made there replaces them). ``summed``: the updates stay on their ranks too, as
    :class:`SummedRows`."""
    shares = ranks.shares([p.tau for p in plans])
    mine = shares[ranks.rank]
    part = train([plans[i] for i in mine], [client_states[i] for i in mine]) if mine else None
    sent = None if part is None else vars(part) | {"steps": None} | ({"updates": None} if summed else {}) | (
        {"selection": vars(part.selection)} if part.selection is not None else {})
    started = time.perf_counter()
    gathered = ranks.gather(_sendable(sent))
    ranks.exchange_s += time.perf_counter() - started
    ranks.exchange_mb += sum(_megabytes(p) for r, p in enumerate(gathered) if r != ranks.rank)
    parts = [p for p in gathered if p is not None]
    back = torch.argsort(torch.tensor([i for s in shares for i in s])).tolist()  # cohort position -> gathered row

    def stacked(pieces: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(pieces)[back].to(device)

    def ordered(name: str) -> list:
        rows = [row for p in parts for row in p[name]]
        return [to_device(rows[i], device) for i in back]

    def fields(name: str) -> dict[str, torch.Tensor]:
        return {k: stacked([p[name][k] for p in parts]) for k in parts[0][name]}

    updates = (SummedRows(part.updates.to(device), mine, len(plans), ranks) if summed
               else stacked([p["updates"] for p in parts]))
    selection = Selection(**fields("selection")) if parts[0]["selection"] is not None else None
    return CohortResult(updates, ordered("buffers"), stacked([p["mean_loss"] for p in parts]), ordered("client_states"),
                        fields("uploads"), None, selection)


def _sendable(tree):
    """Every tensor of a nested dict/list/tuple in host memory and holding only its own values: a view (a client's
    state as a row of its chunk's stacked states) would be pickled with the whole storage it looks into."""
    if isinstance(tree, torch.Tensor):
        tree = tree.cpu()
        return tree.clone() if tree.untyped_storage().nbytes() > tree.numel() * tree.element_size() else tree
    if isinstance(tree, dict):
        return {k: _sendable(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_sendable(v) for v in tree)
    return tree


def _megabytes(tree) -> float:
    if isinstance(tree, torch.Tensor):
        return tree.numel() * tree.element_size() / 2**20
    if isinstance(tree, dict):
        return sum(map(_megabytes, tree.values()))
    if isinstance(tree, (list, tuple)):
        return sum(map(_megabytes, tree))
    return 0.0


def launched() -> int:
    """The number of processes started for this run: torchrun's, or a launcher's tasks for the job (submitit's
    ``tasks_per_node`` times its nodes, on SLURM or locally); 1 otherwise."""
    if "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    if os.environ.get("SUBMITIT_EXECUTOR"):
        from submitit import JobEnvironment

        return JobEnvironment().num_tasks
    return 1


def backend_for(backend: str, device: str) -> str:
    """``hardware.backend`` resolved: auto is NCCL where the ranks compute on GPUs, else gloo."""
    if backend != "auto":
        return backend
    return "nccl" if device == "cuda" or (device == "auto" and torch.cuda.is_available()) else "gloo"


def check_ranks(cfg, size: int) -> list[str]:
    """What makes ``size`` ranks unable to run ``cfg``, before any work: a backend this build or machine lacks, or
    more ranks than a round's clients (a rank with no client would wait on every round)."""
    import torch.distributed as dist

    problems = []
    backend = backend_for(cfg.hardware.backend, cfg.hardware.device)
    available = {"gloo": dist.is_available() and dist.is_gloo_available(),
                 "nccl": dist.is_available() and dist.is_nccl_available() and torch.cuda.is_available()}
    if not available.get(backend, False):
        where = "this machine has no CUDA GPU" if backend == "nccl" else "this PyTorch build lacks it"
        problems.append(f"hardware.backend={cfg.hardware.backend}: the ranks' backend {backend} is not available "
                        f"({where}). Fix: hardware.backend=gloo (CPUs), or run on GPUs with nccl")
    per_round = min(int(cfg.fl.clients_per_round), int(cfg.fl.num_clients))
    if size > per_round:
        problems.append(f"{size} ranks for {per_round} clients per round: a rank would have no client to train. "
                        f"Fix: torchrun --nproc-per-node {per_round} (or fewer), or fl.clients_per_round={size}")
    return problems


def start(cfg) -> Ranks:
    """Join the run's process group (torchrun's environment, or a submitit job's tasks) after checking that it can
    run ``cfg``; a process launched alone is the one rank of one. Ranks other than 0 log warnings only."""
    size = launched()
    if size == 1:
        return Ranks()
    import torch.distributed as dist

    problems = check_ranks(cfg, size)
    if problems:
        raise ConfigError(problems)
    if not dist.is_initialized():
        if "WORLD_SIZE" not in os.environ:  # a submitit job's tasks: torch's variables from SLURM's (or its own)
            from submitit.helpers import TorchDistributedEnvironment

            TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        backend = backend_for(cfg.hardware.backend, cfg.hardware.device)
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend, timeout=timedelta(minutes=10))
    on_gpu = dist.get_backend() == "nccl"
    ranks = Ranks(dist.get_rank(), dist.get_world_size(),
                  torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu"))
    if not ranks.writer:
        logging.getLogger("fedrun").setLevel(logging.WARNING)
    return ranks

"""Executors run a round's cohort through a local rule. Algorithms never know which executor runs them.

``loop`` trains the clients one after another. ``vmap`` stacks the cohort's step states along a client axis and
runs each local step for all of them in one ``torch.func.vmap`` call, minibatches gathered by index from the
device-resident data. Clients are sorted by tau_i, so at step t the active clients are a prefix of the stack and
finished clients cost nothing (masked, not padded). A cohort that would not fit in memory runs in chunks; on a CPU,
a dense model's stacked step also in chunks that fit the last-level cache (``cache_chunk``).

When ``tail`` or fewer clients are left stepping (the longest clients of a cohort of unequal sizes), they finish one
after another with the plain step: on a CPU vmap's per-call overhead exceeds what batching
a few small clients saves, and a natural partition's largest client can step alone for hundreds of steps.

On a CPU, local SGD on a one-layer model with minibatches of a few samples runs a block of steps at a time instead
(``blocks``, fedrun/engine/execution/blocked.py): the same steps, with each client's weights written once per block.

``compile=True`` hands the vmapped step to ``torch.compile``, which fuses its many small operations (on a CPU into
one C++ loop nest; a C++ compiler is needed). Compiled graphs are specialised to shapes, so there every step runs
the whole stack and each client's state is set aside when it finishes: one graph per minibatch width instead of one
per number of active clients, at the price of stepping finished clients' rows (discarded).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call, vmap

from fedrun.algorithms.base import ClientContext, CohortResult, LocalRule, State
from fedrun.data.augment import minibatch, rows
from fedrun.errors import ConfigError
from fedrun.model.functional import FunctionalModel
from fedrun.model.native.indexed_rows import of as rows_in_place
from fedrun.engine.execution import blocked, tree
from fedrun.engine.execution.cuda_math import free_bytes
from fedrun.engine.execution.precision import carried_to_threads
from fedrun.engine.run.sampling import ClientPlan

log = logging.getLogger("fedrun")


def _result(outputs: list[tuple]) -> CohortResult:
    """Stack per-client (update, buffers, mean loss, client state, uploads, steps) tuples, in cohort order."""
    updates, buffers, losses, states, uploads, steps = zip(*outputs)
    return CohortResult(torch.stack(updates), list(buffers), torch.stack(losses), list(states), stack_uploads(uploads),
                        list(steps) if steps[0] is not None else None)


def stack_uploads(uploads) -> dict[str, torch.Tensor]:
    """Each client's uploads (a dict of tensors each), stacked name by name along a client axis."""
    return {name: torch.stack([u[name] for u in uploads]) for name in uploads[0]}


class Executor:
    """How a cohort's clients are trained (loop, vmap, graph): ``run`` gives the cohort's results; ``train`` the
    same with the clients' step selection made where they trained; ``report`` what the executor did over the run that
    its summary should say (nothing, for most). Wrappers run it in a precision (``precision.InPrecision``) or over
    ranks (``ranks.Ranked``)."""

    name = ""

    def train(self, rule: LocalRule, model: FunctionalModel, ctx: ClientContext, plans: list[ClientPlan],
              x: torch.Tensor, y: torch.Tensor, client_states: list[State | None], record=None, select=None
              ) -> CohortResult:
        """``run``, then ``select(updates, steps, plans)``, the clients' step selection, whose result replaces the
        recorded steps."""
        result = self.run(rule, model, ctx, plans, x, y, client_states, record)
        if select is None:
            return result
        return replace(result, steps=None, selection=select(result.updates, result.steps, plans))

    def report(self) -> dict:
        return {}


class LoopExecutor(Executor):
    """Clients one after another, each step a ``torch.func`` gradient of the flat parameters. With ``threads`` > 1
    (a CPU), that many clients train at once, each in a Python thread of its own with one intra-op thread and its own
    replica of the model: small convolutions use two cores better as two clients than as one client's two-thread
    kernels. Each client's arithmetic is the same whichever thread runs it (no randomness is drawn: models with
    dropout train one client at a time), so results equal the one-thread loop's to float rounding."""

    name = "loop"

    def __init__(self, threads: int = 1):
        self.threads = threads
        self._replicas: tuple[FunctionalModel | None, list[FunctionalModel]] = (None, [])

    def run(self, rule: LocalRule, model: FunctionalModel, ctx: ClientContext, plans: list[ClientPlan],
            x: torch.Tensor, y: torch.Tensor, client_states: list[State | None],
            record: torch.device | None = None) -> CohortResult:
        """``record``: keep every step's direction (``state["direction"]``) on that device, for a step selector (BHerd,
        GraB); the host's memory when they do not fit on the accelerator."""
        jobs = list(zip(plans, client_states))
        if self.threads <= 1 or len(jobs) <= 1:
            return _result([_train_client(rule, model, ctx, p, cs, x, y, record) for p, cs in jobs])
        outputs: list[tuple | None] = [None] * len(jobs)
        # each thread takes the next untrained client, under the lock, longest first: the round ends when the last
        # client does, and a long one taken last would train alone while the other threads idle
        claim = iter(sorted(range(len(jobs)), key=lambda i: -plans[i].tau))
        lock = threading.Lock()
        precision = carried_to_threads(x.device.type)

        def work(replica: FunctionalModel) -> None:
            torch.set_num_threads(1)
            with precision():
                while True:
                    with lock:
                        i = next(claim, None)
                    if i is None:
                        return
                    outputs[i] = _train_client(rule, replica, ctx, *jobs[i], x, y, record)

        before = torch.get_num_threads()
        try:
            with ThreadPoolExecutor(self.threads) as pool:
                for done in [pool.submit(work, r) for r in self._replicas_of(model)[: len(jobs)]]:
                    done.result()
        finally:
            torch.set_num_threads(before)
        return _result(outputs)

    def _replicas_of(self, model: FunctionalModel) -> list[FunctionalModel]:
        """One model per thread: ``functional_call`` swaps a module's parameters while it runs, so threads cannot
        share one."""
        if self._replicas[0] is not model:
            self._replicas = (model, [model, *(model.replica() for _ in range(self.threads - 1))])
        return self._replicas[1]


def step_inputs(rule: LocalRule, model: FunctionalModel, x: torch.Tensor):
    """How a local step's minibatch of ``x`` reaches the rule, as a function of the step's index and number: as its
    index, for a one-layer model's compiled step to read the rows in place (``fedrun/model/native/indexed_rows.py``),
    where the rule reads its minibatches only through the model's loss and gradient (``LocalRule.batchable``, from its
    own class) and the model reads rows of ``x`` (``FunctionalModel.reads_rows``); else gathered (``minibatch``)."""
    if type(rule).__dict__.get("batchable", False) and model.reads_rows(x):
        return lambda idx, step: rows_in_place(x, idx)
    return lambda idx, step: minibatch(x, idx, step)


def _train_client(rule: LocalRule, model: FunctionalModel, ctx: ClientContext, plan: ClientPlan,
                  cstate: State | None, x: torch.Tensor, y: torch.Tensor, record: torch.device | None) -> tuple:
    """One client's local steps: (update, buffers, mean loss, client state, uploads, recorded steps)."""
    state = rule.client_init(ctx, cstate)
    loss_sum = torch.zeros((), device=x.device, dtype=ctx.params.dtype)
    steps = []
    inputs = step_inputs(rule, model, x)
    for t, batch in enumerate(plan.batches):
        state, loss = rule.client_step(model, ctx, state, inputs(batch, t), rows(y, batch))
        loss_sum = loss_sum + loss.detach()
        if record is not None:
            steps.append(state["direction"].to(record, non_blocking=True))
    update, new_state, uploads = rule.client_final(ctx, state, cstate)
    return (update, state["buffers"], loss_sum / plan.tau, new_state, uploads,
            torch.stack(steps) if record is not None else None)


class VmapExecutor(Executor):
    """All clients of a cohort (or of a chunk of it) step together under ``torch.func.vmap``."""

    name = "vmap"

    def __init__(self, chunk_size: int | None = None, memory_fraction: float = 0.5, compile: bool = False,
                 tail: int = 0, blocks: bool = True, cache_fraction: float | None = 0.5):
        self.blocks = blocks  # an affine rule on a one-layer model steps in blocks (engine/blocked.py)
        self.chunk_size = chunk_size
        self.memory_fraction = memory_fraction
        self.cache_fraction = cache_fraction
        self.compile = compile
        self.tail = 0 if compile else tail  # a compiled step runs the whole stack (one graph per batch width)
        self._step: tuple | None = None  # (rule, model, vmapped step), built once: a compiled step is reused

    def _vmapped_step(self, rule: LocalRule, model: FunctionalModel):
        """The rule's client step mapped over the client axis, taking the round's context as an argument (so a
        compiled step serves every round)."""
        if self._step is None or self._step[0] is not rule or self._step[1] is not model:
            step = vmap(lambda ctx, s, xb, yb: rule.client_step(model, ctx, s, xb, yb), in_dims=(None, 0, 0, 0),
                        randomness="different")
            if self.compile:
                # the graphs of an earlier run in this process (a script's runs) would count against dynamo's limit
                # of graphs per function, past which it silently runs uncompiled
                torch._dynamo.reset()
                step = torch.compile(step, dynamic=False)
            self._step = (rule, model, step)
        return self._step[2]

    def run(self, rule: LocalRule, model: FunctionalModel, ctx: ClientContext, plans: list[ClientPlan],
            x: torch.Tensor, y: torch.Tensor, client_states: list[State | None],
            record: torch.device | None = None) -> CohortResult:
        # clients with the same minibatch width step together, longest tau first
        order = sorted(range(len(plans)), key=lambda i: (plans[i].batches.shape[1], -plans[i].tau, i))
        groups: dict[int, list[int]] = {}
        for i in order:
            groups.setdefault(plans[i].batches.shape[1], []).append(i)
        parts, ran = [], []
        for members in groups.values():
            size = self.chunk_size or self.chunk_for(rule, model, ctx, plans[members[0]], x, record)
            for s in range(0, len(members), size):
                chunk = members[s : s + size]
                parts.append(self._run_chunk(rule, model, ctx, [plans[i] for i in chunk], x, y,
                                             [client_states[i] for i in chunk], record))
                ran.extend(chunk)
        return in_cohort_order(parts, ran)

    def _block_length(self, rule, model, width: int, record) -> int:
        """Steps per block where this chunk runs in blocks (engine/blocked.py), else 0: not with recorded steps or a
        compiled step."""
        if not self.blocks or record is not None or self.compile:
            return 0
        return blocked.block_length(rule, model, width)

    def _run_chunk(self, rule, model, ctx, plans, x, y, cstates, record=None):
        current = initial_states(rule, ctx, cstates)  # the last step's stack
        block = self._block_length(rule, model, plans[0].batches.shape[1], record)
        if block:
            loss_sum = blocked.run(rule, model, ctx, plans, x, y, current, block)
            return client_results(rule, ctx, current, cstates, plans, loss_sum)
        k_all = len(plans)
        taus = [p.tau for p in plans]  # non-increasing
        native = steps_natively(rule, model) and not self.compile
        step = (lambda c, s, xb, yb: rule.client_step(model, c, s, xb, yb)) if native else \
            self._vmapped_step(rule, model)
        step_ctx = replace(ctx, in_place=True) if native else ctx  # a native step's state: the stack made above
        inputs = step_inputs(rule, model, x) if native else functools.partial(minibatch, x)  # vmap takes tensors
        # a native step has no vmap overhead to save, but a lone client's plain step skips the stack's slicing and
        # batched products (most of a natural partition's round: its largest client steps alone)
        tail = min(self.tail, 1) if native else self.tail
        loss_sum = torch.zeros(k_all, device=x.device, dtype=ctx.params.dtype)
        steps = torch.zeros(k_all, taus[0], len(ctx.params), device=record, dtype=ctx.params.dtype) \
            if record is not None else None
        batches = torch.nn.utils.rnn.pad_sequence([p.batches for p in plans], batch_first=True)  # (K, tau_1, b)
        # each client's state as it ends, in its row, copied there once when it finishes: while every client steps,
        # the last step's whole stack is that holder (a step makes new tensors or updates its active rows in place,
        # and finished rows step no more), but a compiled step's whole stack steps on, so it keeps a holder of its own
        finished = tree.tree_map(torch.empty_like, current) if self.compile else current
        live, k_before = k_all, k_all  # rows of the last step's stack; its first k_before were active
        for t in range(taus[0]):
            k = sum(tau > t for tau in taus)  # active clients: a prefix of the stack
            if live == k_all and not self.compile:
                finished = current  # its rows k .. k_all - 1 are the clients that have just finished
            else:
                tree.copy_rows(finished, current, k, k_before)  # clients k .. k_before - 1 have just finished
            if k <= tail:
                if finished is not current:
                    tree.copy_rows(finished, current, 0, k)
                finished = self._finish_alone(rule, model, ctx, finished, plans[:k], t, x, y, loss_sum, steps)
                k_before = 0
                break
            width = k_all if self.compile else k
            active = current if width == live else tree.tree_map(lambda a: a[:width], current)
            current, loss = step(step_ctx, active, inputs(batches[:width, t], t), rows(y, batches[:width, t]))
            live, k_before = width, k
            loss_sum[:k] += loss[:k].detach()
            if record is not None:
                steps[:k, t].copy_(current["direction"][:k], non_blocking=True)
        if finished is not current:
            tree.copy_rows(finished, current, 0, k_before)
        return client_results(rule, ctx, finished, cstates, plans, loss_sum, steps)

    @staticmethod
    def _finish_alone(rule, model, ctx, stacked, plans, t, x, y, loss_sum, steps):
        """The active clients' steps from step t on, one client after another with the plain step (the loop's),
        written back into their rows of the stack (returned: an entry vmap broadcast from the context, one memory row
        for all, is made whole first)."""
        stacked = tree.tree_map(lambda a: a.contiguous(), stacked)
        inputs = step_inputs(rule, model, x)
        ctx = replace(ctx, in_place=True)  # each client's state below: a copy of its row
        for i, plan in enumerate(plans):
            state = tree.tree_map(lambda a: a[i].clone(), stacked)
            for s in range(t, plan.tau):
                batch = plan.batches[s]
                state, loss = rule.client_step(model, ctx, state, inputs(batch, s), rows(y, batch))
                loss_sum[i] += loss.detach()
                if steps is not None:
                    steps[i, s].copy_(state["direction"], non_blocking=True)
            tree.tree_map(lambda a, b: a[i].copy_(b), stacked, state)
        return stacked

    def chunk_for(self, rule, model, ctx, plan: ClientPlan, x: torch.Tensor, record=None) -> int:
        """Clients per chunk from the memory one client's step needs: within ``memory_fraction`` of the memory free
        on the device and, for a dense chain's stacked step on a CPU, within ``cache_fraction`` of the last-level
        cache (``cache_chunk``)."""
        state_bytes = sum(t.numel() * t.element_size() for t in tree.leaves(rule.client_init(ctx, None)))
        per_client = max(1, 4 * state_bytes + 3 * plan.batches.shape[1] * activation_bytes_per_sample(model, x))
        size = max(1, int(self.memory_fraction * free_memory_bytes(x.device) // per_client))
        in_blocks = self._block_length(rule, model, plan.batches.shape[1], record)
        stacked_chain = model.chain is not None and steps_natively(rule, model) and not in_blocks and not self.compile
        if self.cache_fraction and x.device.type == "cpu" and stacked_chain:
            size = min(size, cache_chunk(per_client, self.cache_fraction))
        return size


def initial_states(rule: LocalRule, ctx: ClientContext, client_states: list[State | None]) -> State:
    """A chunk's initial client states, stacked along a client axis. Clients without a state of their own (all of
    FedAvg's, SCAFFOLD's in their first round) start alike, since a rule's ``client_init`` is a function of the
    context and the client's state: one init, copied into every row, where the clients' own would make every state
    first (a 1000-client softmax round's start: ``python -m fedrun.bench.workloads``'s softmax576_1000)."""
    if any(cs is not None for cs in client_states):
        return tree.stack([rule.client_init(ctx, cs) for cs in client_states])
    return tree.repeat(rule.client_init(ctx, None), len(client_states))


def client_results(rule: LocalRule, ctx: ClientContext, stacked: State, client_states: list[State | None],
                   plans: list[ClientPlan], loss_sum: torch.Tensor, steps: torch.Tensor | None = None
                   ) -> CohortResult:
    """A chunk's result from its final ``stacked`` states (the rule's ``client_final``, ``stacked_final``), each
    client's mean minibatch loss (``loss_sum`` over its steps) and its recorded steps, as the loop executor gives
    them, in the chunk's order."""
    k = len(plans)
    mean_loss = loss_sum / torch.tensor([p.tau for p in plans], dtype=loss_sum.dtype, device=loss_sum.device)
    updates, new_states, uploads = stacked_final(rule, ctx, stacked, client_states)
    return CohortResult(updates, tree.unstack(stacked["buffers"], k), mean_loss, new_states, uploads,
                        [steps[i, : p.tau] for i, p in enumerate(plans)] if steps is not None else None)


def stacked_final(rule: LocalRule, ctx: ClientContext, stacked: State, client_states: list[State | None]
                  ) -> tuple[torch.Tensor, list[State | None], dict[str, torch.Tensor]]:
    """Every client's ``client_final`` on its row of ``stacked``: the updates (K, d), the new client states and the
    uploads, stacked. One call under ``torch.func.vmap`` where the clients' own states stack (all or none of them
    have one), as the vmapped step runs ``client_step``: each row computed as the rule computes one client's (a
    1000-client softmax round spent a tenth of its time in a thousand calls); one call per client otherwise."""
    k = len(client_states)
    own = sum(cs is not None for cs in client_states)
    if own in (0, k):
        kept_none = []  # whether client_final returned no state (vmap returns tensors only): seen as it runs

        def final(state, client_state):
            update, new_state, uploads = rule.client_final(ctx, state, client_state)
            kept_none.append(new_state is None)
            return update, {} if new_state is None else new_state, uploads

        theirs = tree.stack(client_states) if own else None
        updates, new_states, uploads = vmap(final, in_dims=(0, 0 if own else None))(stacked, theirs)
        return updates, [None] * k if kept_none[0] else tree.unstack(new_states, k), uploads
    updates, new_states, uploads = zip(*(rule.client_final(ctx, state, cs)
                                         for state, cs in zip(tree.unstack(stacked, k), client_states)))
    return torch.stack(updates), list(new_states), stack_uploads(uploads)


def in_cohort_order(parts: list[CohortResult], ran: list[int]) -> CohortResult:
    """The chunks' results (``parts``, their clients in the order ``ran``: cohort positions) as one result in cohort
    order."""
    whole = parts[0] if len(parts) == 1 else CohortResult(
        torch.cat([p.updates for p in parts]), [b for p in parts for b in p.buffers],
        torch.cat([p.mean_loss for p in parts]), [s for p in parts for s in p.client_states],
        {n: torch.cat([p.uploads[n] for p in parts]) for n in parts[0].uploads},
        None if parts[0].steps is None else [s for p in parts for s in p.steps])
    if ran == list(range(len(ran))):
        return whole
    at = [0] * len(ran)  # at[i]: client i's row in whole
    for row, i in enumerate(ran):
        at[i] = row
    rows_of = torch.tensor(at, device=whole.updates.device)
    return CohortResult(whole.updates[rows_of], [whole.buffers[r] for r in at], whole.mean_loss[rows_of],
                        [whole.client_states[r] for r in at], {n: u[rows_of] for n, u in whole.uploads.items()},
                        None if whole.steps is None else [whole.steps[r] for r in at])


def cache_chunk(per_client: int, fraction: float) -> int:
    """Clients per chunk whose step (``per_client`` bytes each: state, gradient, activations) stays within
    ``fraction`` of the last-level cache; unlimited where its size is unknown. A dense chain's stacked step is a few
    matrix products per layer over its clients' (K, d) parameters and gradients: once those outgrow the cache, every
    product and update streams them from memory, and a client's step costs more the more clients step with it
    (``python -m fedrun.bench.workloads``'s chunk table, results/bench/cpu.md). A convolutional cohort's activations
    dwarf its parameters, and its grouped convolutions gain from more clients: not chunked."""
    cache = last_level_cache_bytes()
    return max(1, int(fraction * cache // per_client)) if cache else sys.maxsize


@functools.lru_cache(maxsize=4)
def last_level_cache_bytes(caches: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """The largest cache of CPU 0 (Linux sysfs: ``index*/size`` under ``caches``), None where it cannot be read."""
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    sizes = []
    for entry in caches.glob("index*/size"):
        try:
            text = entry.read_text().strip().upper()
        except OSError:
            continue
        if text[:-1].isdigit() and text[-1] in units:
            sizes.append(int(text[:-1]) * units[text[-1]])
        elif text.isdigit():
            sizes.append(int(text))
    return max(sizes) if sizes else None


def activation_bytes_per_sample(model: FunctionalModel, x: torch.Tensor) -> int:
    """Bytes of every layer's output for one input sample (measured once per model with forward hooks)."""
    cached = getattr(model, "_activation_bytes", None)
    if cached is None:
        total = [0]

        def hook(module, inputs, output):
            outs = output if isinstance(output, (tuple, list)) else (output,)
            total[0] += sum(o.numel() * o.element_size() for o in outs if isinstance(o, torch.Tensor))

        leaves_ = [m for m in model.module.modules() if not list(m.children())]
        handles = [m.register_forward_hook(hook) for m in leaves_]
        try:
            model.set_training(False)  # BatchNorm cannot train on one sample
            with torch.no_grad():
                model.module(x[:1])
        finally:
            for h in handles:
                h.remove()
        cached = model._activation_bytes = total[0]
    return cached


def free_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return free_bytes(device)
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
# Above this many FLOPs per client step, a loop of convolutions beats vmap's batched ones on a CPU; below it,
# vmap's saving of per-call overhead wins: the two break even near LeNet-5 at B = 32 (about 100 MFLOP) in
# fedrun.bench.workloads on 2 cores (results/bench/README.md).
CPU_VMAP_MAX_FLOPS_PER_STEP = 100e6
# Up to this many, a Sequential CNN's cohort stepping as one network (FunctionalModel.cohort) beats the loop, also in
# threads; above it, the loop in threads wins: LeNet-5's cohorts run faster as one network, the FedGH CNN's (2.8
# GFLOP a step) slower, in fedrun.bench.workloads on 2 cores (results/bench/cpu.md).
CPU_NETWORK_MAX_FLOPS_PER_STEP = 1e9


def flops_per_step(model: FunctionalModel, x: torch.Tensor, y: torch.Tensor) -> int:
    """FLOPs of one client's local step (forward and backward) on the minibatch (x, y), counted as
    ``torch.utils.flop_counter`` counts them (the multiplications of convolutions and matrix products, each counted
    twice; a layer's input gradient only where its input needs one; a grouped convolution's weight gradient ``groups``
    times), from the layers' shapes in one forward pass: running FlopCounterMode imports torch._dynamo, a second of
    every run's start. ``tests/engine/execution/test_executor.py`` checks the count against FlopCounterMode's."""
    total = 0

    def count(module, args, out):
        nonlocal total
        if isinstance(module, _CONV):
            forward = 2 * out.numel() * module.weight.shape[1] * math.prod(module.kernel_size)
            weight_grad = forward * module.groups
        else:  # nn.Linear
            forward = weight_grad = 2 * out.numel() * module.in_features
        total += forward + weight_grad + (forward if args[0].requires_grad else 0)

    hooks = [m.register_forward_hook(count) for m in model.module.modules() if isinstance(m, (*_CONV, nn.Linear))]
    try:
        model.set_training(True)
        with torch.enable_grad():
            params = model.unflatten(model.init_params().requires_grad_(True))
            functional_call(model.module, {**params, **model.init_buffers()}, (x,))  # the module's own layers
    finally:
        for hook in hooks:
            hook.remove()
    return total


def resolve_auto(model: FunctionalModel, device: torch.device, x: torch.Tensor, y: torch.Tensor,
                 cohort_size: int = 2, threads: int = 1, rule: LocalRule | None = None) -> tuple[str, str]:
    """``auto``: vmap on a GPU. On a CPU: vmap for dense models; for convolutional models the loop when it trains
    ``threads`` > 1 clients at once (as fast as vmap's batched convolutions or faster on the convolutional workloads
    of ``python -m fedrun.bench.workloads``), else vmap when one client step is small (at most
    CPU_VMAP_MAX_FLOPS_PER_STEP on the minibatch (x, y)) and the loop otherwise; but vmap where the cohort of a
    Sequential CNN steps as one network (``rule`` batchable, ``FunctionalModel.cohort``) and one client step is at most
    CPU_NETWORK_MAX_FLOPS_PER_STEP; the loop for recurrent models (PyTorch has no vmap batching rule
    for its fused CPU RNN kernel). Deterministic, so the same config always runs the same executor; the bench checks
    it against all. One client per round (centralized SGD) has nothing to batch: the loop, which skips vmap's per-call
    overhead."""
    if cohort_size == 1:
        return "loop", "one client per round"
    if device.type == "cuda":
        return "vmap", "GPU"
    if model.recurrent:  # their fused CPU kernel has no vmap batching rule
        return "loop", "recurrent layers on the CPU"
    if not any(isinstance(m, _CONV) for m in model.module.modules()):
        return "vmap", "dense layers only, on the CPU"
    flops = flops_per_step(model, x, y)
    if (model.cohort is not None and rule is not None and steps_natively(rule, model)
            and flops <= CPU_NETWORK_MAX_FLOPS_PER_STEP):
        return "vmap", (f"a Sequential CNN, {flops / 1e6:.0f} MFLOP per client step, on the CPU: the cohort steps as "
                        "one network")
    if threads > 1:
        return "loop", f"convolutions on the CPU, {threads} clients at once"
    if flops <= CPU_VMAP_MAX_FLOPS_PER_STEP:
        return "vmap", f"convolutions, {flops / 1e6:.0f} MFLOP per client step (small) on the CPU"
    return "loop", f"convolutions, {flops / 1e6:.0f} MFLOP per client step (large) on the CPU"


def steps_natively(rule: LocalRule, model: FunctionalModel) -> bool:
    """The stack of clients steps as one batch without vmap: a rule that declares its step batchable (elementwise
    over clients, ``LocalRule.batchable``) on a model that steps a stack itself (``FunctionalModel.stacks``: a dense
    chain's gradient by hand in batched products, a Sequential CNN's cohort as one network): no functorch wrapping
    per operation, which is most of a small model's vmapped step."""
    return type(rule).__dict__.get("batchable", False) and model.stacks


def blocks_pay(blocks: bool, device: torch.device) -> bool:
    """``hardware.blocks`` where it pays: on a CPU. A block's steps are as many launches of smaller kernels on a GPU,
    plus its Gram matrix and the weights' product, so there step by step is faster (the softmax workloads' rounds,
    results/bench/gpu.md)."""
    return blocks and device.type == "cpu"


def vmap_tail(model: FunctionalModel, device: torch.device) -> int:
    """``hardware.vmap_tail=null``: on a CPU, up to 4 clients of a dense model finish one by one (vmap's per-call
    overhead outweighs batching so few small steps), one of a convolutional model (its plain step is costlier); on a
    GPU one (a lone client has nothing to batch). A stack stepping natively (no vmap) takes at most 1 of it.
    Deterministic, as ``auto`` is: the same config always steps the same way. A threshold read off informal timings on
    this CPU, not a committed benchmark."""
    if device.type == "cuda" or any(isinstance(m, _CONV) for m in model.module.modules()):
        return 1
    return 4


_RANDOM_LAYERS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout,
                  nn.RReLU)


def random_layers(model: FunctionalModel) -> list[str]:
    """The names of the model's layers that draw random numbers in training (dropout), sorted."""
    return sorted({type(m).__name__ for m in model.module.modules() if isinstance(m, _RANDOM_LAYERS)})


def loop_threads(given: int | None, model: FunctionalModel, device: torch.device, cohort_size: int) -> int:
    """Clients the loop trains at once: ``given``, or (null) on a CPU one per intra-op thread torch would use, at
    most the cohort; one on a GPU, or where the model draws random numbers in training (dropout: the threads would
    share one generator, and its draws would depend on their timing)."""
    drawing = random_layers(model)
    if given is not None:
        if given > 1 and drawing:
            raise ConfigError([f"hardware.loop_threads={given}: the model has {', '.join(drawing)}, whose "
                               "random draws would depend on how the threads interleave; set hardware.loop_threads=1 "
                               "(or null)"])
        return given
    if device.type != "cpu" or drawing:
        return 1
    return max(1, min(torch.get_num_threads(), cohort_size))

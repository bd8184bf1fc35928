"""The ``graph`` executor: a cohort's local steps in static shapes, each step on a GPU one replay of a CUDA graph.

A GPU runs a small client's step in microseconds, so launching its few hundred kernels from Python costs more than
running them (a 100-client LeNet-5 round's eager vmap is launch-bound). A CUDA graph records one step's kernels once
and replays them with one launch; what it replays must keep its shapes and its tensors' addresses. So every step here
runs the chunk's whole stack: the round's minibatch indices lie on the device as a (K, tau_max, B) table, each step
copies its column into a fixed index tensor, and a fixed mask keeps the state of a client that has taken its tau_i
steps (its row still steps, and the mask discards the result). The step writes its new state into the same tensors it
read, and adds each active client's loss into a fixed sum: no host copy and no Python decision depend on a step's
values, so nothing waits for the device inside a round.

The first step of a chunk runs eagerly (on a side stream, as CUDA graph capture asks: lazy initialisations happen
outside the capture), the second is captured, and it and every later step replay the graph. A graph is captured per
chunk and round: the round's context (the server's model, the learning rate) is part of what it recorded.

On a CPU (or wherever capture is off: a model drawing random numbers, augmented inputs that change with the step),
the same masked steps run eagerly: the bookkeeping that a GPU replays, run where it can be tested; there the
``vmap`` executor, which steps only the active clients, is faster.
"""

from __future__ import annotations

import functools
import logging

import torch

from fedrun.algorithms.base import LocalRule
from fedrun.data.augment import AugmentedImages, minibatch, rows
from fedrun.engine.execution import tree
from fedrun.engine.execution.executor import (VmapExecutor, client_results, initial_states, random_layers,
                                              steps_natively)
from fedrun.model.functional import FunctionalModel

log = logging.getLogger("fedrun")


class GraphExecutor(VmapExecutor):
    """The vmap executor's cohort (a stack of client states, chunks sized from free memory) stepped in static
    shapes, captured as a CUDA graph where ``capture`` (null: on a GPU)."""

    name = "graph"

    def __init__(self, chunk_size: int | None = None, memory_fraction: float = 0.5, capture: bool | None = None):
        super().__init__(chunk_size, memory_fraction, compile=False, tail=0, blocks=False, cache_fraction=None)
        self.capture = capture
        # what the run's steps were: graphs captured, steps replayed, steps run eagerly, why capture stopped (if it
        # did): summary.json's and the benchmarks' records, so that a "graph" timing says whether graphs replayed
        self.graphs_captured = self.graph_replays = self.eager_steps = 0
        self.capture_fallback: str | None = None

    def report(self) -> dict:
        """What the executor did over the run, for its summary: the capture counts and a fallback's reason."""
        return {"graphs_captured": self.graphs_captured, "graph_replays": self.graph_replays,
                "eager_steps": self.eager_steps, "capture_fallback": self.capture_fallback}

    def captures(self, model: FunctionalModel, x) -> bool:
        """Whether this chunk's steps replay a CUDA graph: on a GPU, unless the model draws random numbers (dropout:
        a replay would repeat its draws) or the inputs are augmented per step (the step's index picks the
        augmentation), or a capture failed earlier in the run."""
        wanted = x.device.type == "cuda" if self.capture is None else self.capture
        return wanted and x.device.type == "cuda" and not isinstance(x, AugmentedImages) and not random_layers(model)

    def chunk_for(self, rule, model, ctx, plan, x, record=None) -> int:
        """The vmap executor's chunk, halved where the steps are captured: a graph keeps its step's intermediates in
        a memory pool of its own, beside what the eager warm-up step left in the allocator's cache."""
        size = super().chunk_for(rule, model, ctx, plan, x, record)
        return max(1, size // 2) if self.captures(model, x) else size

    def _run_chunk(self, rule: LocalRule, model: FunctionalModel, ctx, plans, x, y, cstates, record=None):
        k = len(plans)
        state = initial_states(rule, ctx, cstates)
        # a batchable rule steps the stack without vmap, making new tensors (ctx.in_place is off: the mask keeps a
        # finished client's old row, so a step may not update it in place)
        step = functools.partial(rule.client_step, model) if steps_natively(rule, model) else \
            self._vmapped_step(rule, model)
        taus = torch.tensor([p.tau for p in plans], device=x.device)
        tau_max = max(p.tau for p in plans)
        batches = torch.nn.utils.rnn.pad_sequence([p.batches for p in plans], batch_first=True)  # (K, tau_max, b)
        active = torch.arange(tau_max, device=x.device) < taus[:, None]  # (K, tau_max): client i steps at t
        index, mask = batches[:, 0].clone(), active[:, 0].clone()  # the step's inputs, at fixed addresses
        loss_sum = torch.zeros(k, device=x.device, dtype=ctx.params.dtype)
        steps = torch.zeros(k, tau_max, len(ctx.params), device=record, dtype=ctx.params.dtype) \
            if record is not None else None

        def masked_step(t: int) -> None:
            # the step gets its own dicts (a rule may set their entries: ``LocalRule.descend``), the same tensors,
            # except the buffers: a training forward updates BatchNorm's running statistics in place, and the mask
            # must keep a finished client's statistics from before the step
            given = tree.tree_map(lambda a: a, state)
            given["buffers"] = tree.tree_map(torch.clone, state["buffers"])
            new, loss = step(ctx, given, minibatch(x, index, t), rows(y, index))
            tree.tree_map(lambda old, fresh: old.copy_(torch.where(mask.view(k, *[1] * (old.dim() - 1)), fresh, old)),
                          state, new)
            loss_sum.add_(torch.where(mask, loss.detach().to(loss_sum.dtype), 0))

        graph = None
        capture = self.captures(model, x)
        for t in range(tau_max):
            if t:
                index.copy_(batches[:, t])
                mask.copy_(active[:, t])
            if graph is None and capture and t:
                graph = self._captured(masked_step, t)
                capture = graph is not None
            if graph is not None:
                graph.replay()
                self.graph_replays += 1
            elif capture:  # t == 0: the warm-up, eager, before the capture
                self._warm_up(functools.partial(masked_step, t), x.device)
                self.eager_steps += 1
            else:
                masked_step(t)
                self.eager_steps += 1
            if record is not None:
                steps[:, t].copy_(state["direction"], non_blocking=True)
        return client_results(rule, ctx, state, cstates, plans, loss_sum, steps)

    def _captured(self, masked_step, t: int):
        """One masked step captured as a CUDA graph (not run); None, with a warning, the reason kept for the run's
        summary and capture off for the rest of the run, where the step cannot be captured (an operation that waits
        for the device or changes shapes)."""
        try:
            graph = self._capture(functools.partial(masked_step, t))
        except RuntimeError as err:
            self.capture_fallback = str(err).splitlines()[0] if str(err) else type(err).__name__
            log.warning("hardware.executor=graph: a local step could not be captured as a CUDA graph (%s); its steps "
                        "run eagerly for the rest of the run", self.capture_fallback)
            self.capture = False
            return None
        self.graphs_captured += 1
        return graph

    @staticmethod
    def _warm_up(step, device: torch.device) -> None:
        """``step`` run on a side stream, as CUDA graph capture asks: its lazy initialisations happen outside the
        capture."""
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            step()
        torch.cuda.current_stream(device).wait_stream(side)

    @staticmethod
    def _capture(step):
        """``step`` recorded, not run, as a CUDA graph; its ``replay()`` runs it on the tensors it recorded."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        return graph


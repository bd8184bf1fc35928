"""Which executor a run trains its cohorts with (``hardware.executor``; ``auto`` decided from the run's shapes)."""

from __future__ import annotations

import logging
import os
import shutil

import torch

from fedrun.algorithms.base import LocalRule
from fedrun.engine.execution.executor import (LoopExecutor, VmapExecutor, blocks_pay, loop_threads, resolve_auto,
                                              vmap_tail)
from fedrun.engine.execution.graph_executor import GraphExecutor
from fedrun.errors import ConfigError
from fedrun.model.functional import FunctionalModel

log = logging.getLogger("fedrun")


def make_executor(hw_cfg, model: FunctionalModel, device: torch.device, x: torch.Tensor, y: torch.Tensor,
                  cohort_size: int, rule: LocalRule | None = None):
    """The executor of ``hardware.executor``; ``auto`` decides from a minibatch (x, y) of the run's shape, the
    number of clients per round and the local rule."""
    name = hw_cfg.executor
    threads = loop_threads(hw_cfg.loop_threads, model, device, cohort_size)
    if name == "auto":
        name, why = resolve_auto(model, device, x, y, cohort_size, threads, rule)
        log.info("hardware.executor=auto resolved to %s (%s)", name, why)
    compile_ = hw_cfg.compile
    if compile_ and name == "vmap" and device.type == "cpu" and not any(
            shutil.which(c) for c in (os.environ.get("CXX", "g++"), "g++", "clang++", "c++")):
        raise ConfigError(["hardware.compile=true: torch.compile needs a C++ compiler on the CPU and none is on PATH "
                           "(g++, clang++ or $CXX); install one (apt-get install g++) or set hardware.compile=false"])
    if name == "graph":
        if compile_:
            log.warning("hardware.compile=true has no effect with hardware.executor=graph (its steps replay a CUDA "
                        "graph on a GPU)")
        return GraphExecutor(hw_cfg.chunk_size, hw_cfg.memory_fraction)
    if name == "vmap":
        tail = vmap_tail(model, device) if hw_cfg.vmap_tail is None else hw_cfg.vmap_tail
        return VmapExecutor(hw_cfg.chunk_size, hw_cfg.memory_fraction, compile_, tail,
                            blocks_pay(hw_cfg.blocks, device), hw_cfg.cache_fraction)
    if compile_:
        log.warning("hardware.compile=true has no effect: it compiles the vmap executor's step and this run uses the "
                    "loop executor (set hardware.executor=vmap to compile)")
    if threads > 1:
        log.info("the loop trains %d clients at once, one intra-op thread each (hardware.loop_threads)", threads)
    return LoopExecutor(threads)

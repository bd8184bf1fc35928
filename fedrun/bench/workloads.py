"""Benchmark harness: one FL round per workload under the loop, vmap and auto executors.

    python -m fedrun.bench.workloads [--quick] [--out FILE.json] [--device cpu|cuda] [--repeats N]

Each workload is one round of local SGD (FedAvg's local rule) for a paper's cohort shape, on random data of the
paper's input shape (timing does not depend on the pixel values). All numbers of a table come from one run on one
machine: ``speedup = loop_s / vmap_s``, ``gflops`` is the workload's FLOPs (forward + backward, counted by
``torch.utils.flop_counter``) over the auto executor's time, and ``matmul_peak_gflops`` is a large dense matmul
measured in the same run, so ``gflops / matmul_peak_gflops`` says how close a workload gets to the machine's peak.

The add-on workloads time what an algorithm adds to a round against the round's local training, on the paper's
shapes: BHerd's client-side herding (Gram matrix, greedy order, selected sums; alpha = 0.5; the training keeps every
step gradient) and the server-side harmonisers FedGH and DGT on the round's updates: ``<addon>_share =
<addon>_s / train_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from fedrun import __version__
from fedrun.algorithms.base import ClientContext
from fedrun.algorithms.schedule.feedback import RoundFeedback
from fedrun.algorithms.schema import make
from fedrun.config.compose import option
from fedrun.engine.run.sampling import plan_client
from fedrun.engine.execution.executor import (LoopExecutor, VmapExecutor, blocks_pay, flops_per_step, loop_threads,
                                    resolve_auto)
from fedrun.engine.execution.executor_choice import make_executor
from fedrun.engine.run.accounting import simulated_times
from fedrun.engine.execution import host_memory
from fedrun.engine.execution.blocked import block_length
from fedrun.model.functional import FunctionalModel, prefers_channels_last
from fedrun.model.native.fused_conv import applies as kernel_applies
from fedrun.model.zoo import build_model
from fedrun.rundir.files import device_name, git_commit


@dataclass(frozen=True)
class Workload:
    name: str
    paper: str
    model: str  # the conf/model option
    kind: str
    shape: tuple
    classes: int
    clients: int
    samples: int  # per client
    batch: int
    epochs: float = 1.0
    batches: str | None = None  # the one-run workload whose cohorts this one holds several of, side by side


WORKLOADS = [
    Workload("softmax576_400", "MA/GA-FSVRG (MNIST-HOG)", "logreg", "vector", (576,), 10, 400, 150, 1),
    Workload("softmax576_1000", "MA/GA-FSVRG (CIFAR-HOG)", "logreg", "vector", (576,), 10, 1000, 50, 1),
    Workload("svm_mnist_5", "BHerd (SVM-MNIST)", "svm", "image", (1, 28, 28), 10, 5, 12000, 100),
    Workload("lenet5_cifar_100", "GIFT (LeNet-5)", "lenet5", "image", (3, 32, 32), 10, 100, 20, 10, 5.0),
    Workload("lenet5_mnist_10", "default experiment (make run)", "lenet5", "image", (1, 28, 28), 10, 10, 640, 64),
    Workload("cnn_fedgh_20", "FedGH (CNN)", "cnn_fedgh", "image", (3, 32, 32), 10, 20, 320, 64),
    Workload("mlp_synthetic_100", "FL-bench's FedAvg (2NN, FedProx synthetic)", "mlp", "vector", (60,), 10, 100, 80,
             32, 5.0),
]

# Cohorts of a thousand clients, and 16 runs' cohorts as one: the GPU's scale (minutes on a CPU), timed only when
# named in --only (`make bench-scale`)
SCALE_WORKLOADS = [
    Workload("lenet5_cifar_1000", "GIFT's LeNet-5 at 1000 clients (5 steps, B = 10)", "lenet5", "image", (3, 32, 32),
             10, 1000, 50, 10),
    Workload("mlp_mnist_1000", "FedAvg's 2NN (McMahan et al.) at 1000 clients (5 steps, B = 10)", "mlp", "vector",
             (784,), 10, 1000, 50, 10),
    Workload("lenet5_mnist_160", "16 runs of the default experiment, their cohorts batched as one", "lenet5", "image",
             (1, 28, 28), 10, 160, 640, 64, batches="lenet5_mnist_10"),
]

ADDON_WORKLOADS = [  # (workload, add-ons timed on its round)
    (Workload("herd_svm_mnist", "BHerd (SVM-MNIST)", "svm", "image", (1, 28, 28), 10, 5, 12000, 100),
     ("herd",)),
    (Workload("herd_cnn_cifar10", "BHerd (CNN-CIFAR10)", "cnn_bherd", "image", (3, 32, 32), 10, 5, 10000,
              100), ("herd",)),
    (Workload("harmonize_cnn_k20", "FedGH/DGT (CIFAR-10 CNN, K=20, E=5)", "cnn_fedgh", "image", (3, 32, 32),
              10, 20, 320, 64, 5.0), ("fedgh", "dgt")),
    (Workload("harmonize_perceptron_k1000", "FedGH/DGT (LEAF Synthetic perceptron, K=1000)", "logreg",
              "vector", (60,), 5, 1000, 20, 5), ("fedgh", "dgt")),
    (Workload("gift_lenet5_k40", "GIFT (LeNet-5, 40 of 100 clients, tau = 100)", "lenet5", "image",
              (3, 32, 32), 10, 40, 600, 32, 5.34), ("gift",)),
]


def quick(w: Workload) -> Workload:
    """A smaller cohort for smoke runs (--quick): the same shapes, fewer clients and steps."""
    return replace(w, clients=max(2, w.clients // 10), samples=max(w.batch, w.samples // 10))


class PeakMemory:
    """Peak memory while a block runs, data included: CUDA's allocator peak, or the process's resident set sampled
    every 2 ms on a CPU."""

    def __init__(self, device: torch.device):
        self.device = device
        self.peak_mb = 0.0

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._peak = self._rss()
            self._stop = threading.Event()

            def sample():
                while not self._stop.is_set():
                    self._peak = max(self._peak, self._rss())
                    time.sleep(0.002)

            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
        else:
            self._stop.set()
            self._thread.join()
            self.peak_mb = max(self._peak, self._rss()) / 2**20


def matmul_peak_gflops(device: torch.device, repeats: int = 3, dtype: torch.dtype = torch.float32) -> float:
    """GFLOP/s of a large matrix product of ``dtype`` operands (on a GPU, in float32 on TF32 units where the caller
    has switched them on)."""
    n = 8192 if device.type == "cuda" else 2048
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = min(seconds(lambda: a @ b, device) for _ in range(repeats + 1))
    return 2 * n**3 / best / 1e9


def convolution_peak_gflops(device: torch.device, repeats: int = 3) -> float:
    """The CPU peak's product (2048^3) as a 1x1 convolution in channels-last: oneDNN's kernel, which uses AVX-512
    where MKL's matrix product may not (on AMD CPUs MKL takes its AVX2 path: about half this machine's peak)."""
    n = 2048
    x = torch.randn(16, n // 16, 1, n, device=device).permute(0, 3, 1, 2)  # (16, C = n, n / 16, 1), channels-last
    w = torch.randn(n, n, 1, 1, device=device)
    best = min(seconds(lambda: torch.nn.functional.conv2d(x, w), device) for _ in range(repeats + 1))
    return 2 * n**3 / best / 1e9


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def seconds(work, device: torch.device) -> float:
    """Wall seconds of ``work()``, the device's queued work included."""
    sync(device)
    t = time.perf_counter()
    work()
    sync(device)
    return time.perf_counter() - t


def setup(w: Workload, device: torch.device, seed: int = 0):
    """The workload's model (its layout as ``hardware.layout=auto`` picks it), data, client plans and context."""
    torch.manual_seed(seed)
    module, objective = build_model(option("model", w.model), w.kind, w.shape, w.classes, w.name)
    model = FunctionalModel(module.to(device), objective, channels_last=prefers_channels_last(module, device),
                            cohort_network=device.type == "cpu", onednn=True, fused_conv=device.type == "cpu",
                            indexed_rows=device.type == "cpu")
    n = w.clients * w.samples
    x = (torch.randint(0, 1000, (n, *w.shape)) if w.kind == "tokens" else torch.randn(n, *w.shape)).to(device)
    y = torch.randint(0, w.classes, (n,), device=device)
    fixed = make("schedule", "fixed")
    tau = fixed.local_steps(fixed.init(), w.samples, w.epochs, w.batch)
    plans = [plan_client(c, np.arange(c * w.samples, (c + 1) * w.samples), tau, w.batch, seed, 1, True, device)
             for c in range(w.clients)]
    ctx = ClientContext(1, model.init_params(), model.init_buffers(), lr=0.01)
    return model, x, y, plans, ctx


def flops_per_round(model, x, y, plans) -> int:
    first = plans[0].batches[0]
    return flops_per_step(model, x[first], y[first]) * sum(p.tau for p in plans)


LONG_ROUND_S = 10.0  # an executor whose first round takes this long is timed once more, not ``repeats`` times


def time_rounds(executors: dict, rule, model, ctx, plans, x, y, repeats: int, models: dict | None = None,
                label: str = "") -> tuple[dict, dict, dict]:
    """Best seconds per executor, peak memory MB of one round under each, and the seconds of each one's first round
    (the warm-up). After the warm-up, the executors are timed in turn (interleaved, so drift on the machine hits all
    alike) until every one has been timed ``repeats`` times and, for short rounds, about two seconds in all (at most
    20 times); but one whose warm-up took LONG_ROUND_S or more is timed once after it (on a GPU the sequential loop
    over a 1000-client cohort takes minutes a round, against which its spread is small). ``models``: another form of the
    model for some executors (by name), e.g. another layout. A progress bar (``label``) on a terminal."""
    states = [None] * len(plans)
    models = models or {}
    bar = tqdm(total=3 * len(executors), desc=label, unit="round", leave=False, disable=None)

    def once(name) -> float:
        took = seconds(lambda: executors[name].run(rule, models.get(name, model), ctx, plans, x, y, states), x.device)
        bar.update()
        return took

    with bar:
        first = {}
        for name in executors:  # warm-up (a compiled step compiles here)
            first[name] = once(name)
        repeats = max(repeats, min(20, int(2.0 / max(min(first.values()), 1e-3))))
        times = {name: 1 if first[name] >= LONG_ROUND_S else repeats for name in executors}
        bar.total = sum(times.values()) + 2 * len(executors)
        best = {name: float("inf") for name in executors}
        for r in range(repeats):
            for name in executors:
                if r < times[name]:
                    best[name] = min(best[name], once(name))
        peak = {}
        for name, ex in executors.items():
            with PeakMemory(x.device) as mem:
                ex.run(rule, models.get(name, model), ctx, plans, x, y, states)
            bar.update()
            peak[name] = mem.peak_mb
    return best, peak, first


def time_evaluations(models: dict, ctx, x, y, repeats: int, batch_size: int = 2048) -> dict:
    """Best seconds of evaluating (x, y) per form of the model (``eval.batch_size``'s default), interleaved."""
    best = {name: float("inf") for name in models}
    for _ in range(repeats + 1):
        for name, model in models.items():
            best[name] = min(best[name], seconds(lambda: model.evaluate_hits(ctx.params, ctx.buffers, x, y,
                                                                                   batch_size), x.device))
    return best


def run_workload(w: Workload, device: torch.device, repeats: int, peak: float, compiled: bool = False) -> dict:
    model, x, y, plans, ctx = setup(w, device)
    first = plans[0].batches[0]
    threads = loop_threads(None, model, device, len(plans))
    rule = make("local", "sgd")
    _, why = resolve_auto(model, device, x[first], y[first], len(plans), threads, rule)
    auto = make_executor(option("hardware", "auto"), model, device, x[first], y[first], len(plans), rule)  # as a run's
    auto_name = f"{auto.name} x{auto.threads}" if auto.name == "loop" and auto.threads > 1 else auto.name
    in_blocks = blocks_pay(True, device)  # whether hardware.blocks (its default) runs local SGD in blocks here
    executors = {"loop": LoopExecutor(), "vmap": VmapExecutor(blocks=in_blocks), "auto": auto}
    if threads > 1:  # else the loop in threads is the loop (a GPU's, one torch thread's): timed once, as the loop
        executors["threads"] = LoopExecutor(threads)
    if compiled:
        executors["compiled"] = VmapExecutor(compile=True)
    blocks = block_length(make("local", "sgd"), model, w.batch)
    if blocks:  # local SGD can run in blocks of steps here: timed both ways (vmap: as hardware.blocks runs it)
        executors["stepwise" if in_blocks else "blocked"] = VmapExecutor(blocks=not in_blocks)
    models = {}
    if model.channels_last:  # image batches in channels-last strides here (hardware.layout): also timed in NCHW
        executors["contiguous"] = make_executor(option("hardware", "auto"), model, device, x[first], y[first],
                                                len(plans), rule)
        models["contiguous"] = FunctionalModel(model.module, model.objective, cohort_network=model.cohort is not None,
                                               fused_conv=model.fused_conv)
    chunk, whole = executors["vmap"].chunk_for(rule, model, ctx, plans[0], x), VmapExecutor(cache_fraction=None)
    if chunk < min(len(plans), whole.chunk_for(rule, model, ctx, plans[0], x)):
        executors["whole"] = whole  # chunks sized by the cache here: also timed without
    if model.cohort is not None:  # the vmap executor steps the cohort as one network here: also timed under vmap
        executors["func"] = VmapExecutor()
        models["func"] = FunctionalModel(model.module, model.objective, channels_last=model.channels_last)
    if model.fused_conv and kernel_applies(model.cohort, x[first][None]):
        executors["unfused"] = VmapExecutor()  # the first convolution runs as one kernel here: also timed without
        models["unfused"] = FunctionalModel(model.module, model.objective, channels_last=model.channels_last,
                                            cohort_network=True)
    if model.reads_rows(x):  # steps (or blocks of steps) read their rows in place: also timed gathered
        executors["gathered"] = VmapExecutor()
        models["gathered"] = FunctionalModel(model.module, model.objective, channels_last=model.channels_last,
                                             cohort_network=model.cohort is not None, onednn=model.onednn,
                                             fused_conv=model.fused_conv)
    seconds, memory, warmup = time_rounds(executors, rule, model, ctx, plans, x, y, repeats, models, w.name)
    seconds.setdefault("threads", seconds["loop"])
    seconds.setdefault("blocked" if in_blocks else "stepwise", seconds["vmap"])  # the vmap executor's way
    forms = {"auto": model}  # and the evaluation of the workload's samples, chunked as fedrun's, also
    if "contiguous" in models:  # in the other layout
        forms["contiguous"] = models["contiguous"]
    if (model.chain is not None or model.image_layers is not None) and device.type == "cpu":
        # as torch's forward of the module (hardware.gradient=autograd, hardware.onednn=false), not by hand
        forms["torch"] = FunctionalModel(model.module, model.objective, by_hand=False,
                                         channels_last=model.channels_last)
    evaluation = time_evaluations(forms, ctx, x, y, repeats) if len(forms) > 1 else {}
    flops = flops_per_round(model, x, y, plans)
    best = min(seconds["loop"], seconds["threads"], seconds["vmap"])
    return {
        "workload": w.name, "paper": w.paper, "model": w.model, "clients": w.clients,
        "samples_per_client": w.samples, "batch": w.batch, "steps": sum(p.tau for p in plans),
        "loop_s": seconds["loop"], "threads_s": seconds["threads"], "loop_threads": threads,
        "vmap_s": seconds["vmap"], "auto_s": seconds["auto"], "auto": auto_name,
        "auto_reason": why, "speedup": seconds["loop"] / seconds["vmap"], "auto_vs_best": seconds["auto"] / best,
        "peak_mem_mb": memory["auto"], "loop_peak_mem_mb": memory["loop"], "vmap_peak_mem_mb": memory["vmap"],
        "gflops": flops / seconds["auto"] / 1e9, "matmul_peak_gflops": peak, "device": device_name(device),
    } | ({"compiled_s": seconds["compiled"], "compiled_first_s": warmup["compiled"],
          "compiled_speedup": seconds["vmap"] / seconds["compiled"]} if compiled else {}) \
      | ({"stepwise_s": seconds["stepwise"], "blocks_s": seconds["blocked"], "block_steps": blocks,
          "blocks_speedup": seconds["stepwise"] / seconds["blocked"]} if blocks else {}) \
      | ({"contiguous_s": seconds["contiguous"], "layout_speedup": seconds["contiguous"] / seconds["auto"],
          "eval_samples": len(y), "eval_s": evaluation["auto"], "eval_contiguous_s": evaluation["contiguous"],
          "eval_speedup": evaluation["contiguous"] / evaluation["auto"]} if "contiguous" in models else {}) \
      | ({"eval_samples": len(y), "eval_s": evaluation["auto"], "eval_torch_s": evaluation["torch"],
          "by_hand_eval_speedup": evaluation["torch"] / evaluation["auto"]} if "torch" in evaluation else {}) \
      | ({"func_s": seconds["func"], "network_speedup": seconds["func"] / seconds["vmap"]}
         if "func" in models else {}) \
      | ({"unfused_s": seconds["unfused"], "fused_speedup": seconds["unfused"] / seconds["vmap"]}
         if "unfused" in models else {}) \
      | ({"gathered_s": seconds["gathered"], "in_place_speedup": seconds["gathered"] / seconds["vmap"]}
         if "gathered" in models else {}) \
      | ({"whole_s": seconds["whole"], "cache_chunk": chunk, "chunk_speedup": seconds["whole"] / seconds["vmap"]}
         if "whole" in executors else {})


def run_addons(w: Workload, addons: tuple[str, ...], device: torch.device, repeats: int) -> dict:
    """Seconds (best of ``repeats`` after a warm-up) of one round's local training and of each add-on on its output:
    ``herd`` (the steps are kept during training), ``fedgh``, ``dgt`` (on the stacked updates), ``gift`` (GIFT's
    observe on the updates plus the time model)."""
    model, x, y, plans, ctx = setup(w, device)
    first = plans[0].batches[0]
    executor = make_executor(option("hardware", "auto"), model, device, x[first], y[first], len(plans),
                             make("local", "sgd"))
    record = device if "herd" in addons else None
    weights = torch.full((len(plans),), 1.0 / len(plans), device=device)
    clients = [p.id for p in plans]
    herd, fedgh = make("step_selector", "herd", alpha=0.5, local_epochs=1.0), make("harmonizer", "fedgh", seed=0)
    dgt, gift = make("harmonizer", "dgt", momentum=0.5), make("schedule", "gift")
    run = {"herd": lambda r: herd.finish(herd.init(), r.updates, herd.select(herd.init(), r.updates, r.steps, plans,
                                                                             ctx), plans, r.uploads, weights),
           "fedgh": lambda r: fedgh(fedgh.init(), r.updates, weights, clients, 1)[1],
           "dgt": lambda r: dgt(dgt.init(), r.updates, weights, clients, 1)[1],
           "gift": lambda r: (gift.observe(gift.init(), RoundFeedback(r.updates, ctx.params, ctx.params, weights,
                                                                      ctx.lr, ctx.lr)),
                              simulated_times([p.tau for p in plans], 1.0, 0.5, 4 * len(ctx.params),
                                              option("timing", "simulated"), np.ones(len(plans)),
                                              np.full(len(plans), 25.0), len(plans)))}

    def timed(fn):
        sync(device)
        t = time.perf_counter()
        out = fn()
        sync(device)
        return time.perf_counter() - t, out

    best = {name: float("inf") for name in ("train", *addons)}
    for attempt in range(max(1, repeats) + 1):  # the first is a warm-up
        rule = make("local", "sgd")
        t, result = timed(lambda: executor.run(rule, model, ctx, plans, x, y, [None] * len(plans), record))
        times = {"train": t} | {a: timed(lambda a=a: run[a](result))[0] for a in addons}  # noqa: B023
        if attempt:
            best = {k: min(best[k], times[k]) for k in best}
    rec = {"workload": w.name, "paper": w.paper, "model": w.model, "clients": w.clients, "tau": plans[0].tau,
           "parameters": len(ctx.params), "executor": executor.name, "train_s": best["train"],
           "addons": list(addons), "device": device_name(device)}
    for a in addons:
        rec |= {f"{a}_s": best[a], f"{a}_share": best[a] / best["train"]}
    if record is not None:
        rec["steps_mb"] = sum(z.numel() * z.element_size() for z in result.steps) / 2**20
    return rec


def machine() -> dict:
    return {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "fedrun": __version__,
            "host_memory": "keep" if host_memory.kept() else "system",
            "git_commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def addons_markdown(records: list[dict]) -> str:
    if not records:
        return ""
    rows = "".join(f"| {r['workload']} | {r['paper']} | {r['clients']} | {r['tau']} | {r['parameters']} | "
                   f"{r['executor']} | {r['train_s']:.3f} | {a} | {r[a + '_s']:.4f} | {100 * r[a + '_share']:.2f}% |\n"
                   for r in records for a in r["addons"])
    return ("\n## Cost of BHerd's herding, the FedGH/DGT harmonisers and GIFT's schedule\n\n"
            "| workload | paper | clients | tau | "
            "parameters | executor | train s | add-on | add-on s | share of training |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n" + rows +
            "\ntrain s = one round of local training (for herding, with every step gradient kept); add-on s = herding "
            "all clients' steps (alpha = 0.5), FedGH / DGT on the round's (K, d) updates, or GIFT's observe on them "
            "plus the time model.\n")


def side_table(records: list[dict], key: str, columns: list[str], cells, note: str) -> str:
    """A table of the records that have ``key`` (an optional measurement), one row of ``cells(record)`` each, and the
    note that says what it measured; empty when none has it."""
    rows = [r for r in records if key in r]
    if not rows:
        return ""
    body = "".join(f"| {' | '.join(str(c) for c in cells(r))} |\n" for r in rows)
    return f"\n| {' | '.join(columns)} |\n|{'---|' * len(columns)}\n{body}\n{note}\n"


def markdown(records: list[dict], info: dict, command: str, addons: list[dict] = ()) -> str:
    head = ("| workload | paper | clients | steps | loop s | loop threads s (threads) | vmap s | auto s (choice) | "
            "speedup | auto/best | peak MB | GFLOP/s | matmul peak GFLOP/s |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    rows = "".join(
        f"| {r['workload']} | {r['paper']} | {r['clients']} | {r['steps']} | {r['loop_s']:.3f} | "
        f"{r['threads_s']:.3f} ({r['loop_threads']}) | {r['vmap_s']:.3f} "
        f"| {r['auto_s']:.3f} ({r['auto']}) | {r['speedup']:.1f}x | {r['auto_vs_best']:.2f} | {r['peak_mem_mb']:.0f} "
        f"| {r['gflops']:.2f} | {r['matmul_peak_gflops']:.0f} |\n" for r in records)
    compiled = side_table(
        records, "compiled_s", ["workload", "vmap s", "compiled s", "vmap/compiled", "compiled first round s"],
        lambda r: [r["workload"], f"{r['vmap_s']:.3f}", f"{r['compiled_s']:.3f}", f"{r['compiled_speedup']:.2f}x",
                   f"{r['compiled_first_s']:.1f}"],
        "compiled = the vmap executor with hardware.compile=true, timed as the others after its first round (the "
        "compilation; inductor's on-disk cache makes a repeated one short).")
    compiled += side_table(
        records, "stepwise_s",
        ["workload", "minibatch", "steps per block", "vmap step by step s", "vmap in blocks s", "speed-up"],
        lambda r: [r["workload"], r["batch"], r["block_steps"], f"{r['stepwise_s']:.3f}", f"{r['blocks_s']:.3f}",
                   f"{r['blocks_speedup']:.2f}x"],
        "vmap in blocks = the vmap executor as it runs local SGD on a one-layer model with small minibatches "
        "(hardware.blocks=true, the default, on a CPU only: fedrun/engine/execution/blocked.py); the vmap column above "
        "is "
        "its time on a CPU and step by step's on a GPU.")
    compiled += side_table(
        records, "func_s", ["workload", "minibatch", "vmap, torch.func s", "vmap, one network s", "speed-up"],
        lambda r: [r["workload"], r["batch"], f"{r['func_s']:.3f}", f"{r['vmap_s']:.3f}",
                   f"{r['network_speedup']:.2f}x"],
        "one network = the vmap executor as it steps a Sequential CNN's cohort on a CPU (hardware.cohort_network=true, "
        "the default: grouped convolutions in channels-last, fedrun/model/cohort_network.py); its time is the vmap "
        "column above; torch.func = hardware.cohort_network=false.")
    compiled += side_table(
        records, "unfused_s", ["workload", "minibatch", "vmap, layer by layer s", "vmap, fused first layer s",
                               "speed-up"],
        lambda r: [r["workload"], r["batch"], f"{r['unfused_s']:.3f}", f"{r['vmap_s']:.3f}",
                   f"{r['fused_speedup']:.2f}x"],
        "fused first layer = the cohort network with its first convolution, 2x2 max pooling and ReLU as one kernel "
        "compiled for this CPU (hardware.native, fedrun/model/native/fused_conv.py); its time is "
        "the vmap column above; layer by layer = hardware.native=false (oneDNN's convolution, torch's pooling).")
    compiled += side_table(
        records, "gathered_s", ["workload", "minibatch", "vmap, gathered s", "vmap, rows in place s", "speed-up"],
        lambda r: [r["workload"], r["batch"], f"{r['gathered_s']:.3f}", f"{r['vmap_s']:.3f}",
                   f"{r['in_place_speedup']:.2f}x"],
        "rows in place = a one-layer model's step (or block of single-sample steps) in a kernel compiled for this CPU "
        "that reads the minibatch's rows where they lie in the training inputs (hardware.native, the "
        "default: fedrun/model/native/indexed_rows.py), or LeNet-5's first kernel reading the cohort's images so "
        "(fedrun/model/native/fused_conv.py); its time is the vmap column above; gathered = "
        "hardware.native=false (the minibatch gathered, then a one-layer model's products and loss in tensor "
        "operations, LeNet-5's same step).")
    compiled += side_table(
        records, "whole_s", ["workload", "clients", "clients per chunk", "vmap, whole cohort s", "vmap, chunks s",
                             "speed-up"],
        lambda r: [r["workload"], r["clients"], r["cache_chunk"], f"{r['whole_s']:.3f}", f"{r['vmap_s']:.3f}",
                   f"{r['chunk_speedup']:.2f}x"],
        "chunks = the vmap executor as it steps a dense model's stacked clients on a CPU: as many per chunk as fill "
        "half the last-level cache (hardware.cache_fraction=0.5, the default); its time is the vmap column above; "
        "whole cohort = hardware.cache_fraction=null.")
    compiled += side_table(
        records, "contiguous_s",
        ["workload", "auto executor", "round, NCHW s", "round, channels-last s", "speed-up", "evaluated samples",
         "evaluation, NCHW s", "evaluation, channels-last s", "speed-up"],
        lambda r: [r["workload"], r["auto"], f"{r['contiguous_s']:.3f}", f"{r['auto_s']:.3f}",
                   f"{r['layout_speedup']:.2f}x", r["eval_samples"], f"{r['eval_contiguous_s']:.3f}",
                   f"{r['eval_s']:.3f}", f"{r['eval_speedup']:.2f}x"],
        "channels-last = image batches entering the model in channels-last strides (hardware.layout=auto on a CPU for "
        "a model with convolutions; fedrun/model/functional.py), NCHW = hardware.layout=contiguous; the rounds under "
        "the auto executor (the auto column above); the evaluation of the workload's samples with eval.batch_size "
        "2048, in chunks of 2048 images in NCHW and of 256 in channels-last.")
    compiled += side_table(
        records, "eval_torch_s", ["workload", "evaluated samples", "evaluation, the module's forward s",
                                  "evaluation, by hand s", "speed-up"],
        lambda r: [r["workload"], r["eval_samples"], f"{r['eval_torch_s']:.4f}", f"{r['eval_s']:.4f}",
                   f"{r['by_hand_eval_speedup']:.2f}x"],
        "by hand = the model's evaluation (the workload's samples, eval.batch_size 2048) as fedrun runs it on a CPU: "
        "a dense model's or a Sequential CNN's forward by hand, products of at least 2M multiply-adds through "
        "oneDNN's linear kernel (hardware.onednn=true, the default; fedrun/model/functional.py: dense_product), a "
        "CNN's ReLU before a max pooling after it and its poolings as maxima of strided views (max_pool_views); the "
        "module's forward = torch's (hardware.gradient=autograd, hardware.onednn=false), in the same layout.")
    about = "\n".join(f"- {k}: {v}" for k, v in info.items())
    device = (list(records) + list(addons))[0]["device"]
    executors = (f"{head}{rows}\nloop = clients one after another; loop threads = the loop training that many "
                 f"clients at once, one intra-op thread each (hardware.loop_threads; 1, as on a GPU: the "
                 f"loop itself, timed once); speedup = loop/vmap; each executor's time: its best round after a "
                 f"warm-up round (one round where the warm-up took {LONG_ROUND_S:.0f} s or more); auto/best = auto's "
                 f"time over the fastest executor's; peak MB = "
                 f"the peak memory of a round under the auto executor, data included (process RSS on a CPU, allocator "
                 f"peak on a GPU); matmul peak = a 2048^3 (8192^3 on a GPU) matrix product timed in this run "
                 f"(convolution_peak_gflops below, on a CPU: the same product as a 1x1 convolution, oneDNN's kernel)."
                 f"\n{compiled}") if records else ""
    return (f"# Benchmark on {device}\n\nMade by `{command}`.\n\n{executors}"
            f"{addons_markdown(list(addons))}\n## Machine\n{about}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedrun.bench.workloads", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller cohorts (a smoke run)")
    parser.add_argument("--out", default=None, help="write the records as JSON here (and a .md table beside it)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=None, help="comma-separated workload names")
    parser.add_argument("--compiled", action="store_true",
                        help="also time the vmap executor with hardware.compile=true (compiled_first_s: its first "
                             "round, the compilation included)")
    parser.add_argument("--host-memory", choices=("keep", "system"), default="keep",
                        help="hardware.host_memory for the whole bench process (keep: as runs do by default; system: "
                             "the C library's own thresholds; process-wide, so compare two invocations)")
    args = parser.parse_args(argv)
    if args.host_memory == "keep":
        host_memory.keep_freed_memory()
    device = torch.device(args.device)
    chosen = lambda w: not args.only or w.name in args.only.split(",")  # noqa: E731
    named = [w for w in SCALE_WORKLOADS if args.only and chosen(w)]
    workloads = [quick(w) if args.quick else w for w in [*WORKLOADS, *named] if chosen(w)]
    addon_workloads = [(quick(w) if args.quick else w, a) for w, a in ADDON_WORKLOADS if chosen(w)]
    peak = matmul_peak_gflops(device)
    conv_peak = convolution_peak_gflops(device) if device.type == "cpu" else None
    info = machine() | ({"convolution_peak_gflops": round(conv_peak)} if conv_peak else {})
    command = "python -m fedrun.bench.workloads " + " ".join(argv if argv is not None else sys.argv[1:])
    records, addon_records = [], []

    def write() -> None:
        """The records so far, rewritten after every workload: a bench stopped part-way (a time limit on a lent
        GPU) keeps the workloads it finished."""
        if not args.out:
            return
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps([r | {"machine": info, "command": command} for r in records + addon_records],
                                  indent=2) + "\n")
        done, total = len(records) + len(addon_records), len(workloads) + len(addon_workloads)
        out.with_suffix(".md").write_text(markdown(records, info, command, addon_records)
                                          + (f"\n(partial: {done} of {total} workloads so far)\n"
                                             if done < total else ""))

    for w in workloads:
        rec = run_workload(w, device, args.repeats, peak, args.compiled)
        records.append(rec)
        write()
        print(f"{rec['workload']:18s} clients={rec['clients']:5d} steps={rec['steps']:6d} loop={rec['loop_s']:.3f}s "
              f"vmap={rec['vmap_s']:.3f}s auto={rec['auto_s']:.3f}s ({rec['auto']}) speedup={rec['speedup']:.1f}x "
              f"threads={rec['threads_s']:.3f}s "
              f"auto/best={rec['auto_vs_best']:.2f} peak={rec['peak_mem_mb']:.0f}MB gflops={rec['gflops']:.2f}"
              + (f" compiled={rec['compiled_s']:.3f}s (first {rec['compiled_first_s']:.1f}s)" if args.compiled else ""),
              flush=True)
    for w, addons in addon_workloads:
        rec = run_addons(w, addons, device, args.repeats)
        addon_records.append(rec)
        write()
        print(f"{rec['workload']:26s} tau={rec['tau']} d={rec['parameters']} train={rec['train_s']:.3f}s "
              + " ".join(f"{a}={rec[a + '_s']:.4f}s ({100 * rec[a + '_share']:.2f}%)" for a in addons), flush=True)
    if args.out:
        print(f"wrote {args.out} and {Path(args.out).with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

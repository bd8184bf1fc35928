"""A cohort's round against the chip's limits, under each executor form and precision (the GPU's table).

    python -m fedrun.bench.limits [--device cuda] [--only W1,W2] [--forms vmap,graph,...] [--precisions ...]
                                  [--levers cudnn_benchmark,layout] [--out FILE.json]

Each workload is one round of local SGD on random data of its paper's shape (``fedrun.bench.workloads``), timed
under each form (``vmap``: the vmap executor, a GPU's ``auto``; ``graph``: the graph executor, its steps replaying a
CUDA graph on a GPU; ``graph_network``/``vmap_network``: with a Sequential CNN's cohort stepping as one network,
``hardware.cohort_network=true``) and each ``hardware.precision``. Beside each time stand the two floors of that
round on this chip, measured in the same run: its FLOPs at the chip's matrix-product peak in that precision, and its
minimal memory traffic at the chip's copy bandwidth. ``speedup`` is over ``vmap`` in float32, the GPU path this
table is meant to improve on, timed in the same run.

Each of ``--levers`` times every form and precision again with one speed lever flipped, an A/B pair in the same run
(``gain``: the form's round without the lever over its round with it): ``cudnn_benchmark`` (cuDNN times its
convolution algorithms for each new shape and keeps the fastest: ``hardware.cudnn_benchmark=true``) and ``layout``
(image batches in the other memory layout than the chip's preferred one: ``hardware.layout``).

A workload that holds several runs' cohorts side by side (``Workload.batches``: ``lenet5_mnist_160`` is 16 runs of
the default experiment) is also set against its one-run workload timed in the same run: what a sweep would gain by
training its runs' cohorts as one, form by form, before any engine is built for it.

Minimal traffic, a floor rather than an estimate: each client step writes its activations once and reads them once
in the backward pass, and reads and writes its step state (parameters, direction, optimiser buffers) once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import torch

from fedrun.algorithms.schema import make
from fedrun.bench.workloads import (SCALE_WORKLOADS, WORKLOADS, flops_per_round, machine, matmul_peak_gflops, quick,
                                    seconds, setup, time_rounds)
from fedrun.engine.execution import tree
from fedrun.engine.execution.cuda_math import configure_cuda
from fedrun.engine.execution.executor import VmapExecutor, activation_bytes_per_sample
from fedrun.engine.execution.graph_executor import GraphExecutor
from fedrun.engine.execution.precision import InPrecision, tf32_units
from fedrun.model.functional import FunctionalModel
from fedrun.rundir.files import device_name

FORMS = ("vmap", "graph", "vmap_network", "graph_network")
LEVERS = ("cudnn_benchmark", "layout")
PRECISIONS = ("float32", "tf32", "bfloat16")
DEFAULT_WORKLOADS = ("lenet5_cifar_1000", "mlp_mnist_1000", "lenet5_cifar_100", "lenet5_mnist_10", "cnn_fedgh_20",
                     "lenet5_mnist_160")


def matmul_peak(device: torch.device, precision: str, repeats: int = 3) -> float:
    """FLOP/s of the workloads' large matrix product in ``precision`` (float32, TF32 units, or bfloat16 operands)."""
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    with tf32_units() if precision == "tf32" else contextlib.nullcontext():
        return matmul_peak_gflops(device, repeats, dtype) * 1e9


def copy_bandwidth(device: torch.device, repeats: int = 3) -> float:
    """Bytes/s of a large copy on the device (each byte read once and written once)."""
    n = (1 << 28) if device.type == "cuda" else (1 << 24)
    a = torch.empty(n, device=device)
    b = torch.empty_like(a)
    best = min(seconds(lambda: b.copy_(a), device) for _ in range(repeats + 1))
    return 2 * n * a.element_size() / best


def traffic_per_round(rule, model: FunctionalModel, ctx, plans, x) -> int:
    """The round's minimal memory traffic in bytes (the module docstring's floor)."""
    state_bytes = sum(t.numel() * t.element_size() for t in tree.leaves(rule.client_init(ctx, None)))
    per_step = 2 * plans[0].batches.shape[1] * activation_bytes_per_sample(model, x) + 2 * state_bytes
    return per_step * sum(p.tau for p in plans)


def executor_of(form: str):
    return GraphExecutor() if form.startswith("graph") else VmapExecutor(tail=1, blocks=False)


class CudnnBenchmarked:
    """An executor whose rounds run with cuDNN timing its convolution algorithms (``hardware.cudnn_benchmark``), the
    process's setting restored after each."""

    def __init__(self, executor):
        self.executor, self.name = executor, executor.name

    def run(self, *args, **kwargs):
        before = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True
        try:
            return self.executor.run(*args, **kwargs)
        finally:
            torch.backends.cudnn.benchmark = before

    def report(self) -> dict:
        return self.executor.report()


def run_limits(w, device: torch.device, forms, precisions, repeats: int, peaks: dict, bandwidth: float,
               levers=()) -> list[dict]:
    model, x, y, plans, ctx = setup(w, device)
    rule = make("local", "sgd")
    kinds = {(network, layout): FunctionalModel(model.module, model.objective, cohort_network=network,
                                                channels_last=model.channels_last != (layout == "layout"))
             for network in (False, True) for layout in (None, "layout")}
    forms = [f for f in forms if not f.endswith("_network") or kinds[True, None].cohort is not None]
    levers = [None, *levers]
    executors = {(f, p, lever): InPrecision(executor_of(f), p, device) for f in forms for p in precisions
                 for lever in levers}
    executors |= {key: CudnnBenchmarked(e) for key, e in executors.items() if key[2] == "cudnn_benchmark"}
    names = {key: " ".join(filter(None, key)) for key in executors}
    models = {names[key]: kinds[key[0].endswith("_network"), "layout" if key[2] == "layout" else None]
              for key in executors}
    best, memory, first = time_rounds({names[k]: e for k, e in executors.items()}, rule, model, ctx, plans, x, y,
                                      repeats, models, w.name)
    flops, traffic = flops_per_round(model, x, y, plans), traffic_per_round(rule, model, ctx, plans, x)
    base = best.get("vmap float32")
    return [{"workload": w.name, "paper": w.paper, "clients": w.clients, "batches": w.batches,
             "steps": sum(p.tau for p in plans), "form": form, "precision": precision, "lever": lever,
             "layout": "channels_last" if models[names[key]].channels_last else "contiguous",
             "round_s": best[names[key]], "first_round_s": first[names[key]], "peak_mem_mb": memory[names[key]],
             "flops": flops, "bytes": traffic, "flops_floor_s": flops / peaks[precision],
             "bytes_floor_s": traffic / bandwidth, "achieved_tflops": flops / best[names[key]] / 1e12,
             "share_of_peak": flops / best[names[key]] / peaks[precision],
             "speedup": base / best[names[key]] if base else None,
             "gain": best[names[form, precision, None]] / best[names[key]] if lever else None,
             "device": device_name(device),
             **executors[key].report()}  # a graph form's captures: whether its timing replayed graphs
            for key in executors for form, precision, lever in [key]]


def graphs(record: dict) -> str:
    """A graph form's capture record in the table: counts, or why capture stopped; empty for the other forms."""
    if "graphs_captured" not in record:
        return ""
    if record["capture_fallback"]:
        return f"fell back to eager steps: {record['capture_fallback']}"
    return f"{record['graphs_captured']} / {record['graph_replays']} / {record['eager_steps']}"


def speedup(record: dict) -> str:
    return "" if record["speedup"] is None else f"{record['speedup']:.1f}x"


def lever(record: dict) -> str:
    """The lever a row flips (the layout it then runs in); empty for the form as it is."""
    if not record.get("lever"):
        return ""
    return f"{record['lever']} ({record['layout']})" if record["lever"] == "layout" else record["lever"]


def gain(record: dict) -> str:
    """A lever's A/B: the form's round without the lever over its round with it."""
    return "" if record.get("gain") is None else f"{record['gain']:.2f}x"


def batched_gains(records: list[dict]) -> list[str]:
    """For each workload holding several runs' cohorts, per form and precision: the runs' rounds one after another
    (its one-run workload's round, times how many runs it holds) over its one batched round."""
    records = [r for r in records if not r.get("lever")]
    single = {(r["workload"], r["form"], r["precision"]): r for r in records}
    lines = []
    for r in records:
        one = single.get((r.get("batches"), r["form"], r["precision"]))
        if one is not None:
            runs = r["clients"] / one["clients"]
            lines.append(f"- {r['workload']} ({runs:g} runs of {one['workload']}), {r['form']} {r['precision']}: "
                         f"{runs * one['round_s'] / r['round_s']:.1f}x ({runs:g} x {one['round_s'] * 1e3:.1f} ms "
                         f"one after another, {r['round_s'] * 1e3:.1f} ms batched)")
    return lines


def markdown(records: list[dict], info: dict, command: str) -> str:
    rows = "".join(
        f"| {r['workload']} | {r['clients']} | {r['steps']} | {r['form']} | {r['precision']} "
        f"| {lever(r)} "
        f"| {r['round_s'] * 1e3:.1f} | {r['first_round_s']:.2f} | {r['flops_floor_s'] * 1e3:.2f} "
        f"| {r['bytes_floor_s'] * 1e3:.2f} "
        f"| {r['achieved_tflops']:.2f} | {100 * r['share_of_peak']:.1f}% | "
        f"{speedup(r)} | {gain(r)} | {r['peak_mem_mb']:.0f} | {graphs(r)} |\n" for r in records)
    peaks = ", ".join(f"{p} {v / 1e12:.1f} TFLOP/s" for p, v in info["matmul_peak"].items())
    return (f"# A cohort's round against the chip's limits\n\nDevice: {records[0]['device'] if records else '?'}. "
            f"Matrix-product peaks measured in this run: {peaks}; copy bandwidth {info['copy_bandwidth'] / 1e9:.0f} "
            f"GB/s.\n\n| workload | clients | steps | form | precision | lever | round ms | first round s | "
            "FLOP floor ms | byte floor ms | TFLOP/s | of peak | speedup over vmap float32 | lever's gain | peak MB | "
            "graphs |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n" + rows +
            "\nround ms: the best of the timed rounds after the first; FLOP floor: the round's FLOPs (forward and "
            "backward, as torch.utils.flop_counter counts them) at the measured peak of its precision; byte floor: "
            "its minimal traffic (each activation written and read once, each step state read and written once) at "
            "the measured copy bandwidth; of peak: achieved FLOP/s over the peak of its precision; graphs: a graph "
            "form's CUDA graphs captured, steps replayed and steps run eagerly over all its rounds, or why capture "
            "stopped (its timings are then eager steps').\n\n"
            + ("Runs batched into one cohort, against the same runs' cohorts one after another:\n\n"
               + "\n".join(batched) + "\n\n" if (batched := batched_gains(records)) else "") +
            f"Command: `{command}`; commit {info['git_commit']}, {info['date']}.\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedrun.bench.limits", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", default=",".join(DEFAULT_WORKLOADS), help="comma-separated workload names")
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--precisions", default=None, help="default: float32,tf32,bfloat16 on a GPU, else "
                                                           "float32,bfloat16")
    parser.add_argument("--levers", default="", help=f"comma-separated, each timed as an A/B pair: {LEVERS}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller cohorts (a smoke run)")
    parser.add_argument("--out", default=None, help="write the records as JSON here (and a .md table beside it)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    precisions = (args.precisions.split(",") if args.precisions else
                  [p for p in PRECISIONS if device.type == "cuda" or p != "tf32"])
    forms = args.forms.split(",")
    levers = [lv for lv in args.levers.split(",") if lv]
    if bad := [f for f in forms if f not in FORMS] + [p for p in precisions if p not in PRECISIONS] + [
            lv for lv in levers if lv not in LEVERS]:
        parser.error(f"unknown form, precision or lever {bad}: forms are {FORMS}, precisions {PRECISIONS}, levers "
                     f"{LEVERS}")
    if "tf32" in precisions and device.type != "cuda":
        parser.error("--precisions tf32 needs a GPU (TF32 matrix units)")
    every = {w.name: w for w in [*WORKLOADS, *SCALE_WORKLOADS]}
    if unknown := [n for n in args.only.split(",") if n not in every]:
        parser.error(f"--only {unknown}: workloads are {sorted(every)}")
    workloads = [quick(every[n]) if args.quick else every[n] for n in args.only.split(",")]
    if device.type == "cuda":
        configure_cuda(False)  # float32 is float32 outside a row's precision, as in a run
    info = machine() | {"matmul_peak": {p: matmul_peak(device, p) for p in precisions},
                        "copy_bandwidth": copy_bandwidth(device)}
    command = "python -m fedrun.bench.limits " + " ".join(argv if argv is not None else sys.argv[1:])
    records = []
    for w in workloads:
        done = run_limits(w, device, forms, precisions, args.repeats, info["matmul_peak"], info["copy_bandwidth"],
                          levers)
        records += done
        for r in done:
            print(f"{r['workload']:18s} {r['form']:14s} {r['precision']:9s} {lever(r):26s} "
                  f"{r['round_s'] * 1e3:9.2f} ms floors {r['flops_floor_s'] * 1e3:.2f} / "
                  f"{r['bytes_floor_s'] * 1e3:.2f} ms {100 * r['share_of_peak']:.1f}% of peak", flush=True)
        if args.out:  # rewritten after every workload: a run stopped by a time limit keeps what it finished
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps([r | {"machine": info, "command": command} for r in records], indent=2) + "\n")
            out.with_suffix(".md").write_text(markdown(records, info, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())

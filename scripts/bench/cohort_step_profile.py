"""Where a LeNet-5 cohort step's time goes on a CPU (issue #27): the default experiment's cohort network by operator.

    python scripts/bench/cohort_step_profile.py [--clients 1,10] [--steps 30] [--unfused] [--out results/bench/X.md]

For each cohort size K it builds the default experiment's model (``make run``: LeNet-5 on MNIST-shaped images,
B = 64) as a run does, times the vmap executor's step (the cohort network, fedrun/model/cohort_network.py; K = 1: the
step a lone client takes at a cohort's tail) by the wall clock, then runs the same steps under ``torch.profiler``
and sums each operator's own CPU time (its children left out) per step. A convolution's rows carry its GFLOP/s
(forward, or what its backward computes: the input gradient, the weight gradient or both), the FLOPs from its
shapes; so do the fused first layer's (fedrun/model/native/fused_conv.py: its convolution at every output position, and
the weight gradient). ``--unfused``: with ``hardware.native=false`` (a lone client then takes the plain step). The
profiler's own overhead makes the operators' sum exceed the step's wall time; the shares are of that sum. Random
images and labels; the weights as the run initialises them.
"""

from __future__ import annotations

import argparse
import math
import time
from collections import defaultdict
from pathlib import Path

from fedrun.rundir.files import device_name, git_commit
from step_costs import best_us

B = 64
SHAPE = (1, 28, 28)


def conv_flops(out: list[int], weight: list[int], parts: int) -> int:
    """FLOPs of one convolution call: 2 x its output's size x one output's multiply-adds, times the parts computed
    (a forward: 1; a backward: the input gradient and the weight gradient, 1 each)."""
    return 2 * math.prod(out) * math.prod(weight[1:]) * parts


def fused_flops(x: list[int], weight: list[int], padding: int) -> int:
    """FLOPs of a fused layer's forward (a convolution with its pooling and ReLU as one kernel), as many as the
    first layer's backward (the weight gradient alone) and half the later layer's (the weights' and the images'):
    ``x`` (K, B, C, H, W) and ``weight`` (K, O, C, R, R), its convolution at every position of the output."""
    k, b, c, h, w = x
    o, r = weight[1], weight[-1]
    return conv_flops([b, k * o, h + 2 * padding - r + 1, w + 2 * padding - r + 1], [k * o, c, r, r], 1)


def lenet5_step(k: int, fused: bool = True):
    """One local SGD step of K clients of the default experiment's model, as the vmap executor takes it (K = 1: a
    lone client's step), on random images and labels from seed 0: a function of no arguments, whose ``padding``
    is the first convolution's. ``fused``: hardware.native."""
    import torch

    from fedrun.algorithms.base import ClientContext
    from fedrun.algorithms.schema import make
    from fedrun.config.compose import compose_config
    from fedrun.engine.execution import tree
    from fedrun.engine.run.simulation import Simulation

    sim = Simulation.from_config(compose_config(["progress=false", "logger=none",
                                                 f"hardware.native={str(fused).lower()}"]))
    model, rule = sim.model, make("local", "sgd")
    ctx = ClientContext(1, sim.state.params, sim.state.buffers, lr=0.01)
    torch.manual_seed(0)
    x, y = torch.randn(k, B, *SHAPE), torch.randint(0, 10, (k, B))
    if k == 1:
        state = rule.client_init(ctx, None)
        step = lambda: rule.client_step(model, ctx, state, x[0], y[0])  # noqa: E731
    else:
        state = tree.stack([rule.client_init(ctx, None)] * k)
        step = lambda: rule.client_step(model, ctx, state, x, y)  # noqa: E731
    step.padding, step.later_padding = [m.padding[0] for m in model.module if isinstance(m, torch.nn.Conv2d)][:2]
    return step


def profile(k: int, steps: int, fused: bool = True) -> tuple[float, list[tuple[str, str, float, float | None]]]:
    """Wall ms per step, then (operator, first input's shape, ms per step, a convolution's FLOPs per step or None)
    by time."""
    from torch.profiler import profile as torch_profile

    from fedrun.engine.execution.host_memory import keep_freed_memory

    keep_freed_memory()
    step = lenet5_step(k, fused)
    wall_ms = best_us(step, steps, repeats=3) / 1e3
    with torch_profile(record_shapes=True) as prof:
        for _ in range(steps):
            step()
    rows = defaultdict(lambda: [0.0, None])
    forward_out = {}  # a convolution's output shape, from its backward's grad_output (same weight shape)
    events = prof.key_averages(group_by_input_shape=True)
    fused_per_step = 0  # the fused first layer's forward FLOPs per step; its backward computes as many
    later_per_step = 0  # the fused later layer's; its backward computes twice as many
    for e in events:
        if e.key == "aten::convolution_backward":
            forward_out[tuple(e.input_shapes[2])] = e.input_shapes[0]
        elif e.key == "_ConvPoolReLU":  # the images, the minibatches' index into them (K, B), the weights, ...
            images, index, weight = e.input_shapes[:3]
            fused_per_step += fused_flops([*index, *images[1:]], weight, step.padding) * e.count / steps
        elif e.key == "_ConvPoolReLUImages":
            later_per_step += fused_flops(e.input_shapes[0], e.input_shapes[1], step.later_padding) * e.count / steps
    for e in events:
        if e.self_cpu_time_total <= 0:
            continue
        shapes = e.input_shapes
        first = "x".join(map(str, shapes[0])) if shapes and shapes[0] else ""
        row = rows[(e.key, first)]
        row[0] += e.self_cpu_time_total / 1e3 / steps
        if e.key == "aten::mkldnn_convolution" and tuple(shapes[1]) in forward_out:
            row[1] = (row[1] or 0) + conv_flops(forward_out[tuple(shapes[1])], shapes[1], 1) * e.count / steps
        elif e.key == "aten::convolution_backward":  # the first layer's input (the images) needs no gradient
            parts = 1 if shapes[1][1] == SHAPE[0] * k else 2
            row[1] = (row[1] or 0) + conv_flops(shapes[0], shapes[2], parts) * e.count / steps
        elif e.key in ("_ConvPoolReLU", "_ConvPoolReLUBackward"):
            row[1] = fused_per_step
        elif e.key in ("_ConvPoolReLUImages", "_ConvPoolReLUImagesBackward"):
            row[1] = later_per_step * (2 if e.key.endswith("Backward") else 1)
    return wall_ms, sorted(((name, shape, ms, fl) for (name, shape), (ms, fl) in rows.items()),
                              key=lambda r: -r[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,10", help="cohort sizes, comma-separated")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--top", type=int, default=14, help="operators listed per cohort size")
    parser.add_argument("--unfused", action="store_true", help="hardware.native=false")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import torch

    lines = ["# Where a LeNet-5 cohort step's time goes (issue #27)", "",
             f"Made by `python scripts/bench/cohort_step_profile.py --clients {args.clients} --steps {args.steps}"
             f"{' --unfused' if args.unfused else ''}{f' --out {args.out}' if args.out else ''}` at commit "
             f"{git_commit()} on "
             f"{time.strftime('%Y-%m-%d', time.gmtime())} on {device_name(torch.device('cpu'))}: the default "
             f"experiment's model (LeNet-5, MNIST-shaped random images and labels from seed 0, B = {B}), one local "
             "SGD step of K clients as the vmap executor takes it (the cohort network; K = 1: a lone client's step, "
             "a cohort's tail), "
             + ("with hardware.native=false (K = 1: the plain step)" if args.unfused else
                "each convolution with its pooling and ReLU as one kernel (hardware.native, the default)")
             + ". Operators' own CPU time under torch.profiler, per step; GFLOP/s for convolutions (a backward's: "
             "the gradients it computes).", ""]
    for k in (int(c) for c in args.clients.split(",")):
        wall, table = profile(k, args.steps, not args.unfused)
        total = sum(r[2] for r in table)
        lines += [f"## K = {k}: {wall:.2f} ms per step by the wall clock ({wall / k:.2f} per client), "
                  f"{total:.2f} ms of operators under the profiler", "",
                  "| operator | first input | ms per step | share | GFLOP/s |", "|---|---|---|---|---|"]
        for name, shape, ms, flops in table[: args.top]:
            lines.append(f"| {name} | {shape} | {ms:.3f} | {ms / total:.0%} | "
                         f"{'' if flops is None else f'{flops / ms / 1e6:.0f}'} |")
        rest = sum(r[2] for r in table[args.top :])
        lines += [f"| {len(table) - args.top} others | | {rest:.3f} | {rest / total:.0%} | |", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

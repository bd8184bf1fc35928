"""What one local step costs on a CPU, and what of it is arithmetic (issue #27): the numbers behind
``hardware.host_memory`` and behind the peer bench's per-round floor.

    python scripts/bench/step_costs.py [--pairs 2] [--out results/bench/step-costs-cpu.md]

Each measure runs in fresh processes on one thread, once with ``hardware.host_memory=system`` and once with ``keep``
(the allocator's thresholds are process-wide), in interleaved pairs; the table gives the medians and system/keep:

- the FedProx-synthetic 2NN's minibatch gradient by hand (60 -> 200 -> 200 -> 10, B = 32: the peer bench's
  workload), per client, for a stack of K = 1, 4, 16 and 100 clients (``FunctionalModel``'s batched step);
- the same step's matrix products alone (forward, weight and input gradients: what ``flops_per_step`` counts), K = 1:
  the arithmetic floor of a lone client's step;
- a LeNet-5 step (loss and gradient) on 64 MNIST-shaped images, in NCHW and in channels-last strides;
- each of LeNet-5's layers alone in channels-last, on the activations the step gives it: its forward (autograd
  recording, as in the step), and its forward and backward (the gradients of its parameters and, past the first
  layer, of its input, as in the step): where the step's time goes;
- a cohort of 100 CIFAR-shaped LeNet-5 clients at B = 10 (GIFT's): its two convolutions as one grouped
  convolution (what vmap runs) in NCHW and in channels-last, against a loop of the clients' own convolutions; and
  the vmapped step with the stacked images in NCHW and laid out so that vmap's grouped convolutions see
  channels-last (memory (B, H, W, K, C)).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
TWO_NN = (60, 200, 200, 10)
B = 32


def best_us(work, calls: int, repeats: int = 5) -> float:
    """Microseconds per call of ``work()``: the best of ``repeats`` timings of ``calls`` calls, after a warm-up."""
    for _ in range(max(3, calls // 10)):
        work()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            work()
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e6


def two_nn():
    """The 2NN as fedrun builds it (``model=mlp`` with two hidden layers of 200), as a FunctionalModel."""
    import torch

    from fedrun.model.functional import FunctionalModel
    from fedrun.model.zoo import CROSS_ENTROPY, Flatten

    layers = [Flatten()]
    for a, b in zip(TWO_NN[:-2], TWO_NN[1:-1]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return FunctionalModel(torch.nn.Sequential(*layers, torch.nn.Linear(TWO_NN[-2], TWO_NN[-1])), CROSS_ENTROPY)


def products(params, x, d_out):
    """The step's matrix products only, for a (K, ...) stack: the forward's (with bias), then each layer's weight
    gradient and, below the top, its input gradient (none for the data), with the output gradient ``d_out`` standing
    in for the loss's and no ReLU masks: the arithmetic of the by-hand gradient without its elementwise work."""
    import torch

    weights = params[0::2]
    h, inputs = x, []
    for w, b in zip(weights, params[1::2]):
        inputs.append(h)
        h = torch.baddbmm(b.unsqueeze(-2), h, w.transpose(-1, -2))
    d, grads = d_out, []
    for i in reversed(range(len(weights))):
        grads.append(d.transpose(-1, -2) @ inputs[i])
        if i:
            d = d @ weights[i]
    return grads


def stacked(model, k: int):
    """K clients' copies of the model's parameters, a minibatch each, and their parameters as (K, ...) tensors."""
    import torch

    w = model.init_params().repeat(k, 1).contiguous()
    x, y = torch.randn(k, B, TWO_NN[0]), torch.randint(0, TWO_NN[-1], (k, B))
    params = [t.reshape(k, *s) for t, s in zip(torch.split(w, model.numels, dim=-1), model.shapes)]
    return w, x, y, params


def worker(mode: str) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    if mode == "keep":
        from fedrun.engine.execution.host_memory import keep_freed_memory

        assert keep_freed_memory(), "glibc's mallopt is needed for host_memory=keep"
    from fedrun.config.compose import option
    from fedrun.model.functional import FunctionalModel
    from fedrun.model.zoo import build_model

    out = {}
    model = two_nn()
    for k in (1, 4, 16, 100):
        w, x, y, _ = stacked(model, k)
        out[f"2NN gradient by hand, K = {k}, per client (us)"] = best_us(
            lambda: model._loss_and_grad_by_hand(w, x, y), max(20, 2000 // k)) / k
    _, x, _, params = stacked(model, 1)
    d_out = torch.randn(1, B, TWO_NN[-1])
    out["2NN matrix products alone, K = 1 (us)"] = best_us(lambda: products(params, x, d_out), 2000)
    module, objective = build_model(option("model", "lenet5"), "image", (1, 28, 28), 10, "mnist")
    images, labels = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    for name, laid_out in (("NCHW", False), ("channels-last", True)):
        lenet = FunctionalModel(module, objective, channels_last=laid_out)
        flat, buffers = lenet.init_params(), lenet.init_buffers()
        out[f"LeNet-5 step, 64 MNIST images, {name} (us)"] = best_us(
            lambda: lenet.loss_and_grad(flat, buffers, images, labels), 100)
    return out | layer_costs(module, images) | cohort_costs()


COHORT, COHORT_B = 100, 10


def grouped_channels_last(x):
    """Stacked images (K, B, C, H, W) laid out in memory as (B, H, W, K, C): vmap turns a convolution with per-client
    weights into one grouped convolution over (B, K * C, H, W), which is then channels-last without a copy."""
    return x.permute(1, 3, 4, 0, 2).contiguous().permute(3, 0, 4, 1, 2)


def grouped(x, weights):
    """The clients' convolutions (x (K, B, C, H, W), weights (K, O, C, k, k)) as one grouped convolution."""
    import torch.nn.functional as F

    k, b = x.shape[:2]
    merged = x.transpose(0, 1).reshape(b, -1, *x.shape[-2:])  # (B, K * C, H, W): a channels-last view for
    # images laid out by grouped_channels_last, else a copy
    out = F.conv2d(merged, weights.flatten(0, 1), groups=k)
    return out.reshape(b, k, -1, *out.shape[-2:]).transpose(0, 1)


def cohort_costs() -> dict[str, float]:
    import torch

    from fedrun.config.compose import option
    from fedrun.model.functional import FunctionalModel
    from fedrun.model.zoo import build_model

    out = {}
    for name, (c, o, hw) in {"conv1 (3 -> 6, 32x32)": (3, 6, 32), "conv2 (6 -> 16, 14x14)": (6, 16, 14)}.items():
        x = torch.randn(COHORT, COHORT_B, c, hw, hw)
        weights = torch.randn(COHORT, o, c, 5, 5, requires_grad=True)
        tag = f"{COHORT} LeNet-5 clients' {name}, B = {COHORT_B}"
        for layout, xs in (("NCHW", x), ("channels-last", grouped_channels_last(x))):
            xs = xs.detach().requires_grad_(c > 3)  # the first convolution needs no input gradient

            def grouped_step(xs=xs):
                y = grouped(xs, weights)
                return torch.autograd.grad(y, [weights, *([xs] if xs.requires_grad else [])], torch.ones_like(y))

            out[f"{tag}: one grouped convolution, {layout}, forward and backward (us)"] = best_us(grouped_step, 5)
        own = [(xi.contiguous(memory_format=torch.channels_last).requires_grad_(c > 3), wi.detach().requires_grad_())
               for xi, wi in zip(x, weights)]

        def loop():
            for xi, wi in own:
                y = torch.nn.functional.conv2d(xi, wi)
                torch.autograd.grad(y, [wi, *([xi] if xi.requires_grad else [])], torch.ones_like(y))

        out[f"{tag}: a loop of the clients' own, channels-last, forward and backward (us)"] = best_us(loop, 5)
    module, objective = build_model(option("model", "lenet5"), "image", (3, 32, 32), 10, "cifar10")
    model = FunctionalModel(module, objective)
    flat = torch.stack([model.init_params() for _ in range(COHORT)])
    x, y = torch.randn(COHORT, COHORT_B, 3, 32, 32), torch.randint(0, 10, (COHORT, COHORT_B))
    buffers = model.init_buffers()
    step = torch.vmap(lambda w, xs, ys: model.loss_and_grad(w, buffers, xs, ys))
    for layout, xs in (("NCHW", x), ("laid out (B, H, W, K, C)", grouped_channels_last(x))):
        out[f"vmapped LeNet-5 step of {COHORT} clients, B = {COHORT_B}, images {layout} (us)"] = best_us(
            lambda xs=xs: step(flat, xs, y), 5)
    return out


def layer_costs(module, images) -> dict[str, float]:
    """Each layer of ``module`` (a Sequential) alone, on the activations that the layers before it give, in
    channels-last strides: forward, and forward and backward."""
    import torch

    from fedrun.model.functional import channels_last

    out, h = {}, channels_last(images)
    for i, layer in enumerate(module):
        x = h.detach().requires_grad_(i > 0)  # the step needs no gradient of the images
        wrt = [*layer.parameters(), *([x] if i > 0 else [])]
        h = layer(x)
        if not wrt:
            continue
        grad_out = torch.randn_like(h)
        layout = ", channels-last" if x.dim() == 4 else ""
        name = f"LeNet-5 layer {i} {type(layer).__name__} {tuple(x.shape[1:])}{layout}"

        def both(layer=layer, x=x, wrt=wrt, grad_out=grad_out):
            return torch.autograd.grad(layer(x), wrt, grad_out)

        out[f"{name}: forward (us)"] = best_us(lambda layer=layer, x=x: layer(x), 100)
        out[f"{name}: forward and backward (us)"] = best_us(both, 100)
    return out


def markdown(runs: dict[str, list[dict]], command: str, pairs: int) -> str:
    from fedrun.rundir.files import git_commit

    rows = ["| measure | host_memory=system | host_memory=keep | system / keep |", "|---|---|---|---|"]
    for key in runs["system"][0]:
        system = statistics.median(r[key] for r in runs["system"])
        keep = statistics.median(r[key] for r in runs["keep"])
        rows.append(f"| {key} | {system:.1f} | {keep:.1f} | {system / keep:.2f}x |")
    return (f"# One local step's cost on a CPU (issue #27)\n\nMade by `{command}` at commit {git_commit(REPO)} on "
            f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, every process on one thread: medians of {pairs} "
            "interleaved pair(s) of fresh processes (glibc's thresholds are process-wide, and whether a process "
            "without `keep` page-faults its steps depends on what it freed before). Random inputs; the 2NN as "
            "`model=mlp` builds it for FedProx synthetic (60 features, 10 classes), B = 32.\n\n"
            + "\n".join(rows) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        print(json.dumps(worker(argv[1])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    runs: dict[str, list[dict]] = {"system": [], "keep": []}
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(REPO)}
    for pair in range(args.pairs):
        for mode in ("system", "keep") if pair % 2 == 0 else ("keep", "system"):
            done = subprocess.run([sys.executable, __file__, "--worker", mode], env=env, check=True,
                                  capture_output=True, text=True)
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"pair {pair + 1}/{args.pairs}: {mode} done", file=sys.stderr, flush=True)
    text = markdown(runs, "python scripts/bench/step_costs.py " + " ".join(argv), args.pairs)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a one-layer model's step on its rows in place pays (issue #27): rounds with and without it, across shapes.

    python scripts/bench/indexed_rows_shapes.py [--repeats 5] [--out results/bench/X.md]

For each shape (a model of one Linear layer, its input width and classes, the cohort, the minibatch) it builds the
workload as ``python -m fedrun.bench.workloads`` does (random inputs and labels from seed 0; one round of local SGD, E =
1) and times the vmap executor's round with ``hardware.native`` on (the compiled kernel,
fedrun/model/native/indexed_rows.py) and off (the minibatch gathered), interleaved as the bench interleaves its
executors: each one's best round.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from fedrun.rundir.files import device_name, git_commit

SHAPES = [  # (name, model, input shape, classes, clients, samples per client, minibatch, why)
    ("svm_mnist_5", "svm", (1, 28, 28), 10, 5, 12000, 100, "BHerd's SVM cohort (the bench's workload)"),
    ("svm_mnist_lone", "svm", (1, 28, 28), 10, 1, 12000, 100, "one SVM client (its plain step, as in the loop)"),
    ("svm_mnist_100", "svm", (1, 28, 28), 10, 100, 600, 50, "a hundred SVM clients"),
    ("logreg_mnist_10_b10", "logreg", (1, 28, 28), 10, 10, 600, 10, "softmax regression, 10 clients, B = 10"),
    ("logreg_mnist_10_b64", "logreg", (1, 28, 28), 10, 10, 640, 64, "the same at the default B = 64"),
    ("logreg_mnist_100_b10", "logreg", (1, 28, 28), 10, 100, 100, 10, "100 clients, B = 10"),
    ("logreg_mnist_100_b50", "logreg", (1, 28, 28), 10, 100, 600, 50, "100 clients, B = 50: a large product"),
    ("logreg_synthetic_1000", "logreg", (60,), 5, 1000, 20, 5, "FedGH's LEAF Synthetic perceptron: short rows"),
    ("logreg_synthetic_200", "logreg", (60,), 10, 200, 100, 10, "short rows, 10 classes, B = 10"),
]


def time_shape(name, model_name, shape, classes, clients, samples, batch, repeats: int) -> tuple[float, float]:
    """The vmap executor's best round (s) with the rows in place and gathered."""
    import torch

    from fedrun.algorithms.schema import make
    from fedrun.bench.workloads import Workload, setup, time_rounds
    from fedrun.engine.execution.executor import VmapExecutor
    from fedrun.model.functional import FunctionalModel

    w = Workload(name, "", model_name, "vector" if len(shape) == 1 else "image", shape, classes, clients, samples,
                 batch)
    model, x, y, plans, ctx = setup(w, torch.device("cpu"))
    if not model.reads_rows(x):
        raise SystemExit(f"{name}: the kernel does not apply here (not built, or the shape does not fit)")
    gathered = FunctionalModel(model.module, model.objective, onednn=model.onednn)
    best, _, _ = time_rounds({"in_place": VmapExecutor(), "gathered": VmapExecutor()}, make("local", "sgd"), model,
                             ctx, plans, x, y, repeats, {"gathered": gathered}, name)
    return best["in_place"], best["gathered"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    command = "python scripts/bench/indexed_rows_shapes.py " + " ".join(argv if argv is not None else sys.argv[1:])
    import torch

    lines = ["# A one-layer model's step on its rows in place, across shapes (issue #27)", "",
             f"Made by `{command.strip()}` at commit {git_commit()} on "
             f"{time.strftime('%Y-%m-%d', time.gmtime())} on {device_name(torch.device('cpu'))}: one round of local "
             "SGD (E = 1) on random inputs and labels from seed 0, under the vmap executor, with "
             "hardware.native=true (rows in place: fedrun/model/native/indexed_rows.py) and false (the minibatch "
             "gathered), "
             "interleaved; each one's best round.", "",
             "| shape | what | model | inputs | classes | clients | B | gathered s | in place s | speed-up |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, model_name, shape, classes, clients, samples, batch, why in SHAPES:
        in_place, gathered = time_shape(name, model_name, shape, classes, clients, samples, batch, args.repeats)
        lines.append(f"| {name} | {why} | {model_name} | {math.prod(shape)} | "
                     f"{1 if model_name == 'svm' else classes} | {clients} | {batch} | {gathered:.4f} | "
                     f"{in_place:.4f} | {gathered / in_place:.2f}x |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

"""How far softmax regression can go on Zhao et al.'s HOG features of MNIST, by normalisation and L2 coefficient:
the full training set, L-BFGS to convergence, test accuracy. Settles ``data.hog_normalize``, which Zhao et al. do
not state (fedrun-table fsvrg_hog_ceiling)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def ceiling(x: torch.Tensor, y: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor, l2: float,
            iterations: int = 300) -> float:
    """Test accuracy of softmax regression minimising CE + (l2 / 2) ||(W, b)||^2 on (x, y), in float64."""
    x, x_test = x.double(), x_test.double()
    classes = int(y.max()) + 1
    w = torch.zeros(x.shape[1], classes, dtype=torch.double, requires_grad=True)
    b = torch.zeros(classes, dtype=torch.double, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=iterations, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(x @ w + b, y) + 0.5 * l2 * (w.pow(2).sum() + b.pow(2).sum())
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return float(((x_test @ w + b).argmax(dim=1) == y_test).double().mean())


def measure(l2: tuple[float, ...] = (0.01, 0.0001), normalize: tuple[str, ...] = ("none", "l2"),
            iterations: int = 300, dataset: str = "mnist_hog", root: str | None = None) -> list[dict]:
    """One row per (normalisation, L2 coefficient): the test accuracy at convergence and the mean feature norm."""
    from fedrun.config.compose import option
    from fedrun.data import DATASETS, resolve_root

    rows = []
    for how in normalize:
        d = DATASETS[dataset].load(resolve_root(root), option("data", dataset, hog_normalize=how))
        norm = float(d.x_train.norm(dim=1).mean())
        rows += [{"data.hog_normalize": how, "l2": c, "seed": 0, "feature_norm": norm,
                  "test_acc": ceiling(d.x_train, d.y_train, d.x_test, d.y_test, float(c), iterations)} for c in l2]
    return rows

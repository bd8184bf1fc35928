"""scikit-learn's 8x8 handwritten digits (1797 images): tiny, always present, good for quick checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .base import DatasetSpec, FedDataset

TEST_FRACTION = 0.2


def load(root: Path, cfg) -> FedDataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None]  # (N, 1, 8, 8) in [0, 1]
    y = bunch.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))  # a fixed split, independent of the run seed
    n_test = int(round(TEST_FRACTION * len(y)))
    test, train = order[:n_test], order[n_test:]
    mean, std = x[train].mean(), x[train].std()
    x = (x - mean) / std
    return FedDataset("digits", torch.from_numpy(x[train]), torch.from_numpy(y[train]),
                      torch.from_numpy(x[test]), torch.from_numpy(y[test]),
                      num_classes=10, input_kind="image", source="sklearn.datasets.load_digits")


SPEC = DatasetSpec(
    name="digits",
    description="scikit-learn digits, 1438 train / 359 test, 1x8x8, 10 classes",
    meta=lambda cfg: ("image", (1, 8, 8), 10),
    load=load,
    is_present=lambda root: True,
    how_to_get="ships with scikit-learn",
)

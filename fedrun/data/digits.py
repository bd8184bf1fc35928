"""scikit-learn's 8x8 handwritten digits (1797 images): tiny, always present, good for quick checks.

Read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``, what ``load_digits`` reads) without
importing scikit-learn, whose import costs more than a whole digits round: every quick run and test pays it."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

from fedrun.process.lazy import torch
from fedrun.data.base import DatasetSpec, FedDataset

TEST_FRACTION = 0.2


def digits_file() -> Path:
    """scikit-learn's digits file, found without importing scikit-learn."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("data=digits reads the digits file scikit-learn ships: pip install scikit-learn")
    return Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"


def load(root: Path, cfg) -> FedDataset:
    with gzip.open(digits_file(), "rt") as f:
        table = np.loadtxt(f, delimiter=",")  # 64 pixel values in 0..16, then the label, per row
    x = (table[:, :-1].reshape(-1, 1, 8, 8) / 16.0).astype(np.float32)  # (N, 1, 8, 8) in [0, 1]
    y = table[:, -1].astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))  # a fixed split, independent of the run seed
    n_test = int(round(TEST_FRACTION * len(y)))
    test, train = order[:n_test], order[n_test:]
    mean, std = x[train].mean(), x[train].std()
    x = (x - mean) / std
    return FedDataset("digits", torch.from_numpy(x[train]), torch.from_numpy(y[train]),
                      torch.from_numpy(x[test]), torch.from_numpy(y[test]),
                      num_classes=10, input_kind="image", source="sklearn/datasets/data/digits.csv.gz")


SPEC = DatasetSpec(
    name="digits",
    description="scikit-learn digits, 1438 train / 359 test, 1x8x8, 10 classes",
    meta=lambda cfg: ("image", (1, 8, 8), 10),
    load=load,
    is_present=lambda root: True,
    how_to_get="ships with scikit-learn",
)

"""Small files in the official formats of datasets that cannot be fetched here, so that their loaders, and the
scripts that use them, run for real on a machine without the data. Results on fixtures are never reported as
reproductions."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from .cifar import LAYOUTS


def write_cifar(root: Path, name: str = "cifar10", per_file: int = 3, seed: int = 3) -> dict[str, list[int]]:
    """Write ``per_file`` random images per batch file in CIFAR's python-version layout under ``root/name``;
    returns the labels written to each file."""
    layout = LAYOUTS[name]
    d = Path(root) / name / layout["folder"]
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    labels = {}
    for f in layout["train"] + layout["test"]:
        lab = rng.integers(0, layout["classes"], per_file).tolist()
        batch = {b"batch_label": f.encode(), layout["label_key"]: lab,
                 b"data": rng.integers(0, 256, (per_file, 3072)).astype(np.uint8),
                 b"filenames": [b"x.png"] * per_file}
        (d / f).write_bytes(pickle.dumps(batch, protocol=2))
        labels[f] = lab
    return labels

"""CIFAR-10 and CIFAR-100 from the official "python version" archives (the layout torchvision also reads).

The batches are pickles; fedrun reads them with a numpy-only unpickler rather than ``pickle.load``.
CIFAR-10: ``<root>/cifar10/cifar-10-batches-py/{data_batch_1..5,test_batch}``;
CIFAR-100: ``<root>/cifar100/cifar-100-python/{train,test}`` (fine labels).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrun.errors import DataMissingError
from fedrun.data.base import DatasetSpec, FedDataset, image_dataset
from fedrun.data.download import fetcher
from fedrun.data.safe_pickle import load_numpy_pickle

LAYOUTS = {
    "cifar10": {
        "folder": "cifar-10-batches-py",
        "train": [f"data_batch_{i}" for i in range(1, 6)],
        "test": ["test_batch"],
        "label_key": b"labels",
        "classes": 10,
        "url": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    },
    "cifar100": {
        "folder": "cifar-100-python",
        "train": ["train"],
        "test": ["test"],
        "label_key": b"fine_labels",
        "classes": 100,
        "url": "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
    },
}


def data_dir(root: Path, name: str) -> Path:
    return root / name / LAYOUTS[name]["folder"]


def read_batches(directory: Path, files: list[str], label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for f in files:
        batch = load_numpy_pickle((directory / f).read_bytes())
        xs.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(batch[label_key], dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


def _make(name: str) -> DatasetSpec:
    layout = LAYOUTS[name]

    def is_present(root: Path) -> bool:
        d = data_dir(root, name)
        return all((d / f).exists() for f in layout["train"] + layout["test"])

    def load(root: Path, cfg) -> FedDataset:
        if not is_present(root):
            raise DataMissingError(spec.how_to_get.format(root=root))
        d = data_dir(root, name)
        x_train, y_train = read_batches(d, layout["train"], layout["label_key"])
        x_test, y_test = read_batches(d, layout["test"], layout["label_key"])
        arrays = {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
        return image_dataset(name, arrays, layout["classes"], str(d), cfg.normalize)

    files = ", ".join(layout["train"] + layout["test"])
    spec = DatasetSpec(
        name=name,
        description=f"{name.upper()} 50k train / 10k test, 3x32x32, {layout['classes']} classes",
        meta=lambda cfg: ("image", (3, 32, 32), layout["classes"]),
        load=load,
        is_present=is_present,
        fetch=fetcher(name),
        pixel_images=True,
        how_to_get=(
            f"{name.upper()} was not found: fedrun needs {{root}}/{name}/{layout['folder']}/ with {files}. "
            f"Download {layout['url']} and unpack it in {{root}}/{name}/ (or run torchvision's "
            f"datasets.{'CIFAR10' if name == 'cifar10' else 'CIFAR100'}(root='{{root}}/{name}', download=True)), "
            f"or run `fedrun-data fetch {name}` on a machine that reaches www.cs.toronto.edu (MD5-checked)."
        ),
    )
    return spec


CIFAR10 = _make("cifar10")
CIFAR100 = _make("cifar100")

"""Fashion-MNIST (Xiao et al.) from its original IDX files: Debian's ``dataset-fashion-mnist`` or torchvision's."""

from __future__ import annotations

from pathlib import Path

from fedrun.errors import DataMissingError
from fedrun.data.base import DatasetSpec, FedDataset, image_dataset
from fedrun.data.download import fetcher
from fedrun.data.idx import find, read_idx_split

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")


def candidate_dirs(root: Path) -> list[Path]:
    return [root / "fashion_mnist", root / "fashion_mnist" / "FashionMNIST" / "raw", DEBIAN_DIR]


def _find_dir(root: Path) -> Path | None:
    for d in candidate_dirs(root):
        if find(d, "train-images-idx3-ubyte") is not None:
            return d
    return None


def is_present(root: Path) -> bool:
    return _find_dir(root) is not None


def load(root: Path, cfg) -> FedDataset:
    d = _find_dir(root)
    if d is None:
        raise DataMissingError(SPEC.how_to_get.format(root=root))
    return image_dataset("fashion_mnist", read_idx_split(d, "train", "t10k"), 10, str(d),
                         cfg.normalize)


SPEC = DatasetSpec(
    name="fashion_mnist",
    description="Fashion-MNIST, 60k train / 10k test, 1x28x28, 10 classes",
    meta=lambda cfg: ("image", (1, 28, 28), 10),
    load=load,
    is_present=is_present,
    fetch=fetcher("fashion_mnist"),
    pixel_images=True,
    how_to_get=(
        "Fashion-MNIST was not found in {root}/fashion_mnist/, {root}/fashion_mnist/FashionMNIST/raw/ or "
        f"{DEBIAN_DIR}/. On Debian/Ubuntu: `sudo apt-get install dataset-fashion-mnist`. Elsewhere: put "
        "train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and "
        "t10k-labels-idx1-ubyte.gz (from github.com/zalandoresearch/fashion-mnist, or torchvision's "
        "FashionMNIST(root, download=True)) in {root}/fashion_mnist/, or run `fedrun-data fetch fashion_mnist` "
        "on a connected machine (MD5-checked)."
    ),
)

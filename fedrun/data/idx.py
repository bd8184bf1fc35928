"""The IDX file format of LeCun's MNIST and Zalando's Fashion-MNIST (optionally gzipped)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Path) -> np.ndarray:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    if raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path} is not an IDX file (bad magic number)")
    dtype, ndim = _DTYPES[raw[2]], raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=dtype, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape} but holds {data.size} values")
    return data.reshape(shape).copy()  # writable, so torch can take it without a warning


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write ``array`` (uint8) as an IDX file; gzipped when ``path`` ends in .gz. Used by test fixtures."""
    a = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, a.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in a.shape)
    raw = header + a.tobytes()
    path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)


def find(directory: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (directory / name).exists():
            return directory / name
    return None


def read_idx_split(directory: Path, train_prefix: str, test_prefix: str) -> dict[str, np.ndarray]:
    """Read the four standard files ``{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]`` of ``directory``."""
    out = {}
    for split, prefix in (("train", train_prefix), ("test", test_prefix)):
        for kind, stem in (("x", f"{prefix}-images-idx3-ubyte"), ("y", f"{prefix}-labels-idx1-ubyte")):
            path = find(directory, stem)
            if path is None:
                raise FileNotFoundError(directory / stem)
            arr = read_idx(path)
            out[f"{kind}_{split}"] = arr.astype(np.int64) if kind == "y" else arr
    return out

"""Histogram-of-oriented-gradients features (Zhao et al. Sec. V-A, after Lu 2017): MNIST and CIFAR-10 as HOG vectors.

Per image (grey levels in [0, 1]; CIFAR-10 converted to grey with ITU-R 601 weights): gradients by central
differences, each pixel's magnitude added to one of ``bins`` orientation bins evenly dividing [0, 2 pi), summed over
square blocks of ``block`` pixels at stride ``stride``. For 28x28 MNIST with block 7, stride 3 and 9 bins: 8 x 8 = 64
blocks, 576 features (Zhao et al.'s numbers). The paper does not say how features are normalised;
``data.hog_normalize``: ``none`` (default) keeps the raw sums, ``l2`` scales each image's vector to unit length. Softmax
regression with Zhao et al.'s L2 coefficient 0.01 reaches 98.2% on MNIST with the raw sums and 90.6% with unit vectors
(the coefficient then dominates; fedrun-table fsvrg_hog_ceiling), so the raw sums match the paper's accuracies. Computed
once for the whole dataset with tensor operations and cached under ``<root>/<dataset>_hog/``, keyed by the settings and
the source data.
"""

from __future__ import annotations

import math
from pathlib import Path

from omegaconf import OmegaConf

from fedrun.process.lazy import torch
from fedrun.data.base import DatasetSpec, FedDataset, cache_path, load_or_build, sha256_arrays

GREY = (0.299, 0.587, 0.114)


def hog(images: torch.Tensor, block: int = 7, stride: int = 3, bins: int = 9, normalize: str = "none"
        ) -> torch.Tensor:
    """(N, H, W) grey images -> (N, blocks * bins) HOG features, ordered block by block (row-major), bin within."""
    x = images.float()[:, None]
    padded = torch.nn.functional.pad(x, (1, 1, 1, 1), mode="replicate")
    gx = (padded[..., 1:-1, 2:] - padded[..., 1:-1, :-2]) / 2  # d/dx, x to the right
    gy = (padded[..., 2:, 1:-1] - padded[..., :-2, 1:-1]) / 2  # d/dy, y downwards
    magnitude = torch.sqrt(gx**2 + gy**2)
    angle = torch.remainder(torch.atan2(gy, gx), 2 * math.pi)
    index = torch.clamp((angle / (2 * math.pi / bins)).long(), max=bins - 1)
    per_bin = torch.zeros(x.shape[0], bins, *x.shape[-2:], dtype=magnitude.dtype, device=x.device)
    per_bin.scatter_(1, index, magnitude)
    sums = torch.nn.functional.avg_pool2d(per_bin, block, stride) * block * block  # (N, bins, by, bx)
    features = sums.permute(0, 2, 3, 1).reshape(x.shape[0], -1)
    if normalize == "l2":
        features = features / features.norm(dim=1, keepdim=True).clamp_min(1e-12)
    elif normalize != "none":
        from fedrun.config.schema import HOG_NORMALIZATIONS

        raise ValueError(f"data.hog_normalize={normalize!r}: must be one of {HOG_NORMALIZATIONS}")
    return features


def num_features(height: int, width: int, block: int, stride: int, bins: int) -> int:
    return ((height - block) // stride + 1) * ((width - block) // stride + 1) * bins


def _settings(cfg) -> dict:
    return {"block": int(cfg.hog_block), "stride": int(cfg.hog_stride),
            "bins": int(cfg.hog_bins), "normalize": str(cfg.hog_normalize)}


def hog_spec(base: DatasetSpec, height: int, width: int, paper: str) -> DatasetSpec:
    """``<base>_hog``: the images of ``base`` as HOG vectors (the same splits and labels)."""
    name = f"{base.name}_hog"

    def meta(cfg):
        s = _settings(cfg)
        return "vector", (num_features(height, width, s["block"], s["stride"], s["bins"]),), base.meta(cfg)[2]

    def load(root: Path, cfg) -> FedDataset:
        pixels = base.load(root, OmegaConf.create({**OmegaConf.to_container(OmegaConf.create(cfg)),
                                                   "normalize": "unit", "name": base.name}))
        s = _settings(cfg)

        def grey(x: torch.Tensor) -> torch.Tensor:
            if x.shape[1] == 1:
                return x[:, 0]
            return torch.einsum("nchw,c->nhw", x, torch.tensor(GREY, dtype=x.dtype))

        def build():
            return {split: hog(grey(getattr(pixels, split)), **s).numpy() for split in ("x_train", "x_test")}

        source = sha256_arrays(*(t.numpy() for t in (pixels.x_train, pixels.y_train, pixels.x_test, pixels.y_test)))
        a = load_or_build(cache_path(root / name, name, {**s, "source": source, "version": 1}), build)
        return FedDataset(name, torch.from_numpy(a["x_train"]), pixels.y_train, torch.from_numpy(a["x_test"]),
                          pixels.y_test, num_classes=pixels.num_classes, input_kind="vector",
                          source=f"{pixels.source} (HOG)")

    features = num_features(height, width, 7, 3, 9)
    return DatasetSpec(name=name, description=f"{base.name} as HOG vectors ({paper}), {features} features for "
                                              f"{height}x{width} (7x7 blocks, stride 3, 9 bins)",
                       meta=meta, load=load, is_present=base.is_present, how_to_get=base.how_to_get, fetch=base.fetch)

